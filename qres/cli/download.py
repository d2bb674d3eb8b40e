"""``qres download``: fetch a public dataset into the layout evaluate and train read."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from qres import paths
from qres.cli.group import CommandError
from qres.datasets.benchmarks import dataset_dir
from qres.datasets.download import REGISTRY, DownloadError, download, mirror_url


@click.command("download")
@click.argument("dataset", type=click.Choice([*REGISTRY, "all"]))
@click.option(
    "--dest",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Data dir to fill [default: $QRES_HOME/data, else the user data dir].",
)
@click.option(
    "--mirror",
    metavar="URL",
    default=None,
    help="Fetch from URL/<dataset>/<file> (http(s), file:// or a directory) instead.",
)
@click.option("--force", is_flag=True, help="Download again even if files are present.")
def download_command(dataset: str, dest: Path | None, mirror: str | None, force: bool) -> None:
    """Fetch DATASET's public files (AskUbuntu from the Lei et al. GitHub repository,
    SemEval-2016 Task 3 from alt.qcri.org), resuming partial downloads and checking sha256.

    \b
    Examples:
      qres download askubuntu
      qres download all --mirror file:///srv/qres-mirror --dest ./data
    """
    dest_dir = dest if dest is not None else paths.data_dir()
    try:
        base_url = mirror_url(mirror) if mirror else None
    except DownloadError as err:
        raise CommandError(str(err)) from None
    names = list(REGISTRY) if dataset == "all" else [dataset]
    console = Console(stderr=True)
    for name in names:
        try:
            fetched = download(name, dest_dir, base_url=base_url, force=force)
        except DownloadError as err:
            raise CommandError(str(err)) from None
        got = sum(f.action != "skipped" for f in fetched)
        console.print(
            f"{name}: {got} fetched, {len(fetched) - got} already present, "
            f"in {dataset_dir(name, dest_dir)}",
            highlight=False,
        )
