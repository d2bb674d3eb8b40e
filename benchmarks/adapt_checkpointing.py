"""`qres adapt`'s fine-tuning with and without gradient checkpointing, side by side, as JSON.

    python benchmarks/adapt_checkpointing.py --forum DIR --links 96 --repeats 2 --out FILE

Each run is a process of its own that fine-tunes MiniLM as ``qres adapt`` does on a CPU (the
forum's newest ``--links`` training links, 2 epochs, the last asking with titles, texts cut
to 128 tokens, 2 threads), once with each layer's activations recomputed in the backward
pass (``low_memory``, gradient checkpointing) and once keeping them; the two kinds take
turns. Each gives its steps' seconds, its loss at each step, its peak RSS, and the largest
difference of any weight from the first checkpointed run's model: checkpointing recomputes
the same activations with the same dropout masks, so the models should agree to rounding.
One more process of each kind times a step of the forum's 48 longest texts (every one cut
at 128 tokens), the most memory a step can take at this cut.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
KINDS = ("checkpointed", "kept")


def fine_tune(forum: Path, links: int, low_memory: bool, out: Path) -> dict:
    from qres.training import forum_adapt
    from qres.training.default_set import minilm_source
    from qres.training.finetune_transformer import finetune

    times: list[float] = []
    losses: list[str] = []
    began = time.perf_counter()
    record = finetune(
        minilm_source(),
        out,
        forum,
        epochs=forum_adapt.EPOCHS,
        threads=2,
        log=lambda line: losses.append(line),
        dataset="stackexchange",
        hold_out=True,
        title_epochs=forum_adapt.TITLE_EPOCHS,
        progress=lambda step, steps: times.append(time.perf_counter()),
        low_memory=low_memory,
        max_tokens=forum_adapt.TRAIN_TOKENS,
        newest_links=links,
    )
    steps = [round(b - a, 2) for a, b in zip([began, *times[:-1]], times, strict=True)]
    return {
        "step_seconds": steps[1:],
        "first_step_seconds": steps[0],
        "log": losses,
        "final_loss": record["final_loss"],
    }


def longest_step(forum: Path, low_memory: bool) -> dict:
    """One training step of the forum's 48 longest texts, each cut to 128 tokens."""
    import torch

    from qres.datasets.forum_duplicates import load_forum_duplicates
    from qres.training import forum_adapt
    from qres.training.default_set import minilm_source
    from qres.training.finetune_transformer import STEP_PASSES, _checkpoint_layers, _embedded
    from qres.training.import_encoder import load_sentence_transformer

    torch.manual_seed(0)
    torch.set_num_threads(2)
    questions = load_forum_duplicates(forum, "all").corpus()
    texts = sorted((q.text for q in questions), key=len)[-48:]
    model = load_sentence_transformer(minilm_source())
    model.max_seq_length = forum_adapt.TRAIN_TOKENS
    if low_memory:
        _checkpoint_layers(model)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    began = time.perf_counter()
    vectors = _embedded(model, texts, "cpu", STEP_PASSES).view(16, 3, -1)
    scores = 20 * vectors[:, 0] @ vectors[:, 1:].transpose(0, 1).reshape(-1, 384).T
    loss = torch.nn.functional.cross_entropy(scores, torch.arange(16))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return {"step_seconds": round(time.perf_counter() - began, 2)}


def child(args) -> None:
    low_memory = args.child.endswith("checkpointed")
    if args.child.startswith("longest"):
        result = longest_step(args.forum, low_memory)
    else:
        result = fine_tune(args.forum, args.links, low_memory, args.model_out)
    result["peak_rss_gb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)
    print(json.dumps(result))


def largest_difference(first: Path, other: Path) -> float:
    from safetensors.torch import load_file

    a, b = load_file(first / "model.safetensors"), load_file(other / "model.safetensors")
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def run(kind: str, args, model_out: Path | None = None) -> dict:
    command = [
        sys.executable,
        __file__,
        "--child",
        kind,
        "--forum",
        str(args.forum),
        "--links",
        str(args.links),
    ]
    if model_out is not None:
        command += ["--model-out", str(model_out)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--forum", type=Path, required=True)
    parser.add_argument("--links", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--model-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    report: dict = {
        "benchmark": __doc__.split("\n\n")[0],
        "how": " ".join(["python", *sys.argv]),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": {"cpu_count": os.cpu_count(), "load_average_1m": os.getloadavg()[0]},
        "runs": [],
    }
    with tempfile.TemporaryDirectory() as work:
        first = None
        for repeat in range(args.repeats):
            for kind in KINDS:
                out = Path(work) / f"{kind}-{repeat}"
                result = {"kind": kind, "repeat": repeat, **run(kind, args, out)}
                first = first or out
                result["largest_weight_difference_from_first"] = largest_difference(first, out)
                report["runs"].append(result)
                print(json.dumps({k: v for k, v in result.items() if k != "log"}), flush=True)
    report["longest_step"] = {kind: run(f"longest-{kind}", args) for kind in KINDS}
    for kind in KINDS:
        steps = [s for r in report["runs"] if r["kind"] == kind for s in r["step_seconds"]]
        report.setdefault("median_step_seconds", {})[kind] = sorted(steps)[len(steps) // 2]
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
