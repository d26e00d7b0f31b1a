"""The read-only web console at `/ui`: catalog, effective access, policy changes and audit,
rendered on the server from the same filtered data as the JSON API (docs/console.md)."""
