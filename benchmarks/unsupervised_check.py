"""MiniLM's forms and BM25's fusion weight on four forums nothing was fitted on, as JSON.

    python benchmarks/unsupervised_check.py [--per-site 2000] [--seed 0] [--minilm DIR]
        [--cache DIR] [--out benchmarks/unsupervised_check.json]

The forums are the four StackExchange sites of ``../shared/data/stackexchange-kaggle-tags``
(biology, cooking, crypto, robotics; read as :mod:`real_text` reads them, bodies through
:func:`qres.corpus.stackexchange.html_to_text`). They carry no duplicate links, so this is a
proxy task with no labels: of each site, ``--per-site`` questions with a title and a body of at
least 20 words are drawn (seeded); each title is a query, the corpus is the drawn bodies
*without their titles*, and the one relevant document is the query's own body.

Ranked for each site: BM25 alone (qres's analyzer and BM25: the bodies indexed by
:class:`qres.backends.embedded.EmbeddedBackend` with empty titles, its top 100); each MiniLM
form's cosine alone (exact, over every body: the query encoded as ``encode_query`` encodes it,
a body as a text of its own, so no title is mixed in); and, for each form and each BM25 weight
w, ``w · bm25/top + (1 − w) · cosine`` (:class:`qres.ranking.fusion.Fusion`) over the union of
BM25's top 100 and the cosine's top 100, a body BM25 did not return scoring 0 there. The forms
are ``--minilm`` as it is (fp32, 256 tokens) and int8 variants of it cut to 256, 128 and 64
tokens, made by :func:`qres.training.import_encoder.derive_encoder` under ``--cache``.

Reported per site: MRR@10, nDCG@10, R@10 and R@100 (percent) of every ranking; the share of
the drawn questions whose title and body (and body alone) run past 64, 128 and 256 MiniLM
tokens, i.e. what each cut drops; and paired-bootstrap 95% intervals (with a sign-flip
randomization p) of per-query nDCG@10 differences (:mod:`qres.evaluation.significance`): fp32
256 against each int8 form; for fp32 256 and int8 64, each fusion weight against the same
form's cosine alone, and w = 0.5 against the best weight, which is picked (by nDCG@10) on the
same queries it is compared on.

With ``--model-set NAME`` the rankings are that set's instead of MiniLM's forms: each member's
cosine alone, and the set's cosine, the members' cosines weighted as its fusion weights them
(:func:`fusion_transfer.member_shares`: the shipped GRU at each share of
:data:`fusion_transfer.GRU_SHARES`, the transformers sharing the rest), fused with BM25 at
each w; ``fusion_transfer.py --unsupervised`` reads the best weights from it.

Vectors are cached under ``--cache`` by model fingerprint and text, so a rerun only ranks.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fusion_transfer import set_forms  # noqa: E402
from real_text import SITES, kaggle_rows  # noqa: E402
from search_latency import machine  # noqa: E402

from qres.backends.embedded import EmbeddedBackend  # noqa: E402
from qres.corpus.readers import Question  # noqa: E402
from qres.corpus.stackexchange import html_to_text  # noqa: E402
from qres.encoders import model_set  # noqa: E402
from qres.encoders.runtime import Encoder, EncoderError, TransformerEncoder  # noqa: E402
from qres.evaluation.ranking_metrics import ndcg_at, recall_at, reciprocal_rank_at  # noqa: E402
from qres.evaluation.significance import compare  # noqa: E402
from qres.paths import home  # noqa: E402
from qres.ranking.fusion import Fusion  # noqa: E402

# name: (quantisation, max tokens) of the form derived from --minilm; None, None is it as it is
FORMS = {
    "fp32-256": (None, None),
    "int8-256": ("int8", 256),
    "int8-128": ("int8", 128),
    "int8-64": ("int8", 64),
}
WEIGHTS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5)
DEPTH = 100  # each first stage's candidates
MIN_BODY_WORDS = 20
TOKEN_CUTS = (64, 128, 256)
DEFAULT_OUT = Path(__file__).resolve().parent / "unsupervised_check.json"


def eligible(data_dir: Path | None, sites: list[str]) -> dict[str, list[tuple[str, str]]]:
    """(title, body text) of every question of each site with a title and a long enough body."""
    out: dict[str, list[tuple[str, str]]] = {site: [] for site in sites}
    for site, title, html, _ in kaggle_rows(data_dir):
        if site not in out:
            continue
        body = html_to_text(html)
        if title.strip() and len(body.split()) >= MIN_BODY_WORDS:
            out[site].append((title.strip(), body))
    return out


def sample(questions: list[tuple[str, str]], n: int, seed: int) -> list[tuple[str, str]]:
    if n >= len(questions):
        return questions
    picked = np.random.default_rng(seed).choice(len(questions), n, replace=False)
    return [questions[i] for i in sorted(picked)]


def forms(minilm: Path, cache: Path) -> dict[str, Path]:
    """Each form's model directory, the int8 ones derived under ``cache`` once per source."""
    from qres.encoders.manifest import open_model

    source = open_model(minilm).card["fingerprint"]
    out = {}
    for name, (quantize, max_tokens) in FORMS.items():
        if quantize is None and max_tokens is None:
            out[name] = minilm
            continue
        folder = cache / "models" / f"{source[:16]}-{name}"
        try:
            made = open_model(folder).card.get("training", {}).get("derived_from") == source
        except Exception:  # absent or half-written: derive it again
            made = False
        if not made:
            from qres.training.import_encoder import derive_encoder

            derive_encoder(minilm, folder, quantize, max_tokens)
        out[name] = folder
    return out


