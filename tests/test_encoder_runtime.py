"""Where and how the ONNX sessions run: threads, spinning, device and provider choice.

No GPU is needed: the CUDA branches are checked against a stand-in for the onnxruntime
module that lists (or does not list) the CUDA provider.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from qres.corpus.readers import Question
from qres.encoders import runtime as enc
from qres.encoders.runs import side_by_side, token_runs
from qres.encoders.runtime import CPU, CUDA, Encoder, EncoderError, Runtime

MODEL = Path(__file__).resolve().parents[1] / "qres" / "models" / "default"


def fake_ort(*providers):
    return SimpleNamespace(get_available_providers=lambda: list(providers), __version__="9.9")


def test_runtime_reads_the_environment(monkeypatch):
    for name in (
        "QRES_DEVICE",
        "QRES_QUERY_THREADS",
        "QRES_BULK_THREADS",
        "QRES_ONNX_SPINNING",
        "QRES_TOKEN_BUDGET",
    ):
        monkeypatch.delenv(name, raising=False)
    assert Runtime.from_env() == Runtime("auto", 1, 0, False, 0)
    monkeypatch.setenv("QRES_DEVICE", "CPU")
    monkeypatch.setenv("QRES_QUERY_THREADS", "2")
    monkeypatch.setenv("QRES_BULK_THREADS", "3")
    monkeypatch.setenv("QRES_ONNX_SPINNING", "1")
    monkeypatch.setenv("QRES_TOKEN_BUDGET", "512")
    assert Runtime.from_env() == Runtime("cpu", 2, 3, True, 512)
    assert Runtime.from_env("cuda").device == "cuda"  # --device beats $QRES_DEVICE
    monkeypatch.setenv("QRES_DEVICE", "gpu")
    with pytest.raises(EncoderError, match="unknown device 'gpu'"):
        Runtime.from_env()
    monkeypatch.setenv("QRES_DEVICE", "cpu")
    monkeypatch.setenv("QRES_QUERY_THREADS", "two")
    with pytest.raises(EncoderError, match=r"\$QRES_QUERY_THREADS must be a whole number"):
        Runtime.from_env()


def test_queries_stay_on_the_cpu_and_bulk_work_goes_to_cuda_when_offered():
    gpu, cpu_only = fake_ort(CUDA, CPU), fake_ort(CPU)
    auto = Runtime("auto")
    assert auto.providers(gpu, bulk=False) == [CPU]
    assert auto.providers(gpu, bulk=True) == [CUDA, CPU]
    assert auto.providers(cpu_only, bulk=True) == [CPU]
    assert Runtime("cpu").providers(gpu, bulk=True) == [CPU]
    assert Runtime("cuda").providers(gpu, bulk=False) == [CUDA, CPU]
    with pytest.raises(EncoderError, match="device cuda: onnxruntime 9.9 is the CPU build"):
        Runtime("cuda").providers(cpu_only, bulk=True)


def test_a_quantized_model_keeps_the_cpus_runs_and_batches_on_cuda():
    """Its vectors move with the texts run beside it (travel test split, fast set: hybrid
    nDCG@10 36.01 with the CPU's runs, 35.13 with CUDA's), so they must not depend on the
    device: the same token budget per run, and the same questions per indexing batch."""
    from qres.indexing.pipeline import CPU_BATCH, GPU_BATCH, default_batch_size

    int8 = {"encoder": {"quantize": "int8"}}
    full = {"encoder": {}}
    auto = Runtime("auto")
    assert enc.bulk_token_budget(auto, full, [CUDA, CPU]) == enc.GPU_TOKEN_BUDGET
    assert enc.bulk_token_budget(auto, full, [CPU]) == enc.TOKEN_BUDGET
    assert enc.bulk_token_budget(auto, int8, [CUDA, CPU]) == enc.TOKEN_BUDGET
    assert enc.bulk_token_budget(Runtime("auto", token_budget=512), int8, [CUDA]) == 512

    def encoder(providers, card):
        return SimpleNamespace(providers=providers, runs_as_on_cpu=enc.quantized(card))

    gpu_full, gpu_int8 = encoder([CUDA, CPU], full), encoder([CUDA, CPU], int8)
    assert default_batch_size([gpu_full]) == GPU_BATCH
    assert default_batch_size([encoder([CPU], full)]) == CPU_BATCH
    assert default_batch_size([gpu_int8]) == CPU_BATCH
    assert default_batch_size([gpu_full, gpu_int8]) == CPU_BATCH
    assert default_batch_size([]) == CPU_BATCH


@pytest.mark.parametrize(
    ("builds", "expected"),
    [
        ({"onnxruntime"}, "is the CPU build: pip install 'qres[gpu]'"),
        ({"onnxruntime", "onnxruntime-gpu"}, "both installed"),
        ({"onnxruntime-gpu"}, "offers no CUDA provider"),
    ],
)
def test_why_cuda_is_not_usable(monkeypatch, builds, expected):
    monkeypatch.setattr(enc, "onnxruntime_builds", lambda: builds)
    assert expected in enc.cuda_unavailable_reason(fake_ort(CPU))


def test_provider_status_on_this_machine():
    import onnxruntime

    status = enc.provider_status()
    assert status[CPU] == "usable"
    if CUDA not in onnxruntime.get_available_providers():
        assert status[CUDA] == enc.cuda_unavailable_reason(onnxruntime)


def test_sessions_use_the_configured_threads_and_do_not_spin():
    encoder = Encoder.load(MODEL, runtime=Runtime("cpu", query_threads=2, bulk_threads=2))
    assert encoder._bulk is None  # made on first bulk use only
    query = encoder._query()["title"].get_session_options()
    assert query.intra_op_num_threads == 2
    assert query.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert encoder._bulk is None  # made on first bulk use only
    encoder.encode_query("boot from usb")
    assert encoder._bulk is None
    questions = [Question(str(i), f"question {i} about wifi", "body") for i in range(20)]
    bulk_vectors = encoder.encode_questions(questions)
    bulk = encoder._bulk["title"].get_session_options()
    # a GRU's bulk threads are one-thread runs side by side, not threads inside one run
    assert bulk.intra_op_num_threads == 1 and encoder._parallel == 2
    assert bulk.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    # Both sessions run the same graph: the same vectors either way.
    small = np.stack([encoder.encode_questions([q])[0] for q in questions[:3]])
    np.testing.assert_allclose(small, bulk_vectors[:3], atol=1e-6)
    # one-thread queries: the bulk runs use the query sessions, no second set is made
    shared = Encoder.load(MODEL, runtime=Runtime("cpu", query_threads=1, bulk_threads=2))
    assert shared._bulk_sessions() is shared._query() and shared._parallel == 2


def test_spinning_can_be_turned_back_on():
    encoder = Encoder.load(MODEL, runtime=Runtime("cpu", spinning=True))
    options = encoder._query()["title"].get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "1"


def test_info_names_the_providers_and_why_not(run):
    import json

    payload = json.loads(run("--json", "--device", "cpu", "info").output)
    assert payload["onnx_providers"][CPU] == "usable"
    assert CUDA in payload["onnx_providers"]
    assert payload["device"] == "cpu"


def plain_encode(question: Question) -> np.ndarray:
    """A question's vector the plainest way: one default onnxruntime session, each field run
    alone (no batch, no padding), the non-empty fields' vectors averaged and normalised."""
    import onnxruntime

    from qres.encoders.vocab import Vocab

    session = onnxruntime.InferenceSession(str(MODEL / "model.onnx"), providers=[CPU])
    card = enc.read_card(MODEL / "model.json")
    title, body = Vocab.load(MODEL / "vocab.txt").encode_question(
        question.title, question.body, card["max_title_tokens"], card["max_body_tokens"]
    )
    fields = [
        session.run(
            ["vector"], {"token_ids": np.array([ids]), "mask": np.ones((1, len(ids)), np.float32)}
        )[0][0]
        for ids in (title, body)
        if ids
    ]
    total = np.sum(fields, axis=0)
    return total / np.linalg.norm(total)


