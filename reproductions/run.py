"""Run the reproduction matrix (matrix.yaml) and check every figure; render its table.

    python reproductions/run.py            # every row
    python reproductions/run.py --fast     # the rows CI runs
    python reproductions/run.py --write-table   # rewrite docs/results.md's table from matrix.yaml

Commands run in-process from the repository root (relative paths in them are the repo's),
with the user's $QRES_HOME, so evaluation indexes are re-used between runs. Exit status 1
when a figure is off by more than its row's tolerance.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
MATRIX = ROOT / "reproductions" / "matrix.yaml"
RESULTS = ROOT / "docs" / "results.md"
BEGIN = "<!-- reproductions:begin (generated from reproductions/matrix.yaml) -->"
END = "<!-- reproductions:end -->"
COLUMNS = ("MAP", "MRR", "P@1", "P@5")


@dataclass
class Check:
    row: dict
    measured: dict[str, float]

    @property
    def failures(self) -> list[str]:
        tolerance = self.row["tolerance"]
        return [
            f"{name} {self.measured.get(name)} (expected {want} ± {tolerance})"
            for name, want in self.row["expected"].items()
            if self.measured.get(name) is None or abs(self.measured[name] - want) > tolerance
        ]


def load_rows(fast_only: bool = False) -> list[dict]:
    rows = yaml.safe_load(MATRIX.read_text(encoding="utf-8"))["rows"]
    return [r for r in rows if r["fast"] or not fast_only]


def evaluate(command: str) -> dict[str, float]:
    """The metrics of a one-ranker ``qres evaluate`` command, run in-process."""
    from click.testing import CliRunner

    from qres.cli import cli

    words = shlex.split(command)
    if words[:2] != ["qres", "evaluate"]:
        raise ValueError(f"not a qres evaluate command: {command}")
    result = CliRunner().invoke(cli, [*words[1:], "--json"], catch_exceptions=False)
    if result.exit_code != 0:
        raise RuntimeError(f"{command} failed: {result.output.strip()}")
    (evaluation,) = json.loads(result.stdout)
    return evaluation["metrics"]


def check(rows: list[dict]) -> list[Check]:
    return [Check(row, evaluate(row["command"])) for row in rows]


def render_table(rows: list[dict]) -> str:
    lines = [
        "| data | ranker | " + " | ".join(COLUMNS) + " |",
        "|---|---|" + "---|" * len(COLUMNS),
    ]
    # Rows of other measures (full-forum search: recall, nDCG) are checked, not tabled here:
    # docs/real-forums.md gives them.
    for row in (r for r in rows if set(COLUMNS) <= set(r["expected"])):
        cells = [f"{row['expected'][c]:.{row['decimals']}f}" for c in COLUMNS]
        lines.append(f"| {row['data']} | {row['ranker']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_table_into(page: str, rows: list[dict]) -> str:
    """``page`` with the text between the markers replaced by the table of ``rows``."""
    start, end = page.index(BEGIN) + len(BEGIN), page.index(END)
    return page[:start] + "\n" + render_table(rows) + "\n" + page[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="only the rows marked fast")
    parser.add_argument(
        "--write-table", action="store_true", help="rewrite the table of docs/results.md"
    )
    args = parser.parse_args(argv)
    os.chdir(ROOT)  # the commands' relative paths are the repository's
    if args.write_table:
        RESULTS.write_text(render_table_into(RESULTS.read_text("utf-8"), load_rows()), "utf-8")
        print(f"rewrote the reproductions table of {RESULTS}")
        return 0
    failed = 0
    for result in check(load_rows(args.fast)):
        row, failures = result.row, result.failures
        failed += bool(failures)
        status = "FAIL " + "; ".join(failures) if failures else "ok"
        print(f"{row['data']} | {row['ranker']}: {status}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
