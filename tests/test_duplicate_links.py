"""A forum's duplicate links: read from PostLinks.xml, kept with the duplicates, and followed
by search (a closed duplicate found gives way to its original), in evaluation only as of the
time each query was closed."""

import gzip
import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from qres.backends.embedded import EmbeddedBackend
from qres.cli import cli
from qres.corpus import duplicate_links
from qres.corpus.readers import CorpusError, Question
from qres.indexing.pipeline import index_questions
from qres.ranking import duplicates
from qres.ranking.search import Result, SearchPipeline
from tests.fakes import schema_of_an_older_qres
from tests.test_forum_evaluation import write_forum

LINKS = [
    ("21", "1", "2012-01-01T10:00:00.000", 3),
    ("21", "2", "2012-03-01T10:00:00.000", 3),
    ("21", "2", "2012-03-01T10:00:00.000", 3),  # listed twice: kept once
    ("22", "1", "2011-06-01T10:00:00.000", 3),
    ("23", "23", "2011-06-01T10:00:00.000", 3),  # a link to itself: ignored
    ("24", "3", "2011-06-01T10:00:00.000", 1),  # "linked", not a duplicate
]


def postlinks(path, links):
    rows = [
        f'<row Id="{n}" CreationDate="{d}" PostId="{p}" RelatedPostId="{r}" LinkTypeId="{t}" />'
        for n, (p, r, d, t) in enumerate(links, start=1)
    ]
    text = "<postlinks>\n" + "\n".join(rows) + "\n</postlinks>\n"
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


@pytest.mark.parametrize("name", ["PostLinks.xml", "PostLinks.xml.gz"])
def test_links_are_read_oldest_first_duplicates_only(tmp_path, name):
    path = postlinks(tmp_path / name, LINKS)
    assert duplicate_links.beside(tmp_path / "Posts.xml") == path
    assert duplicate_links.read(path) == {
        "21": [("1", "2012-01-01T10:00:00.000"), ("2", "2012-03-01T10:00:00.000")],
        "22": [("1", "2011-06-01T10:00:00.000")],
    }


def test_malformed_links_name_the_file_and_line(tmp_path):
    path = tmp_path / "PostLinks.xml"
    path.write_text(
        '<postlinks>\n<row Id="1" PostId="2" RelatedPostId="3" LinkTypeId="3" />\n<row\n'
    )
    with pytest.raises(CorpusError) as err:
        duplicate_links.read(path)
    assert str(err.value).startswith(f"{path}:") and "malformed XML" in str(err.value)


def test_the_links_held_compactly_read_as_the_plain_mapping_would():
    """DuplicateLinks keeps whole-number ids in arrays and any other id in a dict: both read
    as a dict of each duplicate's distinct originals, oldest link first."""
    rows = [
        ("30", "7", "2013-05-01T00:00:00.000"),
        ("30", "5", "2012-05-01T00:00:00.000"),
        ("30", "7", "2011-01-01T00:00:00.000"),  # listed again, older: the older date kept
        ("30", "x9", "2012-09-01T00:00:00.000"),  # an id that is not a number, same duplicate
        ("a1", "4", "2010-01-01T00:00:00.000"),
        ("007", "1", "2010-01-01T00:00:00.000"),  # a leading zero: kept as written
        ("8", "8", "2010-01-01T00:00:00.000"),  # a link to itself
        ("9", "3", ""),  # undated
    ]
    links = duplicate_links.DuplicateLinks(rows)
    want = {
        "30": [
            ("7", "2011-01-01T00:00:00.000"),
            ("5", "2012-05-01T00:00:00.000"),
            ("x9", "2012-09-01T00:00:00.000"),
        ],
        "a1": [("4", "2010-01-01T00:00:00.000")],
        "007": [("1", "2010-01-01T00:00:00.000")],
        "9": [("3", "")],
    }
    assert links == want and len(links) == 4 and sorted(links) == sorted(want)
    assert "30" in links and "8" not in links and "7" not in links and 30 not in links
    assert links.get("07") is None and links.get("nope") is None
    assert [links.get(post) for post in want] == list(want.values())
    assert [links.get(post, "none") for post in ("1", "10", "29", "31", "99999")] == ["none"] * 5
    assert duplicate_links.DuplicateLinks([]) == {}
    assert duplicate_links.DuplicateLinks([]).get("1") is None