def test_bulk_runs_side_by_side_give_the_vectors_of_a_plain_encode():
    from qres.corpus.readers import read_corpus

    questions = list(read_corpus(MODEL.parents[1] / "data" / "demo" / "questions.tsv"))
    questions[7] = Question("no-body", "wifi drops after resume", "")
    questions[8] = Question("no-title", "", "the screen stays black after login")
    want = np.stack([plain_encode(q) for q in questions])
    for threads in (1, 3):
        encoder = Encoder.load(MODEL, runtime=Runtime("cpu", bulk_threads=threads))
        # runs of 7 sequences of mixed lengths, 3 at a time with 3 threads
        got = encoder.encode_questions(questions, batch_size=7)
        assert encoder._parallel == threads
        np.testing.assert_allclose(got, want, atol=2e-6)
        np.testing.assert_allclose(encoder.encode_questions(questions), want, atol=2e-6)


def test_runs_are_cut_by_padded_tokens_and_cover_every_text_once():
    lengths = [5, 300, 1, 40, 40, 7, 12, 5000, 3]
    runs = token_runs(lengths, budget=100)
    assert sorted(i for run in runs for i in run) == list(range(len(lengths)))
    flat = [lengths[i] for run in runs for i in run]
    assert flat == sorted(lengths)  # by increasing length
    for run in runs:
        longest = max(lengths[i] for i in run)
        assert len(run) == 1 or len(run) * longest <= 100  # a longer text runs alone
    assert [len(r) for r in token_runs([2] * 10, budget=1000, max_rows=4)] == [4, 4, 2]


