"""Questions per second of the encoders: torch (training side) vs onnxruntime (serving side).

Encodes real forum questions (the SemEval-2016 dev XML beside the checkout, else synthetic
ones) one at a time and in batches of 256, tokenisation included on both sides, and prints
one JSON object with the machine it ran on.

    python benchmarks/encoder_throughput.py                     # every encoder, paper sizes
    python benchmarks/encoder_throughput.py --encoder rcnn --questions 512
    python benchmarks/encoder_throughput.py --run runs/rcnn-semeval   # a trained run

Untrained encoders run as fast as trained ones of the same size, so random weights are used
unless ``--run`` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402

from qres.corpus.readers import Question  # noqa: E402
from qres.datasets.benchmarks import load_semeval_xml  # noqa: E402
from qres.encoders.runtime import Encoder  # noqa: E402
from qres.encoders.vocab import Vocab  # noqa: E402
from qres.paths import repo_shared_data  # noqa: E402
from qres.text import BODY_MAX_TOKENS, TITLE_MAX_TOKENS, tokenize  # noqa: E402
from qres.training.config import TrainConfig  # noqa: E402
from qres.training.encoders import ENCODERS, EncoderConfig, QuestionEncoder  # noqa: E402
from qres.training.export import export_onnx  # noqa: E402
from qres.training.loop import torch_encoder  # noqa: E402
from qres.training.rundir import load_trained  # noqa: E402


def sample_questions(n: int) -> tuple[list[Question], str]:
    dev = repo_shared_data() / "semeval2016-task3" / "SemEval2016-Task3-CQA-QL-dev.xml"
    if dev.exists():
        questions = list(load_semeval_xml(dev).questions.values())
        source = str(dev)
    else:
        rng = np.random.default_rng(0)
        words = [f"w{i}" for i in range(5000)]
        questions = [
            Question(str(i), " ".join(rng.choice(words, 10)), " ".join(rng.choice(words, 80)))
            for i in range(n)
        ]
        source = "synthetic (10-word titles, 80-word bodies)"
    return (questions * (n // len(questions) + 1))[:n], source


def random_run(kind: str, questions: list[Question], out: Path) -> Path:
    """A run directory with random weights and a vocabulary from ``questions``."""
    words = {w for q in questions for w in tokenize(q.title) + tokenize(q.body)}
    vocab = Vocab.from_words(sorted(words))
    config = EncoderConfig(kind, len(vocab), 50)
    torch.manual_seed(0)
    model = QuestionEncoder(config)
    out.mkdir(parents=True)
    vocab.save(out / "vocab.txt")
    torch.save({"model": model.state_dict(), "epoch": 0}, out / "best.pt")
    run = {
        "train": vars(TrainConfig(encoder=kind)),
        "encoder": config.to_dict(),
        "title_max": TITLE_MAX_TOKENS,
        "body_max": BODY_MAX_TOKENS,
        "training": {"dataset": "none (random weights, benchmark)"},
    }
    (out / "run.json").write_text(json.dumps(run))
    return out


def rate(encode, questions: list[Question], batch: int, seconds: float) -> float:
    """Questions per second, repeating over ``questions`` for at least ``seconds``."""
    encode(questions[: min(batch, len(questions))])  # warm-up
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        for start in range(0, len(questions), batch):
            encode(questions[start : start + batch])
            done += len(questions[start : start + batch])
        if batch == 1 and done >= 64:
            break
    return round(done / (time.perf_counter() - started), 1)


def bench(run_dir: Path, questions: list[Question], seconds: float, device: str) -> dict:
    model, vocab, run = load_trained(run_dir)
    model = model.to(device).eval()
    with tempfile.TemporaryDirectory() as tmp:
        export_onnx(run_dir, Path(tmp) / "model")
        encoder = Encoder.load(Path(tmp) / "model")
        torch_encode = torch_encoder(model, vocab, device, run["title_max"], run["body_max"])
        result = {"encoder": model.config.kind, "dim": model.config.output_dim}
        for batch in (1, 256):
            result[f"torch_{device}_batch{batch}_qps"] = rate(
                torch_encode, questions, batch, seconds
            )
            result[f"onnxruntime_batch{batch}_qps"] = rate(
                lambda qs, b=batch: encoder.encode_questions(qs, batch_size=b),
                questions,
                batch,
                seconds,
            )
        result["onnxruntime_providers"] = encoder.providers
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--encoder", choices=ENCODERS, action="append")
    parser.add_argument("--run", type=Path, help="a training run directory to measure")
    parser.add_argument("--questions", type=int, default=512)
    parser.add_argument("--seconds", type=float, default=3.0, help="minimum per measurement")
    args = parser.parse_args()
    questions, source = sample_questions(args.questions)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.run:
            results.append(bench(args.run, questions, args.seconds, device))
        for kind in args.encoder or ([] if args.run else list(ENCODERS)):
            run_dir = random_run(kind, questions, Path(tmp) / kind)
            results.append(bench(run_dir, questions, args.seconds, device))
    report = {
        "benchmark": "encoder_throughput",
        "unit": "questions/s (tokenisation included; titles <= 40, bodies <= 100 tokens)",
        "questions": len(questions),
        "question_source": source,
        "machine": {
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "processor": platform.processor() or platform.machine(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "onnxruntime": ort.__version__,
            "torch_device": device,
            "available_providers": ort.get_available_providers(),
        },
        "results": results,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
