"""How much weight BM25 gets beside a model set's cosine, chosen for what holds across
datasets and query forms, as JSON (and, with ``--out``, the set's fusion file).

    python benchmarks/fusion_transfer.py --model-set minilm [--out FILE] [--json FILE]

The fused score is w · BM25/top BM25 + (1 − w) · cosine (:mod:`qres.ranking.fusion`, the
weighted sum). Each w of ``--weights`` is scored, through the production candidate lists, on
every cell of: SemEval-2016 train and dev (MAP of each question's ten related questions) and
the travel forum's train split (nDCG@10 of full-forum search, text alone), each with whole
questions and with titles alone as queries (:mod:`qres.evaluation.query_form`). The test
split of the forum is never read; SemEval's test set is not here.

The ways to pick w reported: the best on SemEval alone and on the forum alone (each then read
on the other: leave one dataset out), the one whose worst cell against the cosine alone is
best (minimax over datasets and query forms), and, from ``benchmarks/unsupervised_check.json``
(``--unsupervised``), the best on the four unlabelled forums of that proxy task (a title
against bodies), mean nDCG@10 over the sites. ``--out`` writes the median of the three
sources' picks (SemEval, the travel forum, the four unlabelled forums; without the proxy's
file, the smaller of the first two): no one source decides, and a source unlike the others
(SemEval's short questions, re-ranked) is outvoted. Needs the model set built and the shared
data; ``--from-json`` takes the table from an earlier run instead of measuring it again.

A set of several models (``default``) fuses w · BM25/top + (1 − w) · its cosine, the members'
cosines weighted by :func:`member_shares`: the transformers share alike, and the shipped GRU,
which was trained on SemEval's forum, gets a share g of :data:`GRU_SHARES`. SemEval cannot
judge g, so g is picked on the sources the GRU never saw: the travel forum's train split and
the four unlabelled forums each pick their best (g, w), and the set takes the smaller g (the
less say for a model trained elsewhere); w is then chosen at that g as for one model.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_latency import machine  # noqa: E402

from qres.datasets.benchmarks import default_data_dir  # noqa: E402
from qres.encoders import model_set  # noqa: E402
from qres.encoders.runtime import Encoder  # noqa: E402
from qres.evaluation import forum_fusion  # noqa: E402
from qres.evaluation import fusion_fit as fcv  # noqa: E402
from qres.evaluation.rankers import open_eval_index  # noqa: E402
from qres.evaluation.runner import load_benchmark  # noqa: E402
from qres.ranking.fusion import Fusion  # noqa: E402

WEIGHTS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5)
GRU_SHARES = (0.0, 0.1, 0.2, 1 / 3)  # 1/3: the GRU's say in the mean of three cosines
FORMS = ("question", "title")
SOURCES = {"semeval2016": ("train", "dev"), "stackexchange": ("train",)}


def member_shares(fingerprints: list[str], gru_share: float) -> list[float]:
    """Each member's share of a set's cosine: the shipped GRU ``gru_share`` (where the set has
    other members), the others alike."""
    gru = model_set.shipped_gru_fingerprint()
    others = sum(f != gru for f in fingerprints)
    if others == len(fingerprints) or not others:
        return [1 / len(fingerprints)] * len(fingerprints)
    return [gru_share if f == gru else (1 - gru_share) / others for f in fingerprints]


def set_forms(set_name: str, encoders: list[Encoder]) -> dict[str, list[float]]:
    """Each way measured of weighting the set's cosines, by label: the set's name, or
    ``"NAME g=G"`` for each share of the GRU where the set holds it beside others."""
    fingerprints = [e.fingerprint for e in encoders]
    if model_set.shipped_gru_fingerprint() not in fingerprints or len(fingerprints) == 1:
        return {set_name: member_shares(fingerprints, 0.0)}
    return {f"{set_name} g={g:.2f}": member_shares(fingerprints, g) for g in GRU_SHARES}


def fused_weights(w: float, shares: list[float]) -> list[float]:
    """The weighted sum's parameters over [BM25/top, each member's cosine]."""
    return [w, *((1 - w) * s for s in shares)]


def cells(encoders: list[Encoder], data_dir: Path, forum: Path | None) -> dict[str, list]:
    """``"source/split/form"`` → that cell's candidate lists."""
    out = {}
    open_index = lambda name: open_eval_index(None, name)  # noqa: E731
    with ExitStack() as stack:
        semeval = [
            (stack.enter_context(open_index(f"semeval2016-{e.fingerprint[:16]}")), e)
            for e in encoders
        ]
        for form in FORMS:
            for split in SOURCES["semeval2016"]:
                lists = fcv.semeval_candidate_lists(data_dir, [split], semeval, query=form)
                out[f"semeval2016/{split}/{form}"] = lists
            # the index with the links (the one `qres evaluate` keeps): the candidates do not
            # depend on them, and none are followed here
            benchmark = load_benchmark("stackexchange", "train", forum, query=form)
            out[f"stackexchange/train/{form}"] = forum_fusion.indexed_lists(
                benchmark, encoders, open_index
            )
    return out


