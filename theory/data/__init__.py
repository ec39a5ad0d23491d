"""Traces: schema and rules, parsing, validation, Parquet/CSV I/O, seeded generators."""
