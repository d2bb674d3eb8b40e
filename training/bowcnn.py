"""BOW-CNN (dos Santos et al. 2015): a learned weighted bag of words beside a CNN encoder.

    s(q, c) = β1 · cos(bow_q, bow_c) + β2 · cos(cnn_q, cnn_c),   β1 = bow_beta, β2 = 1 − β1

* ``cnn`` — a ``qres.training.encoders.QuestionEncoder`` of kind ``cnn`` (title and body unit
  vectors averaged), built as ``qres.training.rundir.new_run`` builds one;
* ``bow`` — the question's title and body token ids (``TokenizedQuestions``, cut to
  title_max/body_max), entry ``tf(w) · weight[w]``. ``weight`` is learned, initialised to the
  IDF over the vocabulary questions (``data.vocab_ids``), log(N / df(w)). A word that no such
  question holds (one kept from the pre-trained vectors) starts as if seen once, log(N):
  the rarest, most telling weight. ``<pad>`` and ``<unk>`` weigh 0 and are left out of every
  bag, so two questions never match on words the vocabulary does not know.

Loss: log(1 + exp(−γ·(s(q, p+) − s(q, p−)))) (as softplus), p− being the highest-scoring of
the example's sampled negatives: the one the model confuses most, as the max-margin loss of
``qres.training.losses`` picks it.

A batch's bag-of-words cosines are computed over the words of that batch only: word ids are
renumbered with ``torch.unique`` and term frequencies scattered into [n, V_batch], never
[n, |V|]. Dev scores go through ``qres.encoders.bowcnn_scorer.BowCnnScorer`` (with the torch CNN),
the code
that serves the exported model.

The run directory is ``qres.training.rundir``'s and the epochs run in ``qres.training.loop``
(run.json, vocab.txt, last.pt, best.pt, same seeding, same resume); the checkpoints hold the
whole ``BowCnn`` and run.json adds ``"scorer": "bow-cnn"`` and ``"beta": [β1, β2]``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from rich.console import Console
from torch import Tensor, nn

from qres.corpus.readers import Question
from qres.datasets.benchmarks import RankingQuery
from qres.encoders.bowcnn_scorer import SCORER, BowCnnScorer
from qres.encoders.vocab import UNK_ID, Vocab
from qres.training.config import TrainConfig, TrainError, resolve_device
from qres.training.data import Example, TokenizedQuestions, TrainingData, load_dataset
from qres.training.encoders import EncoderConfig, QuestionEncoder
from qres.training.evaluate import evaluate
from qres.training.loop import candidate_rows, fit, torch_encoder
from qres.training.rundir import (
    LAST_FILE,
    RUN_FILE,
    VOCAB_FILE,
    checked_run,
    new_run,
    open_run,
    read_checkpoint,
    run_dir_and_checkpoint,
)


def idf_weights(id_lists: Iterable[Sequence[int]], vocab_size: int) -> np.ndarray:
    """float32 [vocab_size]: log(N / df(w)) over N bags of ids; df 0 counts as 1; pad, unk 0."""
    df = np.zeros(vocab_size, dtype=np.int64)
    n = 0
    for ids in id_lists:
        df[np.unique(np.asarray(ids, dtype=np.int64))] += 1
        n += 1
    idf = np.log(max(n, 1) / np.maximum(df, 1)).astype(np.float32)
    idf[: UNK_ID + 1] = 0.0
    return idf


def logistic_pairwise_loss(positive: Tensor, negatives: Tensor, gamma: float) -> Tensor:
    """Mean of log(1 + exp(−γ·(s+ − max s−))); ``positive`` [B], ``negatives`` [B, K]."""
    return F.softplus(-gamma * (positive - negatives.max(dim=1).values)).mean()


class BowCnn(nn.Module):
    """The CNN question encoder plus one learned weight per vocabulary word."""

    def __init__(self, encoder: QuestionEncoder, bow_weights: np.ndarray, beta: float):
        super().__init__()
        self.encoder = encoder
        self.bow_weight = nn.Parameter(torch.tensor(np.asarray(bow_weights, dtype=np.float32)))
        self.beta = (float(beta), 1.0 - float(beta))

    def bags_of_words(
        self, title_ids: Tensor, title_mask: Tensor, body_ids: Tensor, body_mask: Tensor
    ) -> Tensor:
        """Unit rows [n, V_batch] of tf · weight over the words present in the batch."""
        ids = torch.cat([title_ids, body_ids], 1)
        present = (torch.cat([title_mask, body_mask], 1) > 0) & (ids > UNK_ID)
        n = ids.size(0)
        rows = torch.arange(n, device=ids.device).unsqueeze(1).expand_as(ids)[present]
        words, local = torch.unique(ids[present], return_inverse=True)
        width = len(words)
        ones = torch.ones(local.shape, dtype=self.bow_weight.dtype, device=ids.device)
        tf = torch.zeros(n * width, dtype=ones.dtype, device=ids.device)
        tf = tf.index_add(0, rows * width + local, ones).view(n, width)
        return F.normalize(tf * self.bow_weight[words], dim=1, eps=1e-8)

    def forward(self, title_ids, title_mask, body_ids, body_mask) -> tuple[Tensor, Tensor]:
        """(unit bags of words [n, V_batch], unit CNN vectors [n, dim]) of one batch."""
        tensors = (title_ids, title_mask, body_ids, body_mask)
        return self.bags_of_words(*tensors), self.encoder(*tensors)

    def similarity(self, bow: Tensor, cnn: Tensor, rows: Tensor) -> Tensor:
        """[len(rows), n]: s between the batch's questions ``rows`` and each of its questions."""
        return self.beta[0] * bow[rows] @ bow.T + self.beta[1] * cnn[rows] @ cnn.T


