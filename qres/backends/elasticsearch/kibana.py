"""`qres kibana-setup`: import the qres data views and search-analytics dashboard into Kibana.

The saved objects live in ``es_config/kibana/qres.ndjson``: data views over the question
index (``qres-questions``) and the search log (``qres-search-log``), three visualisations
(query volume, latency percentiles, zero-result queries) and the dashboard holding them.
They go through Kibana's saved-objects import API with ``overwrite=true``, so running the
command again updates them in place. Credentials are the Elasticsearch ones (see
:mod:`qres.backends.elasticsearch`): Kibana accepts the same users and API keys.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import urllib3

from qres.backends.elasticsearch import CONFIG_DIR, EsConfig, mask_userinfo

DEFAULT_KIBANA_URL = "http://localhost:5601"
SAVED_OBJECTS = CONFIG_DIR / "kibana" / "qres.ndjson"
DASHBOARD_ID = "qres-search-analytics"


class KibanaError(RuntimeError):
    """A problem talking to Kibana, in one sentence."""


def import_url(kibana_url: str, space: str | None = None) -> str:
    base = kibana_url.rstrip("/")
    prefix = f"/s/{space}" if space else ""
    return f"{base}{prefix}/api/saved_objects/_import?overwrite=true"


def auth_headers(config: EsConfig) -> dict[str, str]:
    if config.api_key:
        return {"Authorization": f"ApiKey {config.api_key}"}
    if config.user:
        return urllib3.util.make_headers(basic_auth=f"{config.user}:{config.password}")
    return {}


def _pool(config: EsConfig) -> urllib3.PoolManager:
    options: dict = {"timeout": urllib3.Timeout(connect=10, read=max(config.timeout, 60))}
    if config.ca_cert:
        options["ca_certs"] = config.ca_cert
    return urllib3.PoolManager(retries=False, **options)


def import_saved_objects(
    kibana_url: str,
    ndjson: bytes,
    config: EsConfig,
    space: str | None = None,
    http=None,
) -> int:
    """POST ``ndjson`` to Kibana's import API; return how many objects it imported."""
    parts = urlsplit(kibana_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise KibanaError(
            f"Kibana URL {mask_userinfo(kibana_url)!r} is not an http(s) URL: pass "
            f"--kibana-url like {DEFAULT_KIBANA_URL}"
        )
    where = mask_userinfo(kibana_url.rstrip("/"))
    http = http or _pool(config)
    try:
        answer = http.request(
            "POST",
            import_url(kibana_url, space),
            fields={"file": ("qres.ndjson", ndjson, "application/ndjson")},
            headers={"kbn-xsrf": "qres", **auth_headers(config)},
        )
    except urllib3.exceptions.SSLError as err:
        raise KibanaError(
            config.scrub(
                f"TLS connection to Kibana at {where} failed ({_cause(err)}): set "
                "QRES_ES_CA_CERT to the CA certificate Kibana's is signed by"
            )
        ) from None
    except (urllib3.exceptions.TimeoutError, urllib3.exceptions.HTTPError) as err:
        raise KibanaError(
            config.scrub(
                f"cannot reach Kibana at {where} ({_cause(err)}): start it (`docker compose "
                "up -d`) or pass --kibana-url / set QRES_KIBANA_URL"
            )
        ) from None
    return _imported(answer.status, answer.data, where, config)


def _cause(err: Exception) -> str:
    text = str(err)
    marker = "] "
    if "[Errno" in text and marker in text:
        return text.split(marker, 1)[1].rstrip(")'\"").lower()
    return text[:200]


def _imported(status: int, data: bytes, where: str, config: EsConfig) -> int:
    try:
        body = json.loads(data or b"{}")
    except json.JSONDecodeError:
        body = {}
    message = str(body.get("message", "")) if isinstance(body, dict) else ""
    if status == 401:
        problem = (
            "rejected the credentials: check QRES_ES_USER and QRES_ES_PASSWORD, or QRES_ES_API_KEY"
            if config.has_credentials
            else "requires credentials: set QRES_ES_USER and QRES_ES_PASSWORD, or QRES_ES_API_KEY"
        )
        raise KibanaError(f"Kibana at {where} {problem}")
    if status == 403:
        raise KibanaError(
            f"Kibana at {where} refused the import ({message or 'forbidden'}): use a user "
            "allowed to manage saved objects (e.g. elastic)"
        )
    if status == 404:
        raise KibanaError(
            f"{where} has no saved-objects API (HTTP 404): check that --kibana-url points at "
            "Kibana, not Elasticsearch, and that the --space exists"
        )
    if status == 503:
        raise KibanaError(f"Kibana at {where} is not ready yet (HTTP 503): wait a minute and retry")
    if status != 200 or not isinstance(body, dict):
        raise KibanaError(
            f"Kibana at {where} answered HTTP {status} ({message or 'no details'}): "
            "see Kibana's log and retry"
        )
    if not body.get("success"):
        errors = body.get("errors") or []
        shown = "; ".join(
            f"{e.get('type')} {e.get('id')} ({(e.get('error') or {}).get('type', 'error')})"
            for e in errors[:5]
        )
        raise KibanaError(
            f"Kibana at {where} imported {body.get('successCount', 0)} objects but refused "
            f"{len(errors)}: {shown or 'no details'}: check that Kibana is 8.15 or later"
        )
    return int(body.get("successCount", 0))
