"""qres download against file:// and local-HTTP mirrors built from ../shared/data."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import json
import shutil
import socket
import threading
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from qres.cli import cli
from qres.datasets.benchmarks import LAYOUTS
from qres.datasets.download import REGISTRY, DownloadError, download

SHARED_DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
ASKUBUNTU_LOCAL = ("dev.txt", "test.txt", "heldout.txt")
SEMEVAL_ZIP = "semeval2016-task3-cqa-ql-traindev-v3.2.zip"
PART2 = "SemEval2016-Task3-CQA-QL-train-part2.xml"
DEV = "SemEval2016-Task3-CQA-QL-dev.xml"
PART1 = "SemEval2016-Task3-CQA-QL-train-part1.xml"
# Stand-ins for the official files we have no copy of; the registry entries stay as they are.
STAND_INS = {
    "text_tokenized.txt.gz": gzip.compress(b"9\thow do i enable updates ?\tupdate manager .\n"),
    "train_random.txt": b"240299\t168608 390642\t368007 70009 48077\n",
    "vectors_pruned.200.txt.gz": gzip.compress(b"ubuntu " + b"0.1 " * 199 + b"0.1\n"),
}
PART1_STAND_IN = b'<?xml version="1.0" encoding="utf-8"?>\n<xml version="stand-in"/>\n'


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def shared() -> Path:
    assert SHARED_DATA.is_dir(), f"test data missing: {SHARED_DATA.resolve()} must exist"
    return SHARED_DATA


def build_mirror(root: Path, shared: Path) -> Path:
    ask = root / "askubuntu"
    ask.mkdir(parents=True)
    for name in ASKUBUNTU_LOCAL:
        shutil.copyfile(shared / "askubuntu" / name, ask / name)
    for name, data in STAND_INS.items():
        (ask / name).write_bytes(data)
    sem = root / "semeval2016"
    sem.mkdir()
    with zipfile.ZipFile(sem / SEMEVAL_ZIP, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.write(shared / "semeval2016-task3" / "README.txt", "v3.2/README.txt")
        zf.writestr(f"v3.2/train/{PART1}", PART1_STAND_IN)
        zf.write(shared / "semeval2016-task3" / PART2, f"v3.2/train/{PART2}")
        zf.write(shared / "semeval2016-task3" / DEV, f"v3.2/dev/{DEV}")
    return root


@pytest.fixture(scope="module")
def mirror(tmp_path_factory, shared) -> Path:
    return build_mirror(tmp_path_factory.mktemp("mirror"), shared)


@pytest.fixture
def own_mirror(tmp_path, shared) -> Path:
    """A mirror a test may damage."""
    return build_mirror(tmp_path / "own-mirror", shared)


def expected_bytes(shared: Path) -> dict[str, bytes]:
    """What each downloaded askubuntu file must hold, by name."""
    out = {n: (shared / "askubuntu" / n).read_bytes() for n in ASKUBUNTU_LOCAL}
    return out | STAND_INS


def test_registry_lists_the_official_files():
    ask = {r.path: r.url for r in REGISTRY["askubuntu"]}
    assert set(ask) == set(ASKUBUNTU_LOCAL) | set(STAND_INS)
    for name, url in ask.items():
        assert url == f"https://raw.githubusercontent.com/taolei87/askubuntu/master/{name}"
    (zip_entry,) = REGISTRY["semeval2016"]
    assert zip_entry.url.startswith("https://alt.qcri.org/semeval2016/task3/data/uploads/")
    assert zip_entry.url.endswith(SEMEVAL_ZIP)
    assert {m.path for m in zip_entry.members} == {PART1, PART2, DEV}


def test_pinned_checksums_are_those_of_the_shared_copies(shared):
    local = {f"askubuntu/{n}": shared / "askubuntu" / n for n in ASKUBUNTU_LOCAL} | {
        f"semeval2016/{n}": shared / "semeval2016-task3" / n for n in (PART2, DEV)
    }
    pinned = {f"askubuntu/{r.path}": r.sha256 for r in REGISTRY["askubuntu"] if r.sha256} | {
        f"semeval2016/{m.path}": m.sha256 for m in REGISTRY["semeval2016"][0].members if m.sha256
    }
    assert set(pinned) == set(local)
    for key, path in local.items():
        assert pinned[key] == sha256(path.read_bytes()), key


def test_full_download_gives_verified_files_and_records_unpinned(tmp_path, mirror, shared, capsys):
    dest = tmp_path / "data"
    got = download("askubuntu", dest, base_url=mirror.as_uri(), progress=False)
    assert {f.path.name: f.action for f in got} == dict.fromkeys(
        expected_bytes(shared), "downloaded"
    )
    for name, data in expected_bytes(shared).items():
        assert (dest / "askubuntu" / name).read_bytes() == data, name
    assert not list(dest.rglob("*.part"))

    recorded = json.loads((dest / "checksums.json").read_text())
    assert recorded == {f"askubuntu/{n}": sha256(d) for n, d in STAND_INS.items()}
    err = capsys.readouterr().err
    for name, data in STAND_INS.items():
        line = (
            f"askubuntu/{name}: no pinned checksum; recorded sha256 {sha256(data)} "
            f"in {dest / 'checksums.json'}"
        )
        assert line in err
    assert "dev.txt: no pinned checksum" not in err


def test_semeval_zip_is_downloaded_and_its_members_extracted(tmp_path, mirror, shared):
    dest = tmp_path / "data"
    got = download("semeval2016", dest, base_url=mirror.as_uri(), progress=False)
    assert {f.path.name: f.action for f in got} == {
        SEMEVAL_ZIP: "downloaded",
        PART1: "extracted",
        PART2: "extracted",
        DEV: "extracted",
    }
    sem = dest / "semeval2016-task3"
    for name in (PART2, DEV):
        assert (sem / name).read_bytes() == (shared / "semeval2016-task3" / name).read_bytes()
    assert (sem / PART1).read_bytes() == PART1_STAND_IN
    recorded = json.loads((dest / "checksums.json").read_text())
    assert set(recorded) == {f"semeval2016/{SEMEVAL_ZIP}", f"semeval2016/{PART1}"}
    assert recorded[f"semeval2016/{PART1}"] == sha256(PART1_STAND_IN)

    # A lost member comes back from the kept archive, without a download.
    (sem / DEV).unlink()
    again = download("semeval2016", dest, base_url="file:///nonexistent", progress=False)
    assert {f.path.name: f.action for f in again}[DEV] == "extracted"
    assert {f.path.name: f.action for f in again}[SEMEVAL_ZIP] == "skipped"
    assert (sem / DEV).read_bytes() == (shared / "semeval2016-task3" / DEV).read_bytes()


def test_rerun_skips_everything_without_touching_the_mirror(tmp_path, mirror):
    dest = tmp_path / "data"
    for dataset in REGISTRY:
        download(dataset, dest, base_url=mirror.as_uri(), progress=False)
    mtimes = {p: p.stat().st_mtime_ns for p in dest.rglob("*") if p.is_file()}
    gone = (tmp_path / "no-such-mirror").as_uri()
    for dataset in REGISTRY:
        again = download(dataset, dest, base_url=gone, progress=False)
        assert again and {f.action for f in again} == {"skipped"}
    assert {p: p.stat().st_mtime_ns for p in dest.rglob("*") if p.is_file()} == mtimes


def test_a_corrupted_local_file_is_fetched_again(tmp_path, mirror, shared):
    dest = tmp_path / "data"
    download("askubuntu", dest, base_url=mirror.as_uri(), progress=False)
    (dest / "askubuntu" / "test.txt").write_bytes(b"damaged\n")
    again = {
        f.path.name: f.action for f in download("askubuntu", dest, mirror.as_uri(), False, False)
    }
    assert again["test.txt"] == "downloaded"
    assert (dest / "askubuntu" / "test.txt").read_bytes() == (
        shared / "askubuntu" / "test.txt"
    ).read_bytes()


@pytest.mark.parametrize("name", ["dev.txt", "train_random.txt"])
def test_resume_from_a_truncated_part_file(tmp_path, mirror, shared, name):
    full = expected_bytes(shared)[name]
    target = tmp_path / "data" / "askubuntu" / name
    target.parent.mkdir(parents=True)
    part = target.with_name(name + ".part")
    part.write_bytes(full[: len(full) // 3])
    got = download("askubuntu", tmp_path / "data", base_url=mirror.as_uri(), progress=False)
    assert {f.path.name: f.action for f in got}[name] == "resumed"
    assert target.read_bytes() == full
    assert not part.exists()


def test_resume_appends_instead_of_copying_again(tmp_path, mirror, shared):
    # A .part whose prefix differs from the mirror proves the tail was appended, not recopied:
    # the result keeps the wrong prefix, fails its pinned checksum, and is deleted.
    full = expected_bytes(shared)["heldout.txt"]
    part = tmp_path / "data" / "askubuntu" / "heldout.txt.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(b"X" * 100)
    with pytest.raises(DownloadError, match="checksum mismatch for askubuntu/heldout.txt"):
        download("askubuntu", tmp_path / "data", base_url=mirror.as_uri(), progress=False)
    assert not part.exists()
    assert not part.with_name("heldout.txt").exists()
    got = download("askubuntu", tmp_path / "data", base_url=mirror.as_uri(), progress=False)
    assert {f.path.name: f.action for f in got}["heldout.txt"] == "downloaded"
    assert part.with_name("heldout.txt").read_bytes() == full


def test_corrupted_mirror_file_fails_checksum_and_leaves_nothing(tmp_path, own_mirror):
    bad = own_mirror / "askubuntu" / "dev.txt"
    bad.write_bytes(bad.read_bytes().replace(b"\t", b" ", 1))
    dest = tmp_path / "data"
    with pytest.raises(DownloadError) as caught:
        download("askubuntu", dest, base_url=own_mirror.as_uri(), progress=False)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("checksum mismatch for askubuntu/dev.txt")
    assert sha256(bad.read_bytes()) in message
    assert not (dest / "askubuntu" / "dev.txt").exists()
    assert not (dest / "askubuntu" / "dev.txt.part").exists()


def test_corrupted_zip_member_fails_checksum(tmp_path, own_mirror):
    archive = own_mirror / "semeval2016" / SEMEVAL_ZIP
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr(f"v3.2/train/{PART1}", PART1_STAND_IN)
        zf.writestr(f"v3.2/train/{PART2}", b"<xml/>\n")
        zf.writestr(f"v3.2/dev/{DEV}", b"<xml/>\n")
    dest = tmp_path / "data"
    with pytest.raises(DownloadError, match=f"checksum mismatch for semeval2016/{PART2}"):
        download("semeval2016", dest, base_url=own_mirror.as_uri(), progress=False)
    assert not (dest / "semeval2016-task3" / PART2).exists()
    assert not (dest / "semeval2016-task3" / f"{PART2}.part").exists()


def test_an_archive_that_is_not_a_zip_is_deleted_and_forgotten(tmp_path, own_mirror):
    (own_mirror / "semeval2016" / SEMEVAL_ZIP).write_bytes(b"<html>not found</html>")
    dest = tmp_path / "data"
    with pytest.raises(DownloadError, match="not a valid zip archive"):
        download("semeval2016", dest, base_url=own_mirror.as_uri(), progress=False)
    assert not (dest / "semeval2016-task3" / SEMEVAL_ZIP).exists()
    assert json.loads((dest / "checksums.json").read_text()) == {}


def test_missing_mirror_file_gives_a_clear_error(tmp_path, own_mirror):
    (own_mirror / "askubuntu" / "test.txt").unlink()
    with pytest.raises(DownloadError) as caught:
        download("askubuntu", tmp_path / "data", base_url=own_mirror.as_uri(), progress=False)
    url = (own_mirror / "askubuntu" / "test.txt").as_uri()
    assert str(caught.value) == f"mirror file not found: {url}"


def test_first_use_hash_is_enforced_later(tmp_path, own_mirror):
    dest = tmp_path / "data"
    download("askubuntu", dest, base_url=own_mirror.as_uri(), progress=False)
    first = json.loads((dest / "checksums.json").read_text())["askubuntu/train_random.txt"]
    assert first == sha256(STAND_INS["train_random.txt"])

    (own_mirror / "askubuntu" / "train_random.txt").write_bytes(b"1\t2\t3 4\n")
    with pytest.raises(DownloadError, match="checksum mismatch for askubuntu/train_random.txt"):
        download("askubuntu", dest, base_url=own_mirror.as_uri(), force=True, progress=False)
    # --force replaces a file only with a verified download, so the trusted copy survives.
    assert json.loads((dest / "checksums.json").read_text())["askubuntu/train_random.txt"] == first
    assert (dest / "askubuntu" / "train_random.txt").read_bytes() == STAND_INS["train_random.txt"]


def test_force_downloads_again_and_ignores_a_stale_part(tmp_path, mirror, shared):
    dest = tmp_path / "data"
    download("askubuntu", dest, base_url=mirror.as_uri(), progress=False)
    stale = dest / "askubuntu" / "dev.txt.part"
    stale.write_bytes(b"stale bytes")
    got = download("askubuntu", dest, base_url=mirror.as_uri(), force=True, progress=True)
    assert {f.action for f in got} == {"downloaded"}
    assert (dest / "askubuntu" / "dev.txt").read_bytes() == expected_bytes(shared)["dev.txt"]
    assert not stale.exists()


def test_a_file_placed_by_hand_is_recorded_on_first_sight(tmp_path, mirror, capsys):
    dest = tmp_path / "data"
    vectors = dest / "askubuntu" / "vectors_pruned.200.txt.gz"
    vectors.parent.mkdir(parents=True)
    vectors.write_bytes(b"placed by hand")
    got = download("askubuntu", dest, base_url=mirror.as_uri(), progress=False)
    assert {f.path.name: f.action for f in got}["vectors_pruned.200.txt.gz"] == "skipped"
    recorded = json.loads((dest / "checksums.json").read_text())
    assert recorded["askubuntu/vectors_pruned.200.txt.gz"] == sha256(b"placed by hand")
    assert "vectors_pruned.200.txt.gz: no pinned checksum" in capsys.readouterr().err


def test_unknown_dataset_is_refused(tmp_path):
    with pytest.raises(DownloadError, match="unknown dataset 'stackoverflow'"):
        download("stackoverflow", tmp_path, progress=False)


# --- http(s) -------------------------------------------------------------------------------


class RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the mirror with single-range support, and a redirect at /moved/..."""

    ranges_seen: list[str] = []

    def log_message(self, *args):  # keep test output quiet
        pass

    def do_GET(self):
        if self.path.startswith("/moved/"):
            self.send_response(302)
            self.send_header("Location", self.path[len("/moved") :])
            self.end_headers()
            return
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(404, "Not Found")
            return
        data = path.read_bytes()
        wanted = self.headers.get("Range")
        if wanted:
            type(self).ranges_seen.append(wanted)
            start = int(wanted.removeprefix("bytes=").rstrip("-"))
            if start >= len(data):
                self.send_error(416, "Range Not Satisfiable")
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            data = data[start:]
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def http_mirror(mirror):
    RangeHandler.ranges_seen = []

    def handler(*args, **kwargs):
        return RangeHandler(*args, directory=str(mirror), **kwargs)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_http_download_resumes_with_a_range_request(tmp_path, http_mirror, shared):
    full = expected_bytes(shared)["test.txt"]
    part = tmp_path / "data" / "askubuntu" / "test.txt.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(full[:1000])
    got = download("askubuntu", tmp_path / "data", base_url=http_mirror, progress=False)
    actions = {f.path.name: f.action for f in got}
    assert actions["test.txt"] == "resumed"
    assert actions["dev.txt"] == "downloaded"
    assert RangeHandler.ranges_seen == ["bytes=1000-"]
    for name, data in expected_bytes(shared).items():
        assert (tmp_path / "data" / "askubuntu" / name).read_bytes() == data


