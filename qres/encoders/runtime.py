"""Serving-side question encoder: an exported model directory run with onnxruntime (no torch).

A model directory (written by ``qres export-onnx``) holds:

* ``model.onnx`` — inputs ``token_ids`` int64 [batch, length] and ``mask`` float32
  [batch, length] (1 = token, 0 = padding, right-padded), output ``vector`` float32
  [batch, dim], L2-normalised; it encodes titles, and bodies too unless the card names a
  separate body graph (``body.onnx``);
* ``vocab.txt`` — the token of each id (:mod:`qres.encoders.vocab`);
* ``model.json`` — the model card: architecture, sizes, training data, dev metrics, the
  fingerprint (sha256 over the graphs and ``vocab.txt``: what an index records) and the
  manifest of every file with its sha256 (:mod:`qres.encoders.manifest`), checked when it is loaded.

A question's vector is computed as in training: title and body tokenised with
``qres.text.tokenize`` and cut to the card's maximum lengths, each field encoded to a unit
vector, the vectors of the non-empty fields averaged and re-normalised.

A transformer model directory (``architecture: "transformer"``, written by ``qres
import-encoder`` from a sentence-transformers model) has the same card and fingerprint, but
``model.onnx`` takes ``input_ids`` and ``attention_mask`` (int64 [batch, length]) and the
token ids come from a Hugging Face ``tokenizers`` file (the card's ``tokenizer_file``, e.g.
``tokenizer.json``; it replaces ``vocab.txt`` in the fingerprint). Title and body are joined
into one text (:attr:`qres.corpus.readers.Question.text`) cut to ``max_seq_tokens``, as the model's
sentence-transformers configuration does; pooling and normalisation are inside the graph.
A card's ``title_weight`` w (0 when absent) mixes in the title alone: a question's vector is
then normalise((1 − w) · v(title and body) + w · v(title)), its title weighing twice, once
cut free of a long body; a question without a body (a search query) is v(title) either way.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import numpy as np

from qres.corpus.readers import Question
from qres.encoders.card import (  # noqa: F401 - the card's names, used through this module too
    CARD_FILE,
    CARD_FORMAT,
    TRANSFORMER,
    VOCAB_FILE,
    EncoderError,
    fingerprint,
    graph_files,
    read_card,
    title_weight,
    vocab_file,
)
from qres.encoders.manifest import open_model
from qres.encoders.runs import distinct, side_by_side, token_runs
from qres.encoders.vocab import Vocab, VocabError, pad_batch

log = logging.getLogger("qres.encoders")

DEVICES = ("auto", "cpu", "cuda")
CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"
# Fewer questions than this are encoded on the query session (CPU by default): a GPU's
# transfer and launch cost outweighs its speed for a handful of short sequences.
SMALL_BATCH = 16
# Sequences per onnxruntime run of a recurrent encoder on the CPU. A GRU's input
# projection for a whole run is held at once ([run, length, 3 x hidden] floats), so small
# runs stay in cache: on the shipped GRU (2 loaded cores) runs of 32-64 encoded 1.2x faster
# than runs of 256 and 3x faster than runs of 2048.
CPU_RUN = 64
# Padded tokens (rows x longest row) per onnxruntime run of a transformer's bulk work. Memory
# per run grows with it (attention is rows x length^2), so a bound on it bounds memory
# whatever the texts. On 2 cores over travel.stackexchange questions, budgets taken in turn
# (benchmarks/token_budget.py): 1,024 encoded fastest, MiniLM 64.5 questions/s against 51.5 at
# 4,096 and the fast set's int8 MiniLM on 64 tokens 236.7 against 220.6 (512 and 2,048 in
# between); 4,096 had been as fast as 8,192-16,384 at a third of their peak memory, and 2.5x
# faster than runs of 256 texts padded to the longest. onnxruntime's CPU arena stays on: with
# bounded runs it stops growing, and turning it (and the memory pattern) off encoded ~40%
# slower without a lower peak.
TOKEN_BUDGET = 1024
GPU_TOKEN_BUDGET = 65536


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    if not value.isdigit():
        raise EncoderError(f"${name} must be a whole number >= 0, not {value!r}")
    return int(value)


@dataclass(frozen=True)
class Runtime:
    """How the ONNX sessions run. ``from_env`` reads each setting from the environment.

    * ``device`` (``$QRES_DEVICE``): ``auto`` encodes single queries on the CPU and bulk work
      (indexing, evaluation) on CUDA when onnxruntime has a usable CUDA provider; ``cpu`` or
      ``cuda`` put both on that device.
    * ``query_threads`` (``$QRES_QUERY_THREADS``, default 1): intra-op threads of the query
      session. One query is a few small matrix products; more threads mostly wait.
    * ``bulk_threads`` (``$QRES_BULK_THREADS``, default 0 = one per core): CPU threads of
      bulk encoding. A recurrent (GRU) encoder runs that many batches at once, each on one
      thread: its per-step products are too small to split across threads (one-thread runs
      encoded about 2x faster than two-thread ones on 2 cores). A transformer does the same
      with its runs of texts (on 2 cores its int8 runs went 1.07-1.19x, its fp32 ones ~1.05x
      the speed of two-thread runs one after another).
    * ``spinning`` (``$QRES_ONNX_SPINNING=1``): let idle onnxruntime threads busy-wait for
      the next run. Off by default: spinning threads take the CPU from the rest of a query
      (tantivy, ranking) and from the other indexing stages.
    * ``token_budget`` (``$QRES_TOKEN_BUDGET``, default 0 = :data:`TOKEN_BUDGET` on the CPU,
      :data:`GPU_TOKEN_BUDGET` on CUDA): padded tokens per run of a transformer's bulk work.
    """

    device: str = "auto"
    query_threads: int = 1
    bulk_threads: int = 0
    spinning: bool = False
    token_budget: int = 0

    @classmethod
    def from_env(cls, device: str | None = None) -> Runtime:
        source = "--device" if device else "QRES_DEVICE"
        device = (device or os.environ.get("QRES_DEVICE") or "auto").strip().lower()
        if device not in DEVICES:
            raise EncoderError(f"{source}: unknown device {device!r} (one of {', '.join(DEVICES)})")
        return cls(
            device=device,
            query_threads=_env_int("QRES_QUERY_THREADS", 1),
            bulk_threads=_env_int("QRES_BULK_THREADS", 0),
            spinning=os.environ.get("QRES_ONNX_SPINNING", "0").strip() == "1",
            token_budget=_env_int("QRES_TOKEN_BUDGET", 0),
        )

    def session_options(self, ort, threads: int):
        options = ort.SessionOptions()
        options.log_severity_level = 3  # warnings about constant folding are not the user's
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        spin = "1" if self.spinning else "0"
        options.add_session_config_entry("session.intra_op.allow_spinning", spin)
        options.add_session_config_entry("session.inter_op.allow_spinning", spin)
        return options

    def providers(self, ort, bulk: bool) -> list[str]:
        """Execution providers of the bulk or the query session."""
        available = ort.get_available_providers()
        if self.device == "cuda":
            if CUDA not in available:
                raise EncoderError(f"device cuda: {cuda_unavailable_reason(ort)}")
            return [CUDA, CPU]
        if self.device == "auto" and bulk and CUDA in available:
            return [CUDA, CPU]
        return [CPU]


# onnxruntime and onnxruntime-gpu install the same `onnxruntime` package directory, so the
# one installed last wins and uninstalling either breaks the other. qres depends on the CPU
# build (every install can serve); the `gpu` extra adds the CUDA build, which must then
# replace the CPU one's files:
GPU_INSTALL = (
    "pip install 'qres[gpu]' && pip uninstall -y onnxruntime "
    "&& pip install --force-reinstall --no-deps onnxruntime-gpu"
)


def onnxruntime_builds() -> set[str]:
    """Which of the distributions onnxruntime and onnxruntime-gpu are installed."""
    from importlib import metadata

    found = set()
    for dist in ("onnxruntime", "onnxruntime-gpu"):
        try:
            metadata.version(dist)
            found.add(dist)
        except metadata.PackageNotFoundError:
            pass
    return found


def cuda_unavailable_reason(ort) -> str:
    """Why onnxruntime offers no CUDA provider, in one sentence."""
    builds = onnxruntime_builds()
    if "onnxruntime-gpu" not in builds:
        return f"onnxruntime {ort.__version__} is the CPU build: {GPU_INSTALL}"
    if "onnxruntime" in builds:
        return (
            "onnxruntime and onnxruntime-gpu are both installed and the CPU build's files "
            "won: pip uninstall -y onnxruntime && pip install --force-reinstall --no-deps "
            "onnxruntime-gpu"
        )
    return "onnxruntime-gpu is installed but offers no CUDA provider"


def provider_status() -> dict[str, str]:
    """Each execution provider qres can use: "usable", or why not (for `qres info`)."""
    import onnxruntime as ort

    status = {CPU: "usable"}
    if CUDA not in ort.get_available_providers():
        status[CUDA] = cuda_unavailable_reason(ort)
        return status
    # Listed is not usable: the provider loads the CUDA libraries only when a session starts
    # and falls back to the CPU if they are missing. Try a real session on the bundled model.
    probe = Path(__file__).resolve().parents[1] / "models" / "default" / "model.onnx"
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 4
        session = ort.InferenceSession(str(probe), options, providers=[CUDA, CPU])
        used = session.get_providers()
    except Exception as err:  # onnxruntime raises its own exception types
        used, detail = [], str(err).strip().splitlines()[:1]
    else:
        detail = []
    if used[:1] == [CUDA]:
        status[CUDA] = "usable"
        if "onnxruntime" in onnxruntime_builds():
            status[CUDA] += (
                " (onnxruntime is installed beside onnxruntime-gpu: uninstalling either "
                "breaks the other; pip uninstall -y onnxruntime && pip install "
                "--force-reinstall --no-deps onnxruntime-gpu)"
            )
    else:
        status[CUDA] = (
            "onnxruntime-gpu is installed but a CUDA session could not start (no GPU, or the "
            "CUDA 12/cuDNN 9 libraries are not on LD_LIBRARY_PATH)"
            + (f": {detail[0]}" if detail else "")
        )
    return status


class Encoder:
    """ONNX sessions per graph, created once; thread-safe to call.

    Single queries (and batches under :data:`SMALL_BATCH`) run on the query sessions, bulk
    work on the bulk sessions, made on first use; see :class:`Runtime` for where each runs.
    ``make_bulk`` returns the bulk sessions and how many runs may go at once on them (none:
    bulk work runs on the query sessions).
    """

    def __init__(
        self,
        model_dir: Path,
        card: dict,
        vocab: Vocab,
        sessions: dict,
        parallel: int = 1,
        make_bulk: Callable[[], tuple[dict, int]] | None = None,
        token_budget: int = TOKEN_BUDGET,
    ):
        self.model_dir, self._card, self.vocab = model_dir, card, vocab
        self._sessions = sessions  # {"title": session, "body": session (maybe the same)}
        self._make_bulk = make_bulk
        self._bulk: dict | None = None
        self._parallel = parallel  # runs at once on the bulk sessions
        self._lock = threading.Lock()
        self.title_max = int(card["max_title_tokens"])
        self.body_max = int(card["max_body_tokens"])
        self.token_budget = token_budget

    @classmethod
    def load(
        cls,
        model_dir: str | Path,
        providers: Sequence[str] | None = None,
        threads: int | None = None,
        runtime: Runtime | None = None,
    ) -> Encoder:
        """The encoder of a model directory, verified by
        :func:`qres.encoders.manifest.open_model`."""

        return cls.from_model(open_model(model_dir), providers, threads, runtime)

    @classmethod
    def from_model(
        cls,
        model,
        providers: Sequence[str] | None = None,
        threads: int | None = None,
        runtime: Runtime | None = None,
    ) -> Encoder:
        """The encoder of an opened :class:`qres.encoders.manifest.Model`. ``providers`` pins every
        session to those execution providers; otherwise ``runtime`` (default
        :meth:`Runtime.from_env`) decides where queries and bulk work run. ``threads``
        overrides the runtime's onnxruntime threads per call: a server running many calls
        at once gives each one thread, so they do not fight over the cores."""
        import onnxruntime as ort

        model_dir, card = model.path, model.card
        files = graph_files(card)
        kind = TransformerEncoder if card.get("architecture") == TRANSFORMER else cls
        try:
            vocab = kind.load_vocab(model_dir, card)
        except VocabError as err:
            raise EncoderError(str(err)) from None
        runtime = runtime or Runtime.from_env()
        if threads is not None:
            runtime = replace(runtime, query_threads=threads, bulk_threads=threads)
        bulk_threads = runtime.bulk_threads or _cores()

        def sessions(chosen: list[str], threads: int) -> dict:
            options = runtime.session_options(ort, threads)
            built = {}
            for name in files:
                try:
                    built[name] = ort.InferenceSession(
                        _graph(model_dir / name, card, chosen), sess_options=options,
                        providers=chosen,
                    )  # fmt: skip
                except Exception as err:  # onnxruntime raises its own exception types
                    first_line = str(err).strip().splitlines()[0] if str(err).strip() else ""
                    raise EncoderError(
                        f"{model_dir / name}: cannot load the ONNX graph ({first_line})"
                    ) from None
            graphs = card["graphs"]
            return {"title": built[graphs["title"]], "body": built[graphs["body"]]}

        def bulk_plan(chosen: list[str]) -> tuple[int, int]:
            """(intra-op threads, runs at once) of bulk work on ``chosen`` providers."""
            if CUDA not in chosen:  # one-thread runs side by side (see Runtime)
                return 1, bulk_threads
            return bulk_threads, 1

        if providers:
            threads, parallel = bulk_plan(list(providers))
            return kind(
                model_dir,
                card,
                vocab,
                sessions(list(providers), threads),
                parallel,
                token_budget=bulk_token_budget(runtime, card, providers),
            )
        query_providers = runtime.providers(ort, bulk=False)
        bulk_providers = runtime.providers(ort, bulk=True)
        query = sessions(query_providers, runtime.query_threads)
        threads, parallel = bulk_plan(bulk_providers)
        shared = bulk_providers == query_providers and threads == runtime.query_threads
        return kind(
            model_dir,
            card,
            vocab,
            query,
            parallel,
            None if shared else lambda: (sessions(bulk_providers, threads), parallel),
            token_budget=bulk_token_budget(runtime, card, bulk_providers),
        )

    @staticmethod
    def load_vocab(model_dir: Path, card: dict):
        return Vocab.load(model_dir / VOCAB_FILE)

    def _query(self) -> dict:
        return self._sessions

    def _bulk_sessions(self) -> dict:
        if self._make_bulk is None:  # bulk work runs on the query sessions
            return self._query()
        if self._bulk is None:
            with self._lock:
                if self._bulk is None:
                    self._bulk, self._parallel = self._make_bulk()
        return self._bulk

    @property
    def runs_as_on_cpu(self) -> bool:
        """Whether bulk work keeps the CPU's batches on any device (:func:`quantized`)."""
        return quantized(self._card)

    @property
    def dim(self) -> int:
        return int(self._card["dim"])

    @property
    def fingerprint(self) -> str:
        return self._card["fingerprint"]

    @property
    def card(self) -> dict:
        return dict(self._card)

    @property
    def providers(self) -> list[str]:
        """Execution providers of bulk encoding (creates the bulk session)."""
        return list(self._bulk_sessions()["title"].get_providers())

    @property
    def query_providers(self) -> list[str]:
        return list(self._query()["title"].get_providers())

    def encode_ids(
        self,
        sequences: Sequence[Sequence[int]],
        field: str,
        batch_size: int | None = None,
        bulk: bool = True,
    ):
        """Unit vectors [n, dim] of token-id sequences; an empty sequence gives zeros.
        ``batch_size``: sequences per run (default :data:`CPU_RUN`)."""
        out = np.zeros((len(sequences), self.dim), dtype=np.float32)
        session = (self._bulk_sessions() if bulk else self._query())[field]
        parallel = self._parallel if bulk else 1
        batch_size = batch_size or CPU_RUN
        # Similar lengths share a run so little time goes on padding.
        order = sorted((i for i, s in enumerate(sequences) if s), key=lambda i: len(sequences[i]))
        runs = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]

        def run(rows: list[int]) -> None:
            ids, mask = pad_batch([sequences[i] for i in rows])
            out[rows] = session.run(["vector"], {"token_ids": ids, "mask": mask})[0]

        list(side_by_side(run, runs, parallel))
        return out

    def tokenize(self, questions: Sequence[Question]) -> list[tuple[list[int], list[int]]]:
        """Each question's title and body token ids, cut to the card's maximum lengths."""
        return self.tokenizer()(questions)

    def tokenizer(self) -> Callable[[Sequence[Question]], list[tuple[list[int], list[int]]]]:
        """:meth:`tokenize` as a picklable function (for indexing's worker processes)."""
        return partial(_tokenize, self.vocab, self.title_max, self.body_max)

    def encode_tokens(
        self,
        tokens: Sequence[tuple[Sequence[int], Sequence[int]]],
        batch_size: int | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> np.ndarray:
        """Unit vectors [n, dim] float32 of :meth:`tokenize`'s output (title and body
        averaged; identical questions encoded once); calls from several threads may
        overlap. ``progress(n)`` is called with the number of questions when done."""
        unique, where = distinct([(tuple(t), tuple(b)) for t, b in tokens])
        bulk = len(unique) >= SMALL_BATCH
        titles = self.encode_ids([t for t, _ in unique], "title", batch_size, bulk)
        bodies = self.encode_ids([b for _, b in unique], "body", batch_size, bulk)
        vectors = _normalize(titles + bodies)[where]
        if progress:
            progress(len(tokens))
        return vectors

    def encode_questions(
        self, questions: Sequence[Question], batch_size: int | None = None
    ) -> np.ndarray:
        """Unit vectors [n, dim] float32 of questions (title and body averaged)."""
        return self.encode_tokens(self.tokenize(questions), batch_size)

    def encode_query(self, text: str) -> np.ndarray:
        """Unit vector [dim] of a search query, read as a question title without a body."""
        return self.encode_questions([Question("query", text, "")])[0]


def _tokenize(vocab: Vocab, title_max: int, body_max: int, questions: Sequence[Question]):
    return [vocab.encode_question(q.title, q.body, title_max, body_max) for q in questions]


class TransformerEncoder(Encoder):
    """A sentence-transformers model exported to ONNX; the same interface as :class:`Encoder`.

    ``vocab`` is the model's Hugging Face ``tokenizers.Tokenizer``; a question is one text
    (title and body), so :meth:`tokenize` gives (ids, []) pairs.
    """

    def __init__(self, model_dir: Path, card: dict, tokenizer, sessions, *args, **kwargs):
        super().__init__(model_dir, card, tokenizer, sessions, *args, **kwargs)
        self.max_tokens = int(card["max_seq_tokens"])
        self._pad_id = int(card.get("pad_token_id", 0))
        self.title_weight = title_weight(card)
        self._known: dict[tuple, np.ndarray] | None = None

    def share_vectors(self, known: dict[tuple, np.ndarray]) -> None:
        """Take a text's vector from ``known`` (its token ids to its vector) where it is there,
        and put each text encoded from now on there: encoders of one model's files, at any
        title weight, then encode each text once between them (``qres adapt`` chooses the
        title weight and then indexes the same forum)."""
        self._known = known

    @staticmethod
    def load_vocab(model_dir: Path, card: dict):
        from tokenizers import Tokenizer

        path = model_dir / card["tokenizer_file"]
        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception as err:  # tokenizers raises plain Exceptions with long messages
            raise EncoderError(f"{path}: not a valid tokenizers file ({str(err)[:120]})") from None
        tokenizer.no_padding()
        tokenizer.enable_truncation(int(card["max_seq_tokens"]))
        return tokenizer

    def tokenizer(self) -> Callable[[Sequence[Question]], list[tuple[list[int], list[int]]]]:
        """(text ids, title ids) per question; the title's only with a ``title_weight``, and
        only where the question has a body (else its text is its title)."""
        return partial(_tokenize_text, self.vocab, self.title_weight > 0)

    def encode_tokens(
        self,
        tokens: Sequence[tuple[Sequence[int], Sequence[int]]],
        batch_size: int | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> np.ndarray:
        """Unit vectors [n, dim] float32 of :meth:`tokenize`'s output: each text's, mixed
        with its title's by the ``title_weight`` where a title is given. ``progress(n)`` is
        called as in :meth:`encode_sequences` for the texts; the titles, encoded after them,
        are not counted."""
        with_title = [i for i, (_, title) in enumerate(tokens) if title]
        vectors = self.encode_sequences([t for t, _ in tokens], batch_size, progress)
        if with_title and self.title_weight:
            titles = self.encode_sequences([tokens[i][1] for i in with_title], batch_size)
            mixed = (1 - self.title_weight) * vectors[with_title] + self.title_weight * titles
            vectors[with_title] = _normalize(mixed)
        return vectors

    def encode_sequences(
        self,
        tokens: Sequence[Sequence[int]],
        batch_size: int | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> np.ndarray:
        """Unit vectors [n, dim] float32 of token id sequences, each encoded whole.

        Identical texts are encoded once. The rest are sorted by length and cut into runs
        of at most :attr:`token_budget` padded tokens (rows x the run's longest row; a text
        longer than the budget runs alone), ``batch_size`` rows at most if given, so memory
        per run is bounded whatever the texts. ``progress(n)`` is called after each run
        with the number of texts (duplicates included) it covered."""
        ids, where = distinct([tuple(t) for t in tokens])
        copies = np.bincount(where, minlength=len(ids))
        unique = np.zeros((len(ids), self.dim), dtype=np.float32)
        known = self._known
        # texts encoded before by an encoder sharing these vectors
        shared = [known is not None and t in known for t in ids]
        found = [i for i, was in enumerate(shared) if was]
        todo = [i for i, was in enumerate(shared) if not was]
        if found:
            unique[found] = [known[ids[i]] for i in found]
            if progress:
                progress(int(copies[found].sum()))
        bulk = len(todo) >= SMALL_BATCH
        session = (self._bulk_sessions() if bulk else self._query())["title"]

        def run(rows: list[int]) -> int:
            width = len(ids[rows[-1]])
            batch = np.full((len(rows), width), self._pad_id, dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for r, i in enumerate(rows):
                batch[r, : len(ids[i])] = ids[i]
                mask[r, : len(ids[i])] = 1
            unique[rows] = session.run(["vector"], {"input_ids": batch, "attention_mask": mask})[0]
            return int(copies[rows].sum())

        runs = token_runs([len(ids[i]) for i in todo], self.token_budget, batch_size)
        runs = [[todo[at] for at in run] for run in runs]
        for covered in side_by_side(run, runs, self._parallel if bulk else 1):
            if progress:
                progress(covered)
        if known is not None:
            known.update((ids[i], unique[i]) for i in todo)
        return unique[where]

    def encode_texts(
        self,
        texts: Sequence[str],
        batch_size: int | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> np.ndarray:
        """Unit vectors [n, dim] of texts, each cut to the card's ``max_seq_tokens``;
        ``progress`` as in :meth:`encode_sequences`."""
        questions = [Question(str(i), t, "") for i, t in enumerate(texts)]
        return self.encode_tokens(self.tokenize(questions), batch_size, progress)


def quantized(card: dict) -> bool:
    """Whether a card's graph quantizes activations over each run (``quantize: int8``, from
    onnxruntime's dynamic quantization): a vector then moves a little with the texts run
    beside it. On the travel forum's test split, the fast set's hybrid nDCG@10 was 36.01 with
    the CPU's runs and 35.13 with runs of CUDA's size, so such a graph keeps the CPU's runs
    and batches wherever it runs: its vectors do not depend on the device."""
    return card.get("encoder", {}).get("quantize") == "int8"


def bulk_token_budget(runtime: Runtime, card: dict, providers: Sequence[str]) -> int:
    """Padded tokens per run of a transformer's bulk work on ``providers``."""
    if runtime.token_budget:
        return runtime.token_budget
    return GPU_TOKEN_BUDGET if CUDA in providers and not quantized(card) else TOKEN_BUDGET


def _graph(path: Path, card: dict, providers: list[str]) -> str | bytes:
    """What onnxruntime loads for a graph file: the file, or on CUDA an int8 graph rewritten
    so that the GPU runs all of it (:mod:`qres.encoders.cuda_graph`); without the ``onnx``
    package that rewrite needs, the file as it is (its integer products then run on the
    CPU)."""
    if CUDA not in providers or not quantized(card):
        return str(path)
    from qres.encoders import cuda_graph

    try:
        return cuda_graph.without_integer_ops(path)
    except ImportError:
        log.warning("%s: int8 products run on the CPU (pip install onnx: on the GPU)", path)
    except Exception as err:  # noqa: BLE001 - another graph's shape, onnx's own errors: the
        # graph as it is still runs
        log.warning("%s: not rewritten for the GPU (%s); int8 products run on the CPU", path, err)
    return str(path)


def _tokenize_text(tokenizer, with_titles: bool, questions: Sequence[Question]):
    if not questions:
        return []
    texts = [e.ids for e in tokenizer.encode_batch([q.text for q in questions])]
    titles: list[list[int]] = [[] for _ in questions]
    if not with_titles:
        return list(zip(texts, titles, strict=True))
    # a title is tokenised alone only beside a body; a search query has none
    has_body = [i for i, q in enumerate(questions) if q.title.strip() and q.body.strip()]
    if has_body:
        encoded = tokenizer.encode_batch([questions[i].title for i in has_body])
        for i, e in zip(has_body, encoded, strict=True):
            titles[i] = e.ids
    return list(zip(texts, titles, strict=True))


def _cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _normalize(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.maximum(norms, 1e-8)).astype(np.float32)