def bowcnn_step(
    model: BowCnn, optimizer, batch: list[Example], tokenized, device, config: TrainConfig
) -> float:
    ids = list(dict.fromkeys(i for e in batch for i in (e.query, e.positive, *e.negatives)))
    row = {qid: n for n, qid in enumerate(ids)}
    bow, cnn = model(*tokenized.batch(ids, device))
    queries = torch.tensor([row[e.query] for e in batch], device=device)
    scores = model.similarity(bow, cnn, queries).gather(1, candidate_rows(batch, row).to(device))
    loss = logistic_pairwise_loss(scores[:, 0], scores[:, 1:], config.gamma)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
    optimizer.step()
    return loss.item()


def torch_scorer(model: BowCnn, vocab: Vocab, device, title_max: int, body_max: int):
    """A ``BowCnnScorer`` over the torch model as it is now (eval mode, current weights)."""
    encode = torch_encoder(model.encoder, vocab, device, title_max, body_max)
    weights = model.bow_weight.detach().cpu().numpy()
    return BowCnnScorer(encode, vocab, weights, model.beta, title_max, body_max)


def evaluate_scorer(
    queries: Sequence[RankingQuery],
    questions: dict[str, Question],
    scorer: BowCnnScorer,
    skip_without_relevant: bool,
) -> dict[str, float]:
    """MAP, MRR, P@1, P@5 (percent) of each query's candidates ranked by the scorer."""

    def score(represented, query: int, candidates: list[int]) -> np.ndarray:
        return scorer.scores(represented.rows([query]), represented.rows(candidates))[0]

    return evaluate(queries, questions, scorer.represent, skip_without_relevant, score)


def _check_config(config: TrainConfig) -> None:
    if not 0.0 <= config.bow_beta <= 1.0:
        raise TrainError(f"bow_beta must lie in [0, 1], not {config.bow_beta}")
    unsupported = [
        name
        for name, on in [
            ("pretrain_epochs", config.pretrain_epochs > 0),
            ("adapt_to", config.adapt_to is not None),
            ("tags", config.tags),
        ]
        if on
    ]
    if unsupported:
        raise TrainError(f"bowcnn training does not support {', '.join(unsupported)}")


