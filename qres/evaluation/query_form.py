"""What an evaluation query searches with (``qres evaluate --query``).

A benchmark's query is a whole question, title and body, but a forum's ask-a-question widget
searches with what the user has typed so far: a title, often only its first words. So a
query can be searched as

* ``question`` — its title and body (the default, every figure before this option);
* ``title`` — its title alone;
* ``title-words:N`` — the first N words of its title (N ≥ 1), what the widget has while
  the title is being typed;
* ``title-chars:N`` — the first N characters of its title, its last word often cut short
  (what the widget sends when the user pauses mid-word; ``qres evaluate --typing`` searches
  it as the widget does, :mod:`qres.ranking.completion`).

Only the query's text changes: its id, relevant questions and extras (the date it was closed,
which replays a forum's duplicate links as they stood) stay, and the index is the same.
"""

from __future__ import annotations

from dataclasses import replace

from qres.corpus.readers import Question

FORMS = ("question", "title", "title-words:N", "title-chars:N")
DEFAULT = "question"


def check(form: str) -> str:
    """``form`` if it is one of :data:`FORMS`; else a one-line ValueError saying which are."""
    if form in ("question", "title"):
        return form
    name, _, count = form.partition(":")
    if name in ("title-words", "title-chars") and count.isdigit() and int(count) >= 1:
        return f"{name}:{int(count)}"
    raise ValueError(
        f"unknown query form {form!r}: question, title, title-words:N or title-chars:N (N a "
        "whole number of words or characters, 1 or more)"
    )


def apply(question: Question, form: str) -> Question:
    """``question`` as a query of ``form`` (a question without a title keeps its body's words,
    so that no query is left empty)."""
    form = check(form)
    if form == "question":
        return question
    title = question.title.strip() or question.body.strip()
    if form.startswith("title-words:"):
        title = " ".join(title.split()[: int(form.partition(":")[2])])
    elif form.startswith("title-chars:"):
        title = title_chars(title, int(form.partition(":")[2]))
    return replace(question, title=title, body="")


def title_chars(title: str, n: int) -> str:
    """The first ``n`` characters of ``title``, its spaces as one; a space after the last
    word is kept: it says the word is finished."""
    return " ".join(title.split())[:n]
