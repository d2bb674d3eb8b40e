"""Elasticsearch client errors as one sentence: what failed, where, what to do next."""

from __future__ import annotations

import functools
import re

from elastic_transport import ApiError as TransportApiError
from elastic_transport import ConnectionError as EsConnectionError
from elastic_transport import ConnectionTimeout, TlsError, TransportError
from elasticsearch import (
    AuthenticationException,
    AuthorizationException,
    NotFoundError,
    UnsupportedProductError,
)

from qres.backends.base import BackendError, IndexMissingError
from qres.backends.elasticsearch.config import EsConfig, config_path

# What a cluster answers when it is too busy for now (retried with backoff where written).
BUSY = (429, 502, 503, 504)


def _error_type(err: TransportApiError) -> str:
    body = err.body if isinstance(err.body, dict) else {}
    error = body.get("error")
    return error.get("type", "") if isinstance(error, dict) else ""


def _from_elasticsearch(err: TransportApiError) -> bool:
    """Whether an error answer came from Elasticsearch: its product header (7.14 on), or else
    the body of an Elasticsearch error (``{"error": {"type": ...}}``) or of a document lookup
    (``{"_index": ..., "found": false}``), never a proxy's or a web server's page."""
    headers = getattr(err.meta, "headers", None) or {}
    if headers.get("x-elastic-product") == "Elasticsearch":
        return True
    body = err.body if isinstance(err.body, dict) else {}
    error = body.get("error")
    return (isinstance(error, dict) and "type" in error) or "_index" in body


def _describe_error(error: dict) -> str:
    """``type: reason (cause)`` of an Elasticsearch error object, then its first root cause
    when that is another error: "all shards failed" alone hides e.g. the script error behind
    it (whose own cause the first failed shard tells)."""
    reason = f"{error.get('type', 'error')}: {error.get('reason', '')}"
    caused = error.get("caused_by")
    if isinstance(caused, dict) and caused.get("reason"):
        reason += f" ({caused['reason']})"
    roots = error.get("root_cause")
    root = roots[0] if isinstance(roots, list) and roots and isinstance(roots[0], dict) else {}
    if root.get("reason") and (root.get("type"), root["reason"]) != (
        error.get("type"),
        error.get("reason"),
    ):
        reason += f"; root cause {root.get('type', 'error')}: {root['reason']}"
        shards = error.get("failed_shards")
        shard = shards[0] if isinstance(shards, list) and shards else {}
        cause = (shard.get("reason") or {}).get("caused_by") if isinstance(shard, dict) else None
        if isinstance(cause, dict) and cause.get("reason"):
            reason += f" ({cause['reason']})"
    return reason


def _error_reason(err: TransportApiError) -> str:
    body = err.body if isinstance(err.body, dict) else {}
    error = body.get("error")
    if isinstance(error, dict):
        return _short(_describe_error(error), 400)
    return _short(str(error)) if error else _body_text(err)


def _body_text(err: TransportApiError, limit: int = 200) -> str:
    return _short(str(err.body), limit) if err.body else "no details"


