"""Fusing the BM25 and cosine scores of a query's candidates into one score.

fused = w_bm25 · bm25 / max_bm25(query) + w_cosine · cosine + bias

BM25 is divided by the query's top BM25 score so its scale no longer depends on query
length; the cosine is in [-1, 1] already. The weights are learned by
:func:`qres.evaluation.fusion_fit.tune_fusion` (the mix that maximises MAP on labelled
candidate lists, e.g. SemEval train) and saved as ``fusion.json`` in the model directory,
listed in its manifest (:mod:`qres.encoders.manifest`); without that file :data:`DEFAULT` is used.

``qres tune-fusion --cv K`` instead compares the fusions of :mod:`qres.evaluation.fusion_fit`
(weighted
sum, reciprocal-rank fusion, pairwise learning to rank) by K-fold cross-validated MAP and
keeps the best: ``method`` and ``params`` say which and with what parameters, ``cv`` holds
each fold's parameters and queries, so ``qres evaluate`` scores each query it was tuned on
with the fusion of the folds that did not see it (:meth:`Fusion.for_query`).

An index of several models (``qres index --model A --model B``) is searched with a fusion of
BM25 and every model's cosine: ``models`` lists the models' fingerprints in the order of
their cosines, and ``params`` holds the method's parameters over [bm25/top, cosine_1, ...].
Such a fusion is a file of its own (``qres tune-fusion --cv K --model A --model B --out
FILE``), given to search with ``--fusion FILE``; without one, BM25 and the cosines are
summed with equal weights (:meth:`Fusion.equal`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

METHODS = ("weighted-sum", "rrf", "pairwise-linear")
RRF_K = 60.0


@dataclass(frozen=True)
class Fusion:
    bm25: float
    cosine: float
    bias: float = 0.0
    source: str = "default"
    tuned_on: str | None = None  # "dataset/split" whose labels chose the weights
    method: str = "weighted-sum"  # or another method of qres.evaluation.fusion_fit
    params: list[float] | None = None  # that method's parameters, when not bm25/cosine
    cv: dict | None = None  # folds, fold_of (query → fold), per_fold params, CV metrics
    models: list[str] | None = None  # fingerprints of the fused cosines (None: one model's)

    def score(self, bm25: np.ndarray, cosine: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
        """The fused scores of a query's candidates: ``cosine`` is one array, or one per
        model of :attr:`models`, in that order."""
        cosines = list(cosine) if isinstance(cosine, list | tuple) else [cosine]
        if self.method == "weighted-sum" and self.params is None:
            if len(cosines) != 1:
                raise ValueError(f"this fusion has one cosine, not {len(cosines)}")
            return self.bm25 * normalize_bm25(bm25) + self.cosine * cosines[0] + self.bias
        return score(self.method, self.params, signals(bm25, cosines)) + self.bias

    def cosine_of(self, cosines: Sequence[np.ndarray]) -> np.ndarray:
        """One cosine from several models' (what dense mode ranks by and a result shows):
        weighed as this fusion weighs them, where it is a weighted sum that gives them any
        weight (a member it gives none has no say), else their mean."""
        weights = self.params[1:] if self.method == "weighted-sum" and self.params else []
        if len(weights) != len(cosines) or min(weights) < 0 or len(set(weights)) == 1:
            return np.mean(cosines, axis=0)
        total = sum(weights)
        return sum(w / total * c for w, c in zip(weights, cosines, strict=True) if w)

    @classmethod
    def equal(cls, models: Sequence[str]) -> Fusion:
        """Half the weight on BM25, the other half shared by the models' cosines."""
        share = 0.5 / len(models)
        return cls(
            bm25=0.5,
            cosine=0.5,
            source=f"default: equal weights for bm25 and {len(models)} models",
            params=[0.5, *([share] * len(models))],
            models=list(models),
        )

    @classmethod
    def read(cls, path: str | Path) -> Fusion:
        """A fusion saved as a file of its own (``--fusion FILE``); one-line errors."""
        try:
            values = json.loads(Path(path).read_text())
            fusion = cls(**values)
        except FileNotFoundError:
            raise ValueError(f"{path}: no such fusion file") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, TypeError) as err:
            raise ValueError(f"{path}: not a qres fusion file ({err})") from None
        if fusion.models is not None and not (
            isinstance(fusion.models, list) and all(isinstance(m, str) for m in fusion.models)
        ):
            raise ValueError(f"{path}: 'models' must be a list of model fingerprints")
        return fusion

    def for_query(self, query_id: str) -> Fusion:
        """The fusion fitted without ``query_id`` when it was one of the cross-validated
        queries (its honest, out-of-fold score), else this one."""
        fold = (self.cv or {}).get("fold_of", {}).get(query_id)
        if fold is None:
            return self
        params = self.cv["per_fold"][fold]
        if self.method == "weighted-sum" and self.params is None:
            return replace(self, bm25=params[0], cosine=params[1], cv=None)
        return replace(self, params=params, cv=None)

    def save_file(self, path: str | Path) -> Path:
        """Write this fusion as a file of its own (what ``--fusion FILE`` reads). A model
        directory's own ``fusion.json`` is written as :meth:`save` writes it, listed in the
        manifest (else the model no longer loads); refused if the fusion is another model's."""
        from qres.encoders.card import CARD_FILE, read_card
        from qres.encoders.manifest import FUSION_FILE

        path = Path(path)
        model_dir = path.parent
        if path.name != FUSION_FILE or not (model_dir / CARD_FILE).is_file():
            path.write_text(json.dumps(asdict(self), indent=2))
            return path
        fitted = self.models or (self.cv or {}).get("fingerprints")
        if fitted and fitted != [read_card(model_dir / CARD_FILE).get("fingerprint")]:
            which = "another model" if len(fitted) == 1 else f"{len(fitted)} models together"
            raise ValueError(
                f"{path}: the fusion model {model_dir} searches with, but this one was fitted "
                f"for {which}; write it to a file of its own"
            )
        return self.save(model_dir)

    def save(self, model_dir: str | Path) -> Path:
        """Write ``fusion.json`` into a model directory and list it in the manifest."""
        from qres.encoders.manifest import FUSION_FILE, add_to_manifest

        path = Path(model_dir) / FUSION_FILE
        path.write_text(json.dumps(asdict(self), indent=2))
        add_to_manifest(model_dir, FUSION_FILE, "fusion")
        return path

    @classmethod
    def load(cls, model_dir: str | Path) -> Fusion:
        """The fusion of a model directory (verified with the rest of it)."""
        from qres.encoders.manifest import open_model

        return cls.for_model(open_model(model_dir))

    @classmethod
    def for_model(cls, model) -> Fusion:
        """The fusion of an opened :class:`qres.encoders.manifest.Model`: its own
        ``fusion.json``; else, for a model set's member, the fusion shipped for that set
        (:func:`shipped_fusion_for`); else :data:`DEFAULT`."""
        path = model.component("fusion")
        if path is not None:
            return cls(**json.loads(path.read_text()))
        return shipped_fusion_for([model.card["fingerprint"]]) or DEFAULT


