"""The reproduction matrix of the README figures (matrix.yaml) and its runner (run.py)."""
