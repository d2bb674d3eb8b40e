"""Joint tag prediction (multi-label) on the shared question encoder, and its baseline.

The head is one linear layer on the encoder's unit vector, trained with sigmoid
cross-entropy against the question's tags (StackExchange ``RELQ_TAGS``; Qatar Living's
``RELQ_CATEGORY`` as a single label). ``qres train --tags`` adds it to the ranking loss:
``loss = α · ranking + β · tags``. The questions of the dev queries are held out and scored
with P@5, R@5 and MAP (``qres.evaluation.tag_metrics``), beside a TF-IDF one-vs-rest logistic
regression trained on the same questions.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from qres.corpus.readers import Question
from qres.encoders.manifest import TAGS_FILE, add_to_manifest
from qres.evaluation.tag_metrics import tag_metrics
from qres.text import tokenize


class TagHead(nn.Module):
    def __init__(self, dim: int, labels: Sequence[str]):
        super().__init__()
        self.labels = list(labels)
        self.index = {t: i for i, t in enumerate(self.labels)}
        self.linear = nn.Linear(dim, len(self.labels))

    def forward(self, vectors: Tensor) -> Tensor:
        return self.linear(vectors)

    def targets(self, questions: Sequence[Question], device) -> Tensor:
        """Multi-hot [questions, tags]; tags outside the head's labels are ignored."""
        out = torch.zeros(len(questions), len(self.labels), device=device)
        for row, q in enumerate(questions):
            for tag in q.tags:
                if tag in self.index:
                    out[row, self.index[tag]] = 1.0
        return out

    def loss(self, vectors: Tensor, questions: Sequence[Question]) -> Tensor:
        """Mean sigmoid cross-entropy over the tagged questions of a batch (0 if none)."""
        rows = [i for i, q in enumerate(questions) if q.tags]
        if not rows:
            return vectors.new_zeros(())
        logits = self(vectors[torch.tensor(rows, device=vectors.device)])
        targets = self.targets([questions[i] for i in rows], vectors.device)
        return nn.functional.binary_cross_entropy_with_logits(logits, targets)


def tag_labels(questions: Sequence[Question], min_count: int = 1) -> list[str]:
    """Tags used by at least ``min_count`` questions, most frequent first."""
    counts = Counter(t for q in questions for t in q.tags)
    return [t for t, n in counts.most_common() if n >= min_count]


def tagged_split(data, seed: int = 0) -> tuple[list[Question], list[Question]]:
    """(training, held-out) tagged questions.

    Held out: the tagged questions of the dev queries that are not training questions
    (SemEval's dev questions); where there are none (AskUbuntu's corpus is all training
    text), a seeded fifth of the tagged training questions.
    """
    training_ids = set(data.vocab_ids)
    tagged = [data.questions[i] for i in data.vocab_ids if data.questions[i].tags]
    dev_ids = {i for q in data.dev for i in (q.id, *q.candidates)} - training_ids
    held = [data.questions[i] for i in sorted(dev_ids) if i in data.questions]
    held = [q for q in held if q.tags]
    if held or len(tagged) < 2:
        return tagged, held
    order = np.random.default_rng([seed, 4]).permutation(len(tagged))
    cut = max(1, len(tagged) // 5)
    return [tagged[i] for i in sorted(order[cut:])], [tagged[i] for i in sorted(order[:cut])]


def head_metrics(head: TagHead, vectors: np.ndarray, questions: Sequence[Question]) -> dict:
    with torch.no_grad():
        scores = head(torch.from_numpy(vectors).to(head.linear.weight.device)).cpu().numpy()
    return tag_metrics(scores, [q.tags for q in questions], head.labels)


def tfidf_baseline(train: Sequence[Question], held: Sequence[Question]) -> dict:
    """P@5, R@5, MAP of TF-IDF + one-vs-rest logistic regression (scikit-learn)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.preprocessing import MultiLabelBinarizer

    binarizer = MultiLabelBinarizer()
    y = binarizer.fit_transform([q.tags for q in train])
    vectorizer = TfidfVectorizer(analyzer=tokenize, sublinear_tf=True, min_df=1)
    x = vectorizer.fit_transform([q.text for q in train])
    classifier = OneVsRestClassifier(LogisticRegression(max_iter=1000, C=10.0))
    classifier.fit(x, y)
    scores = classifier.predict_proba(vectorizer.transform([q.text for q in held]))
    return tag_metrics(scores, [q.tags for q in held], list(binarizer.classes_))


def save_head(head: TagHead, model_dir: str | Path) -> None:
    """``tags.npz`` beside an exported encoder, listed in its manifest: what ``qres tags``
    reads."""
    np.savez(
        Path(model_dir) / TAGS_FILE,
        weight=head.linear.weight.detach().cpu().numpy().astype(np.float32),
        bias=head.linear.bias.detach().cpu().numpy().astype(np.float32),
        labels=np.array(head.labels, dtype=str),
    )
    add_to_manifest(model_dir, TAGS_FILE, "tag_head")


def export_head(run_dir: str | Path, model_dir: str | Path) -> int:
    """Write the tag head of a ``--tags`` run's best epoch beside its export; 0 if none."""
    run_dir = Path(run_dir)
    run_file = run_dir / "run.json" if run_dir.is_dir() else run_dir.parent / "run.json"
    run = json.loads(run_file.read_text(encoding="utf-8"))
    labels = run.get("tag_labels")
    if not labels:
        return 0
    checkpoint = run_dir / "best.pt" if run_dir.is_dir() else run_dir
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    dim = state["extras"]["tags"]["linear.weight"].shape[1]
    head = TagHead(dim, labels)
    head.load_state_dict(state["extras"]["tags"])
    save_head(head, model_dir)
    return len(labels)
