"""``qres adapt DIR``: a forum's own model set, learnt from its duplicate links in one command
(not to be confused with :mod:`qres.training.adapt`, adversarial domain adaptation in training).

A forum's moderators close a new question as a duplicate of an older one; those links say
which questions mean the same on that forum, in its own words. ``adapt`` splits them by time
(:mod:`qres.datasets.forum_duplicates`: the oldest 80% train, the newest 20% test, the newest
tenth of train held out) and then, each step resumable:

1. **fine-tune** all-MiniLM-L6-v2 on the train links without the held-out tenth (on a CPU
   the newest :data:`TRAIN_LINKS` of them; :func:`qres.training.finetune_transformer.finetune`;
   the last epoch asks with each duplicate's title alone, as a widget does; each one's hard
   negatives are the questions MiniLM itself finds nearest it, its originals left out),
   saving a checkpoint every few steps;
2. **convert** it to ONNX, as ``qres import-encoder`` does, into the set's folder;
   then **choose how much of a title alone its vectors mix in** on the held-out tenth
   (:mod:`qres.training.title_weight`: 0 to 0.3, the best mean of whole-question and title
   queries by exact cosine);
3. **fit the fusion** of BM25 with its cosine on the held-out tenth, which the model never
   saw (the weighted sum, by cross-validation);
4. **report** before (the shipped ``minilm`` set) and after on the test links, which neither
   step read: nDCG@10 and R@100 with whole questions and with titles alone as queries.

The set is written into ``$QRES_HOME/model-sets/NAME`` (``set.json``, ``fusion.json`` and the
model), made whole beside it and renamed into place; ``qres index Posts.xml --model-set NAME``
then indexes with it. Work in progress lives in ``$QRES_HOME/adapt/NAME``.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from qres import paths
from qres.encoders import model_set

EPOCHS, TITLE_EPOCHS = 2, 1
# AdamW's peak rate. 5e-5 rather than the 2e-5 of `qres train --encoder transformer`: chosen on
# the travel forum's held-out tenth; on SemEval train it was level
# (benchmarks/adapt_learning_rate.json).
LR = 5e-5
LR_BEFORE = 2e-5  # what a run begun by an older qres (its record names no rate) goes on with
# Hard negatives: the questions nearest each duplicate by MiniLM's own cosine rather than
# BM25's top hits, chosen on the travel forum's held-out tenth
# (benchmarks/adapt_nearest_negatives.json).
NEGATIVES = "nearest"
NEGATIVES_BEFORE = "bm25"  # what a run whose record names none goes on with
TRAIN_TOKENS = 128  # texts are cut to this while training on a CPU (served: MiniLM's 256)
# On a CPU, fine-tuning reads at most the newest this many training links (pairs), so that a
# forum with tens of thousands of them adapts in about half an hour on 2 cores, not a day;
# the travel forum has 824. A GPU reads them all.
TRAIN_LINKS = 1_000
FOLDS = 5
# A larger forum is measured, and its fusion fitted, on this many of its questions: those its
# links join and a fixed sample of the rest (encoding a forum of 10^5 questions with two
# transformer sets would take hours on a few cores).
SEARCHED = 20_000
MEMBER = "minilm-adapted"
REPORT_FILE = "report.json"
QUERY_FORMS = ("question", "title")


class AdaptError(RuntimeError):
    """``qres adapt`` cannot go on; the message is one line for the user."""


@dataclass
class Adaptation:
    """Where one forum's adaptation works and what it writes."""

    forum: Path  # the dump's folder: Posts.xml and PostLinks.xml
    name: str  # the model set's name
    work: Path = field(init=False)
    target: Path = field(init=False)

    def __post_init__(self):
        self.work = paths.home() / "adapt" / self.name
        self.target = model_set.user_sets_dir() / self.name

    @property
    def trained(self) -> Path:  # the fine-tuned sentence-transformers model
        return self.work / "sentence-transformers"

    @property
    def staged(self) -> Path:  # the set, made whole here before it is renamed into place
        return self.work / "model-set"


def is_set_name(name: str) -> bool:
    return bool(name) and all(c.isalnum() or c in "-_" for c in name) and name[0] not in "-_"


