"""A model directory's card (``model.json``): reading and checking it, the files it names,
and the fingerprint an index records. Both the manifest (:mod:`qres.encoders.manifest`) and the
runtime (:mod:`qres.encoders.runtime`) build on it."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

CARD_FILE = "model.json"
VOCAB_FILE = "vocab.txt"
CARD_FORMAT = "qres-encoder/1"
TRANSFORMER = "transformer"


class EncoderError(RuntimeError):
    """A missing, corrupt or incompatible model directory; one sentence."""


def fingerprint(
    model_dir: str | Path,
    graph_files: Sequence[str],
    vocab_file: str = VOCAB_FILE,
    title_weight: float = 0.0,
) -> str:
    """sha256 over the graph files (in the order given), the vocabulary/tokenizer file and,
    when not 0, a transformer's ``title_weight``: it changes every vector the model makes,
    so vectors made with and without it are never mixed."""
    digest = hashlib.sha256()
    for name in [*graph_files, vocab_file]:
        with open(Path(model_dir) / name, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    if title_weight:
        digest.update(f"title_weight={title_weight!r}".encode())
    return digest.hexdigest()


def title_weight(card: dict) -> float:
    """A transformer's share of the title-alone vector in a question's vector (0: none)."""
    return float(card.get("title_weight", 0.0))


def card_fingerprint(model_dir: str | Path, card: dict) -> str:
    """The fingerprint of the model directory ``card`` describes, computed from its files."""
    return fingerprint(model_dir, graph_files(card), vocab_file(card), title_weight(card))


def graph_files(card: dict) -> list[str]:
    """The distinct graph files of a card, title graph first."""
    graphs = card["graphs"]
    return list(dict.fromkeys([graphs["title"], graphs["body"]]))


def vocab_file(card: dict) -> str:
    """The file that maps text to token ids: ``vocab.txt``, or a transformer's tokenizer."""
    return card["tokenizer_file"] if card.get("architecture") == TRANSFORMER else VOCAB_FILE


def check_file_name(card_path: Path, name) -> None:
    """Refuse a file a card names outside its model directory (``../x.onnx``, ``/etc/x``):
    a model directory is read, copied and verified as one folder."""
    parts = PurePosixPath(name).parts if isinstance(name, str) else ()
    if not parts or parts[0] == "/" or ".." in parts or "\\" in name:
        raise EncoderError(
            f"{card_path}: not a valid model card ({name!r} is not a file of the model directory)"
        )


def read_card(path: Path) -> dict:
    try:
        card = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EncoderError(f"{path}: model card not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise EncoderError(f"{path}: not a valid model card ({err})") from None
    if not isinstance(card, dict) or card.get("format") != CARD_FORMAT:
        found = card.get("format") if isinstance(card, dict) else None
        raise EncoderError(f"{path}: not a {CARD_FORMAT} model card (format {found!r})")
    for key in ("dim", "max_title_tokens", "max_body_tokens", "fingerprint"):
        if not isinstance(card.get(key), int if key != "fingerprint" else str):
            raise EncoderError(f"{path}: not a valid model card (bad or missing {key!r})")
    graphs = card.get("graphs")
    if not isinstance(graphs, dict) or not {"title", "body"} <= graphs.keys():
        raise EncoderError(f"{path}: not a valid model card (bad or missing 'graphs')")
    named = [graphs["title"], graphs["body"]]
    if card.get("architecture") == TRANSFORMER:
        for key, kind in (("tokenizer_file", str), ("max_seq_tokens", int)):
            if not isinstance(card.get(key), kind):
                raise EncoderError(f"{path}: not a valid model card (bad or missing {key!r})")
        named.append(card["tokenizer_file"])
    for name in named:
        check_file_name(path, name)
        weight = card.get("title_weight", 0.0)
        if not isinstance(weight, int | float) or isinstance(weight, bool) or not 0 <= weight < 1:
            raise EncoderError(f"{path}: not a valid model card ('title_weight' not in [0, 1))")
    return card
