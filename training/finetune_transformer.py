"""Fine-tune a sentence-transformers encoder on labelled duplicate pairs (``qres train
--encoder transformer --base DIR``).

Each (query, relevant question) pair of the training split is one example, with one hard
negative: on SemEval one of the query's own non-relevant candidates; on a StackExchange forum
(``--dataset stackexchange``) one of BM25's top hits over the whole forum for the query, its
originals left out (:func:`qres.training.data.load_stackexchange`), or with ``negatives=
"nearest"`` (``qres adapt``) one of the questions nearest it by the base model's own cosine
(:func:`nearest_negatives`), drawn afresh each epoch,
from the train split only (its newest tenth, which the GRU path keeps to choose its epoch,
is trained on too: no epoch is chosen here, unless ``hold_out`` keeps it out so that
``qres tune-fusion --dataset stackexchange --held-out`` can fit the fusion on queries the
encoder never saw). The loss is the in-batch softmax
(multiple-negatives ranking, scale 20): every other example's positive and every hard
negative in the batch are negatives. AdamW with linear warm-up over the first 10% of the
steps. A fixed number of epochs is run: no dev set is read, so dev stays unseen. Questions
are the text the serving side encodes (:attr:`qres.corpus.readers.Question.text`), cut to the
model's ``max_seq_length``. The result is a sentence-transformers directory; ``qres
import-encoder sentence-transformers`` turns it into a served model directory.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import torch

from qres.datasets.benchmarks import dataset_dir, load_semeval
from qres.training.import_encoder import load_sentence_transformer

SCALE = 20.0
CHECKPOINT_STEPS = 20  # a run with a checkpoint file saves itself this often
STEP_PASSES = 3  # a step's texts encode in this many passes of like length (_embedded)
FORUM_NEGATIVE_POOL = 10  # a forum pair's hard negative is one of the top this many found
# The base model's nearest are looked for among a forum's questions, a fixed sample of this
# many where it has more (the base model encodes ~80 questions/s on 2 cores at 128 tokens).
NEAREST_AMONG = 20_000
DATA_NOTES = {
    "semeval2016": "semeval2016 train (parts 1 and 2); dev not read",
    "stackexchange": "stackexchange train split (oldest 80% of duplicate links), {negatives} "
    "hard negatives from the whole forum; test split not read",
}
NEGATIVE_NAMES = {"bm25": "BM25's", "nearest": "the base model's nearest"}

Triples = list[tuple[str, str, str]]


def training_triples(data_dir: Path | None, seed: int) -> Triples:
    """(query, relevant, non-relevant candidate of the same query) texts of SemEval train."""
    labelled = load_semeval(dataset_dir("semeval2016", data_dir), "train")
    rng = random.Random(seed)
    triples = []
    for q in labelled.queries:
        negatives = [c for c in q.candidates if c not in q.relevant and c in labelled.questions]
        for r in sorted(q.relevant):
            if r in labelled.questions and negatives:
                negative = labelled.questions[rng.choice(negatives)].text
                triples.append((q.question.text, labelled.questions[r].text, negative))
    return triples


class ForumTriples:
    """A forum's train-split (duplicate, original) pairs, each with a hard negative drawn
    anew per epoch from the top :data:`FORUM_NEGATIVE_POOL` found for the duplicate (BM25's);
    ``newest``: only the newest this many pairs (of :attr:`available`); ``embed``: the
    negatives are instead the questions nearest each duplicate by its cosine
    (:func:`nearest_negatives`)."""

    def __init__(
        self,
        data_dir: Path | None,
        hold_out: bool = False,
        newest: int | None = None,
        embed=None,
    ):
        from qres.training.data import load_stackexchange

        data = load_stackexchange(data_dir, newest)  # (BM25 searched for the newest alone)
        self.nearest_among = None  # (sampled, of all): where the nearest came from a sample
        if embed is not None:
            data.train = nearest_negatives(data, embed)
            if len(data.questions) > NEAREST_AMONG:
                self.nearest_among = (NEAREST_AMONG, len(data.questions))
        self.questions = data.questions
        self.held_out = len(data.dev) if hold_out else 0
        every = [(q.id, q.positives, q.negatives) for q in data.train]
        if not hold_out:
            every += [(q.id, sorted(q.relevant), _non_relevant(q)) for q in data.dev]
        self.available = sum(len(positives) for _, positives, _ in every)
        self.pairs = [
            (query, positive, negatives[:FORUM_NEGATIVE_POOL])
            for query, positives, negatives in every
            if negatives
            for positive in positives
        ]
        if newest is not None:  # the pairs are in the order their duplicates were closed
            self.pairs = self.pairs[max(0, len(self.pairs) - newest) :]

    def __len__(self) -> int:
        return len(self.pairs)

    def draw(self, rng: random.Random, titles: bool = False) -> Triples:
        """One epoch's triples; with ``titles``, each duplicate asks with its title alone
        (what a widget sends) rather than its whole text."""
        text = self.questions
        ask = (lambda q: text[q].title or text[q].text) if titles else (lambda q: text[q].text)
        return [
            (ask(q), text[p].text, text[rng.choice(negatives)].text)
            for q, p, negatives in self.pairs
        ]


def nearest_negatives(data, embed) -> list:
    """``data.train`` with each query's hard negatives (where BM25 gave it some) replaced by
    the questions nearest it by ``embed``'s cosine (``embed(texts)``: unit vectors, one row
    each), its own originals left out, among every question of the forum (a fixed sample of
    :data:`NEAREST_AMONG` where it has more). On the travel forum these beat BM25's
    (benchmarks/adapt_nearest_negatives.json)."""
    import numpy as np

    from qres.training.data import FORUM_HARD_NEGATIVES, TrainQuery

    ids = sorted(data.questions)
    if len(ids) > NEAREST_AMONG:
        ids = sorted(random.Random(0).sample(ids, NEAREST_AMONG))
    vectors = embed([data.questions[i].text for i in ids])
    row = {question: at for at, question in enumerate(ids)}
    asking = [q for q in data.train if q.negatives and q.id not in row]
    outside = {}  # the queries a sample left out are encoded apart
    if asking:
        texts = [data.questions[q.id].text for q in asking]
        outside = dict(zip((q.id for q in asking), embed(texts), strict=True))
    train = []
    for q in data.train:
        if not q.negatives:  # a query BM25 was not asked for (older than the newest links)
            train.append(q)
            continue
        left_out = {q.id, *q.positives}
        query = vectors[row[q.id]] if q.id in row else outside[q.id]
        nearest = np.argsort(-(vectors @ query))[: FORUM_HARD_NEGATIVES + len(left_out)]
        negatives = [ids[at] for at in nearest if ids[at] not in left_out]
        train.append(TrainQuery(q.id, q.positives, negatives[:FORUM_HARD_NEGATIVES]))
    return train


def _non_relevant(query) -> list[str]:
    return [c for c in query.candidates if c not in query.relevant]


def finetune(
    base: Path,
    out_dir: Path,
    data_dir: Path | None = None,
    epochs: int = 1,
    lr: float = 2e-5,
    batch_size: int = 16,
    seed: int = 0,
    device: str = "auto",
    threads: int = 2,
    log=print,
    dataset: str = "semeval2016",
    hold_out: bool = False,
    title_epochs: int = 0,
    checkpoint: Path | None = None,
    progress=None,
    low_memory: bool = False,
    max_tokens: int | None = None,
    newest_links: int | None = None,
    negatives: str = "bm25",
) -> dict:
    """Fine-tune ``base`` and save it (sentence-transformers) in ``out_dir``.

    ``title_epochs``: a forum's last this many epochs ask with each duplicate's title alone
    (the other epochs with its whole text), so the model also learns the short queries a
    widget sends. ``checkpoint``: a file the run is saved to every :data:`CHECKPOINT_STEPS`
    steps and resumed from (the same batches, in the same order); deleted when done.
    ``progress(step, steps)`` is called after each step. ``low_memory``: each transformer
    layer's activations are recomputed in the backward pass rather than kept (gradient
    checkpointing): a fraction of the memory for 1.4–1.9× a step's time (2 cores).
    ``max_tokens``: each text is cut to this many tokens while training (the model still
    reads its own limit when served): attention's cost grows with the square of the length.
    ``newest_links``: a forum's run trains on its newest this many pairs only.
    ``negatives``: a forum's hard negatives, ``"bm25"`` (BM25's top hits) or ``"nearest"``
    (the base model's nearest questions, found before it is trained)."""
    if negatives not in NEGATIVE_NAMES:
        raise ValueError(f"negatives: {negatives!r}, not one of {sorted(NEGATIVE_NAMES)}")
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
    model = load_sentence_transformer(base).to(device)
    served_tokens = model.max_seq_length  # what the saved model reads, whatever the cut
    if max_tokens is not None:  # trained on shorter texts than it reads when served
        model.max_seq_length = min(max_tokens, model.max_seq_length)
    if low_memory:
        _checkpoint_layers(model)
    rng = random.Random(seed)
    forum_run = dataset == "stackexchange"
    if forum_run:
        embed = None
        if negatives == "nearest":

            def embed(texts):
                return model.encode(
                    texts,
                    batch_size=64,
                    normalize_embeddings=True,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                )

        forum = ForumTriples(data_dir, hold_out, newest_links, embed)
        first_title_epoch = epochs - title_epochs
        draw = lambda rng, epoch: forum.draw(rng, titles=epoch >= first_title_epoch)  # noqa: E731
    else:
        triples = training_triples(data_dir, seed)
        draw = lambda _rng, _epoch: list(triples)  # noqa: E731
    n_pairs = len(draw(random.Random(seed), 0))
    per_epoch = (n_pairs + batch_size - 1) // batch_size
    steps = epochs * per_epoch
    optimizer, schedule = optimizer_for(model, lr, steps)
    step, losses, spent = 0, [], 0.0
    if checkpoint is not None and checkpoint.is_file():
        saved = torch.load(checkpoint, map_location=device, weights_only=False)
        settings = (saved["steps"], saved["pairs"], saved.get("max_tokens"))
        if settings != (steps, n_pairs, model.max_seq_length):
            raise ValueError(f"{checkpoint}: saved by another run (other data or settings)")
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        schedule.load_state_dict(saved["schedule"])
        torch.set_rng_state(saved["torch_rng"])
        step, losses, spent = saved["step"], saved["losses"], saved["seconds"]
        rng.setstate(saved["draw_state"])  # what the epoch under way was drawn with
        log(f"resumed at step {step}/{steps}")
    started = time.perf_counter() - spent
    model.train()
    for epoch in range(step // per_epoch, epochs):
        drawn_with = rng.getstate()  # a run resumed in this epoch draws it again from here
        triples = draw(rng, epoch)
        rng.shuffle(triples)
        done_here = step - epoch * per_epoch  # batches of this epoch a resumed run has done
        for start in range(done_here * batch_size, len(triples), batch_size):
            batch = triples[start : start + batch_size]
            texts = [t for triple in batch for t in triple]
            vectors = _embedded(model, texts, device, STEP_PASSES).view(len(batch), 3, -1)
            queries, candidates = (
                vectors[:, 0],
                vectors[:, 1:].transpose(0, 1).reshape(-1, vectors.shape[-1]),
            )
            scores = SCALE * queries @ candidates.T  # positives are columns 0..n-1
            loss = torch.nn.functional.cross_entropy(
                scores, torch.arange(len(batch), device=device)
            )
            losses.append(descend(loss, optimizer, schedule))
            step += 1
            if progress is not None:
                progress(step, steps)
            if step % 10 == 0 or step == steps:
                recent = sum(losses[-10:]) / len(losses[-10:])
                elapsed = time.perf_counter() - started
                log(f"epoch {epoch + 1} step {step}/{steps} loss {recent:.4f} {elapsed:.0f}s")
            if checkpoint is not None and step % CHECKPOINT_STEPS == 0 and step < steps:
                _save_checkpoint(
                    checkpoint,
                    {
                        "steps": steps,
                        "pairs": n_pairs,
                        "max_tokens": model.max_seq_length,
                        "step": step,
                        "losses": losses,
                        "seconds": time.perf_counter() - started,
                        # a finished epoch: the next one is drawn from the state now
                        "draw_state": rng.getstate() if step % per_epoch == 0 else drawn_with,
                        "model": model.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "schedule": schedule.state_dict(),
                        "torch_rng": torch.get_rng_state(),
                    },
                )
    model.eval()
    trained_tokens, model.max_seq_length = model.max_seq_length, served_tokens
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save(str(out_dir))
    record = {
        "base": str(base),
        "data": DATA_NOTES[dataset].format(negatives=NEGATIVE_NAMES[negatives])
        + (
            "; the nearest looked for in a fixed sample of {:,} of its {:,} questions, "
            "not all".format(*forum.nearest_among)
            if forum_run and forum.nearest_among
            else ""
        )
        + (f"; its newest {forum.held_out} queries held out" if forum_run and hold_out else "")
        + (
            f"; trained on the newest {n_pairs} of its {forum.available} pairs"
            if forum_run and n_pairs < forum.available
            else ""
        ),
        "pairs": n_pairs,
        "pairs_available": forum.available if forum_run else n_pairs,
        "epochs": epochs,
        "title_epochs": title_epochs if forum_run else 0,
        "lr": lr,
        "batch_size": batch_size,
        "loss": "in-batch softmax (scale 20) with one hard negative per pair"
        + (
            f" (one of {NEGATIVE_NAMES[negatives]} top {FORUM_NEGATIVE_POOL}, drawn per epoch)"
            if forum_run
            else ""
        ),
        "seed": seed,
        "max_tokens": trained_tokens,
        "device": device,
        "seconds": round(time.perf_counter() - started, 1),
        "final_loss": sum(losses[-10:]) / max(1, len(losses[-10:])),
    }
    (out_dir / "qres_finetune.json").write_text(json.dumps(record, indent=2))
    if checkpoint is not None:
        checkpoint.unlink(missing_ok=True)
    return record


def optimizer_for(model, lr: float, steps: int):
    """AdamW and its schedule: linear warm-up over the first 10% of ``steps``, then linear decay."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    warmup = max(1, steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (steps - s) / (steps - warmup)))
    )
    return optimizer, schedule


def descend(loss, optimizer, schedule) -> float:
    """One step down ``loss``'s gradient; returns the loss."""
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    schedule.step()
    return loss.item()


def _checkpoint_layers(model) -> None:
    """Gradient checkpointing in the model's Hugging Face transformer, where it has one."""
    transformer = getattr(model[0], "auto_model", None)
    newer = getattr(transformer, "activation_checkpointing_enable", None)  # transformers 5.x
    if newer is not None:
        newer(activation_checkpointing_kwargs={"use_reentrant": False})
    elif hasattr(transformer, "gradient_checkpointing_enable"):
        transformer.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": False}
        )


def _save_checkpoint(path: Path, state: dict) -> None:
    """Written beside, then renamed: a run killed while saving keeps the previous one."""
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    tmp.replace(path)


def _embedded(model, texts: list[str], device, passes: int):
    """The normalised vectors of ``texts``, encoded in ``passes`` forward passes of texts of
    like length, each padded only to its own longest (a title beside bodies, or a short
    question beside long ones, no longer costs a long one): the vectors one pass would give,
    to rounding, for less work. In training, dropout draws other masks than one pass would."""
    features = _preprocess(model, texts)
    lengths = features["attention_mask"].sum(dim=1)
    order = torch.argsort(lengths, stable=True)
    parts = []
    for rows in torch.tensor_split(order, min(passes, len(texts))):
        longest = int(lengths[rows].max())
        part = {
            k: v[rows][:, :longest].to(device) if torch.is_tensor(v) and v.dim() == 2 else v
            for k, v in features.items()
        }
        parts.append(model(part)["sentence_embedding"])
    encoded = torch.cat(parts)
    vectors = torch.empty_like(encoded)
    vectors[order.to(device)] = encoded  # back in the order of ``texts``
    return torch.nn.functional.normalize(vectors, dim=1)


def _preprocess(model, texts):
    """Token tensors of ``texts`` (``tokenize`` was renamed ``preprocess`` in
    sentence-transformers 6)."""
    method = getattr(model, "preprocess", None) or model.tokenize
    return method(texts)
