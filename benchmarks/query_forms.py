"""The travel forum's test split searched as a widget does (a title, or its first words) and
as every earlier figure did (the whole question), by each model set, as JSON.

    python benchmarks/query_forms.py [--sets bm25,minilm,fast] [--baseline-python PYTHON]

Each cell is ``qres evaluate --dataset stackexchange --split test --query FORM`` (text alone
with ``--no-links``, and with the forum's duplicate links followed as ``qres search`` does),
run as a user runs it; the evaluation indexes are the ones ``qres evaluate`` keeps, so a
second run only searches. nDCG@10 and R@100 per cell, and for every set the paired bootstrap
95% interval of its nDCG@10 difference (:mod:`qres.evaluation.significance`) against BM25 and
against ``baseline``: the former README path, ``--model-set fast`` as it was (the shipped GRU
and MiniLM int8 on 64 tokens, its pairwise fusion), run by ``--baseline-python``, a Python
whose ``qres`` is the former one (e.g. a venv with a .pth naming a ``git worktree`` of
edc28f8 given ``--query``, then this venv's site-packages), with its own evaluation indexes
under ``$QRES_HOME/before`` (the models shared), over the same 216 queries. With
``--before-python``, each of ``--sets`` is also run by that Python's ``qres`` (a worktree of the
commit before a change, the same way), sharing this qres's evaluation indexes, and compared
with itself there (``vs NAME before``). With ``--typing``, each set is also run with ``qres
evaluate --typing`` (a title form's last word completed as the widget's search does) and
compared with itself searched as typed (``vs NAME``), e.g. ``--forms
title-chars:12,title-chars:20,title-chars:30 --typing``. ``--links`` picks the link modes,
``--split`` the split (choose on ``train``). Needs the sets built and the shared data.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_latency import machine  # noqa: E402

from qres import paths  # noqa: E402
from qres.datasets.benchmarks import default_data_dir  # noqa: E402
from qres.evaluation.significance import compare  # noqa: E402

FORMS = ("question", "title", "title-words:4")
LINKS = {"text alone": ["--no-links"], "links followed": []}
SPLITS = {
    "test": "test (the newest 216 duplicates of the travel forum, 4,919 questions)",
    "train": "train (the oldest 864 duplicates of the travel forum, 4,919 questions)",
}


def ranker_args(name: str) -> list[str]:
    if name == "bm25":
        return ["--ranker", "bm25"]
    if name == "baseline":
        return ["--ranker", "hybrid", "--model-set", "fast"]  # as the former qres defines it
    return ["--ranker", "hybrid", "--model-set", name]


def baseline_env() -> dict:
    """The environment the former qres runs in: its own evaluation indexes, the same
    models."""
    home = Path(os.environ.get("QRES_HOME") or paths.home())
    before = home / "before"
    before.mkdir(parents=True, exist_ok=True)
    if not (before / "models").exists():
        (before / "models").symlink_to(home / "models")
    return {**os.environ, "QRES_HOME": str(before)}


def evaluate(
    args: list[str], env: dict | None = None, python: str = sys.executable, split: str = "test"
) -> dict:
    """``qres evaluate`` run by ``python`` (from a neutral folder, so that its own ``qres`` is
    the one imported), with every path absolute."""
    qres = [python, "-c", "from qres.cli import main; main()"]
    command = [*qres, "--json", "evaluate", "--dataset", "stackexchange", "--split", split]
    done = subprocess.run(
        [*command, *args, "--per-query"],
        capture_output=True,
        text=True,
        env=env or os.environ,
        cwd=tempfile.gettempdir(),
    )
    if done.returncode != 0:
        sys.exit(f"qres evaluate {' '.join(args)}: {done.stderr.strip().splitlines()[-1:]}")
    (evaluation,) = json.loads(done.stdout)
    return evaluation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default="bm25,minilm,fast", help="bm25 and model sets")
    parser.add_argument("--baseline-python", default=None, help="runs the former qres")
    parser.add_argument("--before-python", default=None, help="runs each set as it was")
    parser.add_argument("--forms", default=",".join(FORMS))
    parser.add_argument("--links", default=",".join(LINKS), help="text alone, links followed")
    parser.add_argument("--forum", type=Path, default=None, help="[default: travel]")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--typing", action="store_true", help="each set with --typing too")
    parser.add_argument("--split", default="test", help="test, or train to choose on")
    args = parser.parse_args()
    forum = str((args.forum or default_data_dir() / "stackexchange-travel").resolve())
    names = args.sets.split(",") + (["baseline"] if args.baseline_python else [])
    if args.before_python:
        names += [f"{name} before" for name in args.sets.split(",")]
    if args.typing:
        names += [f"{name} typing" for name in args.sets.split(",")]
    started = time.perf_counter()
    cells, per_query = {}, {}
    for form in args.forms.split(","):
        for links in args.links.split(","):
            for name in names:
                stem = name.removesuffix(" before").removesuffix(" typing")
                asked = [*ranker_args(stem), "--query", form, *LINKS[links], "--data-dir", forum]
                asked += ["--typing"] if name.endswith(" typing") else []
                if name == "baseline":
                    found = evaluate(asked, baseline_env(), args.baseline_python, args.split)
                elif name.endswith(" before"):
                    found = evaluate(asked, python=args.before_python, split=args.split)
                else:
                    found = evaluate(asked, split=args.split)
                key = f"{name} | {form} | {links}"
                m = found["metrics"]
                cells[key] = {"nDCG@10": round(m["nDCG@10"], 2), "R@100": round(m["R@100"], 2)}
                per_query[key] = {r["query"]: r["nDCG@10"] for r in found["per_query"]}
                print(key, cells[key], flush=True)
    for key, row in cells.items():
        name, form, links = key.split(" | ")
        typed = name.removesuffix(" typing") if name.endswith(" typing") else None
        for other in ("bm25", "baseline", f"{name} before", typed):
            against = f"{other} | {form} | {links}"
            if other is None or other == name or against not in per_query:
                continue
            c = compare(other, per_query[against], name, per_query[key])
            row[f"vs {other}"] = {
                "difference": round(c.difference, 2),
                "interval": [round(c.ci_low, 2), round(c.ci_high, 2)],
                "p": round(c.p_value, 4),
            }
            if other == "bm25" and not name.endswith((" before", " typing")):
                row["ratio to bm25"] = round(row["nDCG@10"] / cells[against]["nDCG@10"], 3)
    result = {
        "benchmark": "query_forms",
        "split": SPLITS.get(args.split, args.split),
        "cells": cells,
        "seconds": round(time.perf_counter() - started, 1),
        "machine": machine(),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
