"""``qres.Index``: an index opened from Python to add questions to, as ``qres index`` does: a
corpus file of another forum than the index holds is refused unless ``add_to_existing``, and
``skip_bad`` skips malformed records, and ``prune`` deletes the questions a newer dump of the
forum no longer holds.

with Index.open("travel-index", model_set="minilm") as index:
    index.add("dump/Posts.xml")  # a StackExchange dump: its PostLinks.xml is read too
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Literal

from qres.backends.base import Backend
from qres.corpus import duplicate_links
from qres.corpus.contents import read_checked, saying_what_is_kept
from qres.corpus.readers import Question, ReadStats
from qres.indexing import pruning
from qres.indexing.pipeline import (
    IndexReport,
    check_keeps_vectors,
    index_model_dirs,
    index_questions,
    search_encoder,
)
from qres.indexing.sources import check_corpus, kept_model_dirs, record_corpus


class Index:
    """An index opened for adding questions, with the encoders that give their vectors."""

    def __init__(self, backend: Backend, encoder=None):
        check_keeps_vectors(backend, encoder)
        self.backend, self.encoder = backend, encoder

    @classmethod
    def open(
        cls,
        index_dir: str | Path | None = None,
        model: str | Path | None = None,
        *,
        model_set: str | None = None,
        backend: str | None = None,
        no_vectors: bool = False,
        **settings,
    ) -> Index:
        """The index at ``index_dir`` (default ``$QRES_HOME/index``), created if missing
        (``settings``: analyzer, title_boost, ... as for :func:`qres.backends.open_backend`).
        The vectors stored are those of ``model_set`` (a set's name, as ``--model-set``)
        and ``model`` (a model directory); with neither, those of the models the index
        holds, as ``qres index`` does, a rebuild (``rebuild=True``) included unless
        ``no_vectors``."""
        from qres import paths
        from qres.backends import open_backend
        from qres.encoders import model_set as sets

        models = [*(sets.model_dirs(model_set) if model_set else []), *([model] if model else [])]
        if no_vectors and (models or not settings.get("rebuild")):
            raise ValueError("no_vectors goes with rebuild=True, without model or model_set")
        where = index_dir or paths.default_index_dir()
        if settings.get("rebuild") and not models and not no_vectors:
            models = list(kept_model_dirs(lambda: open_backend(backend, where)))
        encoders = [search_encoder(m) for m in models]  # a bad model creates nothing
        store = open_backend(backend, where, create=True, **settings)
        try:
            if not models:
                encoders = [search_encoder(m) for m in index_model_dirs(store)]
            return cls(store, encoders[0] if len(encoders) == 1 else encoders or None)
        except BaseException:
            store.close()
            raise

    def add(
        self,
        questions: Iterable[Question] | str | Path,
        batch_size: int | None = None,
        on_batch: Callable[[int], None] | None = None,
        links: str | Path | Literal[False] | None = None,
        *,
        add_to_existing: bool = False,
        skip_bad: bool = False,
        prune: bool = False,
    ) -> IndexReport:
        """Add or replace ``questions`` (or those of a corpus file) by id; committed. A
        question closed as a duplicate is stored with its originals (search shows the
        original in its place) as ``links``, a ``PostLinks.xml``, says: by default a
        StackExchange dump's own, beside its ``Posts.xml``; False: none.

        A corpus file is read as ``qres index`` reads it: one other than those the index was
        built from is refused (:class:`BackendError`, before anything is written) unless
        ``add_to_existing``, and is recorded once its questions are written; a malformed
        record stops the reading (:class:`CorpusError`, saying how many questions read
        before it are in the index) unless ``skip_bad`` skips and counts it. With ``prune``
        (a file only, not in a rebuild), the questions held that the file, read whole, no
        longer holds are deleted (:mod:`qres.indexing.pruning`; ``report.pruned``)."""
        if links is True:
            raise ValueError("links: a PostLinks.xml file, False (none) or None (a dump's own)")
        if prune and (not isinstance(questions, str | Path) or add_to_existing):
            raise ValueError("prune: a corpus file's questions alone, without add_to_existing")
        if prune and self.backend.rebuilding:
            raise ValueError("prune: a rebuild holds the file's questions alone already")
        if isinstance(questions, str | Path):
            return self._add_file(
                Path(questions), batch_size, on_batch, links, add_to_existing, skip_bad, prune
            )
        if links:
            questions = duplicate_links.attach(questions, duplicate_links.read(Path(links)))
        return index_questions(self.backend, questions, self.encoder, batch_size, on_batch=on_batch)

    def _add_file(self, corpus: Path, batch_size, on_batch, links, mix, skip_bad, prune):
        ways = "give it its own Index, or mix them with add_to_existing=True"
        check_corpus(self.backend, corpus, mix, ways)
        if prune:
            pruning.check_prunable(self.backend, corpus)
        stats = ReadStats()
        questions, fmt = read_checked(corpus, None, skip_bad, stats)
        links = duplicate_links.chosen(corpus, fmt, links)
        if links:
            closed = duplicate_links.read(links, hint="links=False: without them")
            questions = duplicate_links.attach(questions, closed)
        read_ids: set[str] = set()
        questions = pruning.noting_ids(questions, read_ids) if prune else questions

        def written(n: int) -> None:
            record_corpus(self.backend, corpus)  # once questions are in, as qres index does
            if on_batch:
                on_batch(n)

        dropped = "nothing is kept if this error ends the rebuild's with block"
        with saying_what_is_kept(stats, dropped if self.backend.rebuilding else None):
            report = index_questions(
                self.backend, questions, self.encoder, batch_size, on_batch=written
            )
        record_corpus(self.backend, corpus)
        report.skipped, report.problems = stats.skipped, stats.problems
        report.undecodable = stats.undecodable
        if prune:
            report.pruned = pruning.prune(self.backend, read_ids, corpus, stats.skipped)
        return report

    def count(self) -> int:
        return self.backend.count()

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc) -> None:
        self.backend.__exit__(*exc)  # a rebuild (rebuild=True) is finished, or dropped on error
