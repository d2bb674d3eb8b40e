"""What an evaluation ranks and what it gives back: :class:`Benchmark` (one split of a
labelled set, ready to rank), :class:`Evaluation` (its metrics, per query, and the rankings)
and :class:`SetupError` (options that do not go together)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from qres.corpus.readers import Question
from qres.datasets.benchmarks import RankingQuery


@dataclass
class Evaluation:
    dataset: str
    split: str
    ranker: str
    metrics: dict[str, float | None]
    per_query: list[dict] = field(default_factory=list)
    # Per query id, its candidates best first with their scores: what a TREC run file holds.
    ranked: dict[str, list[tuple[str, float]]] = field(default_factory=dict, repr=False)

    def summary(self, per_query: bool = True) -> dict:
        """The JSON form ``qres evaluate --json`` prints (the ranked lists left out)."""
        out = {k: v for k, v in asdict(self).items() if k != "ranked"}
        return out if per_query else {**out, "per_query": None}


@dataclass
class Benchmark:
    """One split of a labelled set, ready to rank (:func:`load_benchmark`)."""

    dataset: str
    split: str
    queries: list[RankingQuery]
    texts: Mapping[str, Question]  # the queries' and candidates' questions by id
    corpus: Callable[[], Iterable[Question]]  # every question Acc@k ranks
    skip_without_relevant: bool  # queries without a relevant candidate left out (else AP 0)
    with_auc: bool = False  # also AUC(0.05) over every labelled pair
    has_given_order: bool = True
    # What the candidates' index holds when that is not the whole corpus (AskUbuntu): Acc@k
    # then needs a second index of the corpus.
    indexed: Callable[[], Iterable[Question]] | None = None
    source: Path | None = None  # the file or folder the texts come from (None: the layout's)
    folder: Path | None = None  # the dataset's folder, named in errors
    missing_texts: bool = False  # AskUbuntu without its corpus file: given-order only
    whole_forum: bool = False  # each query ranks the whole corpus (stackexchange)
    # A forum indexed with its duplicate links: a closed duplicate found leads to its original.
    with_links: bool = False
    query_form: str = "question"  # what each query searches with (qres.evaluation.query_form)
    # A title query searched as the widget sends a title being typed: its last word completed
    # (qres.ranking.completion).
    typing: bool = False
    # A forum searched in part: its questions the duplicate links join and a sample of the
    # rest, this many in all (qres.evaluation.forum.sampled); None: the whole forum.
    searched: int | None = None


class SetupError(ValueError):
    """Evaluation options that do not go together; ``option`` names the one to change."""

    def __init__(self, option: str, message: str):
        super().__init__(message)
        self.option = option