def measure(lists, w: float, shares: list[float] = (1.0,)) -> float:
    """The cell's own measure (MAP, or nDCG@10 for the forum), percent."""
    key = "nDCG@10" if lists[0].source == "stackexchange" else "AP"
    params = fused_weights(w, shares)
    return 100 * float(np.mean([fcv.query_metrics("weighted-sum", params, c)[key] for c in lists]))


def pick(table: dict[str, dict[float, float]], names: list[str], weights) -> float:
    """The weight of best mean over ``names``' cells (ties: the smaller weight)."""
    return max(weights, key=lambda w: (np.mean([table[n][w] for n in names]), -w))


# What benchmarks/unsupervised_check.py calls each set's MiniLM form (a set of several
# models: its mixes' labels, as set_forms names them, from its --model-set run).
PROXY_FORM = {"minilm": "fp32-256", "fast": "int8-64"}


def proxy_means(path: Path, form: str) -> dict[float, float]:
    """w → mean nDCG@10 over the unsupervised check's sites of ``form`` fused at w."""
    sites = json.loads(path.read_text())["sites"]
    found: dict[float, list[float]] = {}
    for site in sites.values():
        for name, figures in site["figures"].items():
            if name.startswith(f"{form} w="):
                found.setdefault(float(name.split("=")[-1]), []).append(figures["nDCG@10"])
    return {w: float(np.mean(v)) for w, v in found.items()}


def proxy_pick(path: Path | None, form: str | None) -> dict | None:
    """The weight of best mean nDCG@10 over the unsupervised check's sites, or None."""
    if path is None or form is None:
        return None
    mean = proxy_means(path, form)
    if not mean:
        sys.exit(f"{path}: no figures of {form!r} (run unsupervised_check.py for this set)")
    best = max(mean, key=lambda w: (mean[w], -w))
    return {
        "weight": best,
        "mean nDCG@10 over the sites": {str(w): round(v, 2) for w, v in mean.items()},
    }


def gru_share(tables: dict, mixes: dict, weights, proxy: Path | None) -> dict:
    """Which mix of the set's cosines: each source the GRU never saw (the forum's train split,
    the unlabelled forums) picks its best (mix, w), and the mix with the smaller GRU share of
    the two is taken. ``tables``: mix → cell → w → figure."""
    order = list(mixes)  # by growing share

    def forum_mean(label, w):
        cells = [n for n in tables[label] if n.startswith("stackexchange/")]
        return float(np.mean([tables[label][n][w] for n in cells]))

    def best(pairs, figure) -> dict:  # ties: the smaller share of the GRU, then the smaller w
        mix, w = max(pairs, key=lambda p: (figure(*p), -order.index(p[0]), -p[1]))
        return {"mix": mix, "weight": w}

    picks = {"forum_alone": best(((m, w) for m in order for w in weights), forum_mean)}
    if proxy is not None:
        means = {m: proxy_means(proxy, m) for m in order}
        pairs = ((m, w) for m in order for w in means[m])
        picks["unsupervised_forums"] = best(pairs, lambda m, w: means[m][w])
    taken = min((p["mix"] for p in picks.values()), key=order.index)
    return {"taken": taken, "shares": mixes[taken], **picks}


