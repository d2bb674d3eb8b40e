"""qres: question retrieval for community Q&A forums."""

__version__ = "0.1.0"
