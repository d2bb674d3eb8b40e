"""Labelled question-similarity sets: what ``qres evaluate`` scores and ``qres train`` learns.

* SemEval-2016 Task 3 subtask B (Qatar Living): XML files (train part 2, dev, and the
  StackExchange sample of 2017 in the same layout) and the train-part-1 CSV. Each original
  question has 10 related questions; PerfectMatch and Relevant count as relevant.
* AskUbuntu (Lei et al. 2016): ``dev.txt``/``test.txt`` — query id, similar ids, 20
  candidate ids, Lucene BM25 scores — and ``train_random.txt`` — query id, similar ids,
  random negative ids. Question texts live in the separate corpus file.
* Android pairwise files (``dev.pos.txt``/``dev.neg.txt``): ``query_id candidate_id`` lines.

Where the files lie is defined once, in :data:`LAYOUTS`: ``../shared/data``, ``qres download``,
``qres evaluate`` and ``qres train`` all use ``<data dir>/<folder>/<file>``.
"""

from __future__ import annotations

import csv
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from qres import paths
from qres.corpus.readers import CorpusError, Question, open_text, read_corpus

# "Related" is the 2017 StackExchange sample's name for "Relevant".
SEMEVAL_RELEVANT = frozenset({"PerfectMatch", "Relevant", "Related"})


@dataclass
class RankingQuery:
    """One query with its candidate list in the order the file gives."""

    id: str
    candidates: list[str]
    relevant: frozenset[str]
    given_scores: list[float] | None = None  # AskUbuntu's Lucene BM25 scores
    question: Question | None = None  # the query's own text, where the file has it


@dataclass
class LabelledSet:
    queries: list[RankingQuery]
    questions: dict[str, Question] = field(default_factory=dict)  # candidate texts


@dataclass
class TrainQuery:
    id: str
    positives: list[str]
    negatives: list[str]


def load_semeval_xml(path: str | Path) -> LabelledSet:
    """Original questions with their related questions ordered by RELQ_RANKING_ORDER."""
    by_query: dict[str, RankingQuery] = {}
    ranked: dict[str, list[tuple[int, str]]] = {}
    questions: dict[str, Question] = {}
    with open_text(path) as f:
        try:
            for _, elem in ET.iterparse(f, events=("end",)):
                if elem.tag != "OrgQuestion":
                    continue
                qid = elem.get("ORGQ_ID", "")
                if qid not in by_query:
                    org = Question(
                        qid, elem.findtext("OrgQSubject") or "", elem.findtext("OrgQBody") or ""
                    )
                    by_query[qid] = RankingQuery(qid, [], frozenset(), question=org)
                    ranked[qid] = []
                for rel in elem.iter("RelQuestion"):
                    rid = rel.get("RELQ_ID", "")
                    tags = rel.get("RELQ_TAGS") or rel.get("RELQ_CATEGORY") or ""
                    questions[rid] = Question(
                        rid,
                        rel.findtext("RelQSubject") or "",
                        rel.findtext("RelQBody") or "",
                        tuple(t.strip() for t in tags.split(",") if t.strip()),
                    )
                    order = int(rel.get("RELQ_RANKING_ORDER", len(ranked[qid])))
                    ranked[qid].append((order, rid))
                    if rel.get("RELQ_RELEVANCE2ORGQ") in SEMEVAL_RELEVANT:
                        query = by_query[qid]
                        query.relevant = query.relevant | {rid}
                elem.clear()
        except ET.ParseError as err:
            raise CorpusError(path, err.position[0], f"malformed XML ({err})") from None
    for qid, query in by_query.items():
        query.candidates = [rid for _, rid in sorted(ranked[qid])]
    return LabelledSet(list(by_query.values()), questions)


def load_semeval_csv(path: str | Path) -> LabelledSet:
    """The train-part-1 CSV: question1 with its question2 candidates and 0/1 relevance."""
    by_query: dict[str, RankingQuery] = {}
    questions: dict[str, Question] = {}
    with open_text(path) as f:
        rows = csv.DictReader(f)
        need = {"question1_id", "question2_id", "question1", "question2", "relevance"}
        if not rows.fieldnames or not need <= set(rows.fieldnames):
            raise CorpusError(path, 1, f"expected CSV columns {', '.join(sorted(need))}")
        for row in rows:
            qid, rid = row["question1_id"].strip(), row["question2_id"].strip()
            if row["relevance"] not in ("0", "1"):
                raise CorpusError(
                    path, rows.line_num, f"relevance must be 0 or 1, got {row['relevance']!r}"
                )
            if qid not in by_query:
                title, _, body = row["question1"].partition(". ")
                by_query[qid] = RankingQuery(
                    qid, [], frozenset(), question=Question(qid, title, body)
                )
            title, _, body = row["question2"].partition(". ")
            questions[rid] = Question(rid, title, body)
            query = by_query[qid]
            query.candidates.append(rid)
            if row["relevance"] == "1":
                query.relevant = query.relevant | {rid}
    return LabelledSet(list(by_query.values()), questions)


