"""TREC run files, the format trec_eval, pytrec_eval and ranx read: one line per ranked
candidate, ``qid Q0 docid rank score tag``, each query's lines best first (rank 1 up).

trec_eval orders a query's lines by score (ties by docid), not by the rank column, so the
scores written keep qres's order: a candidate the ranker did not return (score -inf) is
written 1 below the query's lowest real score, and a score tied with the line above it
(qres keeps such candidates in the order it got them) 1e-6 below that line's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from qres.corpus.readers import CorpusError

TIE_STEP = 1e-6


def run_lines(ranked: Mapping[str, Sequence[tuple[str, float]]], tag: str) -> Iterator[str]:
    """The lines of a run: ``ranked`` maps each query id to its candidates, best first."""
    if not tag or any(c.isspace() for c in tag):
        raise ValueError(f"a run tag is one word, not {tag!r}")
    for qid, scored in ranked.items():
        finite = [s for _, s in scored if s != float("-inf")]
        floor = min(finite) - 1.0 if finite else 0.0
        previous = float("inf")
        for rank, (docid, score) in enumerate(scored, 1):
            score = floor if score == float("-inf") else float(score)
            if score >= previous:
                score = previous - max(TIE_STEP, abs(previous) * 1e-12)
            previous = score
            yield f"{qid} Q0 {docid} {rank} {score!r} {tag}"


def write_run(path: Path, ranked: Mapping[str, Sequence[tuple[str, float]]], tag: str) -> int:
    """Write a run file (through a temporary file, so a failed write leaves none); its lines."""
    lines = list(run_lines(ranked, tag))
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    tmp.replace(path)
    return len(lines)


def read_run(path: Path) -> dict[str, list[str]]:
    """Each query's docids of a run file, best first as trec_eval orders them: by score
    descending, ties by docid descending (the rank column is not read)."""
    lines: dict[str, list[tuple[float, str]]] = {}
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                _read_line(path, number, line, lines)
    except UnicodeDecodeError:  # read in blocks: which line is not known
        raise CorpusError(path, None, "not UTF-8 text: a run file is text") from None
    return {
        qid: [docid for _, docid in sorted(scored, reverse=True)] for qid, scored in lines.items()
    }


def _read_line(path: Path, number: int, line: str, lines: dict) -> None:
    """One line of a run file into ``lines`` (query → its (score, docid) pairs)."""
    fields = line.split()
    if not fields:
        return
    if len(fields) != 6:
        raise CorpusError(path, number, "expected 6 fields: qid Q0 docid rank score tag")
    try:
        score = float(fields[4])
    except ValueError:
        raise CorpusError(path, number, f"score {fields[4]!r} is not a number") from None
    lines.setdefault(fields[0], []).append((score, fields[2]))
