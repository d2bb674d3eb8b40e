"""``qres index``: filling an index from a corpus file (``qres info`` and ``qres compact``
look after it)."""

from __future__ import annotations

from pathlib import Path

import click

from qres.backends.base import index_models
from qres.cli.given_options import not_nan, refuse_conflicting
from qres.cli.group import Context, json_option, model_set_option
from qres.cli.output import (
    QuestionsDone,
    committed_line,
    counted_when_interrupted,
    progress_display,
    said_if_swapped,
    say_indexed,
    writing_first,
)
from qres.corpus import duplicate_links
from qres.corpus.contents import read_checked, saying_what_is_kept
from qres.corpus.readers import FORMATS, ReadStats
from qres.encoders.model_set import with_model_set


@click.command()
@json_option
@click.argument("corpus", type=click.Path(path_type=Path))  # a folder: the reader's error
@click.option("--format", "fmt", type=click.Choice(FORMATS), help="Input format [default: detect].")
@click.option(
    "--model",
    "models",
    type=click.Path(file_okay=False, path_type=Path),
    multiple=True,
    help="Model directory from `qres export-onnx`: store each question's dense vector. "
    "Repeatable: one vector per model; a model new to the index is first computed for "
    "the questions it holds (only that model's vectors) [default: the models the index holds, "
    "with --rebuild too].",
)
@click.option(
    "--rewrite",
    is_flag=True,
    help="Write every question again, even one stored exactly as read (by default those are "
    "skipped: re-indexing a file already indexed is a no-op).",
)
@model_set_option
@click.option("--skip-bad", is_flag=True, help="Skip and count malformed records.")
@click.option("--rebuild", is_flag=True, help="Build a fresh index and swap it in at the end.")
@click.option("--no-vectors", is_flag=True, help="With --rebuild: BM25 alone (drops the vectors).")
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=None,
    help="Questions per batch [default: 2048, 4096 when encoding on CUDA].",
)
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    default=None,
    help="Processes that analyse and tokenise text beside the encoder and the writer; 0: "
    "none, all in this one [default: cores - 2, at least 1 on two cores or more, at most 8].",
)
@click.option(
    "--analyzer",
    type=click.Choice(["english", "plain"]),
    default="english",
    show_default=True,
    help="BM25 text analysis of a new index: stemmed with stop words removed, or plain words.",
)
@click.option(
    "--title-boost",
    default=2.0,
    show_default=True,
    type=click.FloatRange(min=0, max=1000),
    callback=not_nan,
    help="BM25 weight of the title in a new index.",
)
@click.option(
    "--links",
    "links_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A StackExchange PostLinks.xml(.gz): a question it closes as a duplicate leads "
    "search to its original [default: the PostLinks.xml beside a Posts.xml CORPUS].",
)
@click.option("--no-links", is_flag=True, help="Read no duplicate links, not even beside CORPUS.")
@click.option(
    "--prune",
    is_flag=True,
    help="Once the whole file is read, delete the questions the index holds that it no longer "
    "does (a newer dump of the same forum): a forum's deletions without a --rebuild.",
)
@click.option(
    "--add-to-existing",
    "mix",
    is_flag=True,
    help="Add CORPUS to an index built from another corpus file (by default that is refused: "
    "a forum's index does not silently take in another forum).",
)
@click.pass_obj
def index(
    obj: Context,
    corpus,
    fmt,
    models,
    model_set,
    skip_bad,
    rebuild,
    no_vectors,
    batch_size,
    workers,
    analyzer,
    title_boost,
    rewrite,
    links_file,
    no_links,
    mix,
    prune,
):
    """Index the questions of CORPUS (re-running replaces questions by id).

    \b
    CORPUS is one of (plain or .gz; - reads standard input):
      askubuntu    id<TAB>title<TAB>body lines (text_tokenized.txt.gz)
      tsv, csv     a header naming id, title, body [, tags] (CSV quotes newlines)
      jsonl        {"id": ..., "title": ..., "body": ..., "tags": [...]}
      semeval-xml  SemEval Task 3 XML (its related questions)
      semeval-csv  SemEval-2016 subtask B train-part-1 CSV (by its header)
      stackexchange  a StackExchange dump's Posts.xml (questions; HTML to text)
    A question closed as a duplicate (the dump's PostLinks.xml beside Posts.xml,
    or --links FILE) is stored with its originals: search shows the original
    in its place. A malformed record stops the run with file:line and the
    problem (--skip-bad skips it). Progress is committed every 20,000 questions:
    after a crash or Ctrl-C the index holds what was committed and a re-run
    completes it.

    \b
    Examples:
      qres index qres/data/demo/questions.tsv --model-set minilm
      qres index Posts.xml --model-set minilm --index-dir ~/qres-travel
      # a second index of the demo, with the shipped GRU's vectors beside MiniLM's:
      qres index qres/data/demo/questions.tsv --model-set minilm \\
          --model qres/models/default --index-dir ~/qres-demo-gru
    """
    from qres.indexing import pruning
    from qres.indexing.compaction import compact_if_mostly_dead
    from qres.indexing.pipeline import (
        check_keeps_vectors,
        index_model_dirs,
        index_questions,
        search_encoder,
    )
    from qres.indexing.sources import (
        check_corpus,
        check_made_with,
        held_model_dirs,
        kept_model_dirs,
        record_corpus,
    )

    models = with_model_set(model_set, models)
    refuse_conflicting(links_file, no_links, prune, rebuild, mix, no_vectors, models)
    discarded = "the rebuild was discarded; the index is as it was before this run"
    obj.on_interrupt = discarded if rebuild else committed_line(0)
    committed, pruned_now = [0], []  # questions written (index_questions commits them); pruned
    if rebuild and not models and not no_vectors:  # encoding a forum again can take hours
        models = kept_model_dirs(obj.open)
    given = [search_encoder(m, obj.device) for m in models]  # a bad model creates nothing
    dropped = held_model_dirs(obj.open) if no_vectors else []
    source = click.get_current_context().get_parameter_source
    settings = {"analyzer": analyzer, "title_boost": title_boost}  # only a new index takes
    made_with = {n: v for n, v in settings.items() if source(n).name == "COMMANDLINE"}
    # The first question is read before the index is opened: a file without one creates nothing
    stats = ReadStats()
    questions, read_as = read_checked(corpus, fmt, skip_bad, stats)
    backend = obj.open(create=True, rebuild=rebuild, analyzer=analyzer, title_boost=title_boost)
    counted = counted_when_interrupted(obj, backend, committed, rebuild, pruned_now)
    with said_if_swapped(obj, backend), backend, counted, progress_display() as progress:
        if not rebuild:
            check_made_with(backend, made_with)
        check_corpus(backend, corpus, mix)
        if prune:
            pruning.check_prunable(backend, corpus)
        encoders = given
        if not models and not rebuild:  # the models the index was built with, as search does
            encoders = [search_encoder(m, obj.device) for m in index_model_dirs(backend)]
        encoder = encoders if len(encoders) > 1 else (encoders[0] if encoders else None)
        check_keeps_vectors(backend, encoder)
        held = {m["model_fingerprint"] for m in index_models(backend.metadata())}
        links_file = duplicate_links.chosen(corpus, read_as, False if no_links else links_file)
        closed = {}
        if links_file:  # read whole before the posts: a spinner while a big dump's are read
            reading = progress.add_task(f"reading {links_file.name}", total=None, rate="")
            closed = duplicate_links.read(links_file, hint="--no-links: without them")
            progress.remove_task(reading)  # read: the summary says what the links did
        closed_read = [0]
        questions = duplicate_links.attach(questions, closed)
        questions = duplicate_links.counting(questions, closed, closed_read)
        read_ids: set[str] = set()
        questions = pruning.noting_ids(questions, read_ids) if prune else questions
        advance = QuestionsDone(progress, corpus, read_as)

        def written(n: int) -> None:  # once questions go in
            record_corpus(backend, corpus)
            committed[0] += n

        with saying_what_is_kept(stats, obj.on_interrupt if rebuild else None):
            report = index_questions(
                backend,
                questions,
                encoder=encoder,
                batch_size=batch_size,
                on_batch=written,
                on_encoded=advance,
                workers=workers,
                skip_unchanged=not rewrite,
                on_stopping=writing_first,
            )
            record_corpus(backend, corpus)
            advance.finish()
        pruned = pruning.prune(backend, read_ids, corpus, stats.skipped, pruned_now) if prune else 0
        added = [m for m in index_models(backend.metadata()) if m["model_fingerprint"] not in held]
        compacted = compact_if_mostly_dead(backend)
        total = backend.count()
    obj.on_interrupt = committed_line(committed[0], total)  # a rebuild is in place from here on
    summary = {
        "corpus": str(corpus),
        "indexed": report.indexed,
        "duplicates_replaced": report.duplicates,
        "unchanged": report.unchanged,
        "skipped": stats.skipped,
        "truncated": stats.truncated,
        "undecodable": stats.undecodable,
        "first_undecodable": stats.first_undecodable,
        "seconds": round(report.seconds, 2),
        "docs_per_second": round(report.docs_per_second, 1),
        "index_size": total,
        "vectors": encoder is not None,
        "compacted_dead_vector_rows": compacted,
        "duplicate_links": str(links_file) if links_file else None,
        "closed_duplicates_known": len(closed),
        "closed_duplicates_read": closed_read[0],
        "skipped_examples": stats.problems,
        "vectors_dropped": [Path(d).name for d in dropped] if encoder is None else [],
        "models_added": [Path(m.get("model_dir") or "?").name for m in added],
        "questions_given_new_vectors": report.given_new_models,
        "pruned": pruned,
    }
    say_indexed(obj, summary, duplicate_links.closes_none(links_file, len(closed), closed_read[0]))
