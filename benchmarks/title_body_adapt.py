"""Fine-tune MiniLM on a forum's own titles and bodies, no duplicate links read, as JSON.

    python benchmarks/title_body_adapt.py --corpus Posts.xml --name tb128 \
        [--epochs 1] [--max-tokens 128] [--batch 32] --out FILE

A forum without moderator links still has every question's title and body, written by one
person at one time about one thing. Each question with both becomes a (title, body) pair,
the title asking as a widget would; the loss is the in-batch softmax of
:mod:`qres.training.finetune_transformer` (scale 20) with the other pairs' bodies as the
negatives (no mined hard negatives: on a forum the closest other body is often a duplicate).
The result is converted as ``qres adapt`` converts its own (title weight 0.2, as the
``minilm`` set ships) into the model set NAME under $QRES_HOME/model-sets, with the ``minilm``
set's fusion (0.05 · BM25), so that ``qres evaluate --model-set NAME`` scores it beside
``--model-set minilm``. What the forum's links say is never read: the same command could run
on any forum.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def pairs_of(corpus: Path) -> list[tuple[str, str]]:
    from qres.corpus.readers import read_corpus

    pairs = []
    for question in read_corpus(corpus):
        if question.title.strip() and question.body.strip():
            pairs.append((question.title, question.body))
    return pairs


def fine_tune(pairs, out_dir: Path, epochs: int, max_tokens: int, batch: int, seed: int, log):
    import torch

    from qres.training.default_set import minilm_source
    from qres.training.finetune_transformer import (
        SCALE,
        STEP_PASSES,
        _embedded,
        descend,
        optimizer_for,
    )
    from qres.training.import_encoder import load_sentence_transformer

    torch.manual_seed(seed)
    torch.set_num_threads(2)
    base = minilm_source()
    model = load_sentence_transformer(base)
    served = model.max_seq_length
    model.max_seq_length = min(max_tokens, served)
    rng = random.Random(seed)
    per_epoch = (len(pairs) + batch - 1) // batch
    steps = epochs * per_epoch
    optimizer, schedule = optimizer_for(model, 2e-5, steps)
    started, step, losses = time.perf_counter(), 0, []
    model.train()
    for _ in range(epochs):
        order = list(pairs)
        rng.shuffle(order)
        for start in range(0, len(order), batch):
            part = order[start : start + batch]
            vectors = _embedded(model, [t for pair in part for t in pair], "cpu", STEP_PASSES)
            vectors = vectors.view(len(part), 2, -1)
            scores = SCALE * vectors[:, 0] @ vectors[:, 1].T
            loss = torch.nn.functional.cross_entropy(scores, torch.arange(len(part)))
            losses.append(descend(loss, optimizer, schedule))
            step += 1
            if step % 10 == 0 or step == steps:
                recent = sum(losses[-10:]) / len(losses[-10:])
                log(f"step {step}/{steps} loss {recent:.4f} {time.perf_counter() - started:.0f}s")
    model.eval()
    model.max_seq_length = served
    model.save(str(out_dir))
    return {
        "base": str(base),
        "pairs": len(pairs),
        "epochs": epochs,
        "batch_size": batch,
        "lr": 2e-5,
        "max_tokens": max_tokens,
        "seed": seed,
        "loss": "in-batch softmax (scale 20), a title against every body of its batch",
        "seconds": round(time.perf_counter() - started, 1),
        "first_loss": sum(losses[:10]) / max(1, len(losses[:10])),
        "final_loss": sum(losses[-10:]) / max(1, len(losses[-10:])),
    }


def make_set(trained: Path, name: str, record: dict) -> Path:
    from qres.paths import home
    from qres.training.import_encoder import import_sentence_transformer, set_title_weight

    root = home() / "model-sets" / name
    shutil.rmtree(root, ignore_errors=True)
    member = root / "minilm-title-body"
    import_sentence_transformer(trained, member)
    set_title_weight(member, 0.2)
    shipped = json.loads(
        (Path(__file__).parents[1] / "qres/models/minilm-set/fusion.json").read_text()
    )
    shipped.update(
        source="the minilm set's fusion (benchmarks/title_body_adapt.py: not fitted again)",
        models=[json.loads((member / "model.json").read_text())["fingerprint"]],
    )
    (root / "fusion.json").write_text(json.dumps(shipped, indent=2))
    (root / "set.json").write_text(
        json.dumps(
            {
                "members": [{"name": member.name, "dir": member.name}],
                "first_stage": [member.name],
                "made_by": "benchmarks/title_body_adapt.py",
                "fine_tuning": record,
            },
            indent=2,
        )
    )
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    pairs = pairs_of(args.corpus)
    trained = args.work / args.name
    shutil.rmtree(trained, ignore_errors=True)
    record = fine_tune(pairs, trained, args.epochs, args.max_tokens, args.batch, args.seed, print)
    root = make_set(trained, args.name, record)
    record.update(
        corpus=str(args.corpus),
        model_set=str(root),
        peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        machine={"cpu_count": os.cpu_count(), "load_average_1m": os.getloadavg()[0]},
    )
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
