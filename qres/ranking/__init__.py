"""Ranking: the query path (:class:`~qres.ranking.search.SearchPipeline`: BM25 candidates →
query vectors → cosine rescoring → fusion) and the :class:`~qres.ranking.fusion.Fusion` that
mixes BM25 with one or more cosines. Learning a fusion from labels lives in
:mod:`qres.evaluation.fusion_fit`."""
