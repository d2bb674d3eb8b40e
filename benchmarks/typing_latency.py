"""What completing a title's last word as it is typed costs a search, as JSON.

    python benchmarks/typing_latency.py --index-dir DIR [--chars 20] [--queries 300]

Times, in turn on the same queries, the search a widget's request runs (``SearchPipeline
.search``, k = 10, the index's default mode, results with their text as served) with the
text as typed and with ``typing=True`` (its last word completed from the titles of its best
BM25 matches, :mod:`qres.ranking.completion`), and the completion alone. The queries are the
forum's titles (``--forum``, a dump's Posts.xml; default the travel forum) cut to their first
``--chars`` characters, the last word often cut short. ``DIR`` is an index of that forum,
e.g. one ``qres evaluate --dataset stackexchange --model-set minilm`` keeps under
``$QRES_HOME/eval``, or ``qres index Posts.xml --model-set minilm --index-dir DIR``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from itertools import islice
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_latency import machine, summary, timed_in_turn  # noqa: E402

from qres.corpus.readers import read_corpus  # noqa: E402
from qres.datasets.benchmarks import default_data_dir  # noqa: E402
from qres.evaluation.query_form import title_chars  # noqa: E402
from qres.ranking.search import SearchPipeline  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index-dir", type=Path, required=True)
    parser.add_argument("--forum", type=Path, default=None, help="Posts.xml [default: travel]")
    parser.add_argument("--chars", type=int, default=20)
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args()
    posts = args.forum or default_data_dir() / "stackexchange-travel" / "Posts.xml"
    titles = (" ".join(q.title.split()) for q in read_corpus(posts))
    cut = (title_chars(t, args.chars) for t in titles if len(t) > args.chars)
    queries = list(islice(cut, args.queries))
    with SearchPipeline.open(args.index_dir) as pipeline:
        engines = {
            "as_typed": lambda text: pipeline.search(text, 10),
            "typing": lambda text: pipeline.search(text, 10, typing=True),
            "completion_alone": pipeline.complete_typed,
        }
        times = timed_in_turn(engines, queries)
        completed = sum(pipeline.complete_typed(q) != q for q in queries)
        mode = pipeline.mode
    latency = {name: summary(t) for name, t in times.items()}
    result = {
        "benchmark": "typing_latency",
        "index": str(args.index_dir),
        "forum": str(posts),
        "mode": mode,
        "queries": len(queries),
        "chars": args.chars,
        "completed": completed,
        "latency": latency,
        "typing_over_as_typed_p50": round(
            latency["typing"]["p50_ms"] / latency["as_typed"]["p50_ms"], 3
        ),
        "machine": machine(),
        "when": time.strftime("%Y-%m-%d %H:%M"),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
