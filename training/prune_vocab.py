"""Cut an exported model's vocabulary down to the words some corpora use.

With frozen pre-trained word vectors (the default), the rows of the embedding table for
words a deployment never sees carry nothing the model learned; dropping them shrinks the
ONNX file (the 50,000 extra GloVe words are 10 MB of the 11 MB) without changing a single
vector for text made of the kept words. Words dropped become ``<unk>``.

    python -m qres.training.prune_vocab MODEL_DIR OUT_DIR CORPUS [CORPUS ...]

CORPUS: any file ``qres index`` reads. The card records what was kept and from where.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from qres.corpus.readers import read_corpus
from qres.encoders.manifest import FUSION_FILE, core_roles, manifest, write_card
from qres.encoders.runtime import CARD_FILE, VOCAB_FILE, fingerprint, graph_files
from qres.encoders.vocab import Vocab
from qres.text import tokenize

EMBEDDING = "encoder.embedding.table.weight"


def corpus_words(paths: list[Path]) -> set[str]:
    return {t for path in paths for q in read_corpus(path) for t in tokenize(q.text)}


def prune_vocab(model_dir: Path, out_dir: Path, keep: set[str], note: str) -> int:
    """Write ``out_dir``: the model of ``model_dir`` knowing only ``keep``; returns its size."""
    card = json.loads((model_dir / CARD_FILE).read_text())
    if card["encoder"].get("finetune_embeddings"):
        raise ValueError("fine-tuned embeddings: pruning would drop learned rows; refusing")
    words = Vocab.load(model_dir / VOCAB_FILE).tokens
    rows = [0, 1] + [i for i, w in enumerate(words) if i > 1 and w in keep]
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in graph_files(card):
        graph = onnx.load(model_dir / name)
        for init in graph.graph.initializer:
            if init.name == EMBEDDING:
                table = numpy_helper.to_array(init)[np.array(rows)]
                init.CopyFrom(numpy_helper.from_array(table, EMBEDDING))
        onnx.save(graph, out_dir / name)
    Vocab([words[i] for i in rows]).save(out_dir / VOCAB_FILE)
    card["vocab_size"] = card["encoder"]["vocab_size"] = len(rows)
    card["vocab_pruned"] = {"from": len(words), "to": len(rows), "kept": note}
    card["fingerprint"] = fingerprint(out_dir, graph_files(card))
    kept = {FUSION_FILE: "fusion"} if (model_dir / FUSION_FILE).exists() else {}
    for name in kept:
        shutil.copy(model_dir / name, out_dir / name)
    card["files"] = manifest(out_dir, {**core_roles(card), **kept})
    write_card(out_dir, card)
    return len(rows)


def main(argv: list[str]) -> None:
    if len(argv) < 3:
        sys.exit(__doc__)
    model_dir, out_dir, *corpora = (Path(a) for a in argv)
    keep = corpus_words(corpora)
    size = prune_vocab(model_dir, out_dir, keep, "words of " + ", ".join(c.name for c in corpora))
    print(f"wrote {out_dir}: vocabulary {size} words")


if __name__ == "__main__":
    main(sys.argv[1:])
