"""Training data for the encoders: labelled queries, negatives, a dev set, token batches.

Two datasets:

* ``semeval2016`` — train = train part 1 (the subtask B CSV, or the XML of the official zip)
  + train part 2 XML, dev = the dev XML. Positives
  are the PerfectMatch/Relevant candidates; the query's Irrelevant candidates are hard
  negatives, topped up with random train questions. Dev queries without a relevant
  candidate count with AP 0 (the official scorer).
* ``askubuntu`` (Lei et al. 2016 layout) — ``text_tokenized.txt[.gz]`` (``id\\ttitle\\tbody``),
  ``train_random.txt`` (query, similar ids, random ids), ``dev.txt``. The negatives are
  drawn from the query's random ids; dev queries without a similar candidate are dropped.
* ``stackexchange`` — a dump's Posts.xml and PostLinks.xml (:mod:`qres.datasets.
  forum_duplicates`): the train split's duplicate questions (oldest 80% by closing date; the
  test split is never read), each with its linked originals as positives and BM25's top
  hits over the whole forum (itself and its originals left out) as hard negatives. The
  newest tenth of them is the dev set, each re-ranking its originals and BM25 negatives.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from qres.corpus.readers import CorpusError, Question, read_corpus
from qres.datasets.benchmarks import (
    LAYOUTS,
    RankingQuery,
    TrainQuery,
    dataset_dir,
    load_askubuntu_eval,
    load_semeval_file,
    read_askubuntu_train,
)
from qres.encoders.vocab import Vocab, pad_batch
from qres.text import tokenize

DATASETS = ("semeval2016", "askubuntu", "stackexchange")
FORUM_HARD_NEGATIVES = 20  # BM25 hits per forum train query kept as its hard negatives

HardNegatives = Callable[[Question], Sequence[str]]


@dataclass
class TrainingData:
    name: str
    questions: dict[str, Question]  # the text of every id below
    train: list[TrainQuery]
    dev: list[RankingQuery]
    pool: list[str]  # random negatives are drawn from these
    hard_in_file: bool  # TrainQuery.negatives are hard (always used) rather than random
    skip_dev_without_relevant: bool
    vocab_ids: list[str] = field(default_factory=list)  # questions whose words build the vocab
    files: list[str] = field(default_factory=list)


@dataclass
class Example:
    query: str
    positive: str
    negatives: list[str]


def load_dataset(
    dataset: str, data_dir: str | Path | None = None, with_dev: bool = True
) -> TrainingData:
    """The dataset's training data. ``with_dev=False`` leaves ``dev`` empty: SemEval's dev
    file is then not read at all (AskUbuntu's is, to check its ids, and dropped)."""
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r} (one of {', '.join(DATASETS)})")
    if dataset == "stackexchange":
        return load_stackexchange(Path(data_dir) if data_dir else None)
    folder = Path(data_dir) if data_dir else dataset_dir(dataset)
    if not folder.is_dir():
        raise CorpusError(folder, None, f"{dataset} data directory not found")
    if dataset == "semeval2016":
        return load_semeval2016(folder, with_dev)
    data = load_askubuntu(folder)
    if not with_dev:
        data.dev, data.files = [], data.files[:2]
    return data


def load_semeval2016(folder: Path, with_dev: bool = True) -> TrainingData:
    train_files = LAYOUTS["semeval2016"].files(folder, "train")
    dev_files = LAYOUTS["semeval2016"].files(folder, "dev") if with_dev else []
    parts = [load_semeval_file(path) for path in train_files]
    dev = [load_semeval_file(path) for path in dev_files]
    questions: dict[str, Question] = {}
    train: list[TrainQuery] = []
    for part in parts:
        questions.update(part.questions)
        for query in part.queries:
            questions[query.id] = query.question
            positives = [c for c in query.candidates if c in query.relevant]
            irrelevant = [c for c in query.candidates if c not in query.relevant]
            if positives:
                train.append(TrainQuery(query.id, positives, irrelevant))
    vocab_ids = list(questions)
    pool = sorted({c for part in parts for q in part.queries for c in q.candidates})
    for part in dev:
        questions.update(part.questions)
        for query in part.queries:
            questions[query.id] = query.question
    return TrainingData(
        name="semeval2016",
        questions=questions,
        train=train,
        dev=[query for part in dev for query in part.queries],
        pool=pool,
        hard_in_file=True,
        skip_dev_without_relevant=False,
        vocab_ids=vocab_ids,
        files=[str(path) for path in (*train_files, *dev_files)],
    )


