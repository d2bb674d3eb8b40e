"""`qres adapt` with other fine-tuning recipes, side by side, as JSON.

    python benchmarks/adapt_recipes.py --forum DIR --recipe 128:2 --recipe 256:2 \
        [--device cuda] --out FILE

Each ``--recipe TOKENS:EPOCHS[:SEED[:LINKS[:TITLE_EPOCHS[:LR[:NEGATIVES]]]]]`` runs every
step of ``qres adapt`` (fine-tuning, conversion, the fusion fitted on the held-out tenth, the
before/after report on the test split) into its own model set,
``rTOKENSeEPOCHS[sSEED][lLINKS][tTITLE_EPOCHS][rLR][nNEGATIVES]`` (TOKENS ``full``: MiniLM's
own 256; SEED: the fine-tuning's seed, 0 by default; LINKS: its ``--max-links``, the newest
this many training links, 0 for all, the command's own choice where not given; TITLE_EPOCHS:
how many of the last epochs ask with each duplicate's title alone, the command's one where
not given, 0 for none; LR: AdamW's peak rate, the command's ``forum_adapt.LR`` where not
given; NEGATIVES: ``bm25`` or ``nearest``, where the hard negatives come from, the command's
``forum_adapt.NEGATIVES`` where not given).
Then each set is scored on the held-out tenth of
the train links, dense (its cosine alone; the fusion was fitted on those queries) with whole
questions and with titles: the figures a recipe is chosen by, since the test split is what
a release reports. Wall seconds of each stage, the GPU's peak memory and the process's peak
RSS come with it. The JSON is rewritten after each recipe, so a run stopped at its time
limit keeps the recipes it finished.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def held_out_scores(forum: Path, set_name: str) -> dict:
    """Dense nDCG@10 and R@100 on the held-out tenth, whole questions and titles."""
    from qres.datasets.forum_duplicates import held_out_cut
    from qres.encoders import model_set
    from qres.evaluation.ranking_metrics import ndcg_at
    from qres.evaluation.runner import evaluate_rankers, load_benchmark
    from qres.training import forum_adapt

    scores = {}
    for form in ("question", "title"):
        benchmark = load_benchmark("stackexchange", "train", forum, links=False, query=form)
        benchmark.queries = benchmark.queries[held_out_cut(len(benchmark.queries)) :]
        (evaluation,) = evaluate_rankers(
            benchmark,
            ["dense"],
            list(model_set.model_dirs(set_name)),
            forum_adapt._open_index,
            forum_adapt._encoder,
        )
        scores[form] = {
            "queries": len(benchmark.queries),
            "nDCG@10": round(evaluation.metrics["nDCG@10"], 2),
            "R@100": round(evaluation.metrics["R@100"], 2),
            "per_query_ndcg10": {
                q.id: round(
                    ndcg_at(
                        [c in q.relevant for c, _ in evaluation.ranked[q.id]], 10, len(q.relevant)
                    ),
                    3,
                )
                for q in benchmark.queries
            },
        }
    return scores


def run_recipe(
    forum: Path,
    tokens: int | None,
    epochs: int,
    device: str,
    seed: int,
    links: str = "auto",
    title_epochs: int | None = None,
    lr: float | None = None,
    negatives: str | None = None,
) -> dict:
    import functools

    from qres.training import finetune_transformer, forum_adapt

    name = f"r{tokens or 'full'}e{epochs}" + (f"s{seed}" if seed else "")
    name += "" if links == "auto" else f"l{links or 'all'}"
    if title_epochs is not None:
        name += f"t{title_epochs}"
    if lr is not None:
        name += f"r{lr:g}"
    if negatives is not None:
        name += f"n{negatives}"
    forum_adapt.NEGATIVES = _command_negatives if negatives is None else negatives
    forum_adapt.LR = _command_lr if lr is None else lr  # what a new run records and trains at
    # read when fine-tuning starts; each recipe sets it, so one recipe's never carries over
    forum_adapt.TITLE_EPOCHS = _command_title_epochs if title_epochs is None else title_epochs
    if seed:  # adapt trains with finetune's default seed (0)
        finetune_transformer.finetune = functools.partial(_finetune, seed=seed)
    else:
        finetune_transformer.finetune = _finetune
    plan = forum_adapt.Adaptation(forum, name)
    stages: list[list] = []

    def step(what: str, _total: int | None) -> None:
        stages.append([what, time.perf_counter()])
        print(f"[{name}] {what}", flush=True)

    start = time.perf_counter()
    report = forum_adapt.adapt(
        plan,
        step,
        lambda _n: None,
        lambda _m: None,
        epochs,
        device,
        max_tokens=tokens,
        max_links=links,
    )
    end = time.perf_counter()
    seconds = {
        what: round((stages[i + 1][1] if i + 1 < len(stages) else end) - at, 1)
        for i, (what, at) in enumerate(stages)
    }
    fine_tuning = json.loads((plan.trained / "qres_finetune.json").read_text())
    result = {
        "set": name,
        "train_tokens": tokens or "MiniLM's own (256)",
        "epochs": epochs,
        "title_epochs": fine_tuning["title_epochs"],  # as fine-tuning recorded them
        "seed": seed,
        "max_links": links,
        "seconds": round(end - start, 1),
        "stage_seconds": seconds,
        "fine_tuning": fine_tuning,
        "test_report": report,
        "held_out": held_out_scores(forum, name),
    }
    try:
        import torch

        if torch.cuda.is_available():
            result["gpu_memory_peak_mib"] = round(torch.cuda.max_memory_allocated() / 2**20)
            torch.cuda.reset_peak_memory_stats()
    except ImportError:
        pass
    return result


def main() -> None:
    global _finetune, _command_title_epochs, _command_lr, _command_negatives
    from qres.training import finetune_transformer, forum_adapt

    _finetune = finetune_transformer.finetune
    _command_title_epochs = forum_adapt.TITLE_EPOCHS
    _command_lr = forum_adapt.LR
    _command_negatives = forum_adapt.NEGATIVES

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--forum", type=Path, required=True)
    parser.add_argument(
        "--recipe",
        action="append",
        required=True,
        help="TOKENS:EPOCHS[:SEED[:LINKS[:TITLE_EPOCHS[:LR[:NEGATIVES]]]]]",
    )
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    from qres.training.default_set import build

    out = {"benchmark": "adapt_recipes", "forum": str(args.forum), "device": args.device}
    out["python"] = sys.version.split()[0]
    try:
        import torch

        out["torch"] = torch.__version__
        if torch.cuda.is_available():
            out["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    started = time.perf_counter()
    build(set_name="minilm")
    out["before_set_build_seconds"] = round(time.perf_counter() - started, 1)
    out["before_held_out"] = held_out_scores(args.forum, "minilm")
    out["recipes"] = []
    for recipe in args.recipe:
        tokens, epochs, seed, links, title_epochs, lr, negatives = parsed(recipe)
        result = run_recipe(
            args.forum, tokens, epochs, args.device, seed, links, title_epochs, lr, negatives
        )
        result["peak_rss_gb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)
        out["recipes"].append(result)
        args.out.write_text(json.dumps(out, indent=1))
        print(json.dumps({k: v for k, v in result.items() if k != "held_out"}), flush=True)
        print({f: result["held_out"][f]["nDCG@10"] for f in result["held_out"]}, flush=True)
    args.out.write_text(json.dumps(out, indent=1))


def parsed(recipe: str) -> tuple:
    """``TOKENS:EPOCHS[:SEED[:LINKS[:TITLE_EPOCHS[:LR[:NEGATIVES]]]]]`` as run_recipe's
    arguments; a field left out or empty takes its default (None: the command's own)."""
    tokens, epochs, *rest = recipe.split(":")
    seed, links, title_epochs, lr, negatives = (rest + [""] * 5)[:5]
    return (
        None if tokens == "full" else int(tokens),
        int(epochs),
        int(seed or 0),
        "auto" if links in ("", "auto") else (int(links) or None),
        int(title_epochs) if title_epochs else None,
        float(lr) if lr else None,
        negatives or None,
    )


if __name__ == "__main__":
    main()
