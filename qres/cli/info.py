"""``qres info``: what the index holds, and what the runtime can use."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.table import Table

from qres import paths
from qres.backends.base import IndexMissingError, index_models
from qres.cli.group import Context, json_option, load_encoder, stdout
from qres.encoders.runtime import EncoderError


@click.command()
@json_option
@click.pass_obj
def info(obj: Context):
    """Show the index (size, analyzer, model, vectors) and the runtime (ONNX providers).

    \b
    Example:
      qres info
      qres --device cuda info --json   # is the GPU usable, and if not, why
    """
    import onnxruntime

    from qres.encoders.runtime import Runtime, provider_status
    from qres.ranking.completion import first_words

    details = {
        "qres_home": str(paths.home()),
        "backend": obj.open_backend_name(),
        "onnxruntime": onnxruntime.__version__,
        "onnx_providers": provider_status(),
        "device": Runtime.from_env(obj.device).device,
    }
    if obj.open_backend_name() == "embedded":  # Elasticsearch: the connection tells where
        details["index_dir"] = str(obj.index_dir)
    try:
        with obj.open() as backend:
            details["questions"] = backend.count()
            details["model_set"] = _model_set(backend.metadata())
            details["index_metadata"] = backend.metadata()
            details.update(backend.storage())
            if hasattr(backend, "ann_status"):  # the embedded backend's nearest-neighbour files
                details["nearest_search"] = backend.ann_status()
            details["typed_first_words"] = first_words(backend)
            for found in backend.leftovers():
                details[f"leftover {found['path']}"] = (
                    f"{found['bytes']:,} bytes left by an interrupted rebuild or compaction; "
                    f"removed by {found['removed_by']}"
                )
            connection = backend.describe()
            if connection:
                details["connection"] = connection
            model_dir = backend.metadata().get("model_dir")
            if model_dir:
                details["model"] = _describe_model(Path(model_dir), obj.device)
    except IndexMissingError as err:  # no index yet: worth showing with the rest
        details["index"] = str(err)
    if obj.as_json:
        obj.emit(details)
        return
    table = Table(show_header=False)
    for key, value in details.items():
        table.add_row(key, _cell(value))
    stdout.print(table)


def _cell(value) -> str:
    """A value of ``--json``'s object as a person reads it: a line per key or item."""
    if isinstance(value, dict):
        return "\n".join(f"{key}: {_line(item)}" for key, item in value.items())
    if isinstance(value, list):
        return "\n".join(_line(item) for item in value)
    return _line(value)


def _line(value) -> str:
    if isinstance(value, bool) or value is None:
        return {True: "yes", False: "no", None: "-"}[value]
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, list):
        return ", ".join(_line(item) for item in value)
    return json.dumps(value) if isinstance(value, dict) else str(value)


def _model_set(meta: dict) -> str | None:
    """The model set the index's models make (as /readyz says), or None."""
    from qres.encoders.model_set import model_set_of

    held = [m["model_fingerprint"] for m in index_models(meta)]
    return model_set_of(held) if held else None


def _describe_model(model_dir: Path, device: str | None) -> dict:
    try:
        encoder = load_encoder(model_dir, device)
    except EncoderError as err:  # the index is still worth reporting
        return {"dir": str(model_dir), "error": str(err)}
    return {
        "dir": str(model_dir),
        "architecture": encoder.card.get("architecture"),
        "dim": encoder.dim,
        "fingerprint": encoder.fingerprint,
        "execution_providers": encoder.providers,  # bulk encoding
        "query_execution_providers": encoder.query_providers,
    }