def hold_out_train(data: TrainingData, fraction: float, seed: int) -> TrainingData:
    """``data`` with ``fraction`` of its train queries (at least one) moved to ``dev``: each
    becomes a ranking query over its positives and negatives, so epochs can be chosen
    without reading the dev set."""
    order = np.random.default_rng([seed, 7]).permutation(len(data.train))
    held = {int(i) for i in order[: max(1, round(fraction * len(data.train)))]}
    dev = [
        RankingQuery(
            q.id,
            list(dict.fromkeys([*q.positives, *q.negatives])),
            frozenset(q.positives),
            question=data.questions[q.id],
        )
        for n, q in enumerate(data.train)
        if n in held
    ]
    train = [q for n, q in enumerate(data.train) if n not in held]
    return replace(data, train=train, dev=dev, skip_dev_without_relevant=True)


def load_askubuntu(folder: Path) -> TrainingData:
    layout = LAYOUTS["askubuntu"]
    (corpus,), (train_file,), (dev_file,) = (
        layout.files(folder, split) for split in ("corpus", "train", "dev")
    )
    questions = {q.id: q for q in read_corpus(corpus, fmt="askubuntu")}
    train = list(read_askubuntu_train(train_file))
    dev = load_askubuntu_eval(dev_file)
    for where, ids in [("train_random.txt", _train_ids(train)), ("dev.txt", _dev_ids(dev))]:
        missing = sorted(set(ids) - questions.keys())
        if missing:
            raise CorpusError(
                folder / where, None, f"{len(missing)} ids not in the corpus, e.g. {missing[0]}"
            )
    return TrainingData(
        name="askubuntu",
        questions=questions,
        train=[q for q in train if q.positives],
        dev=dev,
        pool=sorted(questions),
        hard_in_file=False,
        skip_dev_without_relevant=True,
        vocab_ids=list(questions),  # the whole corpus, as Lei et al.
        files=[str(corpus), str(train_file), str(dev_file)],
    )


def load_stackexchange(folder: Path | None, newest: int | None = None) -> TrainingData:
    """A forum's duplicates as training data, BM25's top hits over the whole forum their hard
    negatives; ``newest``: those are looked for only for the newest this many train queries
    (and every held-out one), the older ones getting none: a caller that trains on the newest
    links alone need not search for each of a large forum's."""
    import tempfile

    from qres.backends.embedded import EmbeddedBackend
    from qres.datasets.forum_duplicates import held_out_cut, load_forum_duplicates

    forum = load_forum_duplicates(folder, "train")
    cut = held_out_cut(len(forum.queries))  # where the held-out queries begin
    questions = {q.id: q for q in read_corpus(forum.posts, "stackexchange")}
    labelled = []
    with tempfile.TemporaryDirectory(prefix="qres-forum-bm25-") as tmp:
        index = EmbeddedBackend(Path(tmp) / "index", create=True)
        try:
            index.upsert(list(questions.values()))
            index.commit()
            searched_from = 0 if newest is None else cut - newest
            for at, q in enumerate(forum.queries):
                if at < searched_from:
                    labelled.append((q, []))
                    continue
                excluded = {q.id, *q.relevant}
                hits = index.search(q.question.text, FORUM_HARD_NEGATIVES + len(excluded))
                negatives = [h.id for h in hits if h.id not in excluded]
                labelled.append((q, negatives[:FORUM_HARD_NEGATIVES]))
        finally:
            index.close()
    train = [TrainQuery(q.id, sorted(q.relevant), negatives) for q, negatives in labelled[:cut]]
    dev = [
        RankingQuery(q.id, [*sorted(q.relevant), *negatives], q.relevant, question=q.question)
        for q, negatives in labelled[cut:]
    ]
    return TrainingData(
        name="stackexchange",
        questions=questions,
        train=train,
        dev=dev,
        pool=sorted(questions),
        hard_in_file=True,
        skip_dev_without_relevant=True,
        vocab_ids=list(questions),
        files=[str(forum.posts), str(forum.links)],
    )