def test_http_complete_part_file_is_verified_and_kept(tmp_path, http_mirror, shared):
    full = expected_bytes(shared)["dev.txt"]
    part = tmp_path / "data" / "askubuntu" / "dev.txt.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(full)
    got = download("askubuntu", tmp_path / "data", base_url=http_mirror, progress=False)
    assert {f.path.name: f.action for f in got}["dev.txt"] == "resumed"
    assert part.with_name("dev.txt").read_bytes() == full


def test_http_follows_redirects(tmp_path, http_mirror, shared):
    download("semeval2016", tmp_path / "data", base_url=f"{http_mirror}/moved", progress=False)
    assert (tmp_path / "data" / "semeval2016-task3" / DEV).read_bytes() == (
        shared / "semeval2016-task3" / DEV
    ).read_bytes()


def test_http_error_is_one_line(tmp_path, http_mirror):
    with pytest.raises(DownloadError) as caught:
        download("askubuntu", tmp_path / "data", base_url=f"{http_mirror}/nowhere", progress=False)
    url = f"{http_mirror}/nowhere/askubuntu/text_tokenized.txt.gz"
    assert str(caught.value) == f"HTTP 404 Not Found for {url}"


def test_unreachable_host_is_one_line(tmp_path):
    with socket.socket() as probe:  # a port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(DownloadError) as caught:
        download("askubuntu", tmp_path, base_url=f"http://127.0.0.1:{port}", progress=False)
    message = str(caught.value)
    assert message.startswith(f"cannot reach 127.0.0.1:{port} (")
    assert "\n" not in message


