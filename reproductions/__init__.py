"""The reproduction matrix (matrix.yaml) behind docs/results.md, and its runner (run.py)."""