def vectors(
    encoder: Encoder, texts: list[str], cache: Path, bodies: bool = False
) -> tuple[np.ndarray, float | None]:
    """Unit vectors of texts, each encoded alone as a title without a body (what
    ``encode_query`` does one at a time; the GRU, which reads titles and bodies apart, reads
    ``bodies`` as bodies without a title), cached by model and texts; and the seconds spent
    encoding them (None: read from the cache)."""
    apart = not isinstance(encoder, TransformerEncoder)
    digest = hashlib.sha256("\0".join(texts).encode()).hexdigest()[:24]
    kind = "-bodies" if apart and bodies else ""
    path = cache / "vectors" / f"{encoder.fingerprint[:16]}{kind}-{digest}.npy"
    if path.is_file():
        return np.load(path), None
    started = time.perf_counter()
    if apart:
        asked = [Question("", "", t) if bodies else Question("", t, "") for t in texts]
        found = encoder.encode_questions(asked)
    else:
        found = encoder.encode_texts(texts)
    seconds = round(time.perf_counter() - started, 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial.npy")
    np.save(partial, found)
    partial.replace(path)
    return found, seconds


def bm25_hits(bodies: list[str], titles: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(body rows, BM25 scores) of each title's top :data:`DEPTH`, by qres's own BM25 over
    the bodies indexed with empty titles."""
    out = []
    with (
        tempfile.TemporaryDirectory(prefix="qres-unsupervised-") as tmp,
        EmbeddedBackend(Path(tmp) / "index", create=True) as backend,
    ):
        backend.upsert([Question(str(i), "", body) for i, body in enumerate(bodies)])
        backend.commit()
        for title in titles:
            hits = backend.search(title, DEPTH)
            rows = np.array([int(h.id) for h in hits], dtype=np.int64)
            out.append((rows, np.array([h.score for h in hits], dtype=np.float64)))
    return out


def judged(ranked_rows, own: int) -> dict[str, float]:
    """The four figures (fractions) of one query whose one relevant body is row ``own``."""
    ranked = [int(r) == own for r in ranked_rows]
    return {
        "MRR@10": reciprocal_rank_at(ranked, 10),
        "nDCG@10": ndcg_at(ranked, 10, 1),
        "R@10": recall_at(ranked, 10, 1),
        "R@100": recall_at(ranked, 100, 1),
    }


def mean_percent(per_query: list[dict[str, float]]) -> dict[str, float]:
    return {k: round(100 * float(np.mean([q[k] for q in per_query])), 2) for k in per_query[0]}


def top(scores: np.ndarray, k: int) -> np.ndarray:
    """Rows of the k highest scores, best first (ties by row)."""
    k = min(k, len(scores))
    best = np.argpartition(-scores, k - 1)[:k]
    return best[np.lexsort((best, -scores[best]))]


def rank_site(
    bm25: list[tuple[np.ndarray, np.ndarray]], cosines: dict[str, np.ndarray]
) -> dict[str, list[dict[str, float]]]:
    """Per-query figures of every ranking: ``bm25``, ``<form>`` (cosine alone) and
    ``<form> w=<w>`` (fused over BM25's and the cosine's candidates)."""
    per_query: dict[str, list[dict[str, float]]] = {"bm25": []}
    for q, (rows, _) in enumerate(bm25):
        per_query["bm25"].append(judged(rows, q))
    for form, cosine in cosines.items():
        per_query[form] = []
        for w in WEIGHTS:
            per_query[f"{form} w={w}"] = []
        for q, (bm25_rows, bm25_scores) in enumerate(bm25):
            dense = top(cosine[q], DEPTH)
            per_query[form].append(judged(dense, q))
            candidates = np.union1d(bm25_rows, dense)
            bm25_of = np.zeros(len(candidates))
            bm25_of[np.searchsorted(candidates, bm25_rows)] = bm25_scores
            for w in WEIGHTS:
                fused = Fusion(bm25=w, cosine=1 - w).score(bm25_of, cosine[q][candidates])
                order = np.lexsort((candidates, -fused))
                per_query[f"{form} w={w}"].append(judged(candidates[order][:DEPTH], q))
    return per_query


def exposure(tokenizer, questions: list[tuple[str, str]]) -> dict:
    """Percent of questions whose text (title and body, as qres joins them) and whose body
    alone run past each cut, counting the model's [CLS] and [SEP]."""
    whole = [
        len(e.ids) for e in tokenizer.encode_batch([Question("", t, b).text for t, b in questions])
    ]
    body = [len(e.ids) for e in tokenizer.encode_batch([b for _, b in questions])]
    return {
        name: {
            **{
                f"over_{cut}": round(100 * float(np.mean(np.array(n) > cut)), 1)
                for cut in TOKEN_CUTS
            },
            "median_tokens": int(np.median(n)),
        }
        for name, n in (("title_and_body", whole), ("body", body))
    }


def paired(per_query, a: str, b: str, resamples: int) -> dict:
    """nDCG@10 of ranking b minus ranking a (points), its 95% interval and p."""
    got = compare(
        a,
        {str(i): 100 * q["nDCG@10"] for i, q in enumerate(per_query[a])},
        b,
        {str(i): 100 * q["nDCG@10"] for i, q in enumerate(per_query[b])},
        resamples=resamples,
        seed=0,
    )
    return {
        "a": a,
        "b": b,
        "b_minus_a": round(got.difference, 2),
        "ci95": [round(got.ci_low, 2), round(got.ci_high, 2)],
        "p": round(got.p_value, 4),
    }


def comparisons(per_query, resamples: int, fused: list[str]) -> dict:
    """fp32 256 against each int8 form, if measured; each of ``fused``'s fusions against its
    cosine alone."""
    forms_here = [f for f in FORMS if f in per_query]
    out: dict = {"fp32_vs_int8": [], "fusion_vs_cosine": {}}
    for form in forms_here[1:]:
        out["fp32_vs_int8"].append(paired(per_query, form, forms_here[0], resamples))
    for form in fused:
        weighted = [w for w in WEIGHTS if w > 0]
        best = max(
            weighted, key=lambda w: np.mean([q["nDCG@10"] for q in per_query[f"{form} w={w}"]])
        )
        out["fusion_vs_cosine"][form] = {
            "best_w": best,
            "by_w": [paired(per_query, form, f"{form} w={w}", resamples) for w in weighted],
            "w=0.5_vs_best_w": paired(per_query, f"{form} w={best}", f"{form} w=0.5", resamples),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-site", type=int, default=2000, help="questions drawn per site")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sites", default=",".join(SITES), help="comma-separated")
    parser.add_argument(
        "--minilm",
        type=Path,
        default=None,
        help="MiniLM model directory ($QRES_HOME/models/minilm)",
    )
    parser.add_argument(
        "--cache", type=Path, default=Path.home() / ".cache" / "qres-unsupervised-check",
        help="where the int8 forms and the vectors are kept",
    )  # fmt: skip
    parser.add_argument(
        "--model-set",
        default=None,
        help="rank with this model set's members and mixes instead of MiniLM's forms",
    )
    parser.add_argument("--out", type=Path, default=None, help=f"[default: {DEFAULT_OUT}]")
    parser.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples")
    parser.add_argument("--data-dir", type=Path, default=None, help="default ../shared/data")
    args = parser.parse_args(argv)
    sites = args.sites.split(",")
    if unknown := set(sites) - set(SITES):
        parser.error(f"unknown sites {sorted(unknown)}: choose among {', '.join(SITES)}")
    if args.per_site < 2:
        parser.error("--per-site must be at least 2")
    minilm = args.minilm or home() / "models" / "minilm"
    out = args.out or (
        DEFAULT_OUT.with_name(f"unsupervised_check_{args.model_set}.json")
        if args.model_set
        else DEFAULT_OUT
    )
    started = time.perf_counter()
    load_before = os.getloadavg()
    try:
        whole = Encoder.load(minilm)
        if not isinstance(whole, TransformerEncoder):
            parser.error(f"{minilm}: not a transformer model directory")
        if args.model_set:
            directories = dict(
                zip(
                    model_set.members(args.model_set),
                    model_set.model_dirs(args.model_set),
                    strict=True,
                )
            )
        else:
            directories = forms(minilm, args.cache)
        encoders = {name: Encoder.load(d) for name, d in directories.items()}
    except EncoderError as err:
        parser.error(str(err))
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(minilm / whole.card["tokenizer_file"]))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    results = {}
    for site, questions in eligible(args.data_dir, sites).items():
        drawn = sample(questions, args.per_site, args.seed)
        titles, bodies = [t for t, _ in drawn], [b for _, b in drawn]
        cosines, encode_seconds = {}, {}
        for name, encoder in encoders.items():
            queries, query_seconds = vectors(encoder, titles, args.cache)
            docs, doc_seconds = vectors(encoder, bodies, args.cache, bodies=True)
            cosines[name] = queries @ docs.T
            encode_seconds[name] = {"titles": query_seconds, "bodies": doc_seconds}
        fused = [next(iter(FORMS)), list(FORMS)[-1]]
        if args.model_set:
            mixes = set_forms(args.model_set, list(encoders.values()))
            for label, shares in mixes.items():
                cosines[label] = sum(s * cosines[n] for s, n in zip(shares, encoders, strict=True))
            fused = list(mixes)
        per_query = rank_site(bm25_hits(bodies, titles), cosines)
        results[site] = {
            "eligible": len(questions),
            "questions": len(drawn),
            "truncation_percent": exposure(tokenizer, drawn),
            "figures": {name: mean_percent(rows) for name, rows in per_query.items()},
            "paired_ndcg10": comparisons(per_query, args.resamples, fused),
            "encode_seconds": encode_seconds,  # null: read from --cache
        }
    report = {
        "benchmark": "unsupervised_check",
        "task": "title -> its own question's body, among the drawn bodies without titles",
        "model_set": args.model_set,
        "per_site": args.per_site,
        "seed": args.seed,
        "min_body_words": MIN_BODY_WORDS,
        "weights": list(WEIGHTS),
        "depth": DEPTH,
        "resamples": args.resamples,
        "forms": {
            name: {"dir": str(d), "fingerprint": encoders[name].fingerprint[:16]}
            for name, d in directories.items()
        },
        "sites": results,
        "seconds": round(time.perf_counter() - started, 1),
        "load_average_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "machine": machine(),
    }
    text = json.dumps(report, indent=1)
    out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
