"""The model manifest: every file of a model directory listed with its sha256 and verified."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from qres.encoders.manifest import add_to_manifest, file_sha256, open_model
from qres.encoders.runtime import EncoderError
from qres.ranking.fusion import DEFAULT, Fusion
from qres.ranking.search import SearchPipeline

MODEL = Path(__file__).resolve().parents[1] / "qres" / "models" / "default"


@pytest.fixture
def model(tmp_path) -> Path:
    """The shipped GRU without the fusion it ships with: a model as training leaves it."""
    copy = tmp_path / "model"
    shutil.copytree(MODEL, copy)
    (copy / "fusion.json").unlink()
    card = json.loads((copy / "model.json").read_text())
    del card["files"]["fusion.json"]
    (copy / "model.json").write_text(json.dumps(card))
    return copy


def test_the_shipped_model_lists_every_file_it_holds():
    card = json.loads((MODEL / "model.json").read_text())
    on_disk = {p.name for p in MODEL.iterdir()} - {"model.json"}
    assert set(card["files"]) == on_disk
    for name, entry in card["files"].items():
        assert entry["sha256"] == file_sha256(MODEL / name)
    roles = {"model.onnx": "graph", "vocab.txt": "vocabulary", "fusion.json": "fusion"}
    assert open_model(MODEL).files == roles


def test_saved_fusion_is_listed_and_read_back(model):
    assert Fusion.load(model) is DEFAULT
    tuned = Fusion(bm25=0.3, cosine=0.7, source="test")
    tuned.save(model)
    loaded = open_model(model)
    assert loaded.files["fusion.json"] == "fusion"
    assert Fusion.for_model(loaded) == tuned


def test_an_edited_fusion_is_refused(model, tmp_path):
    Fusion(bm25=0.3, cosine=0.7).save(model)
    (model / "fusion.json").write_text(json.dumps({"bm25": 1.0, "cosine": 0.0}))
    with pytest.raises(EncoderError, match="fusion.json: does not match its sha256"):
        Fusion.load(model)


def test_a_component_the_card_does_not_list_is_refused(model):
    (model / "fusion.json").write_text(json.dumps({"bm25": 1.0, "cosine": 0.0}))
    with pytest.raises(EncoderError, match="fusion.json: not listed in model.json"):
        open_model(model)


def test_a_card_without_a_manifest_still_loads_by_the_fingerprint(model):
    card = json.loads((model / "model.json").read_text())
    del card["files"]
    (model / "model.json").write_text(json.dumps(card))
    assert open_model(model).files == {"model.onnx": "graph", "vocab.txt": "vocabulary"}
    add_to_manifest(model, "vocab.txt", "vocabulary")  # an older card gets its core files too
    assert set(json.loads((model / "model.json").read_text())["files"]) == {
        "model.onnx",
        "vocab.txt",
    }


def test_search_uses_the_fusion_the_manifest_lists(model, run, tmp_path):
    demo = MODEL.parents[1] / "data" / "demo" / "questions.tsv"
    assert run("index", demo, "--model", model).exit_code == 0
    Fusion(bm25=0.0, cosine=1.0, source="cosine only").save(model)
    with SearchPipeline.open(tmp_path / "home" / "index") as pipeline:
        assert pipeline.fusion.cosine == 1.0
        hybrid = pipeline.search("wifi drops", 5)
        dense = pipeline.search("wifi drops", 5, "dense")
    assert [r.id for r in hybrid] == [r.id for r in dense]


def test_a_fusion_file_written_onto_the_models_own_fusion_json_is_listed(model, tmp_path):
    own = json.loads((model / "model.json").read_text())["fingerprint"]
    for fitted in (None, {"fingerprints": [own]}):  # fitted for nothing named, or this model
        tuned = Fusion(bm25=0.2, cosine=0.8, source="test", cv=fitted)
        assert tuned.save_file(model / "fusion.json") == model / "fusion.json"
        assert Fusion.load(model) == tuned  # verified against the manifest on the way
    elsewhere = Fusion(bm25=0.1, cosine=0.9).save_file(tmp_path / "fusion.json")
    assert Fusion.read(elsewhere).bm25 == 0.1  # no model card beside it: a file of its own
    assert Fusion.load(model) == tuned


def test_a_fusion_of_other_models_is_not_written_into_a_model(model):
    other = Fusion(bm25=0.5, cosine=0.5, cv={"fingerprints": ["0" * 64]})
    both = Fusion.equal([json.loads((model / "model.json").read_text())["fingerprint"], "0" * 64])
    for fusion, which in ((other, "another model"), (both, "2 models together")):
        with pytest.raises(ValueError, match=f"fitted for {which}; write it to a file of its own"):
            fusion.save_file(model / "fusion.json")
    assert not (model / "fusion.json").exists() and Fusion.load(model) is DEFAULT
