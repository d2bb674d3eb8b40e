"""The AskUbuntu-format fixture (80 questions written for qres, 8 topics of 10).

Its files are kept under neutral names in tests/training/fixtures/ubuntu_forum and laid out
under the names the AskUbuntu loader expects in a temporary directory, once per test run:
``FIXTURE`` is that ``askubuntu/`` directory, ``FIXTURE.parent`` a ``--data-dir`` for it.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "training" / "fixtures" / "ubuntu_forum"
LAYOUT = {
    "questions.tsv": "text_tokenized.txt",
    "dev_queries.txt": "dev.txt",
    "test_queries.txt": "test.txt",
    "train_queries.txt": "train_random.txt",
}


def _lay_out() -> Path:
    root = Path(tempfile.mkdtemp(prefix="qres-askubuntu-fixture-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    folder = root / "askubuntu"
    folder.mkdir()
    for source, name in LAYOUT.items():
        shutil.copyfile(SOURCE / source, folder / name)
    return folder


FIXTURE = _lay_out()
