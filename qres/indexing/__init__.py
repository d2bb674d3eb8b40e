"""Indexing: the pipeline that streams a corpus into a backend (read → prepare → encode →
write, overlapping stages, crash-safe commits), and the service's group-commit writer, which
acknowledges a write only once it is durable and searchable."""
