"""The CUDA paths of qres on a machine with an NVIDIA GPU, checked and timed, as JSON.

    python benchmarks/gpu_check.py --forum DIR --minilm ST_DIR [--mpnet ST_DIR]
        [--glove FILE] [--steps info,index,train,finetune,default-set] --out FILE

Run where onnxruntime-gpu and torch can both reach the GPU (docs/training.md#gpu). Each step
is a `qres` command as a user types it, timed wall-clock with start-up included, and runs
under its own time limit; a step that fails is recorded with its error and the rest go on:

* ``info``: ``qres --device cuda info`` (is the CUDA provider usable);
* ``index``: ``qres index`` of the forum with the shipped GRU and with MiniLM (``--minilm``, a
  sentence-transformers folder, converted with ``qres import-encoder``), each on ``--device
  cpu`` and ``--device cuda`` into fresh indexes; the two indexes' vectors are compared
  (cosine per question) and each is searched once;
* ``train``: ``qres train --device cuda`` of a GRU on the forum's duplicates, fp32 and bf16,
  one epoch each (``--glove``: word vectors as a text file);
* ``finetune``: ``qres train --encoder transformer --hold-out --device cuda`` of MiniLM on
  the forum, then its import (title weight 0.2), ``tune-fusion --held-out`` and ``evaluate
  --split test --no-links``, as docs/real-forums.md runs it on the CPU;
* ``default-set``: the default set's three models (the shipped GRU, MiniLM and ``--mpnet``,
  both imported with title weight 0.2, as ``qres import-encoder default`` makes them) in one
  index, on the CPU and on CUDA, compared model by model;
* ``million``: the fast set (``--fast``: its member's directory, as ``qres import-encoder
  fast`` wrote it) over a forum grown by ``benchmarks/real_text.py`` (``--million-dump``, or
  written here with every core): its first ``--parity-questions`` indexed with ``--device
  cpu`` and ``--device cuda`` (vectors compared, the two rates side by side), then all
  ``--million-questions`` with ``--device cuda`` (rate, peak RSS, the GPU's peak memory, size
  on disk), then ``pipeline_latency.py`` and ``nearest_latency.py`` on that index pinned to
  two cores (``taskset -c 0,1``), as the 2-core figures of docs/scale.md are taken.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
QRES = [sys.executable, "-c", "import sys; from qres.cli import main; sys.argv[0] = 'qres'; main()"]
GRU = str(ROOT / "qres" / "models" / "default")
STEPS = ("info", "index", "train", "finetune", "default-set", "million")
FAST = "minilm-int8-64"  # the fast set's one member, as `qres import-encoder fast` names it


def run(args: list[str], limit: float, env: dict) -> dict:
    """One qres command: its wall seconds, exit status ("timeout" past ``limit``), peak RSS,
    CPU seconds, the GPU's peak memory in use while it ran, and the end of its output."""
    start = time.perf_counter()
    gpu_peak = [0]
    stop = threading.Event()

    def watch_gpu():
        query = ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"]
        while not stop.wait(0.5):
            try:
                used = int(subprocess.run(query, capture_output=True, text=True).stdout.split()[0])
            except (OSError, ValueError, IndexError):
                return
            gpu_peak[0] = max(gpu_peak[0], used)

    watcher = threading.Thread(target=watch_gpu, daemon=True)
    watcher.start()
    with tempfile.TemporaryFile("w+") as out:
        child = subprocess.Popen(
            QRES + args, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT
        )
        killed = threading.Event()
        timer = threading.Timer(limit, lambda: (killed.set(), child.kill()))
        timer.start()
        _, status, usage = os.wait4(child.pid, 0)
        timer.cancel()
        stop.set()
        out.seek(0)
        text = out.read()
    rc = "timeout" if killed.is_set() else os.waitstatus_to_exitcode(status)
    seconds = round(time.perf_counter() - start, 2)
    print(f"[{seconds:7.1f}s] rc={rc} qres {' '.join(args)}", flush=True)
    if rc != 0:
        print(text[-3000:], flush=True)
    return {
        "command": "qres " + " ".join(args),
        "seconds": seconds,
        "rc": rc,
        "peak_rss_gb": round(usage.ru_maxrss / 2**20, 2),
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 1),
        "gpu_memory_peak_mib": gpu_peak[0],
        "tail": text[-1500:],
    }


def compare(a: Path, b: Path, ids: list[str]) -> dict:
    """Each model's vectors in index ``a`` against ``b``'s: cosine per question."""
    from qres.backends.base import index_models
    from qres.backends.embedded import EmbeddedBackend

    out = {}
    with EmbeddedBackend(a) as first, EmbeddedBackend(b) as second:
        for m in index_models(first.metadata()):
            fp = m["model_fingerprint"]
            (x, has_x), (y, has_y) = first.vectors(ids, model=fp), second.vectors(ids, model=fp)
            assert has_x.all() and has_y.all(), "a question without a vector"
            x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
            cos = (x * y).sum(1) / np.linalg.norm(x, axis=1) / np.linalg.norm(y, axis=1)
            out[Path(m["model_dir"]).name] = {
                "questions": len(ids),
                "cosine_mean": float(cos.mean()),
                "cosine_min": float(cos.min()),
                "max_abs_diff": float(np.abs(x - y).max()),
            }
    return out


