"""The options of ``qres train``'s training loop (epochs, batches, negatives, learning rate,
...) and of its optional methods: encoder-decoder pre-training, domain adaptation, joint tag
prediction, BOW-CNN's loss and distillation from a teacher model."""

from __future__ import annotations

from pathlib import Path

import click

LOOP_OPTIONS = [
    click.option(
        "--epochs",
        type=click.IntRange(min=1),
        default=20,
        show_default=True,
        help="At most this many.",
    ),
    click.option(
        "--patience",
        type=click.IntRange(min=1),
        default=4,
        show_default=True,
        help="Stop after this many epochs without a better dev MAP.",
    ),
    click.option(
        "--batch-size",
        type=click.IntRange(min=1),
        default=16,
        show_default=True,
        help="(query, similar question) pairs per step, each with its negatives.",
    ),
    click.option(
        "--negatives",
        type=click.IntRange(min=1),
        default=20,
        show_default=True,
        help="Negatives per pair, resampled every epoch.",
    ),
    click.option(
        "--lr",
        type=click.FloatRange(min=0, min_open=True),
        default=1e-3,
        show_default=True,
        help="Adam learning rate.",
    ),
    click.option(
        "--margin",
        type=float,
        default=0.2,
        show_default=True,
        help="δ of the max-margin loss on cosine scores.",
    ),
    click.option(
        "--dropout",
        type=click.FloatRange(0, 1, max_open=True),
        default=0.1,
        show_default=True,
        help="Share of the encoder's hidden units zeroed at each training step (against "
        "overfitting; 0: none).",
    ),
    click.option(
        "--seed",
        type=int,
        default=0,
        show_default=True,
        help="Same seed, same data and device: same run.",
    ),
]

METHOD_OPTIONS = [
    click.option(
        "--pretrain",
        "pretrain_epochs",
        type=click.IntRange(min=0),
        is_flag=False,
        flag_value=3,
        default=0,
        help="First pre-train the encoder as an encoder-decoder P(title | body), P(title | title) "
        "on the training questions (Lei et al. 2016, Sec. 4.2) for 3 epochs, or --pretrain=N; "
        "held-out perplexity and dev MAP before/after are kept in run.json.",
    ),
    click.option(
        "--pretrain-vocab",
        type=click.IntRange(min=1),
        default=10_000,
        show_default=True,
        help="Words the pre-training decoder predicts (the rest as <unk>).",
    ),
    click.option(
        "--adapt-to",
        type=click.Path(exists=True, path_type=Path),
        help="Unlabelled target corpus (any `qres index` format, or an Android-layout folder: "
        "corpus.tsv.gz + dev.pos.txt/dev.neg.txt): adversarial domain adaptation with a "
        "gradient-reversal domain classifier. Target labels, if any, are only reported "
        "(AUC(0.05) or MAP).",
    ),
    click.option(
        "--adapt-lambda",
        type=click.FloatRange(min=0),
        default=0.1,
        show_default=True,
        help="λ: how strongly the reversed domain gradient pushes the encoder (0 = direct "
        "transfer, the classifier then only measures how separable the domains are).",
    ),
    click.option(
        "--domain-batch",
        type=click.IntRange(min=1),
        default=32,
        show_default=True,
        help="Source and target questions per step for the domain classifier, each.",
    ),
    click.option(
        "--tags",
        is_flag=True,
        help="Train a multi-label tag head jointly (corpus tags; Qatar Living's category): "
        "loss = α·ranking + β·tags. Held-out P@5/R@5/MAP are compared with a TF-IDF "
        "logistic-regression baseline; export-onnx ships the head for `qres tags`.",
    ),
    click.option("--tag-alpha", type=float, default=1.0, show_default=True, help="α of --tags."),
    click.option("--tag-beta", type=float, default=1.0, show_default=True, help="β of --tags."),
    click.option(
        "--bow-beta",
        type=float,
        default=0.5,
        show_default=True,
        help="bowcnn: weight of the bag-of-words cosine (the CNN's is 1 - this).",
    ),
    click.option(
        "--gamma", type=float, default=10.0, show_default=True, help="bowcnn: γ of the loss."
    ),
    click.option(
        "--teacher",
        metavar="DIR",
        help="Distil: also train the encoder to reproduce the in-batch similarities of this "
        "model directory (any qres model, e.g. from `qres import-encoder`) on unlabelled "
        "questions: the training questions and every --unlabelled corpus. The teacher's "
        "vectors are cached under $QRES_HOME/cache/teacher. Dev is then never read: the "
        "epoch is chosen on 10% of the train queries, held out.",
    ),
    click.option(
        "--unlabelled",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        multiple=True,
        help="--teacher: a corpus file (any `qres index` format) of more questions to distil "
        "on; repeatable.",
    ),
    click.option(
        "--supervised-weight",
        type=click.FloatRange(min=0),
        default=1.0,
        show_default=True,
        help="--teacher: loss = distillation + this × the ranking loss (0: distillation only).",
    ),
    click.option(
        "--distill-temperature",
        type=click.FloatRange(min=0, min_open=True),
        default=0.05,
        show_default=True,
        help="--teacher: temperature of the in-batch cosine softmax of student and teacher.",
    ),
]


def _stacked(options):
    """A decorator adding ``options`` to a command in this order, as stacked decorators would."""

    def add(command):
        for option in reversed(options):
            command = option(command)
        return command

    return add


loop_options = _stacked(LOOP_OPTIONS)
method_options = _stacked(METHOD_OPTIONS)