# --- command line ------------------------------------------------------------------------


def test_cli_help_shows_an_example():
    result = CliRunner().invoke(cli, ["download", "--help"])
    assert result.exit_code == 0
    assert "qres download askubuntu" in result.output
    assert "--mirror" in result.output and "--force" in result.output


def test_cli_downloads_all_from_a_directory_mirror(tmp_path, mirror, shared):
    dest = tmp_path / "data"
    result = CliRunner().invoke(cli, ["download", "all", "--mirror", str(mirror), "--dest", dest])
    assert result.exit_code == 0, result.output
    assert (dest / "askubuntu" / "dev.txt").read_bytes() == (
        shared / "askubuntu" / "dev.txt"
    ).read_bytes()
    assert (dest / "semeval2016-task3" / PART2).is_file()


def test_cli_defaults_to_the_qres_data_dir(tmp_path, mirror, monkeypatch):
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(cli, ["download", "askubuntu", "--mirror", mirror.as_uri()])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "home" / "data" / "askubuntu" / "heldout.txt").is_file()


def test_cli_error_is_one_line_without_traceback(tmp_path, own_mirror):
    (own_mirror / "askubuntu" / "heldout.txt").unlink()
    result = CliRunner().invoke(
        cli, ["download", "askubuntu", "--mirror", str(own_mirror), "--dest", tmp_path]
    )
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    error_lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert error_lines == [
        f"error: mirror file not found: {(own_mirror / 'askubuntu' / 'heldout.txt').as_uri()}"
    ]


