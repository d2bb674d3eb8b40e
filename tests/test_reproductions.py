"""The reproduction matrix: docs/results.md's table is generated from it and its fast rows hold."""

from __future__ import annotations

from pathlib import Path

import pytest

from reproductions import run as reproduce

ROOT = Path(__file__).resolve().parents[1]


def test_results_table_is_the_one_the_matrix_renders():
    page = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    assert reproduce.render_table_into(page, reproduce.load_rows()) == page, (
        "docs/results.md's reference table differs from reproductions/matrix.yaml: "
        "run `python reproductions/run.py --write-table`"
    )


def test_render_replaces_only_the_marked_block():
    rows = [
        {"data": "D", "ranker": "R", "decimals": 1, "expected": dict.fromkeys(reproduce.COLUMNS, 5)}
    ]
    text = f"before\n{reproduce.BEGIN}\nstale\n{reproduce.END}\nafter\n"
    rendered = reproduce.render_table_into(text, rows)
    assert rendered.startswith(f"before\n{reproduce.BEGIN}\n| data |")
    assert "| D | R | 5.0 | 5.0 | 5.0 | 5.0 |" in rendered and "stale" not in rendered
    assert rendered.endswith(f"{reproduce.END}\nafter\n")


def test_a_figure_off_by_more_than_the_tolerance_fails():
    row = {"expected": {"MAP": 71.35}, "tolerance": 0.005}
    assert reproduce.Check(row, {"MAP": 71.354}).failures == []
    assert reproduce.Check(row, {"MAP": 71.36}).failures == ["MAP 71.36 (expected 71.35 ± 0.005)"]


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """One QRES_HOME for all rows: the dense and hybrid rows share their evaluation index."""
    return tmp_path_factory.mktemp("home")


@pytest.mark.slow
@pytest.mark.parametrize("row", reproduce.load_rows(fast_only=True), ids=lambda r: r["command"])
def test_fast_rows_reproduce(row, shared_data, home, monkeypatch):
    monkeypatch.setenv("QRES_HOME", str(home))
    monkeypatch.delenv("QRES_BACKEND", raising=False)
    monkeypatch.chdir(ROOT)
    (result,) = reproduce.check([row])
    assert result.failures == [], result.measured