def _model_from_run(run: dict, vocab: Vocab) -> BowCnn:
    encoder = QuestionEncoder(EncoderConfig(**run["encoder"]))
    return BowCnn(encoder, np.zeros(len(vocab), dtype=np.float32), run["beta"][0])


def train_bowcnn(
    config: TrainConfig,
    out_dir: str | Path,
    resume: bool = False,
    data: TrainingData | None = None,
    console: Console | None = None,
    show_progress: bool = True,
    hard_negatives=None,
) -> dict:
    """Train (or resume) a BOW-CNN run in ``out_dir``; returns the run record (``run.json``)."""
    out_dir = Path(out_dir)
    config, run = open_run(config, out_dir, resume)
    console = console or Console(stderr=True)
    return fit_bowcnn(config, out_dir, run, data, console, show_progress, hard_negatives)


def fit_bowcnn(config, out_dir: Path, run, data, console, show_progress, hard_negatives=None):
    """:func:`train_bowcnn` once the run directory is checked (``run`` set when resuming)."""
    if run is not None and run.get("scorer") != SCORER:
        raise TrainError(f"{out_dir / RUN_FILE}: not a BOW-CNN run, cannot resume it as one")
    _check_config(config)
    device = resolve_device(config.device)
    data = data or load_dataset(config.dataset, config.data_dir)
    if run is not None:
        vocab = Vocab.load(out_dir / VOCAB_FILE)
        tokenized = TokenizedQuestions(data.questions, vocab, config.title_max, config.body_max)
        model = _model_from_run(run, vocab)
        state = torch.load(out_dir / LAST_FILE, map_location="cpu", weights_only=False)
        model.load_state_dict(state["model"])
    else:
        encoder, vocab, run = new_run(replace(config, encoder="cnn"), data, device)
        tokenized = TokenizedQuestions(data.questions, vocab, config.title_max, config.body_max)
        bags = (title + body for title, body in map(tokenized.ids, data.vocab_ids))
        model = BowCnn(encoder, idf_weights(bags, len(vocab)), config.bow_beta)
        run = {**run, "train": asdict(config), "scorer": SCORER, "beta": list(model.beta)}
        out_dir.mkdir(parents=True, exist_ok=True)
        vocab.save(out_dir / VOCAB_FILE)
        state = None
    model = model.to(device)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(trainable, lr=config.lr)
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])

    def score_dev() -> dict:
        scorer = torch_scorer(model, vocab, device, config.title_max, config.body_max)
        return evaluate_scorer(data.dev, data.questions, scorer, data.skip_dev_without_relevant)

    return fit(
        model,
        optimizer,
        run,
        state,
        config,
        data,
        out_dir,
        step=lambda batch, _rng: {
            "loss": bowcnn_step(model, optimizer, batch, tokenized, device, config)
        },
        score_dev=score_dev,
        console=console,
        show_progress=show_progress,
        hard_negatives=hard_negatives,
    )


def is_bowcnn_run(source: str | Path) -> bool:
    """Whether a run directory (or a checkpoint in one) holds a BOW-CNN run."""
    run_dir, _ = run_dir_and_checkpoint(source)
    try:
        run = json.loads((run_dir / RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(run, dict) and run.get("scorer") == SCORER


def load_bowcnn(source: str | Path) -> tuple[BowCnn, Vocab, dict]:
    """The model (eval mode), vocabulary and run record of a BOW-CNN run (best epoch)."""
    run_dir, checkpoint = checked_run(source)
    if not is_bowcnn_run(run_dir):
        raise TrainError(f'{run_dir / RUN_FILE}: not a BOW-CNN run (no "scorer": "{SCORER}")')
    try:
        vocab = Vocab.load(run_dir / VOCAB_FILE)
        run = json.loads((run_dir / RUN_FILE).read_text(encoding="utf-8"))
        model = _model_from_run(run, vocab)
        model.load_state_dict(read_checkpoint(checkpoint)["model"])
    except (ValueError, KeyError, TypeError, RuntimeError) as err:
        raise TrainError(f"{run_dir}: cannot load the run ({str(err).splitlines()[0]})") from None
    return model.eval(), vocab, run