def test_attach_keeps_the_links_in_the_extras_and_originals_reads_them():
    known = {"21": [("1", "2012-01-01T10:00:00.000"), ("2", "2012-03-01T10:00:00.000")]}
    q21, q5 = duplicate_links.attach(
        [Question("21", "t", "b", (), {"score": 3}), Question("5", "t", "b")], known
    )
    assert q21.extras == {
        "score": 3,
        "duplicate_of": "1 2",
        "duplicate_dates": "2012-01-01T10:00:00.000 2012-03-01T10:00:00.000",
    }
    assert q5.extras == {}
    assert duplicates.originals(q21.extras) == ["1", "2"]
    assert duplicates.originals(q21.extras, before="2012-02-01") == ["1"]
    assert duplicates.originals(q21.extras, before="2012-01-01") == []
    assert duplicates.originals({"duplicate_of": "7 8"}, before="2000") == ["7", "8"]  # undated
    assert duplicates.first_closed(q21.extras) == "2012-01-01T10:00:00.000"
    assert duplicates.first_closed({}) is None


def closed(qid, *originals, date="2012-01-01"):
    extras = {
        "duplicate_of": " ".join(originals),
        "duplicate_dates": " ".join([date] * len(originals)),
    }
    return Question(qid, f"title {qid}", "body", (), extras if originals else {})


def store(*questions):
    held = {q.id: q for q in questions}
    return lambda ids: {i: held[i] for i in ids if i in held}


def ranked(*ids):
    return [Result(i, 10.0 - n, 10.0 - n, None) for n, i in enumerate(ids)]


def test_a_closed_duplicate_gives_way_to_its_original_at_its_rank_and_score():
    fetch = store(closed("D", "O"), closed("O"), closed("X"))
    shown, _ = duplicates.follow(ranked("D", "X", "O"), fetch, 10)
    assert [(r.id, r.score, r.via) for r in shown] == [("O", 10.0, "D"), ("X", 9.0, None)]


def test_chains_cycles_missing_originals_and_several_originals():
    fetch = store(
        closed("A", "B"),  # A → B → C: C is shown
        closed("B", "C"),
        closed("C"),
        closed("P", "Q"),  # P ↔ Q: the cycle is cut at Q, which is shown
        closed("Q", "P"),
        closed("M", "gone"),  # its original is not in the index: M stays
        closed("S", "T", "U"),  # two originals, in link order
        closed("T"),
        closed("U"),
    )
    shown, _ = duplicates.follow(ranked("A", "P", "M", "S", "C"), fetch, 10)
    assert [(r.id, r.via) for r in shown] == [
        ("C", "A"),
        ("Q", "P"),
        ("M", None),
        ("T", "S"),
        ("U", "S"),
    ]  # C's own hit comes after it was shown: not twice


def test_links_made_later_are_not_followed_before_then():
    fetch = store(closed("D", "O", date="2013-05-01"), closed("O"))
    assert [r.id for r in duplicates.follow(ranked("D"), fetch, 5, before="2013-01-01")[0]] == ["D"]
    assert [r.id for r in duplicates.follow(ranked("D"), fetch, 5, before="2014-01-01")[0]] == ["O"]


def test_hits_known_not_to_be_closed_are_never_read():
    fetch = store(closed("D", "O"), closed("O"), closed("X"), closed("Y"))
    asked = []

    def recording(ids):
        asked.extend(ids)
        return fetch(ids)

    shown, _ = duplicates.follow(
        ranked("X", "D", "Y", "O"), recording, 3, not_closed=lambda ids: {"X", "Y"} & set(ids)
    )
    assert [(r.id, r.via) for r in shown] == [("X", None), ("O", "D"), ("Y", None)]
    assert sorted(asked) == ["D", "O"]  # the duplicate and the original it named


def test_an_original_that_several_of_its_duplicates_match_outranks_a_better_single_hit():
    fetch = store(*(closed(d, "O") for d in ("D1", "D2", "D3")), closed("O"), closed("X"))
    scores = {"X": 10.0, "D1": 9.0, "D2": 8.5, "D3": 8.0, "Z": 1.0}
    hits = [Result(i, s, s, None) for i, s in scores.items()]
    shown, _ = duplicates.follow(hits, fetch, 3)
    family = 9.0 + duplicates.VOTE * ((8.5 - 1.0) + (8.0 - 1.0))  # above the lowest hit, Z
    assert [(r.id, r.via, r.score) for r in shown] == [
        ("O", "D1", family),
        ("X", None, 10.0),
        ("Z", None, 1.0),
    ]
    # The lowest hit is the zero: BM25's scale or a fused one, the families rank alike.
    rescaled = [replace(r, score=3 * r.score - 40) for r in hits]
    assert [r.id for r in duplicates.follow(rescaled, fetch, 3)[0]] == ["O", "X", "Z"]
    # A top k is the first k of any deeper one.
    assert duplicates.follow(hits, fetch, 1)[0] == shown[:1]


