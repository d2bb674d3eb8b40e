"""Whether an index holds the vectors of the model a search encodes queries with, and if
not, one line saying what to do."""

from __future__ import annotations

from pathlib import Path

from qres.backends.base import Backend, BackendError, index_models


def _in_set(fingerprint: str) -> str:
    """', the fast set' where a shipped or forum's own set is that one model."""
    from qres.encoders.model_set import model_set_of

    name = model_set_of([fingerprint])
    return f", the {name} set" if name else ""


def short(fingerprint: str | None) -> str:
    return (fingerprint or "?")[:12]


def check_model_matches(backend: Backend, encoder) -> None:
    """Fail clearly when the index's vectors were not made by ``encoder``."""
    meta = backend.metadata()
    fingerprint = meta.get("model_fingerprint")
    if fingerprint is None:
        raise BackendError(
            "this index has no vectors: index with `qres index CORPUS --model-set minilm` "
            "(or --model DIR) to use dense or hybrid search"
        )
    held = index_models(meta)
    if len(held) > 1:
        dims = {m["model_fingerprint"]: m["vector_dim"] for m in held}
        if encoder.fingerprint not in dims:
            replaced = _held_at(held, getattr(encoder, "model_dir", None))
            if replaced is not None:  # the directory the index names holds another model now
                raise BackendError(
                    f"the index holds vectors of model {short(replaced['model_fingerprint'])} "
                    f"but {replaced['model_dir']} is now model {short(encoder.fingerprint)}: "
                    "re-index with `qres index CORPUS --rebuild` and the same --model or "
                    "--model-set"
                )
            raise BackendError(
                f"model {short(encoder.fingerprint)} is not one of this index's models "
                f"({', '.join(short(m) for m in dims)}): add it with "
                "`qres index CORPUS --model ... --model MODEL_DIR`"
            )
        if dims[encoder.fingerprint] != encoder.dim:
            raise BackendError(
                f"the index holds {dims[encoder.fingerprint]} dims for model "
                f"{short(encoder.fingerprint)} but the model gives {encoder.dim}: "
                "re-index with `qres index CORPUS --rebuild` and that --model-set or --model"
            )
        return
    if fingerprint != encoder.fingerprint or meta.get("vector_dim") != encoder.dim:
        raise BackendError(
            f"the index was built with model {short(fingerprint)} ({meta.get('vector_dim')} dims"
            f"{_in_set(fingerprint)}) but the model given is {short(encoder.fingerprint)} "
            f"({encoder.dim} dims{_in_set(encoder.fingerprint)}): search without --model to "
            "use the index's, or re-index with `qres index CORPUS --rebuild` and that "
            "--model-set or --model"
        )


def _held_at(held: list[dict], model_dir) -> dict | None:
    """The index's model whose recorded directory is ``model_dir``, if any."""
    if model_dir is None:
        return None
    where = Path(model_dir).resolve()
    recorded = [m for m in held if m.get("model_dir")]
    return next((m for m in recorded if Path(m["model_dir"]).resolve() == where), None)