# Equal say for the two signals, until `qres tune-fusion` has measured better.
DEFAULT = Fusion(bm25=0.5, cosine=0.5, source="default")


def normalize_bm25(scores: np.ndarray) -> np.ndarray:
    top = float(np.max(scores)) if len(scores) else 0.0
    return scores / top if top > 0 else np.zeros_like(scores)


def signals(bm25: np.ndarray, cosines: Sequence[np.ndarray]) -> np.ndarray:
    """[n, 1 + M]: BM25 divided by the query's top BM25, then each model's cosine."""
    return np.stack([normalize_bm25(bm25), *cosines], axis=1).astype(np.float64)


def _inverse_ranks(x: np.ndarray) -> np.ndarray:
    """1 / (RRF_K + rank) of each candidate under each signal (rank 1 = highest; equal
    values share the best of their ranks, so a candidate's rank never depends on the order
    the candidates came in: two indexes of the same questions, laid out apart, or two
    backends, rank alike)."""
    descending = np.sort(-x, axis=0)
    ranks = np.column_stack(
        [np.searchsorted(descending[:, j], -x[:, j], side="left") for j in range(x.shape[1])]
    )
    return 1.0 / (RRF_K + ranks.reshape(x.shape) + 1)


def ltr_features(x: np.ndarray) -> np.ndarray:
    return np.hstack([x, RRF_K * _inverse_ranks(x)])


def score(method: str, params: list[float] | None, x: np.ndarray) -> np.ndarray:
    if method == "weighted-sum":
        return x @ np.asarray(params)
    if method == "rrf":
        return _inverse_ranks(x).sum(axis=1)
    if method == "pairwise-linear":
        return ltr_features(x) @ np.asarray(params)
    raise ValueError(f"unknown fusion method {method!r} (one of {', '.join(METHODS)})")


def default_set_fusion() -> Fusion:
    """The fusion shipped for the default model set (:mod:`qres.encoders.model_set`)."""
    from qres.encoders.model_set import FUSION_FILE

    return Fusion.read(FUSION_FILE)


def shipped_fusion_for(fingerprints) -> Fusion | None:
    """The fusion shipped for a model set (:mod:`qres.encoders.model_set`) that fuses exactly
    the models ``fingerprints``, else None. A member a former qres made otherwise
    (:data:`~qres.encoders.model_set.SUPERSEDED`) keeps the fusion its index was searched
    with, so an index built with it ranks as it did until it is rebuilt."""
    from qres.encoders.model_set import SUPERSEDED, fusion_file, names

    current = [SUPERSEDED.get(fp, fp) for fp in fingerprints]
    for name in names():
        path = fusion_file(name)
        if path.is_file():
            shipped = Fusion.read(path)
            if sorted(shipped.models or []) == sorted(current):
                named = dict(zip(current, fingerprints, strict=True))  # as the index names them
                return replace(shipped, models=[named[fp] for fp in shipped.models])
    return None