def test_a_top_k_deeper_than_the_voters_families_goes_on_in_rank_order(monkeypatch):
    monkeypatch.setattr(duplicates, "VOTERS", 2)
    fetch = store(closed("D1", "O"), closed("D2", "O"), closed("O"), closed("X"), closed("Z"))
    hits = ranked("X", "D1", "D2", "Z")
    shown, _ = duplicates.follow(hits, fetch, 3)
    assert [(r.id, r.via) for r in shown] == [("X", None), ("O", "D1"), ("Z", None)]


def index(tmp_path, questions):
    backend = EmbeddedBackend(tmp_path / "index", create=True)
    index_questions(backend, questions, workers=0)
    return backend


FORUM = [
    Question("1", "schengen visa border", "Do I need a Schengen visa at the border crossing?"),
    Question("21", "overstay penalty fine", "overstay fine penalty days airport officer"),
    Question("22", "overstay fine", "penalty fine days overstay passport stamp"),
    Question("23", "overstay penalty", "overstay penalty fine days banned entry"),
    Question("24", "overstay fine penalty", "overstay days fine penalty visa stamp"),
    Question("5", "tipping usa restaurants", "How much to tip in restaurants: overstay"),
]
CLOSED_AS_DUPLICATES_OF_1 = {d: [("1", "2012-01-01")] for d in ("21", "22", "23", "24")}


def test_search_follows_the_links_and_ranks_deeper_when_duplicates_collapse(tmp_path):
    backend = index(tmp_path, duplicate_links.attach(FORUM, CLOSED_AS_DUPLICATES_OF_1))
    assert backend.metadata()[duplicate_links.INDEX_FLAG] is True
    with backend:
        pipeline = SearchPipeline.for_index(backend, mode="bm25")
        assert pipeline.follow_duplicates
        results = pipeline.search("overstay penalty fine days", k=2)
        # The four duplicates of 1 collapse into 1; the search ranks deeper to fill k.
        assert [(r.id, r.via) for r in results] == [("1", results[0].via), ("5", None)]
        assert results[0].via in {"21", "22", "23", "24"}
        assert results[0].title == "schengen visa border"  # the original's own text is shown
        pipeline.follow_duplicates = False
        assert {r.id for r in pipeline.search("overstay penalty fine days", k=4)} == {
            "21",
            "22",
            "23",
            "24",
        }


# 1 voter: the search ranks deeper, and searches again for the deeper ranking
@pytest.mark.parametrize("voters, searched", [(duplicates.VOTERS, 1), (1, 2)])
def test_a_typed_bm25_search_that_follows_links_searches_once_where_it_can(
    tmp_path, monkeypatch, voters, searched
):
    monkeypatch.setattr(duplicates, "VOTERS", voters)
    backend = index(tmp_path, duplicate_links.attach(FORUM, CLOSED_AS_DUPLICATES_OF_1))
    with backend:
        pipeline = SearchPipeline.for_index(backend, mode="bm25")
        expected = pipeline.search("overstay penalty fine days", k=2)
        searches = []
        whole = backend.candidates
        monkeypatch.setattr(
            backend, "candidates", lambda *a, **kw: searches.append(a) or whole(*a, **kw)
        )
        text, results = pipeline.search_typed("overstay penalty fine days", 2)
        assert text == "overstay penalty fine days"
        assert [(r.id, r.via, r.score) for r in results] == [
            (r.id, r.via, r.score) for r in expected
        ]
        assert len(searches) == searched


def test_the_index_marks_closed_duplicates_so_search_reads_only_those(tmp_path):
    backend = index(tmp_path, duplicate_links.attach(FORUM, CLOSED_AS_DUPLICATES_OF_1))
    with backend:
        found = backend.candidates("overstay penalty fine days tipping schengen", 10)
        ids = found.ids(range(len(found)))
        assert set(ids) == {q.id for q in FORUM}
        assert found.not_closed(ids) == {"1", "5"}
        assert found.not_closed(["unread-id"]) == set()  # only candidates it holds
        backend.compact()  # documents rewritten keep their marks
        found = backend.candidates("overstay penalty fine days tipping schengen", 10)
        assert found.not_closed(found.ids(range(len(found)))) == {"1", "5"}


