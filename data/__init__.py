"""The store: one DuckDB file, its schema, the records that go in, and every SQL statement of doxa."""