def check_name(name: str) -> str:
    if not is_set_name(name):
        raise AdaptError(f"--name {name!r}: use letters, digits, - and _ (e.g. travel)")
    if name in model_set.SETS:
        raise AdaptError(f"--name {name}: that is a shipped model set; pick another name")
    return name


def adapt(
    plan: Adaptation,
    step: Callable[[str, int | None], None],
    advance: Callable[[int], None],
    log: Callable[[str], None],
    epochs: int = EPOCHS,
    device: str = "auto",
    threads: int | None = None,
    max_tokens: int | None | str = "auto",
    again: bool = False,
    max_links: int | None | str = "auto",
) -> dict:
    """Run (or resume) every step of ``plan``; returns the report. ``step(what, total)``
    starts a stage of ``total`` units (None: unknown), ``advance(n)`` moves it on;
    ``max_tokens``: texts are cut to this while fine-tuning (None: MiniLM's own 256;
    "auto": :func:`train_tokens`); ``max_links``: fine-tuning reads the newest this many
    training links (None: all; "auto": :data:`TRAIN_LINKS` on a CPU, all on a GPU; a
    resumed run goes on with what it began with); ``again``: a set already under the name
    is replaced, made from whichever forum."""
    from qres.datasets.forum_duplicates import load_forum_duplicates

    forum = load_forum_duplicates(plan.forum, "all")  # one-line CorpusError if not a dump
    if len(forum.queries) < 50:
        raise AdaptError(
            f"{plan.forum}: {len(forum.queries)} questions closed as duplicates of questions "
            "in Posts.xml; adapting needs at least 50 (a few hundred to help)"
        )
    _check_device(device)
    if max_tokens == "auto":
        max_tokens = train_tokens(device)
    started = _started(plan, epochs, max_tokens, max_links, device, again)
    _fine_tune(plan, step, advance, log, epochs, device, threads, started)
    if _published(plan).get("run") != started["run"]:  # the set there is not this run's
        _convert(plan, step)
        known: dict = {}  # the forum's texts' vectors: encoded once for both steps below
        title_weight = _choose_title_weight(plan, step, advance, log, known)
        _fit_fusion(plan, step, log, known)
        _publish(plan, started["run"], title_weight)
    report_path = plan.target / REPORT_FILE
    if not report_path.is_file():
        report = _report(plan, step, advance, log)
        report_path.write_text(json.dumps(report, indent=2))
    return json.loads(report_path.read_text())


def train_tokens(device: str) -> int | None:
    """What texts are cut to while fine-tuning on ``device``: :data:`TRAIN_TOKENS` on a CPU,
    where the cut keeps the travel forum within 30 minutes on 2 cores; none on a GPU, whose
    fine-tuning takes seconds either way (texts then train at the length they are served)."""
    return None if _on_gpu(device) else TRAIN_TOKENS


def _low_memory(max_tokens: int | None) -> bool:
    """Whether fine-tuning recomputes each layer's activations in the backward pass rather
    than keep them (gradient checkpointing): only for texts longer than :data:`TRAIN_TOKENS`.
    At that cut, keeping them gave the same model 1.4x faster for 1.3 GB more on 2 cores
    (benchmarks/adapt_checkpointing.json)."""
    return max_tokens is None or max_tokens > TRAIN_TOKENS


def _on_gpu(device: str) -> bool:
    import torch

    return device == "cuda" or (device == "auto" and torch.cuda.is_available())


def _check_device(device: str) -> None:
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise AdaptError(
            "--device cuda: torch sees no CUDA GPU here (a CPU build of torch, or no driver): "
            "use --device cpu or auto"
        )


