"""A forum's newer dump, a share of its questions deleted: ``qres index Posts.xml --prune`` on
the index of the older one, against ``qres index Posts.xml --rebuild``, the other way to
drop them, side by side in the same run, as JSON.

    python benchmarks/prune_sync.py --dump DIR --work DIR [--model DIR] [--deleted 0.01]
        [--out FILE]

``--dump``: a StackExchange dump folder (``Posts.xml``, ``PostLinks.xml``), e.g. one grown by
``benchmarks/real_text.py``. In ``--work`` the dump is copied and indexed (with ``--model``'s
vectors, or BM25 alone), then ``Posts.xml`` is written again without every question whose
position is a multiple of 1 / ``--deleted`` (the newer dump), and indexed twice from that
same index: once with ``--prune``, once with ``--rebuild``, and once with neither (the
control: the deleted questions stay; the copy of the index each runs on is made apart and not
timed). Each run is timed by ``/usr/bin/time -v``: wall seconds, CPU
seconds, peak RSS; and each index is searched for the deleted questions' titles (none of them
may come back).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

QRES = [sys.executable, "-c", "import sys; from qres.cli import main; sys.argv[0] = 'qres'; main()"]
QUESTION_ROW = re.compile(r'<row Id="([^"]+)" PostTypeId="1"')


def timed(args: list[str]) -> dict:
    done = subprocess.run(
        ["/usr/bin/time", "-v", *QRES, *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        sys.exit(f"qres {' '.join(args)} failed: {done.stderr.strip().splitlines()[-3:]}")
    stats = dict(re.findall(r"^\s*(.+?): (.+)$", done.stderr, re.M))
    clock = [float(p) for p in stats["Elapsed (wall clock) time (h:mm:ss or m:ss)"].split(":")]
    wall = sum(p * 60**i for i, p in enumerate(reversed(clock)))
    cpu = float(stats["User time (seconds)"]) + float(stats["System time (seconds)"])
    summary = json.loads(done.stdout)
    return {
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "peak_rss_mb": round(int(stats["Maximum resident set size (kbytes)"]) / 1024),
        "index_size": summary["index_size"],
        "pruned": summary.get("pruned", 0),
    }


def newer_dump(posts: Path, every: int) -> tuple[list[str], list[str]]:
    """Rewrite ``posts`` without every ``every``-th question; their ids and titles."""
    kept, ids, titles, position = [], [], [], 0
    with posts.open(encoding="utf-8") as lines:
        for line in lines:
            row = QUESTION_ROW.search(line)
            if row:
                position += 1
                if position % every == 0:
                    ids.append(row.group(1))
                    titles.append(re.search(r' Title="([^"]*)"', line).group(1))
                    continue
            kept.append(line)
    posts.write_text("".join(kept), encoding="utf-8")
    return ids, titles


def still_found(index_dir: Path, ids: list[str], titles: list[str]) -> int:
    """How many deleted questions their own titles still find (first 200)."""
    import html

    from qres import SearchPipeline

    pipeline = SearchPipeline.open(index_dir)
    return sum(
        qid in {r.id for r in pipeline.search(html.unescape(t), k=10, with_text=False)}
        for qid, t in zip(ids[:200], titles[:200], strict=True)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dump", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--model", type=Path, help="a model directory [default: BM25 alone]")
    parser.add_argument("--deleted", type=float, default=0.01)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    dump, first = args.work / "dump", args.work / "first"
    dump.mkdir(parents=True)
    for name in ("Posts.xml", "PostLinks.xml"):
        shutil.copy(args.dump / name, dump / name)
    model = ["--model", str(args.model)] if args.model else []
    indexing = timed(
        ["index", str(dump / "Posts.xml"), "--index-dir", str(first), *model, "--json"]
    )
    ids, titles = newer_dump(dump / "Posts.xml", round(1 / args.deleted))
    runs = {}
    for way in ("neither", "prune", "rebuild"):  # neither: what the deleted ones did before
        index_dir, flag = args.work / way, [] if way == "neither" else [f"--{way}"]
        shutil.copytree(first, index_dir)
        posts = str(dump / "Posts.xml")
        runs[way] = timed(["index", posts, "--index-dir", str(index_dir), *flag, "--json"])
        runs[way]["deleted_found_by_their_titles"] = still_found(index_dir, ids, titles)
    report = {
        "benchmark": "prune_sync",
        "dump": str(args.dump),
        "model": str(args.model) if args.model else None,
        "cpu_count": os.cpu_count(),
        "load_1min": round(os.getloadavg()[0], 2),
        "first_index": indexing,
        "deleted": len(ids),
        "runs": runs,
        "prune_over_rebuild_wall": round(runs["prune"]["wall_s"] / runs["rebuild"]["wall_s"], 3),
    }
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