def _connection_cause(err: TransportError) -> str:
    innermost: BaseException = err
    while getattr(innermost, "errors", None):  # the transport nests each attempt's error
        innermost = innermost.errors[0]
    text = str(innermost)
    errno = re.search(r"\[Errno -?\d+\] ([^)\]\"']+)", text)
    return errno.group(1).strip().lower() if errno else _short(text)


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def explain(err: Exception, config: EsConfig, index: str) -> str:
    """One sentence for an Elasticsearch client error: what failed, where, what to do."""
    where = config.safe_url
    settings = f"environment or {config.config_file or config_path()}"
    if isinstance(err, TlsError):
        message = (
            f"TLS connection to Elasticsearch at {where} failed ({_connection_cause(err)}): "
            "set QRES_ES_CA_CERT to the cluster's CA certificate, or use http:// if the "
            "cluster has no TLS"
        )
    elif isinstance(err, ConnectionTimeout):
        message = (
            f"Elasticsearch at {where} did not answer within {config.timeout:g} s: check that "
            "the cluster is healthy (GET _cluster/health) or allow more time with QRES_ES_TIMEOUT"
        )
    elif isinstance(err, EsConnectionError):
        message = (
            f"cannot reach Elasticsearch at {where} ({_connection_cause(err)}): start it "
            "(`docker compose up -d`) or set QRES_ES_URL to its address"
        )
    elif isinstance(err, UnsupportedProductError):
        message = (
            f"{where} answered but is not Elasticsearch ({_short(err.message)}): "
            "set QRES_ES_URL to an Elasticsearch 8 or 9 cluster"
        )
    elif isinstance(err, TransportApiError) and not _from_elasticsearch(err):
        message = (
            f"{where} answered but is not Elasticsearch (HTTP {err.meta.status}, "
            f"{_body_text(err, 80)}): set QRES_ES_URL to an Elasticsearch 8 or 9 cluster"
        )
    elif isinstance(err, AuthenticationException):
        if config.has_credentials:
            message = (
                f"Elasticsearch at {where} rejected the credentials ({config.auth_summary()}): "
                f"check QRES_ES_USER and QRES_ES_PASSWORD, or QRES_ES_API_KEY ({settings})"
            )
        else:
            message = (
                f"Elasticsearch at {where} requires credentials: set QRES_ES_USER and "
                f"QRES_ES_PASSWORD, or QRES_ES_API_KEY ({settings})"
            )
    elif isinstance(err, AuthorizationException):
        message = (
            f"the Elasticsearch user may not do this on {index} at {where} "
            f"({_error_reason(err)}): grant it the privileges on {index}* or use another user"
        )
    elif isinstance(err, NotFoundError) and _error_type(err) == "index_not_found_exception":
        message = missing_index_message(index, where)
    elif isinstance(err, NotFoundError):
        message = (
            f"Elasticsearch at {where} found nothing for a request on index {index!r} (HTTP "
            f"404, {_error_reason(err)}): create the index with `qres --backend elasticsearch "
            "index CORPUS` if it is missing, or check that QRES_ES_URL is the cluster's address"
        )
    elif isinstance(err, TransportApiError) and err.meta.status == 413:
        message = (
            f"Elasticsearch at {where} refused a request on {index} as too large (HTTP 413, "
            f"{_error_reason(err)}): index in smaller batches (qres index --batch-size N) or "
            "raise the cluster's http.max_content_length"
        )
    elif isinstance(err, TransportApiError) and err.meta.status in BUSY:
        message = (
            f"Elasticsearch at {where} is too busy to answer on {index} (HTTP "
            f"{err.meta.status}, {_error_reason(err)}), after retries: try again later"
        )
    elif isinstance(err, TransportApiError):
        message = (
            f"Elasticsearch at {where} refused the request on {index} (HTTP "
            f"{err.meta.status}, {_error_reason(err)}): fix what it names and retry"
        )
    else:
        message = f"talking to Elasticsearch at {where} failed ({_short(str(err))}): retry"
    return config.scrub(message)


def missing_index_message(index: str, where: str) -> str:
    return (
        f"no qres index {index!r} at {where}: create it with "
        "`qres --backend elasticsearch index CORPUS`"
    )


def guarded_on(index_attribute: str):
    """Turn Elasticsearch client errors raised by a method into one-sentence BackendErrors
    naming the index the method works on (the attribute ``index_attribute`` of the backend)."""

    def decorate(method):
        @functools.wraps(method)
        def wrapper(self, *args, **kwargs):
            try:
                return method(self, *args, **kwargs)
            except (TransportApiError, TransportError) as err:
                index = getattr(self, index_attribute)
                missing = isinstance(err, NotFoundError) and (
                    _error_type(err) == "index_not_found_exception"
                )
                kind = IndexMissingError if missing else BackendError
                raise kind(explain(err, self.config, index)) from None

        return wrapper

    return decorate


_guarded = guarded_on("alias")