@pytest.mark.parametrize(
    "mirror, why",
    [("nowhere", "no such folder"), ("http://", "no host"), ("ftp://h/x", "ftp:// is not read")],
)
def test_a_mirror_that_could_serve_nothing_is_refused_before_any_fetch(tmp_path, mirror, why):
    args = ["download", "askubuntu", "--mirror", mirror, "--dest", tmp_path / "data"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        f"error: --mirror {mirror}: {why}; give http(s)://HOST/PATH, file:///PATH or a folder"
    ]
    assert not (tmp_path / "data").exists()


def test_every_file_the_layout_reads_is_one_the_download_provides():
    for name, remotes in REGISTRY.items():
        provided = {r.path for r in remotes} | {m.path for r in remotes for m in r.members}
        for split, parts in LAYOUTS[name].splits.items():
            for alternatives in parts:
                assert provided & set(alternatives), f"{name} {split}: {alternatives}"


@pytest.mark.slow
def test_download_then_evaluate_then_train(run, tmp_path, mirror):
    """What `qres download` leaves is what evaluate and train read (part 1 as the zip's XML)."""
    data = tmp_path / "home" / "data"
    assert run("download", "semeval2016", "--mirror", mirror).exit_code == 0
    result = run(
        *("evaluate", "--dataset", "semeval2016", "--data-dir", data, "--json"),
        *("--ranker", "given-order", "--ranker", "bm25"),
    )
    assert result.exit_code == 0, result.output
    given, bm25 = json.loads(result.output)
    # The reference figure of ../shared/data/README.md for the search engine's order.
    assert round(given["metrics"]["MAP"], 2) == 71.35 and given["metrics"]["queries"] == 50
    assert bm25["metrics"]["queries"] == 50 and bm25["metrics"]["MAP"] > 60
    result = run(
        *("train", "--dataset", "semeval2016", "--data-dir", data / "semeval2016-task3"),
        *("--encoder", "cnn", "--hidden", "8", "--vectors", "random", "--epochs", "1"),
        *("--out", tmp_path / "run"),
    )
    assert result.exit_code == 0, result.output
    run_card = json.loads((tmp_path / "run" / "run.json").read_text())
    assert [Path(f).name for f in run_card["training"]["files"]] == [PART1, PART2, DEV]
    assert run_card["training"]["train_queries"] > 0
