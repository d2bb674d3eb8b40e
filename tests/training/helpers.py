"""Helpers of the encoder-training tests: tiny models and the AskUbuntu-format fixture."""

from __future__ import annotations

from pathlib import Path

import torch

from qres.encoders.vocab import pad_batch
from qres.training.encoders import EncoderConfig, QuestionEncoder
from tests.askubuntu_fixture import FIXTURE

__all__ = ["FIXTURE"]
SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def tiny_config(**overrides):
    """A TrainConfig small enough for a test: 16-d random vectors, 12-d encoder."""
    from qres.training.config import TrainConfig

    values = dict(
        dataset="askubuntu",
        data_dir=str(FIXTURE),
        encoder="gru",
        hidden=12,
        vectors="random",
        random_dim=16,
        finetune_embeddings=True,
        epochs=2,
        batch_size=8,
        negatives=8,
        dropout=0.0,
    )
    values.update(overrides)
    return TrainConfig(**values)


def tiny_model(kind: str, pooling: str | None = None, **extra) -> QuestionEncoder:
    torch.manual_seed(0)
    config = EncoderConfig(
        kind, vocab_size=40, embedding_dim=8, hidden=6, pooling=pooling, dropout=0.0, **extra
    )
    model = QuestionEncoder(config).eval()
    with torch.no_grad():  # non-zero biases so that padding would show if it leaked in
        for name, p in model.named_parameters():
            if "bias" in name or name.endswith("unk"):
                p.uniform_(-0.5, 0.5)
    return model


def tensors(sequences, extra_padding: int = 0):
    ids, mask = pad_batch(sequences)
    ids, mask = torch.from_numpy(ids), torch.from_numpy(mask)
    if extra_padding:
        ids = torch.nn.functional.pad(ids, (0, extra_padding), value=0)
        mask = torch.nn.functional.pad(mask, (0, extra_padding))
    return ids, mask


TOPICS = ["wifi", "sound", "grub", "nvidia", "apt", "ssh", "disk", "python"]


def fixture_topic(qid: str) -> str:
    """The topic of an AskUbuntu-fixture question: ids come in runs of ten per topic."""
    return TOPICS[(int(qid) - 100) // 70]


def write_semeval_fixture(folder: Path) -> Path:
    """A SemEval-2016-layout dataset built from the fixture questions, the topic as
    RELQ_CATEGORY: train part 2 and dev XML (an original question, 3 or 2 related
    questions of its topic marked Relevant, the rest Irrelevant) and a train-part-1 CSV."""
    import csv
    import xml.etree.ElementTree as ET

    from qres.corpus.readers import read_corpus

    questions = list(read_corpus(FIXTURE / "text_tokenized.txt", "askubuntu"))
    by_topic: dict[str, list] = {}
    for q in questions:
        by_topic.setdefault(fixture_topic(q.id), []).append(q)

    def thread_file(path: Path, originals: list[int], n_relevant: int, tag: str) -> None:
        root = ET.Element("xml")
        for t, topic in enumerate(TOPICS):
            for n in originals:
                org = by_topic[topic][n]
                same = [q for q in by_topic[topic] if q.id != org.id][n : n + n_relevant]
                other = [
                    by_topic[TOPICS[(t + 1 + k % 7) % 8]][(n + k // 7) % 10]
                    for k in range(10 - n_relevant)
                ]
                for rank, rel in enumerate(same + other):
                    elem = ET.SubElement(root, "OrgQuestion", ORGQ_ID=f"{tag}{org.id}")
                    ET.SubElement(elem, "OrgQSubject").text = org.title
                    ET.SubElement(elem, "OrgQBody").text = org.body
                    thread = ET.SubElement(elem, "Thread")
                    label = "Relevant" if rel in same else "Irrelevant"
                    relq = ET.SubElement(
                        thread,
                        "RelQuestion",
                        RELQ_ID=f"{tag}{org.id}_R{rel.id}",
                        RELQ_RANKING_ORDER=str(rank + 1),
                        RELQ_RELEVANCE2ORGQ=label,
                        RELQ_CATEGORY=fixture_topic(rel.id),
                    )
                    ET.SubElement(relq, "RelQSubject").text = rel.title
                    ET.SubElement(relq, "RelQBody").text = rel.body
        ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)

    folder.mkdir(parents=True, exist_ok=True)
    thread_file(folder / "SemEval2016-Task3-CQA-QL-train-part2.xml", [0, 1, 2], 3, "T")
    thread_file(folder / "SemEval2016-Task3-CQA-QL-dev.xml", [5], 2, "D")
    with open(folder / "train-part1-subtaskB.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["question1_id", "question2_id", "question1", "question2", "relevance"])
        for topic in TOPICS:
            a, b, c = by_topic[topic][7], by_topic[topic][8], by_topic[TOPICS[0]][9]
            writer.writerow([f"C{a.id}", f"C{a.id}_{b.id}", a.title, b.title, 1])
            writer.writerow([f"C{a.id}", f"C{a.id}_{c.id}", a.title, c.title, 0])
    return folder