def test_runs_side_by_side_keep_their_order_and_at_most_so_many_going():
    import threading
    import time

    going, most, started = [0], [0], []
    lock = threading.Lock()

    def run(item: int) -> int:
        with lock:
            started.append(item)
            going[0] += 1
            most[0] = max(most[0], going[0])
        time.sleep(0.01 * (item % 3))  # later runs may end first
        with lock:
            going[0] -= 1
        return item * 10

    assert list(side_by_side(run, range(12), 3)) == [i * 10 for i in range(12)]
    assert most[0] == 3
    assert list(side_by_side(run, range(4), 1)) == [0, 10, 20, 30]  # in this thread
    # a caller that stops (Ctrl-C raised by its progress callback) starts no more runs
    started.clear()
    with pytest.raises(KeyboardInterrupt):
        for result in side_by_side(run, range(100), 2):
            if result == 30:
                raise KeyboardInterrupt
    time.sleep(0.1)
    assert len(started) <= 5  # runs 0-3 consumed, at most one more begun


def test_identical_questions_are_encoded_once_and_progress_counts_every_question():
    encoder = Encoder.load(MODEL, runtime=Runtime("cpu"))
    questions = [Question(str(i), f"wifi question {i % 20}", f"body {i % 20}") for i in range(60)]
    rows_run = []
    session = encoder._bulk_sessions()["title"]
    counting = _Counting(session.run, rows_run)
    encoder._bulk = encoder._sessions = {"title": counting, "body": counting}
    done = []
    vectors = encoder.encode_tokens(encoder.tokenize(questions), progress=done.append)
    assert sum(done) == 60
    assert sum(rows_run) == 20 * 2  # twenty distinct questions, title and body
    np.testing.assert_allclose(vectors[40], vectors[0])
    np.testing.assert_allclose(
        vectors[:20], np.stack([plain_encode(q) for q in questions[:20]]), atol=2e-6
    )


class _Counting:
    def __init__(self, run, log):
        self.real_run, self.log = run, log

    def run(self, names, feeds):
        self.log.append(len(feeds["token_ids"]))
        return self.real_run(names, feeds)
