"""Lakegate's REST API: Unity Catalog-compatible discovery, governance views, the domain
registry and governed SQL over HTTP (`lakegate serve`; see api/README.md)."""
