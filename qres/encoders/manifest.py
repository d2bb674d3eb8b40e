"""A model directory's manifest: every file it owns, with its role and sha256, in the card.

``model.json`` (see :mod:`qres.encoders.runtime`) lists the directory's components under
``"files"``::

    "files": {
      "model.onnx":      {"role": "graph",       "sha256": "..."},
      "vocab.txt":       {"role": "vocabulary",  "sha256": "..."},
      "fusion.json":     {"role": "fusion",      "sha256": "..."},   # after qres tune-fusion
      "tags.npz":        {"role": "tag_head",    "sha256": "..."},   # a --tags run
      "bow_weights.npy": {"role": "bow_weights", "sha256": "..."}    # a BOW-CNN run
    }

:func:`open_model` is the one loader: it checks every listed file against its sha256, refuses
a component file the card does not list (it would be used unverified), and returns the
:class:`Model` whose parts the encoder, fusion, tag head and BOW-CNN scorer are read from.
``qres export-onnx`` writes the manifest; ``qres tune-fusion`` and the tag-head export add to
it with :func:`add_to_manifest`. A card written before manifests existed has no ``"files"``:
its graphs and vocabulary are still verified by the fingerprint and its BOW weights by
``bow_weights_sha256``, and its other parts are found by their presence, as they were then.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from qres.encoders.card import (
    CARD_FILE,
    EncoderError,
    card_fingerprint,
    check_file_name,
    graph_files,
    read_card,
    vocab_file,
)

ROLES = ("graph", "vocabulary", "fusion", "tag_head", "bow_weights")
FUSION_FILE = "fusion.json"
TAGS_FILE = "tags.npz"
BOW_WEIGHTS_FILE = "bow_weights.npy"
OPTIONAL_FILES = {FUSION_FILE: "fusion", TAGS_FILE: "tag_head", BOW_WEIGHTS_FILE: "bow_weights"}
COSINE = "cosine"  # the scorer search applies: the encoder's cosine, fused with BM25


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class Model:
    """A verified model directory: its card and ``{file name: role}`` of its components."""

    path: Path
    card: dict
    files: dict[str, str]

    @property
    def scorer(self) -> str:
        """How the model scores a pair: ``cosine``, or ``bow-cnn``
        (:mod:`qres.encoders.bowcnn_scorer`)."""
        return self.card.get("scorer", COSINE)

    def component(self, role: str) -> Path | None:
        """The file holding ``role`` (fusion, tag_head, bow_weights, ...), or None."""
        return next((self.path / name for name, r in self.files.items() if r == role), None)

    def require_search_scorer(self) -> None:
        """Refuse a model whose similarity ``qres search`` cannot compute."""
        if self.scorer != COSINE:
            raise EncoderError(
                f"{self.path} is a {self.scorer} model: search ranks by the encoder's cosine "
                f"and cannot apply the rest of its score; rank with it by "
                f"`qres evaluate --model {self.path} --ranker {self.scorer}`"
            )


def manifest(model_dir: str | Path, roles: dict[str, str]) -> dict:
    """The ``"files"`` entry of a card for ``{file name: role}`` in ``model_dir``."""
    unknown = set(roles.values()) - set(ROLES)
    if unknown:
        raise ValueError(f"unknown component role(s) {sorted(unknown)} (one of {ROLES})")
    return {
        name: {"role": role, "sha256": file_sha256(Path(model_dir) / name)}
        for name, role in roles.items()
    }


def core_roles(card: dict) -> dict[str, str]:
    """``{file: role}`` of the graphs and vocabulary a card names."""
    return {**dict.fromkeys(graph_files(card), "graph"), vocab_file(card): "vocabulary"}


def add_to_manifest(model_dir: str | Path, name: str, role: str) -> None:
    """Record (or re-record) file ``name`` of ``model_dir`` in its card's manifest."""
    model_dir = Path(model_dir)
    card = read_card(model_dir / CARD_FILE)
    files = card.get("files")
    if files is None:  # an older card: list its core files first
        files = manifest(model_dir, core_roles(card))
    card["files"] = {**files, **manifest(model_dir, {name: role})}
    write_card(model_dir, card)


def write_card(model_dir: str | Path, card: dict) -> None:
    path = Path(model_dir) / CARD_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(card, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def open_model(model_dir: str | Path) -> Model:
    """Read and verify ``model_dir``: every listed file present with its sha256, no
    unlisted component, the graphs and vocabulary matching the card's fingerprint."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise EncoderError(f"{model_dir}: model directory not found")
    card = read_card(model_dir / CARD_FILE)
    listed = card.get("files")
    files = _verified(model_dir, listed) if listed is not None else _found(model_dir, card)
    for name, role in core_roles(card).items():
        if files.get(name) != role:
            raise EncoderError(f"{model_dir / CARD_FILE}: the manifest does not list {name}")
    if card_fingerprint(model_dir, card) != card.get("fingerprint"):
        raise EncoderError(
            f"{model_dir}: files do not match the card's fingerprint (corrupt or edited)"
        )
    return Model(model_dir, card, files)


def _verified(model_dir: Path, listed) -> dict[str, str]:
    card_path = model_dir / CARD_FILE
    if not isinstance(listed, dict) or not all(
        isinstance(e, dict) and e.get("role") in ROLES and isinstance(e.get("sha256"), str)
        for e in listed.values()
    ):
        raise EncoderError(f"{card_path}: not a valid model card (bad 'files' manifest)")
    for name, entry in listed.items():
        check_file_name(card_path, name)
        path = model_dir / name
        if not path.is_file():
            raise EncoderError(f"{path}: model file not found")
        if file_sha256(path) != entry["sha256"]:
            raise EncoderError(
                f"{path}: does not match its sha256 in {CARD_FILE} (corrupt or edited)"
            )
    for name in OPTIONAL_FILES:
        if name not in listed and (model_dir / name).exists():
            raise EncoderError(
                f"{model_dir / name}: not listed in {CARD_FILE}, so it cannot be verified; "
                "remove it, or write it with the qres command that makes it"
            )
    return {name: entry["role"] for name, entry in listed.items()}


def _found(model_dir: Path, card: dict) -> dict[str, str]:
    """The components of a card without a manifest, by presence (BOW weights by their
    own checksum field)."""
    files = core_roles(card)
    for name in files:
        if not (model_dir / name).is_file():
            raise EncoderError(f"{model_dir / name}: model file not found")
    for name, role in OPTIONAL_FILES.items():
        if (model_dir / name).is_file():
            files[name] = role
    if BOW_WEIGHTS_FILE in files and file_sha256(model_dir / BOW_WEIGHTS_FILE) != card.get(
        "bow_weights_sha256"
    ):
        raise EncoderError(
            f"{model_dir / BOW_WEIGHTS_FILE}: does not match the card's bow_weights_sha256 "
            "(corrupt or edited)"
        )
    return files
