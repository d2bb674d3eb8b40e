"""The HTTP protocol ``qres serve`` runs under uvicorn: uvicorn's httptools protocol with a
bound on what a request may cost before its headers end, and uvicorn's own errors as the
service's one sentence of JSON.

uvicorn holds a request's headers in memory until they end and waits for them without a
time limit (its keep-alive timeout only covers the wait between requests), so four
unfinished 100 MB headers cost the server 400 MB, and a connection that trickles a header a
byte at a time is held for ever. Here a request's headers (request line included) may take
:data:`MAX_HEADER_BYTES` and :data:`HEADER_SECONDS` at most: past either the connection is
answered (431 or 408, ``{"error": ...}``) and closed. A connection that sends nothing is
closed after :data:`HEADER_SECONDS` too.
"""

from __future__ import annotations

import json

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

MAX_HEADER_BYTES = 64 * 1024
HEADER_SECONDS = 10.0


def error_response(status: int, message: str) -> bytes:
    """A whole HTTP response ``{"error": message}`` that closes the connection."""
    body = json.dumps({"error": message}).encode()
    head = (
        b"content-type: application/json\r\n"
        + b"content-length: %d\r\n" % len(body)
        + b"connection: close\r\n\r\n"
    )
    return STATUS_LINE[status] + head + body


class GuardedHttpTools(HttpToolsProtocol):
    """uvicorn's httptools protocol, with a size and time bound on each request's headers
    and JSON errors (see the module)."""

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._header_bytes: int | None = 0  # counted until the headers end (None: ended)
        self._piece = 0  # the size of the piece of the stream being parsed
        self._header_timer = None
        self._start_header_clock(silent=True)

    def _start_header_clock(self, silent: bool = False) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
        self._header_timer = self.loop.call_later(HEADER_SECONDS, self._headers_too_slow, silent)

    def _stop_header_clock(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self, silent: bool) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        if silent:  # nothing asked yet (a browser's spare connection): just close it
            self.transport.close()
            return
        self._refuse(408, f"the request's headers took longer than {HEADER_SECONDS:.0f} s.")

    def _refuse(self, status: int, message: str) -> None:
        self.logger.warning("refused a request: %s", message)
        self.transport.write(error_response(status, message))
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        # httptools tells where a request begins, not at which byte: the piece it begins in
        # is counted whole (with any bytes of the request before it, an overestimate).
        if self._header_bytes is not None:
            self._header_bytes += len(data)
        self._piece = len(data)
        super().data_received(data)
        if (
            self._header_bytes is not None
            and self._header_bytes > MAX_HEADER_BYTES
            and not self.transport.is_closing()
        ):
            self._stop_header_clock()
            self._refuse(431, f"the request's headers are larger than {MAX_HEADER_BYTES} bytes.")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._header_bytes = self._piece
        self._start_header_clock()

    def on_headers_complete(self) -> None:
        # A URL past the bound that arrived in one piece with the rest ends here, before
        # data_received's check: 66,000 letters were "not valid HTTP" (400; uvicorn's URL
        # parser stops at 65,535 bytes). The piece may hold a body too: the URL is measured.
        too_large = len(self.url) >= MAX_HEADER_BYTES  # with its request line: past the bound
        self._header_bytes = None
        self._stop_header_clock()
        if too_large:
            self._refuse(431, f"the request's headers are larger than {MAX_HEADER_BYTES} bytes.")
            raise httptools.HttpParserCallbackError("refused")  # nothing more of it is parsed
        super().on_headers_complete()

    def connection_lost(self, exc) -> None:
        self._stop_header_clock()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to bytes that are not HTTP, as JSON (none to a request refused)."""
        if self.transport.is_closing():
            return
        self.transport.write(error_response(400, "the request is not valid HTTP."))
        self.transport.close()
