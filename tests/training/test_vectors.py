"""Word-vector readers and the vocabulary built from them."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from qres.encoders.vocab import PAD, UNK
from qres.training.vectors import (
    VectorsError,
    WordVectors,
    build_vocab,
    load_glove50,
    read_text_vectors,
    train_word2vec,
)


def write(path, text, zipped=False):
    if zipped:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("zipped", [False, True])
def test_reads_word2vec_text_with_and_without_header(tmp_path, zipped):
    suffix = ".txt.gz" if zipped else ".txt"
    body = "ubuntu 0.5 1.0 -1.5\nwifi 1 2 3\n"
    for name, text in (("plain", body), ("header", "2 3\n" + body)):
        vectors = read_text_vectors(write(tmp_path / (name + suffix), text, zipped))
        assert vectors.dim == 3
        assert set(vectors.vectors) == {"ubuntu", "wifi"}
        np.testing.assert_allclose(vectors.vectors["ubuntu"], [0.5, 1.0, -1.5])


def test_reads_only_the_wanted_words(tmp_path):
    path = write(tmp_path / "v.txt", "a 1 2\nb 3 4\nc 5 6\n")
    assert set(read_text_vectors(path, wanted={"b", "zzz"}).vectors) == {"b"}


def test_bad_vector_files_name_the_line(tmp_path):
    with pytest.raises(VectorsError, match=r"v.txt:2: 1 numbers, expected 2"):
        read_text_vectors(write(tmp_path / "v.txt", "a 1 2\nb 3\n"))
    with pytest.raises(VectorsError, match=r"w.txt:1: vector values must be numbers"):
        read_text_vectors(write(tmp_path / "w.txt", "a 1 x\n"))
    with pytest.raises(VectorsError, match="not found"):
        read_text_vectors(tmp_path / "missing.txt")


def test_glove50_from_the_package():
    vectors = load_glove50({"ubuntu", "wifi", "notawordatall123"})
    assert vectors.dim == 50
    assert set(vectors.vectors) == {"ubuntu", "wifi"}
    assert vectors.vectors["wifi"].dtype == np.float32
    assert np.linalg.norm(vectors.vectors["wifi"]) > 0


def test_word2vec_trains_on_sentences_reproducibly():
    sentences = [["install", "the", "driver"], ["install", "the", "package"]] * 20
    first = train_word2vec(sentences, dim=8, seed=3, epochs=2, min_count=1)
    second = train_word2vec(sentences, dim=8, seed=3, epochs=2, min_count=1)
    assert first.dim == 8 and {"install", "driver"} <= set(first.vectors)
    np.testing.assert_array_equal(first.vectors["driver"], second.vectors["driver"])


SENTENCES = [["wifi", "driver", "wifi", "zzqx"], ["driver", "wifi", "rare"]]
PRETRAINED = WordVectors(
    {"wifi": np.ones(4, np.float32), "driver": np.full(4, 2.0, np.float32)}, 4, "test"
)


def test_a_frozen_vocab_keeps_only_words_with_vectors_most_frequent_first():
    vocab, table = build_vocab(SENTENCES, PRETRAINED)
    assert vocab.tokens == [PAD, UNK, "wifi", "driver"]
    assert table.shape == (4, 4)
    assert np.all(table[0] == 0) and np.all(table[1] == 0)  # <unk> is learned separately
    np.testing.assert_array_equal(table[3], PRETRAINED.vectors["driver"])
    assert vocab.ids(["zzqx", "wifi"]) == [1, 2]


def test_a_finetuned_vocab_also_gives_rows_to_words_without_vectors():
    vocab, table = build_vocab(SENTENCES, PRETRAINED, finetune=True, seed=1)
    assert vocab.tokens[2:4] == ["wifi", "driver"]
    assert set(vocab.tokens[4:]) == {"rare", "zzqx"}
    assert np.any(table[vocab.index["rare"]] != 0)
    vocab2, _ = build_vocab(SENTENCES, PRETRAINED, finetune=True, min_count=2)
    assert vocab2.tokens == [PAD, UNK, "wifi", "driver"]


def test_random_vectors_when_there_are_no_pretrained_ones():
    vocab, table = build_vocab(SENTENCES, None, random_dim=6)
    assert table.shape == (len(vocab), 6) and len(vocab) == 6


def test_the_first_words_of_a_vectors_file_are_kept_as_frequent_words(tmp_path):
    path = write(tmp_path / "v.txt", "the 1 1\nof 2 2\nrare 3 3\nwifi 4 4\n")
    vectors = read_text_vectors(path, wanted={"wifi"}, first=2)
    assert vectors.frequent == ["the", "of"]
    assert set(vectors.vectors) == {"the", "of", "wifi"}
    vocab, table = build_vocab([["wifi", "zzz"]], vectors)
    assert vocab.tokens == [PAD, UNK, "wifi", "the", "of"]  # training words first
    np.testing.assert_array_equal(table[3], [1, 1])


def test_glove50_frequent_words_come_in_glove_order():
    vectors = load_glove50({"wifi"}, first=3)
    assert vectors.frequent == ["the", ",", "."]
    assert set(vectors.vectors) == {"wifi", "the", ",", "."}
