"""Training on a forum's own duplicate links: the train split only, BM25 hard negatives,
the newest train queries as dev."""

from qres.training.data import load_dataset
from tests.test_forum_evaluation import LINKS, write_forum


def test_forum_training_data_uses_the_train_split_only(tmp_path):
    folder = write_forum(tmp_path / "forum", LINKS)
    data = load_dataset("stackexchange", folder)
    # all: 15, 11, 12, 13 | 14 (test); the newest train query (13) is dev
    assert [q.id for q in data.train] == ["15", "11", "12"]
    assert [q.id for q in data.dev] == ["13"]
    assert "14" not in {q.id for q in data.train} | {q.id for q in data.dev}
    by_id = {q.id: q for q in data.train}
    assert by_id["15"].positives == ["1", "5"]
    for q in data.train:
        assert q.negatives and not ({q.id, *q.positives} & set(q.negatives))
    dev = data.dev[0]
    assert dev.relevant == {"3"} and dev.candidates[0] == "3" and "13" not in dev.candidates
    assert data.hard_in_file and len(data.questions) == 10
