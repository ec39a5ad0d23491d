"""spark_backend."""