def test_an_index_made_before_the_closed_mark_follows_links_reading_every_hit(
    tmp_path, monkeypatch
):
    from qres.backends.embedded import directory

    with monkeypatch.context() as old_qres:
        old_qres.setattr(directory, "schema", lambda: schema_of_an_older_qres(closed_mark=False))
        index(tmp_path, duplicate_links.attach(FORUM, CLOSED_AS_DUPLICATES_OF_1)).close()
    with EmbeddedBackend(tmp_path / "index") as backend:
        found = backend.candidates("overstay penalty fine days", 10)
        assert found.not_closed(found.ids(range(len(found)))) == set()  # nothing known
        results = SearchPipeline.for_index(backend, mode="bm25").search("overstay penalty", k=2)
        assert [r.id for r in results] == ["1", "5"]


def test_an_index_without_links_searches_as_before(tmp_path):
    with index(tmp_path, FORUM) as backend:
        pipeline = SearchPipeline.for_index(backend, mode="bm25")
        assert not pipeline.follow_duplicates  # nothing to follow: no stored question read
        found = pipeline.search("overstay penalty fine days", k=10)
        assert {"21", "22", "24"} <= {r.id for r in found} and "1" not in {r.id for r in found}
        assert all(r.via is None for r in found)


def test_qres_index_reads_the_links_beside_a_dump_and_search_shows_originals(tmp_path, monkeypatch):
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    folder = write_forum(tmp_path / "forum", [("11", "1", "2012-01-01", 3)])
    run = CliRunner().invoke
    indexed = run(cli, ["--json", "index", str(folder / "Posts.xml")])
    assert indexed.exit_code == 0, indexed.output
    summary = json.loads(indexed.stdout)
    assert summary["closed_duplicates_known"] == 1
    assert summary["duplicate_links"] == str(folder / "PostLinks.xml")
    found = json.loads(run(cli, ["--json", "search", "Schengen visa border?", "-k", "3"]).stdout)
    assert [(r["id"], r["via"]) for r in found["results"]][:1] == [("1", None)]
    assert "11" not in [r["id"] for r in found["results"]]  # shown as 1, its original
    kept = run(cli, ["--json", "search", "Schengen visa border?", "-k", "3", "--keep-duplicates"])
    assert {"1", "11"} <= {r["id"] for r in json.loads(kept.stdout)["results"]}
    table = run(cli, ["search", "border crossing thanks visa", "-k", "1"])
    assert table.exit_code == 0 and "Traceback" not in table.output


def test_qres_index_counts_the_closed_duplicates_it_read_not_every_link(tmp_path, monkeypatch):
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    # 11 and 12 are in Posts.xml; 98 and 99, closed as duplicates too, are not (deleted)
    links = [("11", "1", "2012-01-01", 3), ("12", "2", "2012-01-01", 3)]
    links += [("98", "1", "2012-01-01", 3), ("99", "3", "2012-01-01", 3)]
    folder = write_forum(tmp_path / "forum", links)
    run = CliRunner().invoke
    summary = json.loads(run(cli, ["--json", "index", str(folder / "Posts.xml")]).stdout)
    assert (summary["closed_duplicates_known"], summary["closed_duplicates_read"]) == (4, 2)
    shown = run(cli, ["index", str(folder / "Posts.xml"), "--rebuild"]).output
    assert (
        "PostLinks.xml closes 2 of the questions of Posts.xml as duplicates (and 2 that "
        "Posts.xml does not hold): search shows their originals in their place"
    ) in shown


