"""`qres adapt` with the forum's own titles asking for their bodies in the title epoch.

    python benchmarks/adapt_forum_titles.py --forum DIR --out FILE [--baseline]

Runs every step of ``qres adapt`` (``adapt_recipes.run_recipe``, 128 tokens, 2 epochs) with
its title epoch also asking with the titles of as many of the forum's questions as there are
training links (seeded) for their own bodies, each with one of BM25's top 10 for the title as
its hard negative (the question and the questions its train links join left out). Questions
that are test-split or held-out duplicates are never drawn: only text the forum held before
those links. ``--baseline`` runs the command as it is. Each run goes in a fresh
``$QRES_HOME``: both write the set ``r128e2``. The held-out tenth's dense scores (per query)
are what the variant is chosen by; `benchmarks/adapt_forum_titles.json` holds both runs.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import adapt_recipes  # noqa: E402

from qres.training import finetune_transformer  # noqa: E402

NEGATIVE_POOL = 10


class WithForumTitles(finetune_transformer.ForumTriples):
    def __init__(self, data_dir, hold_out=False):
        super().__init__(data_dir, hold_out)
        from qres.backends.embedded import EmbeddedBackend
        from qres.datasets.forum_duplicates import load_forum_duplicates
        from qres.training.data import load_stackexchange

        test = {q.id for q in load_forum_duplicates(data_dir, "test").queries}
        data = load_stackexchange(data_dir)
        held = {q.id for q in data.dev}
        family: dict[str, set[str]] = {}
        for q in data.train:
            for member in (group := {q.id, *q.positives}):
                family.setdefault(member, set()).update(group)
        eligible = sorted(
            (
                qid
                for qid, q in self.questions.items()
                if qid not in test | held and q.title and q.body.strip()
            ),
            key=lambda s: (len(s), s),
        )
        chosen = random.Random(0).sample(eligible, min(len(eligible), len(self.pairs)))
        self.title_pairs = []
        with tempfile.TemporaryDirectory() as tmp:
            index = EmbeddedBackend(Path(tmp) / "index", create=True)
            index.upsert(list(self.questions.values()))
            index.commit()
            for qid in chosen:
                excluded = family.get(qid, set()) | {qid}
                hits = index.search(self.questions[qid].title, NEGATIVE_POOL + len(excluded))
                negatives = [h.id for h in hits if h.id not in excluded][:NEGATIVE_POOL]
                if negatives:
                    self.title_pairs.append((qid, negatives))
            index.close()
        print(f"title pairs: {len(self.title_pairs)} of {len(eligible)} eligible", flush=True)

    def draw(self, rng, titles=False):
        triples = super().draw(rng, titles)
        if titles:
            text = self.questions
            triples += [
                (text[q].title, text[q].body, text[rng.choice(n)].text) for q, n in self.title_pairs
            ]
        return triples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--forum", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--baseline", action="store_true", help="the command as it is")
    args = parser.parse_args()
    adapt_recipes._finetune = finetune_transformer.finetune
    if not args.baseline:
        finetune_transformer.ForumTriples = WithForumTitles
    from qres.training.default_set import build

    build(set_name="minilm")
    result = adapt_recipes.run_recipe(args.forum, 128, 2, "cpu", 0)
    result["variant"] = "the command" if args.baseline else "forum titles -> their bodies"
    result["peak_rss_gb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)
    args.out.write_text(json.dumps(result, indent=1))
    print({f: result["held_out"][f]["nDCG@10"] for f in result["held_out"]}, flush=True)


if __name__ == "__main__":
    main()
