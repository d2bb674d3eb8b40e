"""Start ``qres serve`` as its own process on a loopback port, as a user would run it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import httpx

from qres.backends.embedded import EmbeddedBackend
from qres.corpus.readers import read_corpus
from qres.encoders.runtime import Encoder
from qres.indexing.pipeline import index_questions

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "qres" / "data" / "demo" / "questions.tsv"
MODEL = ROOT / "qres" / "models" / "default"


def build_demo_index(index_dir: Path, extras: dict[str, dict] | None = None) -> Path:
    """The demo forum with the shipped model's vectors (what the README's first command makes);
    ``extras``: {id: display fields} given to those questions (the demo corpus has none)."""
    extras = extras or {}
    questions = (replace(q, extras=extras.get(q.id, q.extras)) for q in read_corpus(DEMO))
    with EmbeddedBackend(index_dir, create=True) as backend:
        index_questions(backend, questions, encoder=Encoder.load(MODEL))
    return index_dir


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``qres --index-dir DIR serve ARGS`` on 127.0.0.1; stdout and stderr go to ``log``."""

    def __init__(self, index_dir: Path, *args: str, env: dict | None = None, log: Path):
        self.index_dir, self.args, self.log = index_dir, args, log
        self.env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 90) -> Server:
        command = [
            sys.executable,
            "-c",
            "from qres.cli import main; main()",
            "--index-dir",
            str(self.index_dir),
            "serve",
            "--port",
            str(self.port),
            *self.args,
        ]
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=ROOT
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"qres serve exited early:\n{self.log.read_text()}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"qres serve not ready after {timeout}s:\n{self.log.read_text()}")

    def kill(self) -> None:
        """SIGKILL: no shutdown hook runs (what a crash or the OOM killer does)."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