def test_qres_index_no_links_and_links_file_for_any_format(tmp_path, monkeypatch):
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    folder = write_forum(tmp_path / "forum", [("11", "1", "2012-01-01", 3)])
    run = CliRunner().invoke
    plain = run(cli, ["--json", "index", str(folder / "Posts.xml"), "--no-links"])
    assert json.loads(plain.stdout)["closed_duplicates_known"] == 0
    tsv = tmp_path / "q.tsv"
    tsv.write_text("id\ttitle\tbody\n1\tvisa border\tschengen\n11\tvisa border?\tschengen!\n")
    links = postlinks(tmp_path / "links.xml", [("11", "1", "2012-01-01", 3)])
    other = ["--index-dir", str(tmp_path / "tsv-index")]
    done = run(cli, [*other, "--json", "index", str(tsv), "--links", str(links)])
    assert json.loads(done.stdout)["closed_duplicates_known"] == 1
    found = json.loads(run(cli, [*other, "--json", "search", "visa border"]).stdout)["results"]
    assert [r["id"] for r in found] == ["1"]
    missing = run(cli, [*other, "index", str(tsv), "--links", str(tmp_path / "none.xml")])
    assert missing.exit_code != 0 and "none.xml" in missing.output
    assert "Traceback" not in missing.output


