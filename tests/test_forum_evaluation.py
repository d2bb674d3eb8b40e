"""Full-forum duplicate evaluation on a StackExchange dump: the split by closing date, the
metrics (checked against pytrec_eval) and `qres evaluate --dataset stackexchange`."""

import json
import random

import pytest
import pytrec_eval
from click.testing import CliRunner

from qres.cli import cli
from qres.datasets.forum_duplicates import duplicate_pairs, load_forum_duplicates
from qres.evaluation import ranking_metrics as metrics

TOPICS = [
    ("visa schengen border", "Do I need a Schengen visa at the border?"),
    ("train tickets japan rail pass", "Is the Japan rail pass worth buying for trains?"),
    ("luggage lost airline claim", "The airline lost my luggage: how do I claim?"),
    ("tipping restaurants usa", "How much tipping is expected in USA restaurants?"),
    ("passport renewal abroad", "Can I renew my passport while abroad?"),
]


def write_forum(folder, links):
    """Posts 1-5 (originals) and 11-15 (their rewordings), plus ``links``
    (post, related, date, type)."""
    rows = []
    for i, (title, body) in enumerate(TOPICS, start=1):
        rows.append(
            f'<row Id="{i}" PostTypeId="1" Title="{title}" Body="&lt;p&gt;{body}&lt;/p&gt;" />'
        )
        rows.append(f'<row Id="{10 + i}" PostTypeId="1" Title="{title}?" Body="{body} thanks" />')
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "Posts.xml").write_text("<posts>\n" + "\n".join(rows) + "\n</posts>\n")
    link_rows = [
        f'<row Id="{n}" CreationDate="{d}" PostId="{p}" RelatedPostId="{r}" LinkTypeId="{t}" />'
        for n, (p, r, d, t) in enumerate(links, start=1)
    ]
    (folder / "PostLinks.xml").write_text(
        "<postlinks>\n" + "\n".join(link_rows) + "\n</postlinks>\n"
    )
    return folder


LINKS = [
    ("11", "1", "2012-01-01", 3),
    ("12", "2", "2012-02-01", 3),
    ("13", "3", "2012-03-01", 3),
    ("14", "4", "2012-04-01", 3),
    ("15", "5", "2012-05-01", 3),
    ("15", "1", "2011-12-01", 3),  # 15's first closing: it goes with the oldest
    ("12", "99", "2012-02-01", 3),  # 99 is not in Posts.xml: left out
    ("13", "4", "2012-03-01", 1),  # a "linked" link, not a duplicate
]


def test_split_by_first_closing_date(tmp_path):
    folder = write_forum(tmp_path / "forum", LINKS)
    whole = load_forum_duplicates(folder, "all")
    assert [q.id for q in whole.queries] == ["15", "11", "12", "13", "14"]
    assert {q.id: set(q.relevant) for q in whole.queries} == {
        "15": {"5", "1"},
        "11": {"1"},
        "12": {"2"},
        "13": {"3"},
        "14": {"4"},
    }
    train, test = load_forum_duplicates(folder, "train"), load_forum_duplicates(folder, "test")
    assert [q.id for q in train.queries] == ["15", "11", "12", "13"]
    assert [q.id for q in test.queries] == ["14"]
    assert test.cut_date == "2012-04-01"
    assert duplicate_pairs(folder, "test") == [("14", "4")]


def test_the_travel_forum_has_its_readme_counts(shared_data):
    forum = load_forum_duplicates(shared_data / "stackexchange-travel", "all")
    assert len(forum.queries) == 1080
    assert sum(len(q.relevant) for q in forum.queries) == 1142
    test = load_forum_duplicates(shared_data / "stackexchange-travel", "test")
    assert len(test.queries) == 216


def test_metrics_agree_with_pytrec_eval():
    rng = random.Random(7)
    qrels, run, ours = (
        {},
        {},
        {"recall_1": [], "recall_10": [], "recall_100": [], "ndcg_cut_10": [], "rr10": []},
    )
    for q in range(60):
        docs = [f"d{i}" for i in range(300)]
        relevant = set(rng.sample(docs, rng.randint(1, 4)))
        ranked = rng.sample(docs, 100)
        qrels[f"q{q}"] = {d: 1 for d in relevant}
        run[f"q{q}"] = {d: float(100 - i) for i, d in enumerate(ranked)}
        hits, n = [d in relevant for d in ranked], len(relevant)
        ours["recall_1"].append(metrics.recall_at(hits, 1, n))
        ours["recall_10"].append(metrics.recall_at(hits, 10, n))
        ours["recall_100"].append(metrics.recall_at(hits, 100, n))
        ours["ndcg_cut_10"].append(metrics.ndcg_at(hits, 10, n))
        ours["rr10"].append(metrics.reciprocal_rank_at(hits, 10))
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"recall.1,10,100", "ndcg_cut.10"})
    theirs = evaluator.evaluate(run)
    for measure in ("recall_1", "recall_10", "recall_100", "ndcg_cut_10"):
        expected = [theirs[f"q{q}"][measure] for q in range(60)]
        assert ours[measure] == pytest.approx(expected, abs=1e-9), measure
    # MRR@10 is trec_eval's recip_rank over the first 10 of the run.
    top10 = {q: {d: s for d, s in docs.items() if s > 90} for q, docs in run.items()}
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)
    assert ours["rr10"] == pytest.approx([rr[f"q{q}"]["recip_rank"] for q in range(60)])
    assert sum(ours["rr10"]) > 0 and sum(ours["ndcg_cut_10"]) > 0  # not vacuous