def _published(plan: Adaptation) -> dict:
    path = plan.target / model_set.SET_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def _started(plan: Adaptation, epochs, max_tokens, max_links, device: str, again: bool) -> dict:
    """This adaptation's settings: those it began with where it is resumed (on another
    device too: it goes on with the cut and the links it began with), else these, recorded
    with a new run id. A name that holds another forum's set, or a resume asking for other
    epochs or links, is refused: ``--again`` starts over."""
    record, forum = plan.work / "fine-tuning.json", str(plan.forum.resolve())
    started = json.loads(record.read_text()) if record.is_file() else None
    made_from = (started or ({} if again else _published(plan))).get("forum", forum)
    if made_from != forum:
        raise AdaptError(
            f"{plan.name}: that set was learnt from {made_from}: pick another --name, or add "
            f"--again to replace it with one learnt from {forum}"
        )
    if started is None:
        if max_links == "auto":
            max_links = None if _on_gpu(device) else TRAIN_LINKS
        started = {"forum": forum, "epochs": epochs, "max_tokens": max_tokens, "lr": LR}
        started["negatives"] = NEGATIVES
        started["max_links"] = max_links
        started["run"] = time.strftime("%Y%m%dT%H%M%S") + f"-{os.getpid()}"
        plan.work.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps(started))
    else:
        asked = {"--epochs": (started["epochs"], epochs)}
        if max_links != "auto":  # 0: every link (a run older than the option read them all)
            asked["--max-links"] = (started.get("max_links") or 0, max_links or 0)
        for option, (began, given) in asked.items():
            if began != given:
                raise AdaptError(_other_settings(plan, started["run"], option, began, given))
    return started


def _other_settings(plan: Adaptation, run: str, option: str, began, given) -> str:
    """Why a run begun with ``option`` ``began`` does not go on with ``given``."""
    if _published(plan).get("run") == run:  # made: only --again makes it anew
        again = f"add --again to make it again with {option} {given}"
        return f"{plan.name}: made with {option} {began}: {again}"
    return (
        f"{plan.name}: fine-tuning was started with {option} {began}: give that to resume it, "
        "or add --again to start over"
    )


def _fine_tune(plan, step, advance, log, epochs, device, threads, settings: dict) -> None:
    if (plan.trained / "qres_finetune.json").is_file():
        return
    from qres.training.default_set import BuildError, minilm_source
    from qres.training.finetune_transformer import finetune

    try:
        base = minilm_source()
    except BuildError as err:
        raise AdaptError(str(err)) from None
    partial = plan.work / "sentence-transformers.partial"
    shutil.rmtree(partial, ignore_errors=True)
    checkpoint = plan.work / "checkpoint.pt"
    started = {"shown": False}

    def progress(done: int, total: int) -> None:
        if not started["shown"]:
            step("fine-tuning MiniLM on the forum's older links", total)
            advance(done)
            started["shown"] = True
        else:
            advance(1)

    step("reading the links and finding hard negatives", None)
    finetune(
        base,
        partial,
        plan.forum,
        epochs=epochs,
        lr=settings.get("lr", LR_BEFORE),
        device=device,
        threads=threads or 2,
        log=log,
        dataset="stackexchange",
        hold_out=True,
        title_epochs=min(TITLE_EPOCHS, epochs - 1) if epochs > 1 else 0,
        checkpoint=checkpoint,
        progress=progress,
        low_memory=_low_memory(settings["max_tokens"]),
        max_tokens=settings["max_tokens"],
        newest_links=settings.get("max_links"),
        negatives=settings.get("negatives", NEGATIVES_BEFORE),
    )
    partial.replace(plan.trained)


def _convert(plan, step) -> None:
    from qres.training.import_encoder import EncoderImportError, import_sentence_transformer

    step("converting the fine-tuned model to ONNX", None)
    shutil.rmtree(plan.staged, ignore_errors=True)
    try:
        import_sentence_transformer(plan.trained, plan.staged / MEMBER)
    except EncoderImportError as err:
        raise AdaptError(str(err)) from None


def _choose_title_weight(plan, step, advance, log, known: dict) -> dict:
    """Give the converted model the title weight its held-out links rank best with; returns
    the choice and each weight's figures, for the set's record. The texts' vectors are left
    in ``known``."""
    from qres.evaluation.forum import sampled
    from qres.evaluation.forum_fusion import train_split
    from qres.training import title_weight
    from qres.training.import_encoder import set_title_weight

    held = sampled(train_split(plan.forum, held_out=True, links=False), SEARCHED)
    questions = list(held.corpus())
    step("choosing the title weight on the held-out links", 2 * len(questions))
    model = plan.staged / MEMBER
    encoder = _encoder(model)
    encoder.share_vectors(known)
    best, table = title_weight.choose(encoder, questions, held.queries, progress=advance)
    set_title_weight(model, best)
    log(f"title weight {best} (held-out nDCG@10 by weight: {table})")
    return {"chosen": best, "held_out_nDCG@10": {str(w): f for w, f in table.items()}}


