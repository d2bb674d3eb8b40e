"""qres: question retrieval for community Q&A forums.

    from qres import Index, SearchPipeline
    Index.open("/tmp/my-index", model="qres/models/default").add("qres/data/demo/questions.tsv")
    print(SearchPipeline.open("/tmp/my-index").search("boot ubuntu from usb", k=3))

The names below are imported on first use, so ``import qres`` stays fast (no onnxruntime,
tantivy or numpy until a search or an index needs them).
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_PUBLIC = {
    "Index": "qres.indexing.index",
    "IndexReport": "qres.indexing.pipeline",
    "SearchPipeline": "qres.ranking.search",
    "Result": "qres.ranking.search",
    "Question": "qres.corpus.readers",
    "read_corpus": "qres.corpus.readers",
    "Encoder": "qres.encoders.runtime",
    "Fusion": "qres.ranking.fusion",
    "open_backend": "qres.backends",
    "BackendError": "qres.backends.base",
    "CorpusError": "qres.corpus.readers",
    "EncoderError": "qres.encoders.runtime",
}

__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'qres' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
