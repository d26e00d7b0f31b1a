"""Steps 1-2, the SQL front end: statement text -> one checked sqlglot tree (parse), its tables
resolved through the catalog (resolve), and Spark SQL written back from a tree (sqlgen)."""
