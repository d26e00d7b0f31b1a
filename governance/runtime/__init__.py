"""The Spark runtime at the edge: building the SparkSession and its JVM, Java compiled in the
driver, the server process's garbage collector, a local cluster for tests."""
