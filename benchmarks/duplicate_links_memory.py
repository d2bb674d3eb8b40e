"""Reading a StackOverflow-sized ``PostLinks.xml``: time and peak memory, as JSON.

    python benchmarks/duplicate_links_memory.py --out DIR [--links 8000000] [--duplicates 1100000]

Writes ``DIR/PostLinks.xml`` (once; reused when there) with ``--links`` rows, of which
``--duplicates`` are "closed as a duplicate" links (``LinkTypeId`` 3) and the rest "linked"
(type 1), posts drawn from ids up to 80 million, dates increasing: StackOverflow's dump of
2024 holds about that many rows, a million or so of them duplicate links. Then, in a fresh
process each, :func:`qres.corpus.duplicate_links.read` (what ``qres index Posts.xml`` does
before the posts) and, as the peer, a loop over the same file that parses every row and keeps
nothing: peak RSS above the interpreter's, seconds, and the duplicates held.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_latency import machine  # noqa: E402


def write_links(path: Path, links: int, duplicates: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    is_duplicate = np.zeros(links, bool)
    is_duplicate[rng.choice(links, duplicates, replace=False)] = True
    with open(path, "w", encoding="utf-8") as f:
        f.write('<?xml version="1.0" encoding="utf-8"?>\n<postlinks>\n')
        for start in range(0, links, 100_000):
            n = min(100_000, links - start)
            posts = rng.integers(1, 80_000_000, n)
            related = rng.integers(1, 80_000_000, n)
            kinds = np.where(is_duplicate[start : start + n], 3, 1)
            rows = []
            for i in range(n):
                seconds = 1_217_000_000 + (start + i) * 60
                date = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
                rows.append(
                    f'  <row Id="{start + i + 1}" CreationDate="{date}.123" '
                    f'PostId="{posts[i]}" RelatedPostId="{related[i]}" '
                    f'LinkTypeId="{kinds[i]}" />\n'
                )
            f.write("".join(rows))
        f.write("</postlinks>\n")


def child(what: str, path: Path) -> dict:
    import xml.etree.ElementTree as ET

    from qres.corpus import duplicate_links

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    if what == "qres":
        held = len(duplicate_links.read(path))
    else:  # the peer: every row parsed, each element dropped as soon as it is read
        held = 0
        parser = ET.XMLPullParser(events=("start", "end"))
        root = None
        with open(path, "rb") as f:
            while block := f.read(1 << 16):
                parser.feed(block)
                for event, element in parser.read_events():
                    if event == "start" and root is None:
                        root = element
                    elif event == "end" and element.tag == "row":
                        held += element.get("LinkTypeId") == "3"
                        root.remove(element)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "seconds": round(time.perf_counter() - started, 1),
        "peak_rss_mb_over_start": round((peak - before) / 1024, 1),
        "peak_rss_mb": round(peak / 1024, 1),
        "duplicates_held": held,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--links", type=int, default=8_000_000)
    parser.add_argument("--duplicates", type=int, default=1_100_000)
    parser.add_argument("--child", choices=["qres", "parse-only"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    path = args.out / "PostLinks.xml"
    if args.child:
        print(json.dumps(child(args.child, path)))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    written = None
    if not path.exists():
        started = time.perf_counter()
        write_links(path, args.links, args.duplicates)
        written = round(time.perf_counter() - started, 1)
    runs = {}
    for what in ("parse-only", "qres"):
        command = [sys.executable, __file__, "--out", str(args.out), "--child", what]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        runs[what] = json.loads(done.stdout)
    report = {
        "benchmark": "duplicate_links_memory",
        "file": str(path),
        "file_mb": round(path.stat().st_size / 2**20, 1),
        "links": args.links,
        "duplicates": args.duplicates,
        "written_seconds": written,
        "runs": runs,
        "machine": {**machine(), "load_average": os.getloadavg()},
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
