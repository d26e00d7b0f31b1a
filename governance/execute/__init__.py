"""Step 6, execute: run a verified plan in Spark (errors as data), its DDL actions, the pinned
Delta sources of its views, and the crash leftovers of DDL."""
