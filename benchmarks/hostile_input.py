"""Hostile corpus files against `qres index`, as JSON: time and peak memory.

    python benchmarks/hostile_input.py --work-dir /tmp/qres-hostile [--gigabytes 4]

* one line of ``--gigabytes`` GB in a small ``.tsv.gz`` (a few MB): `qres index` refuses it in
  one line, and `--skip-bad` reads past it to the good line after it; the peer is reading the
  same file through gzip in 1 MB pieces and throwing it away, the least any reader pays;
* a ``Posts.xml`` whose one Body attribute is 5, 10 and 20 MB: read by qres's reader, and by
  its peer, the same parser fed 64 KB at a time as qres did before (expat 2.5 scans an
  unfinished token again on every feed: quadratic);
* a Body of ``--gigabytes`` GB in a small ``Posts.xml.gz``: refused in one line.

Each `qres index` runs in its own process; its peak RSS is the kernel's (``wait4``), so it
counts everything the process touched. The generated files are kept in --work-dir and
reused.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_latency import machine  # noqa: E402

from qres.corpus.readers import read_corpus  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MB = 1 << 20


def write_gz(path: Path, head: bytes, filler: bytes, size: int, tail: bytes) -> Path:
    """``head``, ``size`` bytes of ``filler`` repeated, ``tail``, gzipped (once)."""
    if not path.exists():
        block = filler * (MB // len(filler))
        with gzip.open(path.with_suffix(".tmp"), "wb", compresslevel=6) as f:
            f.write(head)
            for _ in range(size // len(block)):
                f.write(block)
            f.write(tail)
        path.with_suffix(".tmp").replace(path)
    return path


def run_qres(*args) -> dict:
    """`qres ARGS` in its own process: exit status, seconds, peak RSS and its stderr."""
    command = [sys.executable, "-c", "from qres.cli import main; main()", *map(str, args)]
    started = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    stderr = proc.stderr.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {
        "exit_status": proc.returncode,
        "seconds": round(time.monotonic() - started, 2),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "stderr_lines": stderr.count("\n"),
        "stderr": stderr.strip()[-300:],
    }


def drain(path: Path) -> dict:
    """The peer of a reader: gunzip ``path`` in 1 MB pieces and throw them away."""
    started = time.monotonic()
    with gzip.open(path, "rb") as f:
        while f.read(MB):
            pass
    return {"seconds": round(time.monotonic() - started, 2)}


def posts_xml(path: Path, body_bytes: int) -> Path:
    if not path.exists():
        body = "&lt;p&gt;" + "word " * ((body_bytes - 20) // 5) + "&lt;/p&gt;"
        path.write_text(
            '<?xml version="1.0" encoding="utf-8"?>\n<posts>\n'
            f'  <row Id="1" PostTypeId="1" Title="long" Body="{body}" />\n'
            '  <row Id="2" PostTypeId="1" Title="short" Body="b" />\n</posts>\n'
        )
    return path


def fed_64k(path: Path) -> int:
    """The peer: ``path`` fed to an XMLPullParser 64 KB at a time, as qres did before."""
    parser, rows = ET.XMLPullParser(events=("end",)), 0
    with open(path, encoding="utf-8") as f:
        while piece := f.read(1 << 16):
            parser.feed(piece)
            rows += sum(elem.tag == "row" for _, elem in parser.read_events())
    parser.close()
    return rows


def timed(function, *args) -> dict:
    wall, cpu = time.perf_counter(), time.process_time()
    out = function(*args)
    return {
        "seconds": round(time.perf_counter() - wall, 2),
        "cpu_seconds": round(time.process_time() - cpu, 2),
        "result": out,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", type=Path, required=True)
    parser.add_argument("--gigabytes", type=float, default=4.0)
    parser.add_argument("--attribute-mb", default="5,10,20")
    args = parser.parse_args()
    work = args.work_dir
    work.mkdir(parents=True, exist_ok=True)
    size = int(args.gigabytes * (1 << 30))
    load_before = os.getloadavg()
    results = {}

    line = write_gz(
        work / f"one-line-{args.gigabytes:g}g.tsv.gz",
        b"id\ttitle\tbody\ngood1\tt\tb\nhuge\tt\t",
        b"x",
        size,
        b"\ngood2\tt\tb\n",
    )
    results["long_line"] = {
        "file_mb": round(line.stat().st_size / MB, 1),
        "line_gb": args.gigabytes,
        "refused": run_qres("--index-dir", work / "ix-line", "index", line),
        "skip_bad": run_qres("--index-dir", work / "ix-line-skip", "index", line, "--skip-bad"),
        "peer_gunzip_1mb_pieces": drain(line),
    }
    skip, peer = results["long_line"]["skip_bad"], results["long_line"]["peer_gunzip_1mb_pieces"]
    results["long_line"]["skip_bad_over_peer"] = round(skip["seconds"] / peer["seconds"], 2)

    attribute = []
    for mb in (int(m) for m in args.attribute_mb.split(",")):
        path = posts_xml(work / f"posts-body-{mb}mb.xml", mb * 1000 * 1000)
        qres = timed(lambda p: len(list(read_corpus(p))), path)
        peer = timed(fed_64k, path)
        attribute.append(
            {
                "body_mb": mb,
                "qres_reader": qres,
                "peer_fed_64kb": peer,
                "peer_over_qres": round(peer["seconds"] / qres["seconds"], 1),
            }
        )
    results["long_attribute"] = attribute

    body = write_gz(
        work / f"posts-body-{args.gigabytes:g}g.xml.gz",
        b'<?xml version="1.0" encoding="utf-8"?>\n<posts>\n'
        b'  <row Id="1" PostTypeId="1" Title="t" Body="b" />\n'
        b'  <row Id="2" PostTypeId="1" Title="t" Body="',
        b"x",
        size,
        b'" />\n</posts>\n',
    )
    results["endless_attribute"] = {
        "file_mb": round(body.stat().st_size / MB, 1),
        "attribute_gb": args.gigabytes,
        "refused": run_qres("--index-dir", work / "ix-xml", "index", body),
    }
    print(
        json.dumps(
            {
                "benchmark": "hostile_input",
                "machine": {**machine(), "load_average_before": load_before},
                "load_average_after": os.getloadavg(),
                **results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
