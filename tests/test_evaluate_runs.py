"""`qres evaluate --save-run` (TREC run files, read back by pytrec_eval) and `--compare`."""

import json

import pytest
import pytrec_eval

from qres.evaluation.runner import load_benchmark
from qres.evaluation.trec import run_lines


def read_run(path):
    run, order = {}, {}
    for line in path.read_text().splitlines():
        qid, q0, docid, rank, score, tag = line.split(" ")
        assert q0 == "Q0"
        run.setdefault(qid, {})[docid] = float(score)
        order.setdefault(qid, []).append((int(rank), docid, tag))
    return run, order


def test_ties_and_candidates_the_ranker_did_not_return_keep_qres_order():
    inf = float("-inf")
    ranked = {"q": [("a", 2.5), ("z", 0.5), ("b", 0.5), ("c", inf), ("d", inf)], "r": []}
    lines = [line.split(" ") for line in run_lines(ranked, "bm25")]
    assert [(q, d, r, t) for q, _, d, r, _, t in lines] == [
        ("q", "a", "1", "bm25"),
        ("q", "z", "2", "bm25"),
        ("q", "b", "3", "bm25"),
        ("q", "c", "4", "bm25"),
        ("q", "d", "5", "bm25"),
    ]
    scores = [float(line[4]) for line in lines]
    assert scores == pytest.approx([2.5, 0.5, 0.5 - 1e-6, -0.5, -0.5 - 1e-6], abs=1e-12)
    with pytest.raises(ValueError, match="one word"):
        list(run_lines(ranked, "two words"))


def test_save_run_is_what_trec_eval_scores_as_qres_does(run, tmp_path):
    out = tmp_path / "semeval.txt"
    result = run(
        "--json", "evaluate", "--dataset", "semeval2016", "--ranker", "given-order",
        "--ranker", "bm25", "--per-query", "--save-run", out,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    benchmark = load_benchmark("semeval2016", "dev")
    qrels = {
        q.id: {c: int(c in q.relevant) for c in q.candidates}
        for q in benchmark.queries
        if q.relevant
    }
    for evaluation in json.loads(result.stdout):
        ranker = evaluation["ranker"]
        run_file, order = read_run(tmp_path / f"semeval.{ranker}.txt")
        assert set(run_file) == {q.id for q in benchmark.queries}
        for rows in order.values():
            assert [r for r, _, _ in rows] == list(range(1, len(rows) + 1))
            assert {tag for _, _, tag in rows} == {ranker}
        trec = pytrec_eval.RelevanceEvaluator(qrels, {"map"}).evaluate(run_file)
        ours = {row["query"]: row["AP"] for row in evaluation["per_query"]}
        assert len(trec) == len(qrels) > 0
        for qid, measures in trec.items():
            assert 100 * measures["map"] == pytest.approx(ours[qid]), (ranker, qid)


def test_compare_two_rankers(run, tmp_path):
    args = ["evaluate", "--dataset", "semeval2016", "--ranker", "given-order", "--ranker", "bm25"]
    payload = json.loads(run("--json", *args, "--compare").stdout)
    given, bm25 = payload["evaluations"]
    c = payload["comparison"]
    assert (c["a"], c["b"], c["queries"]) == ("given-order", "bm25", given["metrics"]["queries"])
    assert c["difference"] == pytest.approx(bm25["metrics"]["MAP"] - given["metrics"]["MAP"])
    assert c["ci_low"] <= c["difference"] <= c["ci_high"] and 0 < c["p_value"] <= 1
    text = run(*args, "--compare").output
    assert "paired bootstrap 95% interval" in text and "randomization test p =" in text
    refused = run(*args[:-2], "--compare")
    assert refused.exit_code == 2 and "exactly two --ranker" in refused.output


def test_compare_runs_of_saved_runs_is_evaluate_compare(run, tmp_path):
    args = ["evaluate", "--dataset", "semeval2016", "--ranker", "given-order", "--ranker", "bm25"]
    direct = json.loads(run("--json", *args, "--compare", "--save-run", tmp_path / "r.txt").stdout)
    a, b = tmp_path / "r.given-order.txt", tmp_path / "r.bm25.txt"
    payload = json.loads(run("--json", "compare-runs", a, b, "--dataset", "semeval2016").stdout)
    assert [e["ranker"] for e in payload["evaluations"]] == ["r.given-order.txt", "r.bm25.txt"]
    for ours, theirs in zip(payload["evaluations"], direct["evaluations"], strict=True):
        assert ours["metrics"] == pytest.approx(theirs["metrics"])
    got, want = payload["comparison"], direct["comparison"]
    assert {k: v for k, v in got.items() if k not in ("a", "b")} == pytest.approx(
        {k: v for k, v in want.items() if k not in ("a", "b")}
    )
    assert (
        "paired randomization test" in run("compare-runs", a, b, "--dataset", "semeval2016").output
    )


def test_compare_runs_reads_runs_as_trec_eval_and_refuses_bad_ones(run, tmp_path):
    benchmark = load_benchmark("semeval2016", "dev")
    first = benchmark.queries[0]
    relevant = sorted(first.relevant)[0]
    # Only the first query ranked, its relevant candidate first by score (rank column ignored).
    good = tmp_path / "good.txt"
    good.write_text(f"{first.id} Q0 other 1 1.0 x\n{first.id} Q0 {relevant} 2 5.0 x\n")
    other = tmp_path / "other.txt"
    other.write_text(f"{first.id} Q0 other 1 1.0 x\n")
    compared = run("--json", "compare-runs", other, good, "--dataset", "semeval2016")
    payload = json.loads(compared.stdout)
    ap = {row["query"]: row["AP"] for row in payload["evaluations"][1]["per_query"]}
    assert ap[first.id] == pytest.approx(100 / len(first.relevant))
    assert sum(ap.values()) == ap[first.id]  # every other query ranks nothing: AP 0
    # ... which is said, in case the run is of another split
    n = len(benchmark.queries)
    assert compared.stderr.splitlines()[0] == (
        f"warning: {other}: ranks 1 of the {n} queries of semeval2016 dev; the other {n - 1} "
        "count as ranking nothing (a run of another --split?)"
    )
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    result = run("compare-runs", empty, good, "--dataset", "semeval2016")
    assert result.exit_code == 1
    assert result.output.strip() == f"error: {empty}: no rankings in it: an empty run"
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"q Q0 d 1 1.0 x\n\x8d\xff\x00")
    result = run("compare-runs", binary, good, "--dataset", "semeval2016")
    assert result.exit_code == 1
    assert result.output.strip() == f"error: {binary}: not UTF-8 text: a run file is text"
    bad = tmp_path / "bad.txt"
    bad.write_text(f"{first.id} Q0 {relevant} 1 5.0 x\n{first.id} Q0 oops\n")
    result = run("compare-runs", bad, good, "--dataset", "semeval2016")
    assert result.exit_code == 1 and f"{bad}:2: expected 6 fields" in result.output
    assert "Traceback" not in result.output
    bad.write_text("nosuchquery Q0 d 1 5.0 x\n")
    result = run("compare-runs", bad, good, "--dataset", "semeval2016")
    assert result.exit_code == 1 and "query nosuchquery is not in semeval2016 dev" in result.output