def _id_list(field_text: str) -> list[str]:
    return field_text.split()


def load_askubuntu_eval(path: str | Path) -> list[RankingQuery]:
    """dev.txt / test.txt: ``qid<TAB>similar ids<TAB>20 candidate ids<TAB>BM25 scores``."""
    queries = []
    with open_text(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            parts = line.rstrip("\r\n").split("\t")
            if len(parts) != 4:
                raise CorpusError(path, n, f"expected 4 tab-separated fields, found {len(parts)}")
            qid, similar, candidates, scores = parts
            candidates_list = _id_list(candidates)
            try:
                score_list = [float(s) for s in scores.split()]
            except ValueError:
                raise CorpusError(path, n, "BM25 scores must be numbers") from None
            if len(score_list) != len(candidates_list):
                raise CorpusError(
                    path, n, f"{len(candidates_list)} candidates but {len(score_list)} scores"
                )
            queries.append(
                RankingQuery(qid.strip(), candidates_list, frozenset(_id_list(similar)), score_list)
            )
    return queries


def read_askubuntu_train(path: str | Path) -> Iterator[TrainQuery]:
    """train_random.txt: ``qid<TAB>similar ids<TAB>random negative ids``."""
    with open_text(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            parts = line.rstrip("\r\n").split("\t")
            if len(parts) != 3:
                raise CorpusError(path, n, f"expected 3 tab-separated fields, found {len(parts)}")
            yield TrainQuery(parts[0].strip(), _id_list(parts[1]), _id_list(parts[2]))


def load_pairwise(pos_path: str | Path, neg_path: str | Path) -> dict[str, dict[str, int]]:
    """Android-style ``query_id candidate_id`` pair files → {query: {candidate: 1 or 0}}."""
    labels: dict[str, dict[str, int]] = {}
    for path, label in ((pos_path, 1), (neg_path, 0)):
        with open_text(path) as f:
            for n, line in enumerate(f, 1):
                parts = line.split()
                if not parts:
                    continue
                if len(parts) != 2:
                    raise CorpusError(
                        path, n, f"expected 'query_id candidate_id', found {line.strip()!r}"
                    )
                labels.setdefault(parts[0], {})[parts[1]] = label
    return labels


# -- where each data set's files lie ------------------------------------------------------------

SEMEVAL_PART1_CSV = "train-part1-subtaskB.csv"
SEMEVAL_PART1_XML = "SemEval2016-Task3-CQA-QL-train-part1.xml"
SEMEVAL_PART2_XML = "SemEval2016-Task3-CQA-QL-train-part2.xml"
SEMEVAL_DEV_XML = "SemEval2016-Task3-CQA-QL-dev.xml"
ANDROID_CORPUS_FILES = ("corpus.tsv.gz", "corpus.tsv", "corpus.txt.gz", "corpus.txt")


@dataclass(frozen=True)
class Layout:
    """A data set's folder and the files of each split. A split is a sequence of parts; a
    part names its file, or the files that can stand for it in order of preference."""

    name: str
    folder: str
    splits: Mapping[str, tuple[tuple[str, ...], ...]]

    def files(self, folder: Path, split: str) -> list[Path]:
        """The file of each part of ``split`` in ``folder``; a missing one is a CorpusError."""
        if split not in self.splits:
            raise CorpusError(folder, None, f"{self.name} has no {split} split")
        return [self._find(folder, names) for names in self.splits[split]]

    def _find(self, folder: Path, names: tuple[str, ...]) -> Path:
        for name in names:
            if (folder / name).is_file():
                return folder / name
        raise CorpusError(
            folder / names[0],
            None,
            f"not found: run `qres download {self.name}` or pass --data-dir",
        )


LAYOUTS: dict[str, Layout] = {
    "semeval2016": Layout(
        "semeval2016",
        "semeval2016-task3",
        {
            # The official zip has part 1 as XML; ../shared/data has the subtask B CSV of it.
            "train": ((SEMEVAL_PART1_CSV, SEMEVAL_PART1_XML), (SEMEVAL_PART2_XML,)),
            "dev": ((SEMEVAL_DEV_XML,),),
        },
    ),
    "askubuntu": Layout(
        "askubuntu",
        "askubuntu",
        {
            "corpus": (("text_tokenized.txt.gz", "text_tokenized.txt"),),
            "train": (("train_random.txt",),),
            "dev": (("dev.txt",),),
            "test": (("test.txt",),),
        },
    ),
    "android": Layout(
        "android",
        "android",
        {
            "corpus": (ANDROID_CORPUS_FILES,),
            "dev": (("dev.pos.txt",), ("dev.neg.txt",)),
            "test": (("test.pos.txt",), ("test.neg.txt",)),
        },
    ),
}


def default_data_dir() -> Path:
    """``../shared/data`` beside a source checkout if present, else the ``qres download`` dir."""
    shared = paths.repo_shared_data()
    return shared if shared.exists() else paths.data_dir()


def askubuntu_corpus(folder: Path) -> Path | None:
    """AskUbuntu's texts (``text_tokenized.txt[.gz]``) in ``folder`` or where ``qres download
    askubuntu`` put them, if either holds them."""
    (names,) = LAYOUTS["askubuntu"].splits["corpus"]
    places = (folder, paths.data_dir() / LAYOUTS["askubuntu"].folder)
    return next((p / n for p in places for n in names if (p / n).is_file()), None)


def dataset_dir(name: str, data_dir: Path | None = None) -> Path:
    """The folder of data set ``name`` under ``data_dir`` (default :func:`default_data_dir`)."""
    return (data_dir or default_data_dir()) / LAYOUTS[name].folder


def load_semeval_file(path: Path) -> LabelledSet:
    return load_semeval_csv(path) if path.suffix == ".csv" else load_semeval_xml(path)


def load_semeval(folder: Path, split: str) -> LabelledSet:
    """Every query and related question of the SemEval-2016 files of ``split`` in ``folder``."""
    queries, questions = [], {}
    for path in LAYOUTS["semeval2016"].files(folder, split):
        labelled = load_semeval_file(path)
        queries += labelled.queries
        questions.update(labelled.questions)
    return LabelledSet(queries, questions)


def semeval_questions(folder: Path) -> Iterable[Question]:
    """Every related question of the SemEval-2016 subtask B files (train and dev)."""
    for split in ("train", "dev"):
        yield from load_semeval(folder, split).questions.values()


def android_corpus_path(folder: Path) -> Path:
    try:
        (path,) = LAYOUTS["android"].files(folder, "corpus")
    except CorpusError:
        raise CorpusError(
            folder,
            None,
            f"no Android corpus here: expected {', '.join(ANDROID_CORPUS_FILES)} "
            "(id<TAB>title<TAB>body lines)",
        ) from None
    return path


def load_android(folder: Path, split: str) -> LabelledSet:
    """The pairs of ``split`` as queries (candidates in file order, positives relevant) and
    the whole corpus as ``questions``."""
    corpus_path = android_corpus_path(folder)
    questions = {q.id: q for q in read_corpus(corpus_path, "askubuntu")}
    pos_path, neg_path = folder / f"{split}.pos.txt", folder / f"{split}.neg.txt"
    labels = load_pairwise(pos_path, neg_path)
    for path, label in ((pos_path, 1), (neg_path, 0)):
        if not any(label in pairs.values() for pairs in labels.values()):
            raise CorpusError(path, None, "no pairs: AUC needs positive and negative pairs")
    unknown = {i for qid, pairs in labels.items() for i in (qid, *pairs) if i not in questions}
    if unknown:
        _raise_unknown(unknown, (pos_path, neg_path), corpus_path)
    queries = [
        RankingQuery(
            qid,
            list(pairs),
            frozenset(c for c, label in pairs.items() if label == 1),
            question=questions[qid],
        )
        for qid, pairs in labels.items()
    ]
    return LabelledSet(queries, questions)


def _raise_unknown(unknown: set[str], files: Sequence[Path], corpus_path: Path) -> None:
    """Name the first line that uses an id the corpus lacks."""
    for path in files:
        with open_text(path) as f:
            for n, line in enumerate(f, 1):
                for token in line.split():
                    if token in unknown:
                        raise CorpusError(
                            path, n, f"question id {token!r} is not in {corpus_path.name}"
                        )
