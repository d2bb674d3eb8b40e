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
