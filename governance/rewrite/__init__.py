"""Step 4, rewrite: each governed table becomes a dynamic view (row filters, masks, hidden
columns gone); which columns a statement names; mapping-table lookups made literals;
aggregate-only tables guarded by their minimum group size."""
