import numpy as np

from qres.corpus.readers import Question
from qres.encoders.runtime import Encoder
from qres.training.prune_vocab import corpus_words, prune_vocab

from ..test_serving_model import MODEL


def test_pruned_model_encodes_kept_words_identically_and_is_smaller(tmp_path):
    corpus = tmp_path / "c.tsv"
    corpus.write_text("id\ttitle\tbody\nq1\thow do i boot from usb\tthe laptop ignores it\n")
    keep = corpus_words([corpus])
    size = prune_vocab(MODEL, tmp_path / "pruned", keep, "test")
    full, pruned = Encoder.load(MODEL), Encoder.load(tmp_path / "pruned")
    assert size == len(pruned.vocab) < len(full.vocab)
    assert pruned.fingerprint != full.fingerprint
    kept = [Question("a", "boot from usb", "the laptop ignores it")]
    np.testing.assert_allclose(
        pruned.encode_questions(kept), full.encode_questions(kept), atol=1e-6
    )
    dropped = [Question("b", "wifi printer", "")]
    assert not np.allclose(pruned.encode_questions(dropped), full.encode_questions(dropped))
