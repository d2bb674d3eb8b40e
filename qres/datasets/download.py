"""``qres download``: fetch the public datasets into the qres data dir, resumably and verified.

Every file lands in ``<dest>/<folder>/<path>`` (the layout of
:data:`qres.datasets.benchmarks.LAYOUTS`,
which ``qres evaluate`` and ``qres train`` read) by way of ``<path>.part``: bytes are appended to
the ``.part`` (so an interrupted download resumes), its sha256 is checked, and only then is it
renamed into place. Files whose checksum we could not pin are trusted on first use: the hash of
the first download is recorded in ``<dest>/checksums.json`` and later runs are held to it.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path
from urllib.error import HTTPError, URLError
from urllib.parse import urlparse
from urllib.request import Request, url2pathname, urlopen

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Column

from qres import __version__
from qres.datasets.benchmarks import dataset_dir

TIMEOUT_S = 30
CHUNK_BYTES = 1 << 16
CHECKSUMS_FILE = "checksums.json"


class DownloadError(Exception):
    """A download that cannot go on; the message is one sentence for the user."""


@dataclass(frozen=True)
class Member:
    """A file extracted from a downloaded archive."""

    name: str  # path inside the archive
    path: str  # destination, relative to the dataset dir
    sha256: str | None


@dataclass(frozen=True)
class RemoteFile:
    path: str  # destination, relative to the dataset's folder; also its path on a mirror
    url: str  # official public URL
    sha256: str | None  # None: not pinned, trusted on first use
    members: tuple[Member, ...] = ()  # non-empty for a zip whose members qres reads


_LEI = "https://raw.githubusercontent.com/taolei87/askubuntu/master"
_QCRI = "https://alt.qcri.org/semeval2016/task3/data/uploads"
_SEMEVAL_ZIP = "semeval2016-task3-cqa-ql-traindev-v3.2.zip"

# Pinned hashes are those of the copies in ../shared/data; the others were never seen here.
REGISTRY: dict[str, tuple[RemoteFile, ...]] = {
    "askubuntu": (
        RemoteFile("text_tokenized.txt.gz", f"{_LEI}/text_tokenized.txt.gz", None),
        RemoteFile("train_random.txt", f"{_LEI}/train_random.txt", None),
        RemoteFile(
            "dev.txt",
            f"{_LEI}/dev.txt",
            "5c478af0db8998fd9517788c18f84bca96d0f79141cf80504544635f2c3437e0",
        ),
        RemoteFile(
            "test.txt",
            f"{_LEI}/test.txt",
            "5d659c24836bd8ad0a486d353386f1ca3780191e2df6abd58accbfcbb726c4ad",
        ),
        RemoteFile(
            "heldout.txt",
            f"{_LEI}/heldout.txt",
            "26dab391d0d8edf4e4dfaadfe6bc0f50081b9b57ed3b9872338104f5f35bbb44",
        ),
        RemoteFile("vectors_pruned.200.txt.gz", f"{_LEI}/vectors_pruned.200.txt.gz", None),
    ),
    "semeval2016": (
        RemoteFile(
            _SEMEVAL_ZIP,
            f"{_QCRI}/{_SEMEVAL_ZIP}",
            None,
            members=(
                Member(
                    "v3.2/train/SemEval2016-Task3-CQA-QL-train-part1.xml",
                    "SemEval2016-Task3-CQA-QL-train-part1.xml",
                    None,
                ),
                Member(
                    "v3.2/train/SemEval2016-Task3-CQA-QL-train-part2.xml",
                    "SemEval2016-Task3-CQA-QL-train-part2.xml",
                    "1962eae41ce580f593b62ee162929f0bace83740f0dec8ffdf65b4c0abca3d7e",
                ),
                Member(
                    "v3.2/dev/SemEval2016-Task3-CQA-QL-dev.xml",
                    "SemEval2016-Task3-CQA-QL-dev.xml",
                    "dd132f19108cf64f16be01dde40dc297d5c42c06e7a98a9cb23b7b819468064a",
                ),
            ),
        ),
    ),
}


@dataclass(frozen=True)
class Fetched:
    path: Path
    action: str  # "downloaded", "resumed", "extracted" or "skipped"


def download(
    dataset: str,
    dest_dir: str | Path,
    base_url: str | None = None,
    force: bool = False,
    progress: bool = True,
) -> list[Fetched]:
    """Fetch ``dataset`` into its folder under ``dest_dir``; ``base_url`` is a mirror laid out as
    ``<base_url>/<dataset>/<path>`` (http(s) or file://) used instead of the official hosts."""
    if dataset not in REGISTRY:
        raise DownloadError(f"unknown dataset {dataset!r}; choose one of {', '.join(REGISTRY)}")
    dest_dir = Path(dest_dir)
    book = ChecksumBook(dest_dir / CHECKSUMS_FILE)
    session = _Session(dataset, dataset_dir(dataset, dest_dir), book, base_url, force, progress)
    session.dataset_dir.mkdir(parents=True, exist_ok=True)
    try:
        for remote in REGISTRY[dataset]:
            session.fetch(remote)
    finally:
        if session.bar.live.is_started:
            session.bar.stop()
    return session.fetched


class ChecksumBook:
    """``checksums.json``: sha256 recorded on first download of files with no pinned hash."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._hashes: dict[str, str] = {}
        if path.exists():
            try:
                self._hashes = json.loads(path.read_text(encoding="utf-8"))
            except (ValueError, OSError) as err:
                raise DownloadError(f"{path}: cannot read recorded checksums ({err})") from None
            if not isinstance(self._hashes, dict):
                raise DownloadError(f"{path}: expected a JSON object of file -> sha256")

    def get(self, key: str) -> str | None:
        return self._hashes.get(key)

    def record(self, key: str, sha256: str) -> None:
        self._hashes[key] = sha256
        self._save()

    def forget(self, key: str) -> None:
        if self._hashes.pop(key, None) is not None:
            self._save()

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self._hashes, indent=1, sort_keys=True) + "\n", "utf-8")
        tmp.replace(self.path)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class _Session:
    """One dataset's download: where files go, the checksum book, the progress display."""

    def __init__(
        self,
        dataset: str,
        dataset_dir: Path,
        book: ChecksumBook,
        base_url: str | None,
        force: bool,
        progress: bool,
    ) -> None:
        self.dataset = dataset
        self.dataset_dir = dataset_dir
        self.book = book
        self.base_url = base_url
        self.force = force
        self.fetched: list[Fetched] = []
        self.bar = Progress(
            TextColumn("{task.description}", table_column=Column(max_width=28, no_wrap=True)),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            disable=not progress,
        )

    def say(self, message: str) -> None:
        self.bar.console.print(message, highlight=False, soft_wrap=True)

    def key(self, rel_path: str) -> str:
        return f"{self.dataset}/{rel_path}"

    def url_of(self, remote: RemoteFile) -> str:
        if self.base_url is None:
            return remote.url
        return f"{self.base_url.rstrip('/')}/{self.dataset}/{remote.path}"

    def fetch(self, remote: RemoteFile) -> None:
        to_extract = [
            m for m in remote.members if self.force or not self._verified_in_place(m.path, m.sha256)
        ]
        self.fetched += [
            Fetched(self.dataset_dir / m.path, "skipped")
            for m in remote.members
            if m not in to_extract
        ]
        if remote.members and not to_extract:
            return
        archive = self.dataset_dir / remote.path
        if not self.force and self._verified_in_place(remote.path, remote.sha256):
            action = "skipped"
        else:
            action = self._download(remote)
        self.fetched.append(Fetched(archive, action))
        if to_extract:
            self._extract(remote, archive, to_extract)

    def _verified_in_place(self, rel_path: str, pinned: str | None) -> bool:
        """Whether ``rel_path`` is already there with the right bytes (recording it if new)."""
        path = self.dataset_dir / rel_path
        if not path.is_file():
            return False
        expected = pinned or self.book.get(self.key(rel_path))
        actual = sha256_of(path)
        if expected is None:
            self._record_first_use(rel_path, actual)
            return True
        if actual == expected:
            return True
        self.say(f"{self.key(rel_path)}: present but its sha256 differs; fetching it again")
        return False

    def _record_first_use(self, rel_path: str, sha256: str) -> None:
        key = self.key(rel_path)
        self.book.record(key, sha256)
        self.say(f"{key}: no pinned checksum; recorded sha256 {sha256} in {self.book.path}")

    def _download(self, remote: RemoteFile) -> str:
        final = self.dataset_dir / remote.path
        part = final.with_name(final.name + ".part")
        final.parent.mkdir(parents=True, exist_ok=True)
        if self.force:
            part.unlink(missing_ok=True)
        url = self.url_of(remote)
        offset = part.stat().st_size if part.exists() else 0
        self.bar.start()  # only once something is fetched: a run that skips all stays quiet
        task = self.bar.add_task(remote.path, total=None)
        if url.startswith("file:"):
            resumed = _copy_local(url, part, offset, lambda n, t: self._advance(task, n, t))
        else:
            resumed = _fetch_http(url, part, offset, lambda n, t: self._advance(task, n, t))
        self._finish(remote.path, remote.sha256, part, final, url)
        return "resumed" if resumed else "downloaded"

    def _advance(self, task, done: int, total: int | None) -> None:
        self.bar.update(task, completed=done, total=total)

    def _finish(self, rel_path: str, pinned: str | None, part: Path, final: Path, source: str):
        """Verify ``part`` then move it to ``final``; a mismatch deletes it and stops."""
        key = self.key(rel_path)
        expected = pinned or self.book.get(key)
        actual = sha256_of(part)
        if expected is not None and actual != expected:
            part.unlink()
            raise DownloadError(
                f"checksum mismatch for {key} from {source}: expected sha256 {expected}, "
                f"got {actual}; deleted the download"
            )
        final.unlink(missing_ok=True)
        part.replace(final)
        if expected is None:
            self._record_first_use(rel_path, actual)

    def _extract(self, remote: RemoteFile, archive: Path, members: list[Member]) -> None:
        try:
            with zipfile.ZipFile(archive) as zf:
                names = set(zf.namelist())
                for member in members:
                    if member.name not in names:
                        raise DownloadError(f"{archive}: archive has no member {member.name}")
                    final = self.dataset_dir / member.path
                    part = final.with_name(final.name + ".part")
                    with zf.open(member.name) as src, part.open("wb") as dst:
                        shutil.copyfileobj(src, dst, CHUNK_BYTES)
                    self._finish(member.path, member.sha256, part, final, str(archive))
                    self.fetched.append(Fetched(final, "extracted"))
        except zipfile.BadZipFile as err:
            # A broken archive must not stay trusted, or the next run would keep it.
            archive.unlink(missing_ok=True)
            if remote.sha256 is None:
                self.book.forget(self.key(remote.path))
            raise DownloadError(f"{archive}: not a valid zip archive ({err}); deleted it") from None


def _copy_local(url: str, part: Path, offset: int, report) -> bool:
    """Append ``file://`` ``url`` to ``part`` from byte ``offset``; True if it resumed."""
    source = Path(url2pathname(urlparse(url).path))
    if not source.is_file():
        raise DownloadError(f"mirror file not found: {url}")
    size = source.stat().st_size
    if offset > size:  # the .part is not a prefix of this file
        offset = 0
    with source.open("rb") as src, part.open("ab" if offset else "wb") as dst:
        src.seek(offset)
        done = offset
        while chunk := src.read(CHUNK_BYTES):
            dst.write(chunk)
            done += len(chunk)
            report(done, size)
    return offset > 0


def _fetch_http(url: str, part: Path, offset: int, report) -> bool:
    """Append http(s) ``url`` to ``part``, asking for bytes from ``offset``; True if resumed."""
    headers = {"User-Agent": f"qres/{__version__}"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    try:
        response = urlopen(Request(url, headers=headers), timeout=TIMEOUT_S)
    except HTTPError as err:
        if err.code == 416 and offset:  # nothing past offset: the .part is already whole
            return True
        raise DownloadError(f"HTTP {err.code} {err.reason} for {url}") from None
    except URLError as err:
        raise DownloadError(
            f"cannot reach {urlparse(url).netloc} ({err.reason}) for {url}"
        ) from None
    except (OSError, http.client.HTTPException) as err:
        raise DownloadError(f"no answer from {url} ({str(err) or 'timed out'})") from None
    with response:
        if offset and response.status != 206:  # the server ignored Range: start over
            offset = 0
        content_range = response.headers.get("Content-Range", "")
        if offset and not content_range.startswith(f"bytes {offset}-"):
            raise DownloadError(f"{url} answered range {content_range!r}, not bytes {offset}-")
        length = response.headers.get("Content-Length")
        total = offset + int(length) if length and length.isdigit() else None
        done = offset
        try:
            with part.open("ab" if offset else "wb") as dst:
                while chunk := response.read(CHUNK_BYTES):
                    dst.write(chunk)
                    done += len(chunk)
                    report(done, total)
        except (OSError, http.client.HTTPException) as err:
            raise DownloadError(
                f"download of {url} interrupted ({str(err) or 'timed out'}); run again to resume"
            ) from None
    if total is not None and done < total:
        raise DownloadError(
            f"download of {url} stopped at {done} of {total} bytes; run again to resume"
        )
    return offset > 0


MIRROR_FORMS = "give http(s)://HOST/PATH, file:///PATH or a folder"


def mirror_url(mirror: str) -> str:
    """The URL of --mirror, a URL or a plain folder; a DownloadError for one that could not
    serve a file (no host, another scheme, no such folder)."""
    if "://" in mirror:
        parts = urlparse(mirror)
        if parts.scheme not in ("http", "https", "file"):
            raise DownloadError(f"--mirror {mirror}: {parts.scheme}:// is not read; {MIRROR_FORMS}")
        if parts.scheme != "file" and not parts.hostname:
            raise DownloadError(f"--mirror {mirror}: no host; {MIRROR_FORMS}")
        return mirror
    folder = Path(mirror).expanduser().resolve()
    if not folder.is_dir():
        raise DownloadError(f"--mirror {mirror}: no such folder; {MIRROR_FORMS}")
    return folder.as_uri()
