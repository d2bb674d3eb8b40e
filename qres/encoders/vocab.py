"""Token → id mapping of the neural encoders, shared by training and serving.

``vocab.txt`` holds one token a line; the line number (from 0) is the token's id. Id 0 is
``<pad>`` (masked out, never read) and id 1 is ``<unk>`` (every word not in the file).
A question is split into title and body with :func:`qres.text.tokenize`, each cut to its
maximum length, so training and the ONNX runtime see the same ids for the same text.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from qres.text import BODY_MAX_TOKENS, TITLE_MAX_TOKENS, tokenize

PAD, UNK = "<pad>", "<unk>"
PAD_ID, UNK_ID = 0, 1


class VocabError(ValueError):
    """A missing or malformed vocabulary file; the message says which and why."""


class Vocab:
    def __init__(self, tokens: Sequence[str]):
        tokens = list(tokens)
        if tokens[:2] != [PAD, UNK]:
            raise VocabError(f"a vocabulary must start with {PAD!r} and {UNK!r}")
        self.tokens = tokens
        self.index = {token: i for i, token in enumerate(tokens)}
        if len(self.index) != len(tokens):
            raise VocabError("a vocabulary must not list a token twice")

    @classmethod
    def from_words(cls, words: Iterable[str]) -> Vocab:
        """``<pad>``, ``<unk>``, then ``words`` in the order given (duplicates dropped)."""
        tokens = [PAD, UNK]
        seen = set(tokens)
        for word in words:
            if word not in seen:
                seen.add(word)
                tokens.append(word)
        return cls(tokens)

    @classmethod
    def load(cls, path: str | Path) -> Vocab:
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise VocabError(f"{path}: vocabulary file not found") from None
        except (OSError, UnicodeDecodeError) as err:
            raise VocabError(f"{path}: cannot read the vocabulary ({err})") from None
        tokens = text.split("\n")
        if tokens and tokens[-1] == "":
            tokens.pop()
        try:
            return cls(tokens)
        except VocabError as err:
            raise VocabError(f"{path}: {err}") from None

    def save(self, path: str | Path) -> None:
        Path(path).write_text("".join(token + "\n" for token in self.tokens), encoding="utf-8")

    def __len__(self) -> int:
        return len(self.tokens)

    def ids(self, tokens: Iterable[str]) -> list[int]:
        index = self.index
        return [index.get(token, UNK_ID) for token in tokens]

    def encode(self, text: str, max_tokens: int | None = None) -> list[int]:
        return self.ids(tokenize(text, max_tokens))

    def encode_question(
        self,
        title: str,
        body: str,
        title_max: int = TITLE_MAX_TOKENS,
        body_max: int = BODY_MAX_TOKENS,
    ) -> tuple[list[int], list[int]]:
        """Title ids and body ids, each cut to its maximum length."""
        return self.encode(title, title_max), self.encode(body, body_max)


def pad_batch(sequences: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded ``token_ids`` int64 [batch, length] and ``mask`` float32 [batch, length].

    The length is that of the longest sequence but at least 1, so an empty field becomes one
    masked ``<pad>`` (the encoders return a zero vector for it).
    """
    length = max([len(s) for s in sequences] + [1])
    ids = np.full((len(sequences), length), PAD_ID, dtype=np.int64)
    mask = np.zeros((len(sequences), length), dtype=np.float32)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = seq
        mask[row, : len(seq)] = 1.0
    return ids, mask
