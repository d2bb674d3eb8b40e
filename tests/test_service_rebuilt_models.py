"""A server whose index is rebuilt beside it with other models (or none) searches with the
index's new models from then on, as a restarted one would: with its old ones it ranked
vectors of another model silently (same dimension) or failed every search (another)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import httpx

from qres import SearchPipeline
from qres.encoders.card import CARD_FILE, card_fingerprint
from qres.encoders.manifest import add_to_manifest, read_card, write_card
from tests.serving import DEMO, MODEL, Server, build_demo_index

QUERIES = ["boot usb", "wifi drops after suspend", "install ubuntu alongside windows"]


def rebuild(index: Path, *args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from qres.cli import main; main()", "--index-dir", str(index),
         "index", str(DEMO), "--rebuild", *args],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def other_model(tmp_path: Path) -> Path:
    """The shipped GRU with two words of its vocabulary swapped: vectors of the same
    dimension, made by another model (another fingerprint)."""
    model = tmp_path / "other-gru"
    shutil.copytree(MODEL, model)
    words = (model / "vocab.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    a, b = next(i for i, w in enumerate(words) if w.split()[0] == "boot"), 40
    words[a], words[b] = words[b], words[a]
    (model / "vocab.txt").write_text("".join(words), encoding="utf-8")
    add_to_manifest(model, "vocab.txt", "vocabulary")
    card = read_card(model / CARD_FILE)
    card["fingerprint"] = card_fingerprint(model, card)
    write_card(model, card)
    return model


def ranked(answer: httpx.Response) -> list[tuple[str, float]]:
    assert answer.status_code == 200, answer.text
    return [(hit["id"], hit["score"]) for hit in answer.json()["results"]]


def test_a_rebuild_with_another_model_of_the_same_dimension_is_searched_with_it(tmp_path):
    index, model = build_demo_index(tmp_path / "index"), other_model(tmp_path)
    with (
        Server(index, log=tmp_path / "server.log") as server,
        httpx.Client(base_url=server.url, timeout=30) as http,
    ):
        before = [ranked(http.get("/search", params={"q": q})) for q in QUERIES]
        rebuild(index, "--model", str(model))
        after = [ranked(http.get("/search", params={"q": q})) for q in QUERIES]
        ready = http.get("/readyz").json()
    fresh = SearchPipeline.open(index)
    expected = [
        [(r.id, round(r.score, 6)) for r in fresh.search(q, k=10, with_text=False)] for q in QUERIES
    ]
    assert after == expected  # what a server started on the rebuilt index answers
    assert after != before
    assert [m["fingerprint"] for m in ready["models"]] == [
        read_card(model / CARD_FILE)["fingerprint"]
    ]
    assert "the index was rebuilt: now searching with" in (tmp_path / "server.log").read_text()


def test_a_rebuild_without_vectors_is_searched_with_bm25(tmp_path):
    index = build_demo_index(tmp_path / "index")
    with (
        Server(index, log=tmp_path / "server.log") as server,
        httpx.Client(base_url=server.url, timeout=30) as http,
    ):
        assert http.get("/search", params={"q": "boot usb"}).json()["mode"] == "hybrid"
        rebuild(index, "--no-vectors")
        answer = http.get("/search", params={"q": "boot usb"})
        assert answer.status_code == 200 and answer.json()["mode"] == "bm25"
        hybrid = http.get("/search", params={"q": "boot usb", "mode": "hybrid"})
        assert hybrid.status_code == 400
        assert "needs an index with vectors" in hybrid.json()["error"]
        ready = http.get("/readyz")
        assert ready.status_code == 200 and ready.json()["models"] == []


def test_a_server_given_its_model_says_to_restart_after_a_rebuild_with_another(tmp_path):
    index, model = build_demo_index(tmp_path / "index"), other_model(tmp_path)
    log = tmp_path / "server.log"
    with (
        Server(index, "--model", str(MODEL), log=log) as server,
        httpx.Client(base_url=server.url, timeout=30) as http,
    ):
        rebuild(index, "--model", str(model))
        answer = http.get("/search", params={"q": "boot usb"})
        assert answer.status_code == 503, answer.text
        assert (
            "rebuilt with other models since this server loaded its own: restart"
            in (answer.json()["error"])
        )
        assert http.get("/readyz").status_code == 503
        assert http.get("/search", params={"q": "boot usb", "mode": "bm25"}).status_code == 200


def test_new_models_that_cannot_be_loaded_are_a_503_saying_why(tmp_path):
    index, model = build_demo_index(tmp_path / "index"), other_model(tmp_path)
    with (
        Server(index, log=tmp_path / "server.log") as server,
        httpx.Client(base_url=server.url, timeout=30) as http,
    ):
        rebuild(index, "--model", str(model))
        shutil.rmtree(model)  # the index names a model directory that is gone
        answer = http.get("/search", params={"q": "boot usb"})
        assert answer.status_code == 503, answer.text
        assert (
            "rebuilt with other models since this server loaded its own, and they cannot be "
            in (answer.json()["error"])
        )
        assert http.get("/readyz").status_code == 503
        assert http.get("/search", params={"q": "boot usb", "mode": "bm25"}).status_code == 200