def script(name: str, args: list[str], limit: float, env: dict, cores: str | None = None) -> dict:
    """A benchmark script's JSON (``cores``: pinned to those with taskset)."""
    command = [sys.executable, str(ROOT / "benchmarks" / name), *args]
    if cores and shutil.which("taskset"):
        command = ["taskset", "-c", cores, *command]
    elif cores:
        print(f"{name}: no taskset here, so on every core", flush=True)
    start = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=limit, env=env)
        result = json.loads(done.stdout) if done.returncode == 0 else {"error": done.stderr[-2000:]}
    except (subprocess.TimeoutExpired, json.JSONDecodeError) as err:
        result = {"error": repr(err)[:2000]}
    print(f"[{time.perf_counter() - start:7.1f}s] {name} {' '.join(args)}", flush=True)
    return result


class Check:
    def __init__(self, opts):
        self.opts, self.work = opts, Path(tempfile.mkdtemp(prefix="qres-gpu-"))
        self.env = {**os.environ, "QRES_HOME": str(self.work / "home"), "HF_HUB_OFFLINE": "1"}
        self.posts = str(opts.forum / "Posts.xml") if opts.forum else None
        self.report: dict = {"steps": {}}
        self.steps = self.report["steps"]

    def save(self):
        self.opts.out.write_text(json.dumps(self.report, indent=2))

    def step(self, name: str, args: list[str], limit: float) -> dict:
        self.steps[name] = run(args, limit, self.env)
        self.save()
        return self.steps[name]

    def ids(self) -> list[str]:
        from qres.corpus.readers import read_corpus

        return [q.id for q in read_corpus(self.posts)]

    def imported(self, source: Path, name: str, *options: str) -> str:
        out = self.work / name
        if not out.exists():
            cmd = ["import-encoder", "sentence-transformers", str(source), "--out", str(out)]
            self.step(f"import_{name}", [*cmd, *options], 300)
        return str(out)

    def index_both(self, name: str, models: list[str], limit: float) -> None:
        """The forum indexed on the CPU and on CUDA with ``models``; vectors compared."""
        ids = self.ids()
        for device in ("cpu", "cuda"):
            index = self.work / f"{name}-{device}"
            args = ["--device", device, "--index-dir", str(index), "index", self.posts]
            args += [a for m in models for a in ("--model", m)] + ["--json"]
            done = self.step(f"index_{name}_{device}", args, limit)
            done["questions_per_s"] = round(len(ids) / done["seconds"], 1)
        try:
            compared = compare(self.work / f"{name}-cpu", self.work / f"{name}-cuda", ids)
        except Exception as err:  # noqa: BLE001 - recorded, the other steps go on
            compared = {"error": repr(err)}
        self.steps[f"vectors_{name}_cpu_vs_cuda"] = compared
        query = ["--index-dir", str(self.work / f"{name}-cuda"), "--json", "search"]
        self.step(f"search_{name}_cuda_index", [*query, "schengen visa overstay by one day"], 120)

    def info(self):
        try:
            import torch

            self.report["gpu"] = torch.cuda.get_device_name(0)
        except Exception as err:  # noqa: BLE001 - recorded, the ONNX checks go on
            self.report["gpu"] = f"torch cannot see a GPU: {err}"
        self.step("info", ["--device", "cuda", "info", "--json"], 120)

    def index(self):
        self.index_both("gru", [GRU], 600)
        self.index_both("minilm", [self.imported(self.opts.minilm, "minilm")], 600)

    def train(self):
        glove = ["--vectors", str(self.opts.glove)] if self.opts.glove else []
        for precision in ("fp32", "bf16"):
            out = str(self.work / f"gru-{precision}")
            args = [*self.forum_train(), "--encoder", "gru", "--epochs", "1", "--device", "cuda"]
            self.step(
                f"train_gru_{precision}",
                [*args, "--precision", precision, "--out", out, *glove],
                300,
            )

    def forum_train(self) -> list[str]:
        return ["train", "--dataset", "stackexchange", "--data-dir", str(self.opts.forum)]

    def finetune(self):
        tuned = self.work / "minilm-travel"
        args = [*self.forum_train(), "--encoder", "transformer", "--base", str(self.opts.minilm)]
        args += ["--epochs", "2", "--hold-out", "--device", "cuda", "--out", str(tuned)]
        self.step("finetune_minilm", args, 600)
        onnx = self.imported(tuned, "minilm-travel-onnx", "--title-weight", "0.2")
        data = ["--dataset", "stackexchange", "--data-dir", str(self.opts.forum), "--model", onnx]
        self.step("tune_fusion_held_out", ["tune-fusion", *data, "--held-out"], 600)
        test = ["--split", "test", "--ranker", "bm25", "--ranker", "hybrid", "--compare"]
        self.step("evaluate_test", ["evaluate", *data, *test, "--no-links", "--json"], 600)

    def default_set(self):
        if self.opts.mpnet is None:
            self.steps["default_set"] = {"skipped": "no --mpnet given"}
            return
        minilm = self.imported(self.opts.minilm, "minilm-tw", "--title-weight", "0.2")
        mpnet = self.imported(self.opts.mpnet, "mpnet-tw", "--title-weight", "0.2")
        self.index_both("default_set", [GRU, minilm, mpnet], 600)

    def million(self):
        if self.opts.fast is None:
            self.steps["million"] = {"skipped": "no --fast given"}
            return
        models = self.work / "home" / "models"
        models.mkdir(parents=True, exist_ok=True)
        shutil.copytree(self.opts.fast, models / FAST, dirs_exist_ok=True)
        data = ["--data-dir", str(self.opts.kaggle_dir)] if self.opts.kaggle_dir else []
        dump = self.opts.million_dump
        if dump is None:
            dump = self.work / "million"
            count = str(self.opts.million_questions)
            grown = ["--out", str(dump), "--questions", count, "--workers", str(os.cpu_count())]
            self.steps["million_dump"] = script("real_text.py", grown + data, 900, self.env)
        parity = self.work / "parity"
        size = str(self.opts.parity_questions)
        self.steps["parity_dump"] = script(
            "real_text.py", ["--out", str(parity), "--questions", size] + data, 300, self.env
        )
        self.posts = str(parity / "Posts.xml")
        for device in ("cpu", "cuda"):
            index = ["--device", device, "--index-dir", str(self.work / f"parity-{device}")]
            done = run(
                [*index, "index", self.posts, "--model-set", "fast", "--json"], 600, self.env
            )
            done["questions_per_s"] = round(self.opts.parity_questions / done["seconds"], 1)
            self.steps[f"index_fast_{device}_{size}"] = done
            self.save()
        try:
            compared = compare(self.work / "parity-cpu", self.work / "parity-cuda", self.ids())
        except Exception as err:  # noqa: BLE001 - recorded, the other steps go on
            compared = {"error": repr(err)}
        self.steps["vectors_fast_cpu_vs_cuda"] = compared
        big = self.work / "fast-million"
        posts = str(Path(dump) / "Posts.xml")
        device = self.opts.million_device
        args = ["--device", device, "--index-dir", str(big), "index", posts, "--model-set", "fast"]
        done = run([*args, "--json"], self.opts.million_limit, self.env)
        with contextlib.suppress(json.JSONDecodeError, ValueError):
            report = json.loads(done["tail"][done["tail"].index("{") :])
            done["indexed"], done["index_seconds"] = report["indexed"], report["seconds"]
        done["disk_mb"] = {
            p.name: round(sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) / 2**20, 1)
            for p in [big, *big.iterdir()] if p.is_dir()
        }  # fmt: skip
        self.steps[f"index_fast_{device}_million"] = done
        self.save()
        if not self.opts.million_search:
            return
        pinned = {**self.env, "QRES_DEVICE": "cpu"}
        queries = ["--queries-from", str(parity / "Posts.xml"), "--queries", "300"]
        self.steps["pipeline_latency_2_cores"] = script(
            "pipeline_latency.py", ["--index-dir", str(big), *queries, *data], 400, pinned, "0,1"
        )
        self.save()
        self.steps["nearest_latency_2_cores"] = script(
            "nearest_latency.py", ["--index-dir", str(big), "--queries", "200", "--beams",
            "400,800"], 400, pinned, "0,1",
        )  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--forum", type=Path, help="a StackExchange dump (index, train, finetune)")
    ap.add_argument("--minilm", type=Path, help="all-MiniLM-L6-v2, sentence-transformers")
    ap.add_argument("--mpnet", type=Path)
    ap.add_argument("--glove", type=Path)
    ap.add_argument("--fast", type=Path, help=f"the fast set's {FAST} directory (million)")
    ap.add_argument("--kaggle-dir", type=Path, help="the folder holding stackexchange-kaggle-tags")
    ap.add_argument("--million-dump", type=Path, help="a dump real_text.py already wrote")
    ap.add_argument("--million-questions", type=int, default=1_000_000)
    ap.add_argument("--parity-questions", type=int, default=10_000)
    ap.add_argument(
        "--no-million-search", dest="million_search", action="store_false",
        help="million: index only (no latency benchmarks)",
    )  # fmt: skip
    ap.add_argument("--million-device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--million-limit", type=float, default=1800, help="seconds for its index")
    ap.add_argument("--steps", default=",".join(STEPS), help=f"of {', '.join(STEPS)}")
    ap.add_argument("--out", type=Path, required=True)
    opts = ap.parse_args()
    check = Check(opts)
    for name in opts.steps.split(","):
        if name not in STEPS:
            raise SystemExit(f"unknown step {name!r} (one of {', '.join(STEPS)})")
        getattr(check, name.replace("-", "_"))()
    check.save()
    shutil.rmtree(check.work, ignore_errors=True)


if __name__ == "__main__":
    main()