def test_qres_evaluate_stackexchange(tmp_path, monkeypatch):
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    folder = write_forum(tmp_path / "forum", LINKS)
    result = CliRunner().invoke(
        cli,
        [
            "--json",
            "evaluate",
            "--dataset",
            "stackexchange",
            "--data-dir",
            str(folder),
            "--ranker",
            "bm25",
            "--per-query",
        ],
    )
    assert result.exit_code == 0, result.output
    (evaluation,) = json.loads(result.stdout)
    assert evaluation["split"] == "all"
    m = evaluation["metrics"]
    assert m["queries"] == 5
    rows = {r["query"]: r for r in evaluation["per_query"]}
    # Each rewording finds its own original first (its own id is left out of its ranking).
    for q in ("11", "12", "13", "14"):
        assert rows[q]["R@1"] == 100.0 and rows[q]["nDCG@10"] == 100.0
    assert rows["15"]["R@1"] == 50.0 and rows["15"]["R@10"] == 100.0
    assert m["R@1"] == pytest.approx(90.0)


def test_bad_split_and_given_order_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    folder = write_forum(tmp_path / "forum", LINKS)
    base = ["evaluate", "--dataset", "stackexchange", "--data-dir", str(folder)]
    result = CliRunner().invoke(cli, [*base, "--split", "dev", "--ranker", "bm25"])
    assert result.exit_code != 0 and "stackexchange splits are all, train, test" in result.output
    result = CliRunner().invoke(cli, [*base, "--ranker", "given-order"])
    assert result.exit_code != 0 and "bm25, dense or hybrid" in result.output
    missing = CliRunner().invoke(cli, [*base[:-1], str(tmp_path / "nowhere"), "--ranker", "bm25"])
    assert missing.exit_code != 0 and "Posts.xml: not found" in missing.output
    assert "Traceback" not in missing.output


def test_saved_forum_runs_score_the_same_with_compare_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    folder = write_forum(tmp_path / "forum", LINKS)
    base = ["evaluate", "--dataset", "stackexchange", "--data-dir", str(folder)]
    run = tmp_path / "bm25.txt"
    result = CliRunner().invoke(cli, ["--json", *base, "--ranker", "bm25", "--save-run", str(run)])
    assert result.exit_code == 0, result.output
    (direct,) = json.loads(result.stdout)
    forum = ["--dataset", "stackexchange", "--data-dir", str(folder)]
    result = CliRunner().invoke(cli, ["--json", "compare-runs", str(run), str(run), *forum])
    assert result.exit_code == 0, result.output
    scored = json.loads(result.stdout)
    assert scored["evaluations"][0]["metrics"] == direct["metrics"]
    assert scored["comparison"]["difference"] == 0.0


def test_a_large_forum_is_measured_on_its_linked_questions_and_a_fixed_sample(tmp_path):
    """qres adapt measures a forum of more than SEARCHED questions on part of it: every
    question a duplicate link joins, then the others in an order fixed by their ids."""
    from qres.evaluation.forum import sampled
    from qres.evaluation.runner import eval_index_name, load_benchmark

    forum = tmp_path / "forum"
    write_forum(forum, [(10 + i, i, f"2013-0{i}-01T00:00:00.000", 3) for i in range(1, 4)])
    text = (forum / "Posts.xml").read_text().replace("</posts>", "")  # 20 more, unlinked
    text += "".join(
        f'<row Id="{100 + i}" PostTypeId="1" Title="other {i}" Body="b" />\n' for i in range(20)
    )
    (forum / "Posts.xml").write_text(text + "</posts>\n")
    whole = load_benchmark("stackexchange", "all", forum, links=False)
    assert sampled(whole, 30) is whole and whole.searched is None  # 30 questions: all of them
    part = sampled(whole, 12)
    kept = [q.id for q in part.corpus()]
    assert part.searched == len(kept) == 12 and part.queries == whole.queries
    assert {"1", "2", "3", "11", "12", "13"} <= set(kept)  # the questions the links join
    assert kept == [q.id for q in sampled(whole, 12).corpus()]  # the same sample each run
    assert len({q.id for q in sampled(whole, 2).corpus()}) == 6  # never fewer than the linked
    assert eval_index_name(part, "m") != eval_index_name(whole, "m")  # an index of its own
