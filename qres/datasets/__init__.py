"""Labelled benchmarks: the question-similarity sets ``qres evaluate`` scores and ``qres train``
learns from (SemEval-2016 Task 3, AskUbuntu, Android), their on-disk layout, and
``qres download``, which fetches the public ones into that layout, resumably and verified."""
