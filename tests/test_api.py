"""The public Python API: the README example, parity with the CLI, a light ``import qres``."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import qres
from qres.backends.base import BackendError
from qres.backends.embedded import EmbeddedBackend

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "qres" / "data" / "demo" / "questions.tsv"
MODEL = REPO / "qres" / "models" / "default"


def readme_example() -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- api-example -->\n```python\n(.*?)```", readme, re.S)
    assert found, "README.md lost its <!-- api-example --> block"
    return found.group(1)


def test_readme_example_runs_from_the_checkout_root(tmp_path, monkeypatch):
    code = readme_example()
    assert len([line for line in code.splitlines() if line.strip()]) == 4
    # The example's relative paths, from a copy of the checkout's root that git would see.
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "qres").symlink_to(REPO / "qres")
    monkeypatch.chdir(checkout)
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    printed = out.getvalue()
    assert printed.startswith("[Result(id=") and printed.count("Result(") == 3, printed
    assert "cosine=None" not in printed  # hybrid: every result was rescored
    assert (tmp_path / "home" / "tmp" / "demo-index" / "meta.json").is_file()
    assert [p.name for p in checkout.iterdir()] == ["qres"]  # nothing left in the checkout


def test_search_pipeline_open_returns_what_qres_search_prints(run, tmp_path):
    assert run("index", DEMO, "--model", MODEL).exit_code == 0
    for mode in (None, "bm25", "dense"):
        extra = ["--mode", mode] if mode else []
        printed = json.loads(run("search", "wifi drops", "-k", 5, "--json", *extra).output)
        with qres.SearchPipeline.open(tmp_path / "home" / "index", mode=mode) as pipeline:
            results = pipeline.search("wifi drops", 5)
            assert pipeline.mode == printed["mode"]
        assert [r.id for r in results] == [r["id"] for r in printed["results"]]
        assert [r.score for r in results] == pytest.approx([r["score"] for r in printed["results"]])


def test_index_add_takes_questions_and_keeps_the_models_the_index_holds(tmp_path):
    with qres.Index.open(tmp_path / "ix", model=MODEL) as index:
        report = index.add([qres.Question("q1", "boot from usb", "grub hangs")])
        assert report.indexed == 1 and index.count() == 1
    with qres.Index.open(tmp_path / "ix") as index:  # its own model, as `qres index` takes it
        index.add([qres.Question("q2", "wifi drops", "every ten minutes")])
    with qres.SearchPipeline.open(tmp_path / "ix") as pipeline:
        hits = {hit.id: hit for hit in pipeline.search("usb boot wifi", 3)}
    assert hits.keys() == {"q1", "q2"}
    assert all(hit.cosine is not None for hit in hits.values())
    backend = qres.open_backend(None, tmp_path / "ix")
    try:
        with pytest.raises(BackendError, match="stores dense vectors"):
            qres.Index(backend)  # no encoder: its questions would have no vectors
    finally:
        backend.close()


def test_index_add_reads_a_dumps_duplicate_links_as_qres_index_does(tmp_path, shared_data):
    posts = shared_data / "stackexchange-travel" / "Posts.xml"
    with qres.Index.open(tmp_path / "links") as index:
        index.add(posts)  # its PostLinks.xml beside it
    with qres.Index.open(tmp_path / "no-links") as index:
        index.add(posts, links=False)
    query = "schengen visa overstay one day"  # 38654 first, closed as a duplicate of 22849
    with qres.SearchPipeline.open(tmp_path / "links") as pipeline:
        top = pipeline.search(query, 1)[0]
    assert (top.id, top.via) == ("22849", "38654")
    with qres.SearchPipeline.open(tmp_path / "no-links") as pipeline:
        top = pipeline.search(query, 1)[0]
    assert (top.id, top.via) == ("38654", None)
    with qres.Index.open(tmp_path / "no-links") as index, pytest.raises(ValueError, match="links"):
        index.add(posts, links=True)


def test_index_add_refuses_another_forum_as_qres_index_does_unless_asked(run, tmp_path):
    """``Index.open("travel").add("robotics.tsv")`` mixed two forums without a word."""
    from qres.indexing.sources import corpora

    travel, robotics = tmp_path / "travel.tsv", tmp_path / "robotics.tsv"
    travel.write_text("id\ttitle\tbody\nt1\tvisa for a layover\tschengen\n")
    robotics.write_text("id\ttitle\tbody\nr1\tservo jitter\tpwm\nr2\tlidar noise\tx\n")
    with qres.Index.open(tmp_path / "ix") as index:
        index.add(travel)
        with pytest.raises(BackendError, match=r"this index holds .*travel\.tsv, not .*robotics"):
            index.add(robotics)
        assert index.count() == 1  # refused before anything was written
        assert corpora(index.backend) == [str(travel)]
        assert index.add(robotics, add_to_existing=True).indexed == 2
        assert corpora(index.backend) == [str(travel), str(robotics)]
    refused = run("--index-dir", tmp_path / "ix2", "index", robotics)
    assert refused.exit_code == 0, refused.output
    with qres.Index.open(tmp_path / "ix2") as index, pytest.raises(BackendError) as api:
        index.add(travel)
    said = run("--index-dir", tmp_path / "ix2", "index", travel).output
    held = str(api.value).split(": ")[0]  # "this index holds ..., not ..."
    assert f"error: {held}: " in said  # as the command says it, each naming its own ways on
    assert str(api.value).endswith("mix them with add_to_existing=True")
    assert "--add-to-existing" in said and "--" not in str(api.value)


def test_index_add_skips_bad_records_or_says_what_it_kept(tmp_path):
    corpus = tmp_path / "robotics.tsv"
    corpus.write_text("id\ttitle\tbody\nr1\tservo\tpwm\nr2\tno body\nr3\tlidar\tnoise\n")
    with qres.Index.open(tmp_path / "ix") as index:
        with pytest.raises(ValueError) as info:
            index.add(corpus)
        assert str(info.value).startswith(f"{corpus}:3: expected 3 tab-separated fields, found 2")
        assert str(info.value).endswith("; the questions read before it are in the index (1)")
        assert index.count() == 1
        report = index.add(corpus, skip_bad=True)
        assert (report.indexed, report.skipped, index.count()) == (2, 1, 2)
        assert len(report.problems) == 1
        assert report.problems[0].startswith(f"{corpus}:3: expected 3 tab-separated fields")


def test_index_add_counts_the_questions_with_bytes_that_are_not_utf8(tmp_path):
    corpus = tmp_path / "latin.tsv"
    corpus.write_bytes(b"id\ttitle\tbody\nr1\tservo\tpwm\nr2\tna\xefve\tlidar\n")
    with qres.Index.open(tmp_path / "ix") as index:
        report = index.add(corpus)
    assert (report.indexed, report.undecodable) == (2, 1)


def test_results_carry_the_answer_count_as_qres_search_json_prints_it(run, tmp_path):
    corpus = tmp_path / "forum.jsonl"
    corpus.write_text(
        '{"id": "a", "title": "boot from usb", "answer_count": 2, "score": 5}\n'
        '{"id": "b", "title": "usb boot menu missing"}\n'
    )
    assert run("index", corpus).exit_code == 0
    printed = json.loads(run("--json", "search", "usb boot").output)["results"]
    assert {r["id"]: (r["answer_count"], r["extras"]) for r in printed} == {
        "a": (2, {"answer_count": 2, "score": 5}),
        "b": (None, {}),
    }
    with qres.SearchPipeline.open(tmp_path / "home" / "index") as pipeline:
        results = {r.id: r for r in pipeline.search("usb boot", 5)}
        ranked = pipeline.search("usb boot", 5, with_text=False)  # ranking alone: nothing read
    assert results["a"].answer_count == 2 and results["a"].extras == {"answer_count": 2, "score": 5}
    assert results["b"].answer_count is None and results["b"].extras == {}
    assert all(r.answer_count is None and r.extras == {} for r in ranked)


def test_import_qres_loads_nothing_heavy():
    code = (
        "import sys, qres; "
        "heavy = ('numpy', 'onnxruntime', 'tantivy', 'click', 'qres.ranking.search');"
        "print([m for m in heavy if m in sys.modules]); print(sorted(qres.__all__))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    loaded, names = out.stdout.splitlines()
    assert loaded == "[]", out.stderr
    assert "Index" in names and "SearchPipeline" in names


def test_public_names_resolve_and_unknown_ones_fail():
    for name in qres.__all__:
        assert getattr(qres, name) is not None
    assert qres.Index.__module__ == "qres.indexing.index"
    with pytest.raises(AttributeError):
        qres.NoSuchThing  # noqa: B018


def test_backend_base_class_describes_and_refuses_search_logs(tmp_path):
    backend = EmbeddedBackend(tmp_path / "ix", create=True)
    assert backend.describe() == {} and not backend.keeps_search_log
    with pytest.raises(BackendError, match="keeps no search log"):
        backend.log_search({"query": "x"})


def test_log_queries_on_the_embedded_backend_is_a_clear_error(run):
    assert run("index", DEMO).exit_code == 0
    result = run("search", "usb", "--log-queries")
    assert result.exit_code == 1 and "needs the Elasticsearch backend" in result.output


SCRIPT = """
import sys
import qres
{body}
"""
TOP_LEVEL = """
added = qres.Index.open(sys.argv[1], model=sys.argv[2]).add(sys.argv[3], batch_size=60)
print("added", added.indexed)
"""
GUARDED = """
def main():
    added = qres.Index.open(sys.argv[1], model=sys.argv[2]).add(sys.argv[3], batch_size=60)
    print("added", added.indexed)

if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize("body", [TOP_LEVEL, GUARDED], ids=["top-level", "guarded"])
def test_a_script_indexes_many_batches_with_or_without_a_main_guard(tmp_path, body):
    # Worker processes start by running the main script again; a script that indexes at
    # its top level would index again in each one (it hung, or broke the pool, before).
    script = tmp_path / "script.py"
    script.write_text(SCRIPT.format(body=body), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "ix"), str(MODEL), str(DEMO)],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=tmp_path,
        env={**os.environ, "QRES_HOME": str(tmp_path / "home")},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["added", "330"]
    assert done.stderr == ""