def _encoder(model_dir: Path):
    from qres.encoders.runtime import Encoder

    return Encoder.load(model_dir)


def _open_index(name: str):
    from qres.evaluation.rankers import open_eval_index

    return open_eval_index(None, name)


def _fit_fusion(plan, step, log, known: dict) -> None:
    """Fit the set's fusion on the held-out links, its index of the forum made from the
    vectors in ``known`` where they are there."""
    from qres.evaluation import forum_fusion

    step("fitting the fusion on the held-out links", None)
    encoder = _encoder(plan.staged / MEMBER)
    encoder.share_vectors(known)
    result, fusion = forum_fusion.tune(
        plan.forum,
        [encoder],
        _open_index,
        FOLDS,
        "weighted-sum",
        names=[MEMBER],
        held_out=True,
        links=False,
        searched=SEARCHED,
    )
    # named by its model's fingerprint: that is how search finds a set's fusion for an index
    fusion = replace(fusion, models=[encoder.fingerprint])
    fusion.save_file(plan.staged / "fusion.json")
    weights = fusion.params or [fusion.bm25, fusion.cosine]
    log(f"fusion: {fusion.method} {weights} ({result['record']['queries']} held-out queries)")


def _publish(plan, run: str, title_weight: dict) -> None:
    record = {
        "run": run,  # the adaptation that made it (its work folder's fine-tuning.json)
        "members": [{"name": MEMBER, "dir": MEMBER}],
        "first_stage": [MEMBER],
        "made_by": f"qres adapt {plan.forum} --name {plan.name}",
        "forum": str(plan.forum.resolve()),
        "made": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "fine_tuning": json.loads((plan.trained / "qres_finetune.json").read_text()),
        "title_weight": title_weight,  # chosen on the held-out links
    }
    (plan.staged / model_set.SET_FILE).write_text(json.dumps(record, indent=2))
    plan.target.parent.mkdir(parents=True, exist_ok=True)
    former = plan.work / "former-set"  # the set made before stays usable until this is whole
    shutil.rmtree(former, ignore_errors=True)
    if plan.target.exists():
        plan.target.replace(former)
    plan.staged.replace(plan.target)
    shutil.rmtree(former, ignore_errors=True)


def _report(plan, step, advance, log) -> dict:
    """Before and after on the forum's test links, the text alone (no links followed)."""
    from qres.evaluation import forum_fusion
    from qres.evaluation.forum import sampled
    from qres.evaluation.runner import evaluate_rankers, load_benchmark
    from qres.training.default_set import BuildError, build

    try:
        build(set_name="minilm")  # the zero-shot set compared against (built once)
    except BuildError as err:
        raise AdaptError(str(err)) from None
    sets = {"before": model_set.README_SET, "after": plan.name}
    report: dict = {"split": "test", "links": "not followed (the text alone)", "nDCG@10": {}}
    report["R@100"] = {}
    benchmarks = {
        form: sampled(
            load_benchmark("stackexchange", "test", plan.forum, links=False, query=form), SEARCHED
        )
        for form in QUERY_FORMS
    }
    forum = benchmarks[QUERY_FORMS[0]]  # every form searches the same index of the forum
    searched = forum.searched or sum(1 for _ in forum.corpus())  # the whole forum: <= SEARCHED
    for name in sets.values():  # each set's index of the forum, made with a progress bar
        step(f"encoding the forum's {searched:,} questions with the {name} set", searched)
        encoders = [_encoder(d) for d in model_set.model_dirs(name)]
        forum_fusion.encode_forum(forum, encoders, _open_index, advance)
    for form, benchmark in benchmarks.items():
        report["queries"], report["searched"] = len(benchmark.queries), benchmark.searched
        for when, name in sets.items():
            step(f"measuring {when} on the newest links ({form} queries)", None)
            (evaluation,) = evaluate_rankers(
                benchmark,
                ["hybrid"],
                list(model_set.model_dirs(name)),
                _open_index,
                _encoder,
                note=log,
            )
            report["nDCG@10"].setdefault(form, {})[when] = round(evaluation.metrics["nDCG@10"], 2)
            report["R@100"].setdefault(form, {})[when] = round(evaluation.metrics["R@100"], 2)
    return report
