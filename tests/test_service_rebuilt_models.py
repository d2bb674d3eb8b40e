"""A server whose index is rebuilt with other models (here: none) beside it says so in a 503
rather than failing every search with a 500; BM25 still answers."""

from __future__ import annotations

import subprocess
import sys

import httpx

from tests.serving import DEMO, Server, build_demo_index


def test_a_rebuild_without_the_servers_models_is_a_503_saying_to_restart(tmp_path):
    index = build_demo_index(tmp_path / "index")
    log = tmp_path / "server.log"
    with Server(index, log=log) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        assert http.get("/search", params={"q": "boot usb"}).status_code == 200
        rebuilt = subprocess.run(
            [
                sys.executable,
                "-c",
                "from qres.cli import main; main()",
                "--index-dir",
                str(index),
                "index",
                str(DEMO),
                "--rebuild",
                "--no-vectors",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert rebuilt.returncode == 0, rebuilt.stderr
        answer = http.get("/search", params={"q": "boot usb"})
        assert answer.status_code == 503, answer.text
        assert (
            "rebuilt with other models since this server started: restart" in answer.json()["error"]
        )
        assert http.get("/readyz").status_code == 503
        assert http.get("/search", params={"q": "boot usb", "mode": "bm25"}).status_code == 200