def test_qres_search_ranks_the_original_its_duplicates_vote_for_above_a_better_lone_match(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    lone = Question("9", "overstay penalty fine", "overstay penalty fine days at the border")
    tsv = tmp_path / "forum.tsv"
    rows = [f"{q.id}\t{q.title}\t{q.body}" for q in [*FORUM, lone]]
    tsv.write_text("id\ttitle\tbody\n" + "\n".join(rows) + "\n")
    links = postlinks(
        tmp_path / "links.xml", [(d, "1", "2012-01-01", 3) for d in "21 22 23 24".split()]
    )
    run = CliRunner().invoke
    assert run(cli, ["index", str(tsv), "--links", str(links)]).exit_code == 0

    def search(*flags):
        found = run(cli, ["--json", "search", "overstay penalty fine days", *flags])
        return [(r["id"], r["via"]) for r in json.loads(found.stdout)["results"]]

    # Kept as themselves, the lone question scores best and 1's duplicates trail it ...
    assert search("--keep-duplicates")[:3] == [("9", None), ("21", None), ("24", None)]
    # ... but four of them vote for 1, which their best match brings in.
    assert search() == [("1", "21"), ("9", None), ("5", None)]


# An original (1) that shares no word with the query (31); an older duplicate of it (21)
# worded like the query. The query finds the original only through that duplicate's link.
REPLAY_POSTS = [
    ("1", "schengen visa border", "Do I need a Schengen visa at the border?"),
    ("21", "overstay penalty fine", "airport officer overstay penalty fine days"),
    ("31", "overstay penalty fine days", "airport officer overstay penalty fine days stamp"),
    ("5", "tipping usa restaurants", "How much tipping in USA restaurants?"),
]


def write_replay(folder, duplicate_closed):
    folder.mkdir(parents=True)
    rows = [f'<row Id="{i}" PostTypeId="1" Title="{t}" Body="{b}" />' for i, t, b in REPLAY_POSTS]
    (folder / "Posts.xml").write_text("<posts>\n" + "\n".join(rows) + "\n</posts>\n")
    postlinks(
        folder / "PostLinks.xml",
        [("21", "1", duplicate_closed, 3), ("31", "1", "2012-06-01T00:00:00.000", 3)],
    )
    return folder


@pytest.mark.parametrize(
    ("duplicate_closed", "links", "r_at_1"),
    [
        ("2012-01-01T00:00:00.000", True, 100.0),  # closed before the query: followed
        ("2012-01-01T00:00:00.000", False, 0.0),  # --no-links: the text alone
        ("2013-01-01T00:00:00.000", True, 0.0),  # closed after the query was: not known then
    ],
)
def test_evaluation_replays_each_query_with_the_links_known_then(
    tmp_path, monkeypatch, duplicate_closed, links, r_at_1
):
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    folder = write_replay(tmp_path / "forum", duplicate_closed)
    args = ["--json", "evaluate", "--dataset", "stackexchange", "--data-dir", str(folder)]
    args += ["--ranker", "bm25", "--per-query"] + ([] if links else ["--no-links"])
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    rows = {r["query"]: r for r in json.loads(result.stdout)[0]["per_query"]}
    assert rows["31"]["R@1"] == r_at_1


def test_the_service_writer_marks_the_index_once_a_duplicate_is_written(tmp_path):
    from qres.indexing.group_commit import GroupCommitWriter, Upsert

    with EmbeddedBackend(tmp_path / "index", create=True) as backend:
        writer = GroupCommitWriter(backend)
        writer.submit(Upsert([Question("1", "visa", "schengen")], None)).result(10)
        assert duplicate_links.INDEX_FLAG not in backend.metadata()
        closed = Question("2", "visa?", "schengen!", (), {"duplicate_of": "1"})
        writer.submit(Upsert([closed], None)).result(10)
        writer.close()
        assert backend.metadata()[duplicate_links.INDEX_FLAG] is True
        assert SearchPipeline.for_index(backend, mode="bm25").follow_duplicates


def test_a_malformed_postlinks_stops_indexing_in_one_line_before_anything_is_written(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    folder = write_forum(tmp_path / "forum", [("11", "1", "2012-01-01", 3)])
    (folder / "PostLinks.xml").write_text('<postlinks>\n<row PostId="11"\n')
    result = CliRunner().invoke(cli, ["index", str(folder / "Posts.xml")])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"{folder / 'PostLinks.xml'}:" in result.output and "--no-links" in result.output
    assert json.loads(CliRunner().invoke(cli, ["--json", "info"]).stdout)["questions"] == 0
    done = CliRunner().invoke(cli, ["index", str(folder / "Posts.xml"), "--no-links"])
    assert done.exit_code == 0, done.output


@pytest.mark.parametrize("damage", ["bad deflate data", "a bad CRC", "not gzip at all"])
def test_a_corrupt_gzipped_postlinks_stops_indexing_in_one_line(tmp_path, monkeypatch, damage):
    """Issue 34: a corrupt PostLinks.xml.gz printed a 50-line zlib.error traceback, where the
    same damage in Posts.xml.gz gave one line."""
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    folder = write_forum(
        tmp_path / "forum", [(str(11 + i), "1", "2012-01-01", 3) for i in range(5)]
    )
    text = (folder / "PostLinks.xml").read_bytes() * 20
    packed = gzip.compress(text, mtime=0)
    if damage == "bad deflate data":
        packed = packed[:10] + b"\xff" * 40 + packed[50:]
    elif damage == "a bad CRC":
        packed = packed[:-8] + b"\x00\x00\x00\x00" + packed[-4:]
    else:
        packed = text
    (folder / "PostLinks.xml").unlink()
    (folder / "PostLinks.xml.gz").write_bytes(packed)
    result = CliRunner().invoke(cli, ["index", str(folder / "Posts.xml")])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    [line] = result.output.strip().splitlines()
    assert line.startswith(f"error: {folder / 'PostLinks.xml.gz'}:") and "gzip" in line, line
    assert "--no-links" in line


def test_originals_closed_at_the_same_moment_keep_the_files_order():
    """A question closed as a duplicate of several at once gives way to them in the order
    PostLinks.xml lists them (the travel forum has 37 such), as it always did."""
    same = "2015-03-30T12:54:53.960"
    rows = [("45390", "34106", same), ("45390", "31127", same), ("45390", "9", same)]
    assert duplicate_links.DuplicateLinks(rows)["45390"] == [
        ("34106", same),
        ("31127", same),
        ("9", same),
    ]


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        ('PostId="2"', "a duplicate link's RelatedPostId: missing"),
        ('PostId=" " RelatedPostId="3"', "a duplicate link's PostId: empty id"),
    ],
)
def test_a_duplicate_link_without_its_ids_names_the_file_and_line(tmp_path, row, problem):
    """Such a row was dropped without a word, as if the file held one link fewer."""
    path = tmp_path / "PostLinks.xml"
    path.write_text(
        '<postlinks>\n<row Id="1" PostId="5" RelatedPostId="3" LinkTypeId="3" />\n'
        f'<row Id="2" {row} LinkTypeId="3" />\n</postlinks>\n'
    )
    with pytest.raises(CorpusError) as err:
        duplicate_links.read(path)
    assert str(err.value) == f"{path}:3: {problem}"


def test_links_that_close_none_of_the_questions_warn_instead_of_claiming_an_effect(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    tsv = tmp_path / "q.tsv"
    tsv.write_text("id\ttitle\tbody\nq1\tvisa border\tschengen\n")
    links = postlinks(tmp_path / "links.xml", [("11", "1", "2012-01-01", 3)])
    result = CliRunner().invoke(cli, ["index", str(tsv), "--links", str(links)])
    assert result.exit_code == 0, result.output
    assert "search shows their originals" not in result.output
    assert result.output.strip().splitlines()[-1] == (
        f"warning: {links} closes none of the indexed questions: is it this forum's PostLinks.xml?"
    )