def choose(table: dict[str, dict[float, float]], weights, proxy: dict | None = None) -> dict:
    semeval = [n for n in table if n.startswith("semeval2016/")]
    forum = [n for n in table if n.startswith("stackexchange/")]
    by_semeval, by_forum = pick(table, semeval, weights), pick(table, forum, weights)

    def worst(w):
        return min(table[n][w] - table[n][0.0] for n in table)

    minimax = max(weights, key=lambda w: (worst(w), -w))
    picks = [by_semeval, by_forum] + ([proxy["weight"]] if proxy else [])
    return {
        "written": float(np.median(picks)) if proxy else min(picks),
        "unsupervised_forums": proxy,
        "semeval_alone": {
            "weight": by_semeval,
            "on the forum, vs the cosine alone": {
                n: round(table[n][by_semeval] - table[n][0.0], 2) for n in forum
            },
        },
        "forum_alone": {
            "weight": by_forum,
            "on SemEval, vs the cosine alone": {
                n: round(table[n][by_forum] - table[n][0.0], 2) for n in semeval
            },
        },
        "minimax": {"weight": minimax, "worst cell vs the cosine alone": round(worst(minimax), 2)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-set", required=True, help="minilm, fast, default")
    parser.add_argument("--data-dir", type=Path, default=None, help="the shared data")
    parser.add_argument("--forum", type=Path, default=None, help="[default: travel]")
    parser.add_argument("--weights", default=",".join(map(str, WEIGHTS)))
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--out", type=Path, default=None, help="write the set's fusion here")
    parser.add_argument("--unsupervised", type=Path, default=None, help="its JSON, as a source")
    parser.add_argument("--from-json", type=Path, default=None, help="an earlier run's table")
    args = parser.parse_args()
    encoders = [Encoder.load(d) for d in model_set.model_dirs(args.model_set)]
    fingerprints = [e.fingerprint for e in encoders]
    mixes = set_forms(args.model_set, encoders)
    weights = [float(w) for w in args.weights.split(",")]
    if 0.0 not in weights:
        weights.insert(0, 0.0)
    started = time.perf_counter()
    if args.from_json:
        earlier = json.loads(args.from_json.read_text())
        if earlier.get("fingerprints", [earlier.get("fingerprint")]) != fingerprints:
            sys.exit(f"{args.from_json}: measured for other models")
        found = earlier.get("tables") or {next(iter(mixes)): earlier["table"]}
        tables = {
            label: {n: {float(w): v for w, v in row.items()} for n, row in table.items()}
            for label, table in found.items()
        }
        queries = earlier["queries"]
        weights = sorted(next(iter(next(iter(tables.values())).values())))
    else:
        lists = cells(encoders, args.data_dir or default_data_dir(), args.forum)
        tables = {
            label: {name: {w: measure(c, w, shares) for w in weights} for name, c in lists.items()}
            for label, shares in mixes.items()
        }
        queries = {name: len(c) for name, c in lists.items()}
    mix = {"taken": next(iter(mixes)), "shares": next(iter(mixes.values()))}
    if len(mixes) > 1:
        mix = gru_share(tables, mixes, weights, args.unsupervised)
    proxy_form = PROXY_FORM.get(args.model_set, mix["taken"])
    chosen = choose(tables[mix["taken"]], weights, proxy_pick(args.unsupervised, proxy_form))
    result = {
        "model_set": args.model_set,
        "fingerprints": fingerprints,
        "queries": queries,
        "measure": "MAP on semeval2016, nDCG@10 on stackexchange (text alone), percent",
        "mix": mix,
        "tables": {
            label: {name: {str(w): round(v, 2) for w, v in row.items()} for name, row in t.items()}
            for label, t in tables.items()
        },
        "chosen": chosen,
        "seconds": round(time.perf_counter() - started, 1),
        "machine": machine(),
    }
    if args.from_json:  # the table's own measurement
        result |= {"seconds": earlier["seconds"], "machine": earlier["machine"]}
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    if args.out:
        w = chosen["written"]
        one = len(encoders) == 1
        fusion = Fusion(
            bm25=w if one else 0.0,
            cosine=1 - w if one else 0.0,
            params=None if one else fused_weights(w, mix["shares"]),
            source=(
                f"benchmarks/fusion_transfer.py --model-set {args.model_set}: the median of "
                "the weights chosen on SemEval-2016 (train, dev) alone, on the travel forum's "
                "train split alone (whole questions and titles as queries) and on four "
                f"unlabelled forums (benchmarks/{getattr(args.unsupervised, 'name', None)})"
                + ("" if one else f"; the GRU's share of the cosines {mix['taken']}")
            ),
            tuned_on="semeval2016/train+semeval2016/dev+stackexchange/train",
            method="weighted-sum",
            models=fingerprints,
        )
        fusion.save_file(args.out)


if __name__ == "__main__":
    main()
