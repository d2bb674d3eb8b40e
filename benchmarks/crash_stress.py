"""kill -9 at random points while ``qres index`` fills an index and while it writes the ANN
file; the index must open after each kill, and once a final run completes it must give the
same top 10 as an index built without interruption, as JSON.

    python benchmarks/crash_stress.py --corpus Posts.xml --clean DIR --work DIR
        [--model qres/models/default] [--kills 20] [--queries 200] [--seed 0]
        [--ann-every 3] [--keep-work]

``--clean``: an index of ``--corpus`` built by ``qres index`` in one go (built first if
missing), with the same model. ``--work``: the index that is killed (deleted first). Each
round starts ``qres index CORPUS`` (which resumes: questions stored as read are skipped) and
sends it SIGKILL: once it has written a random number of new vector rows (up to twice an even
share of the clean index's, and at least 2.5 commits' worth: kills land while questions are
written, before, during and after commits, and the runs make progress), or, every third
round (``--ann-every``) once the index has an ANN file (or a kill has seen one written),
while it writes an ANN file (a ``.ann.tmp`` beside the vector file: a random moment after
that file appears).
A run that ends first is not counted as a kill, and ends the rounds when it was not waiting
for an ANN write (the corpus is all in: later runs would only read it). After each kill the
index is opened read-only and must answer a search (a BM25 search for "question" returns a
hit); after the rounds a last run completes. ``--keep-work`` goes on with the index ``--work``
already holds, killed by an earlier run of this script, instead of starting from nothing.
Then ``--queries`` titles of the corpus are searched in both indexes (hybrid, the dense first
stage through each index's ANN file, and bm25), and the top 10s compared.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_latency import machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
QRES = [sys.executable, "-c", "from qres.cli import main; main()"]


def index_command(index: Path, corpus: Path, model: Path) -> list[str]:
    return [*QRES, "--index-dir", str(index), "index", str(corpus), "--model", str(model)]


def run_to_end(index: Path, corpus: Path, model: Path, log) -> float:
    started = time.monotonic()
    subprocess.run(index_command(index, corpus, model), stdout=log, stderr=log, check=True)
    return time.monotonic() - started


def ann_tmp(index: Path) -> bool:
    return any(p.name.endswith(".ann.tmp") for p in index.glob("*.tmp"))


def vector_rows(index: Path) -> int:
    """Rows in the first vector file (2 bytes a dimension; the width does not matter here:
    only growth is compared)."""
    path = index / "vectors.f16"
    return path.stat().st_size if path.exists() else 0


def killed_run(index: Path, corpus: Path, model: Path, log, when: str, grow: int, rng):
    """Start a run (it resumes: what is stored as read is skipped) and SIGKILL it: ``when``
    "any", once its vector file grew by a random share of ``grow`` bytes (so each kill lands
    while questions are written, not while the run reads its way back); "ann", at a random
    moment of its next ANN write. What happened, as a dict."""
    for leftover in index.glob("*.ann.tmp"):  # only a tmp file this run writes counts
        leftover.unlink()
    start_rows = vector_rows(index)
    target = start_rows + int(rng.uniform(0.05, 1.0) * grow)
    process = subprocess.Popen(index_command(index, corpus, model), stdout=log, stderr=log)
    started = time.monotonic()
    saw_ann = False
    while process.poll() is None:
        if when == "ann" and ann_tmp(index):
            saw_ann = True
            time.sleep(rng.uniform(0.0, 2.0))  # somewhere into the write
            break
        if when == "any" and vector_rows(index) >= target:
            break
        time.sleep(0.02)
    if process.poll() is not None:
        return {"when": when, "killed": False, "seconds": round(time.monotonic() - started, 1)}
    saw_ann = saw_ann or ann_tmp(index)
    process.send_signal(signal.SIGKILL)
    process.wait()
    return {
        "when": when,
        "killed": True,
        "at_s": round(time.monotonic() - started, 1),
        "vector_bytes_written": vector_rows(index) - start_rows,
        "during_ann_write": saw_ann,
    }


def opens_and_answers(index: Path) -> dict:
    """Open the index as a reader (no write: a kill's leftovers are left for the next run)."""
    from qres.backends.embedded import EmbeddedBackend

    backend = EmbeddedBackend(index)
    try:
        count = backend.count()
        hits = backend.search("question", 5)
        return {"count": count, "answers": len(hits) > 0}
    finally:
        backend.close()


def compare(clean: Path, work: Path, titles: list[str]) -> dict:
    """How many of ``titles`` get the same top 10 from both indexes, in each mode; and how
    many the same scores, with ids that differ only among equal scores (two indexes of the
    same questions written in other runs lay their documents out differently, and the
    engine orders equal scores by where a document lies)."""
    from qres.ranking.search import SearchPipeline

    out = {}
    with SearchPipeline.open(clean) as a, SearchPipeline.open(work) as b:
        out["questions"] = [a.backend.count(), b.backend.count()]
        for mode in ("hybrid", "bm25"):
            same = same_but_ties = 0
            for t in titles:
                x = a.search(t, 10, mode, with_text=False)
                y = b.search(t, 10, mode, with_text=False)
                same += [r.id for r in x] == [r.id for r in y]
                same_but_ties += _by_score(x) == _by_score(y)
            out[f"{mode}_same_top10"] = same
            out[f"{mode}_same_top10_up_to_ties"] = same_but_ties
        out["queries"] = len(titles)
    return out


def _by_score(results) -> list:
    """Each score of a top 10 with the ids that have it, but for the lowest score (the ids of
    a tie cut at the 10th place depend on which of them the engine meets first)."""
    groups: dict[float, set[str]] = {}
    for r in results:
        groups.setdefault(round(r.score, 6), set()).add(r.id)
    lowest = min(groups, default=None)
    return [(score, ids if score != lowest else len(ids)) for score, ids in groups.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--clean", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--model", type=Path, default=ROOT / "qres" / "models" / "default")
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log", type=Path, help="the runs' output (default: beside --work)")
    parser.add_argument(
        "--ann-every",
        type=int,
        default=3,
        help="every this many rounds, once there is an ANN file, aim at its writing (default 3)",
    )
    parser.add_argument(
        "--keep-work",
        action="store_true",
        help="go on with the index --work holds (an earlier run's, killed) instead of deleting it",
    )
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    log_path = args.log or args.work.with_name(args.work.name + ".log")
    report: dict = {"benchmark": "crash_stress", "corpus": str(args.corpus)}
    with open(log_path, "a") as log:
        if not (args.clean / "meta.json").exists():
            report["clean_build_s"] = round(run_to_end(args.clean, args.corpus, args.model, log), 1)
        grow = kill_window(args.clean, args.kills)
        report["kill_window_bytes"] = grow
        if not args.keep_work:
            shutil.rmtree(args.work, ignore_errors=True)
        elif (args.work / "meta.json").exists():
            report["kept_work"] = opens_and_answers(args.work)
        rounds = []
        seen_ann = any(args.work.glob("*.ann"))  # a kept index may have one already
        for i in range(args.kills):
            when = "ann" if seen_ann and i % args.ann_every == args.ann_every - 1 else "any"
            outcome = killed_run(args.work, args.corpus, args.model, log, when, grow, rng)
            # once the index has an ANN file, the runs write it again as they go: aim at that
            seen_ann = (
                seen_ann or outcome.get("during_ann_write", False) or any(args.work.glob("*.ann"))
            )
            if (args.work / "meta.json").exists():
                outcome.update(opens_and_answers(args.work))
            rounds.append(outcome)
            print(json.dumps(outcome), file=sys.stderr)
            if not outcome["killed"] and when == "any":
                break  # the run got to the end: the corpus is in, later runs only read it
        report["final_run_s"] = round(run_to_end(args.work, args.corpus, args.model, log), 1)
    report["rounds"] = rounds
    report["kills"] = sum(r["killed"] for r in rounds)
    report["kills_during_ann_write"] = sum(r.get("during_ann_write", False) for r in rounds)
    titles = titles_of(args.corpus, args.queries)
    report["comparison"] = compare(args.clean, args.work, titles)
    report["machine"] = {**machine(), "load_average": os.getloadavg()}
    print(json.dumps(report, indent=1))
    return 0


def kill_window(clean: Path, kills: int) -> int:
    """Vector-file bytes within which an "any" kill lands: twice the even share of the clean
    index's file, and at least two and a half commits' worth, so that most runs commit
    something before the kill and the rounds move through the corpus (a run killed before
    its first commit keeps nothing, and the next one starts where it did)."""
    from qres.backends.embedded import EmbeddedBackend
    from qres.indexing.pipeline import COMMIT_EVERY

    with EmbeddedBackend(clean) as backend:
        questions = backend.count()
    size = vector_rows(clean)
    return max(2 * size // max(kills, 1), 5 * COMMIT_EVERY * size // max(2 * questions, 1))


def titles_of(corpus: Path, n: int) -> list[str]:
    """``n`` titles spread over the corpus's first 41,803 questions (the real ones)."""
    from itertools import islice

    from qres.corpus.readers import read_corpus

    titles = [q.title for q in islice(read_corpus(corpus), 41_803)]
    step = max(1, len(titles) // n)
    return titles[::step][:n]


if __name__ == "__main__":
    sys.exit(main())
