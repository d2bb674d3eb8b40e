"""The alias and its physical versions: creating ``<alias>-v<N>``, rebuilding into the next
version and swapping the alias to it in one step, and finding what killed rebuilds left
(orphans) and removing them. A part of :class:`qres.backends.elasticsearch.EsBackend`."""

from __future__ import annotations

import logging
import os
import re
import socket

from elastic_transport import TransportError
from elasticsearch import ApiError, NotFoundError

from qres.backends.base import (
    BackendError,
)
from qres.backends.elasticsearch.errors import (
    _error_type,
    _guarded,
)

log = logging.getLogger("qres.backends.elasticsearch.backend")


class VersionedAlias:
    def _create(self, physical: str, with_alias: bool) -> None:
        settings, mappings = self.settings.index_body(self._server_version())
        if not with_alias:  # a rebuild's index: who builds it, so a killed one can be told apart
            mappings.setdefault("_meta", {})["built_by"] = {
                "host": socket.gethostname(),
                "pid": os.getpid(),
            }
        self._client.indices.create(
            index=physical,
            settings=settings,
            mappings=mappings,
            aliases={self.alias: {}} if with_alias else None,
        )
        self._adopt(physical, mappings)

    def _next_physical_name(self) -> str:
        answer = self._client.indices.resolve_index(name=f"{self.alias}-v*", expand_wildcards="all")
        pattern = re.compile(re.escape(self.alias) + r"-v(\d+)")
        versions = [
            int(m.group(1))
            for entry in answer.get("indices", [])
            if (m := pattern.fullmatch(entry["name"]))
        ]
        return f"{self.alias}-v{max(versions, default=0) + 1}"

    def _orphans(self) -> list[str]:
        """Versions of this index (``<alias>-v<N>``) neither behind the alias nor being built
        by this backend: what an interrupted rebuild left (a killed process cleans nothing)."""
        answer = self._client.indices.resolve_index(name=f"{self.alias}-v*", expand_wildcards="all")
        pattern = re.compile(re.escape(self.alias) + r"-v\d+")
        live, _ = self._behind_alias()
        return sorted(
            entry["name"]
            for entry in answer.get("indices", [])
            if pattern.fullmatch(entry["name"])
            and entry["name"] not in live
            and entry["name"] != self._rebuilding
        )

    def _built_here_by(self, orphan: str) -> int | None:
        """The process of this machine that built ``orphan`` (None: another machine's, or
        not known)."""
        mappings = self._client.indices.get_mapping(index=orphan).get(orphan, {}).get("mappings")
        owner = (mappings or {}).get("_meta", {}).get("built_by") or {}
        here = owner.get("host") == socket.gethostname() and isinstance(owner.get("pid"), int)
        return owner["pid"] if here else None

    def _abandoned(self, orphan: str) -> bool:
        """Whether ``orphan`` was built on this machine by a process that is gone: only then
        can it not be a rebuild still running (one elsewhere may be)."""
        pid = self._built_here_by(orphan)
        return pid is not None and not _alive(pid)

    @_guarded
    def acquire_write_lock(self) -> None:
        """A cluster has no writer lock; but as on the embedded backend, a writer removes what
        a killed rebuild left behind: the orphans :meth:`_abandoned` proves dead."""
        for orphan in self._orphans():
            if self._abandoned(orphan):
                self._client.indices.delete(index=orphan, ignore_unavailable=True)
                log.warning(
                    "removed %s, left behind by an interrupted rebuild of %s", orphan, self.alias
                )

    @_guarded
    def leftovers(self) -> list[dict]:
        found = []
        for orphan in self._orphans():
            stats = self._client.indices.stats(index=orphan, metric="store")
            size = stats.get("indices", {}).get(orphan, {}).get("total", {}).get("store", {})
            found.append(
                {
                    "path": orphan,
                    "bytes": int(size.get("size_in_bytes", 0)),
                    "removed_by": "the next write from this machine if its rebuild ran here, "
                    "else the next `qres --backend elasticsearch index --rebuild`",
                }
            )
        return found

    def _behind_alias(self) -> tuple[list[str], bool]:
        """(physical indices the alias names, whether ``alias`` is itself a concrete index)."""
        try:
            answer = self._client.indices.resolve_index(name=self.alias)
        except NotFoundError as err:
            if _error_type(err) != "index_not_found_exception":
                raise
            return [], False
        for entry in answer.get("aliases", []):
            if entry["name"] == self.alias:
                return list(entry.get("indices", [])), False
        concrete = any(entry["name"] == self.alias for entry in answer.get("indices", []))
        return ([self.alias] if concrete else []), concrete

    @_guarded
    def begin_rebuild(self) -> str:
        """Create a fresh physical index (named ``<alias>-v<N+1>``) and send every read and
        write of this backend there; returns its name."""
        if self._rebuilding:
            raise BackendError(f"a rebuild of {self.alias!r} is already under way")
        orphans = self._orphans()
        for orphan in orphans:  # one rebuild at a time: another one here may still run
            pid = self._built_here_by(orphan)
            if pid is not None and _alive(pid):
                raise BackendError(
                    f"{self.alias} is being rebuilt into {orphan} by another qres process "
                    f"(pid {pid}): wait for it to end"
                )
        if orphans:  # what another, unfinished rebuild left: it was interrupted
            log.warning(
                "removed %s, left behind by an interrupted rebuild of %s",
                ", ".join(orphans),
                self.alias,
            )
            self._client.indices.delete(index=orphans, ignore_unavailable=True)
        physical = self._next_physical_name()
        self._create(physical, with_alias=False)
        self._rebuilding = self._target = physical
        return physical

    @_guarded
    def finish_rebuild(self) -> None:
        """Refresh the new index, point the alias at it alone in one atomic ``_aliases`` call,
        then delete the index the alias named before."""
        if not self._rebuilding:
            raise BackendError("no rebuild under way: start one with begin_rebuild()")
        new = self._rebuilding
        self._client.indices.refresh(index=new)
        old, concrete = self._behind_alias()
        if concrete:  # an index named like the alias: replace it by the alias, atomically
            actions = [{"remove_index": {"index": self.alias}}]
        else:
            actions = [{"remove": {"index": name, "alias": self.alias}} for name in old]
        actions.append({"add": {"index": new, "alias": self.alias}})
        self._client.indices.update_aliases(actions=actions)
        self._rebuilding, self._target = None, self.alias
        self.swapped_in = True
        leftovers = [name for name in old if name != new and not concrete]
        if leftovers:
            self._client.indices.delete(index=leftovers)

    @_guarded
    def abort_rebuild(self) -> None:
        """Delete the index being built; the alias keeps naming what it named before."""
        if not self._rebuilding:
            return
        new, self._rebuilding, self._target = self._rebuilding, None, self.alias
        try:
            live, _ = self._behind_alias()
        except (ApiError, TransportError):  # not known: kept, a later rebuild removes it
            log.warning("kept %s: could not tell whether the alias %s names it", new, self.alias)
            return
        if new in live:  # the swap went through, though its answer did not come back
            self.swapped_in = True
            log.warning("%s went live before the rebuild of %s stopped: kept", new, self.alias)
            return
        self._client.indices.delete(index=new, ignore_unavailable=True)

    @_guarded
    def drop(self) -> None:
        """Delete the index: the alias and every physical index behind it (and a rebuild's)."""
        self.abort_rebuild()
        names, _ = self._behind_alias()
        if names:
            self._client.indices.delete(index=names, ignore_unavailable=True)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` of this machine runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, under another user
        return True
    return True