def _train_ids(train: list[TrainQuery]):
    for q in train:
        yield q.id
        yield from q.positives
        yield from q.negatives


def _dev_ids(dev: list[RankingQuery]):
    for q in dev:
        yield q.id
        yield from q.candidates


def vocab_sentences(data: TrainingData) -> list[list[str]]:
    """Title and body tokens of the vocabulary questions (see ``qres.training.vectors``)."""
    return question_sentences(data.questions[qid] for qid in data.vocab_ids)


def question_sentences(questions: Iterable[Question]) -> list[list[str]]:
    """The non-empty title and body token lists of ``questions``."""
    sentences = []
    for q in questions:
        sentences += [tokenize(q.title), tokenize(q.body)]
    return [s for s in sentences if s]


def epoch_examples(
    data: TrainingData,
    rng: np.random.Generator,
    n_negatives: int = 20,
    hard_negatives: HardNegatives | None = None,
    hard_cache: dict[str, list[str]] | None = None,
) -> list[Example]:
    """One epoch of (query, positive, negatives) triples, shuffled, negatives resampled.

    Hard negatives (SemEval's Irrelevant candidates, or ``hard_negatives(question)`` — e.g.
    BM25 hits from an index) fill at most half of the ``n_negatives``; random ones the rest.
    """
    hard_cache = hard_cache if hard_cache is not None else {}
    examples = []
    for query in data.train:
        excluded = {query.id, *query.positives}
        hard = list(query.negatives) if data.hard_in_file else []
        if hard_negatives is not None:
            if query.id not in hard_cache:
                hard_cache[query.id] = list(hard_negatives(data.questions[query.id]))
            hard += [h for h in hard_cache[query.id] if h in data.questions]
        hard = list(dict.fromkeys(h for h in hard if h not in excluded))
        random_from = query.negatives if not data.hard_in_file and query.negatives else data.pool
        for positive in query.positives:
            chosen = _sample(hard, min(len(hard), n_negatives // 2), rng)
            taken = excluded | set(chosen)
            chosen += _sample_excluding(random_from, n_negatives - len(chosen), taken, rng)
            examples.append(Example(query.id, positive, chosen))
    order = rng.permutation(len(examples))
    return [examples[i] for i in order]


def _sample(items: list[str], k: int, rng: np.random.Generator) -> list[str]:
    return [items[i] for i in rng.choice(len(items), size=k, replace=False)] if k else []


def _sample_excluding(items: Sequence[str], k: int, excluded: set[str], rng) -> list[str]:
    chosen: list[str] = []
    seen = set(excluded)
    for _ in range(20 * k):  # rejection sampling; pools are far larger than k
        if len(chosen) == k:
            break
        item = items[int(rng.integers(len(items)))]
        if item not in seen:
            seen.add(item)
            chosen.append(item)
    return chosen


class TokenizedQuestions:
    """Title/body ids of each question, computed once and padded into tensors on demand."""

    def __init__(self, questions: dict[str, Question], vocab: Vocab, title_max: int, body_max: int):
        self.questions, self.vocab = questions, vocab
        self.title_max, self.body_max = title_max, body_max
        self._ids: dict[str, tuple[list[int], list[int]]] = {}

    def ids(self, qid: str) -> tuple[list[int], list[int]]:
        if qid not in self._ids:
            q = self.questions[qid]
            self._ids[qid] = self.vocab.encode_question(
                q.title, q.body, self.title_max, self.body_max
            )
        return self._ids[qid]

    def batch(self, qids: Sequence[str], device: torch.device) -> tuple[torch.Tensor, ...]:
        """(title_ids, title_mask, body_ids, body_mask) tensors for ``qids`` in order."""
        return encode_id_lists([self.ids(q) for q in qids], device)


def encode_id_lists(pairs: Sequence[tuple[list[int], list[int]]], device) -> tuple:
    title_ids, title_mask = pad_batch([t for t, _ in pairs])
    body_ids, body_mask = pad_batch([b for _, b in pairs])
    return tuple(
        torch.from_numpy(a).to(device) for a in (title_ids, title_mask, body_ids, body_mask)
    )
