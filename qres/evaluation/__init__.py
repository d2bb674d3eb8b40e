"""Evaluation: the rankers ``qres evaluate`` scores on labelled benchmarks, the ranking metrics
with their definitions, paired significance tests, TREC run files, and fitting the BM25/cosine
fusion by cross-validated MAP. It sits above indexing and ranking and is never imported by them."""
