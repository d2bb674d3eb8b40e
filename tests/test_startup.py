"""What a command imports: the embedded path never loads the Elasticsearch client or training.

Each check runs the real ``qres`` entry point in a fresh interpreter (imports made by other
tests in this process would hide a stray one) and reads ``sys.modules`` as the command ends.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "qres" / "data" / "demo" / "questions.tsv"
MODEL = REPO / "qres" / "models" / "default"
HEAVY = (
    "elasticsearch",
    "elastic_transport",
    "torch",
    "qres.training",
    "qres.backends.elasticsearch.kibana",
    "urllib3",
)

PROBE = """
import atexit, json, sys
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
from qres.cli import main
sys.argv[0] = "qres"
main()
"""


def imported_by(home: Path, out: Path, *args: str) -> set[str]:
    env = {**os.environ, "QRES_HOME": str(home), "QRES_BACKEND": "embedded"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(out), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(out.read_text()))


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    imported_by(home, home / "index.json", "index", str(DEMO), "--model", str(MODEL))
    return home


@pytest.mark.parametrize("mode", ["bm25", "hybrid"])
def test_embedded_search_imports_no_elasticsearch_or_training(home, tmp_path, mode):
    modules = imported_by(home, tmp_path / "m.json", "search", "boot from usb", "--mode", mode)
    assert "qres.backends.embedded" in modules  # the probe saw the search run
    assert not [m for m in HEAVY if m in modules]


def test_embedded_index_imports_no_elasticsearch(home, tmp_path):
    modules = imported_by(home, tmp_path / "m.json", "index", str(DEMO), "--model", str(MODEL))
    assert "qres.indexing.pipeline" in modules
    assert not [m for m in HEAVY if m in modules]


def test_help_still_lists_the_lazily_loaded_commands(run):
    listed = run("--help").output
    for name in ("download", "kibana-setup", "tags", "train", "export-onnx", "search"):
        assert f"  {name} " in listed


def run_qres_pressing_ctrl_c_as_it_loads(before: str = "") -> subprocess.CompletedProcess:
    """`qres --version` with a Ctrl-C pressed while the group's modules are imported (after
    the code ``before``)."""
    code = (
        "import signal, sys\n" + before + "class Interrupt:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'qres.cli.group': raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Interrupt())\n"
        "from qres.cli import main\n"
        "sys.argv = ['qres', '--version']\n"
        "main()\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_ctrl_c_while_the_command_line_loads_ends_quietly():
    """Ctrl-C in the first moments of `qres ...`, while its modules load, gave a traceback."""
    done = run_qres_pressing_ctrl_c_as_it_loads()
    assert (done.returncode, done.stderr, done.stdout) == (130, "", "")


def test_ctrl_c_pressed_again_as_the_loading_command_line_exits_ends_it_quietly():
    """A second Ctrl-C as `qres` exited after the first ended it by the signal (status -2)."""
    pressed_again = (  # the second Ctrl-C, as the first one's exit begins
        "leave = sys.exit\n"
        "def pressed_again(status):\n"
        "    signal.raise_signal(signal.SIGINT)\n"
        "    leave(status)\n"
        "sys.exit = pressed_again\n"
    )
    done = run_qres_pressing_ctrl_c_as_it_loads(pressed_again)
    assert (done.returncode, done.stderr, done.stdout) == (130, "", "")
