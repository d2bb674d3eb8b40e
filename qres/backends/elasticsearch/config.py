"""Where the Elasticsearch cluster is and how to log in.

Settings come from the ``url`` argument, then the environment (``QRES_ES_URL``,
``QRES_ES_USER``, ``QRES_ES_PASSWORD``, ``QRES_ES_API_KEY``, ``QRES_ES_CA_CERT``,
``QRES_ES_TIMEOUT``), then ``$QRES_HOME/es.json`` with the same keys in lower case without the
prefix (``url``, ``user``, ``password``, ``api_key``, ``ca_cert``, ``timeout``, ``kibana_url``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from elasticsearch import Elasticsearch

from qres import paths
from qres.backends.base import BackendError

DEFAULT_URL = "http://localhost:9200"
CONFIG_KEYS = ("url", "user", "password", "api_key", "ca_cert", "timeout", "kibana_url")
ENV_PREFIX = "QRES_ES_"


def config_path() -> Path:
    return paths.home() / "es.json"


@dataclass(frozen=True)
class EsConfig:
    """Where the cluster is and how to log in; secrets stay out of ``repr``."""

    url: str = field(default=DEFAULT_URL, repr=False)  # may hold user:password@
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    api_key: str | None = field(default=None, repr=False)
    ca_cert: str | None = None
    timeout: float = 30.0
    kibana_url: str | None = None
    config_file: str | None = None  # the es.json that contributed settings, if any

    def __repr__(self) -> str:
        return (
            f"EsConfig(url={self.safe_url!r}, auth={self.auth_summary()!r}, "
            f"ca_cert={self.ca_cert!r}, timeout={self.timeout!r})"
        )

    @property
    def hosts(self) -> list[str]:
        return [u.strip() for u in self.url.split(",") if u.strip()]

    @property
    def safe_url(self) -> str:
        """The URL(s) with any ``user:password@`` replaced by ``***@``."""
        return ",".join(mask_userinfo(u) for u in self.hosts)

    @property
    def has_credentials(self) -> bool:
        return bool(self.api_key or self.user or any(urlsplit(u).password for u in self.hosts))

    def auth_summary(self) -> str:
        if self.api_key:
            return "API key ****"
        if self.user:
            return f"basic (user {self.user!r}, password ****)"
        if any(urlsplit(u).password for u in self.hosts):
            return "basic (from the URL, password ****)"
        return "none"

    def scrub(self, text: str) -> str:
        """``text`` with every secret this configuration holds replaced by ****."""
        secrets = [self.password, self.api_key] + [urlsplit(u).password for u in self.hosts]
        for secret in secrets:
            if secret and len(secret) >= 4:  # shorter ones would garble the text, not hide it
                text = text.replace(secret, "****")
        return text


def mask_userinfo(url: str) -> str:
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))


def load_config(url: str | None = None, environ=None, path: Path | None = None) -> EsConfig:
    """Settings from ``url``, then the environment, then ``$QRES_HOME/es.json``."""
    environ = os.environ if environ is None else environ
    path = path or config_path()
    values: dict = {}
    config_file = None
    if path.exists():
        values = _read_config_file(path)
        config_file = str(path)
    for key in CONFIG_KEYS:
        env = "QRES_KIBANA_URL" if key == "kibana_url" else ENV_PREFIX + key.upper()
        if environ.get(env):
            values[key] = environ[env]
    if url:
        values["url"] = url
    try:
        values["timeout"] = float(values.get("timeout", 30.0))
    except ValueError:
        raise BackendError(
            f"timeout {values['timeout']!r} is not a number of seconds: fix QRES_ES_TIMEOUT "
            f"or the timeout in {path}"
        ) from None
    config = EsConfig(**values, config_file=config_file)
    _check_config(config, path)
    return config


def _read_config_file(path: Path) -> dict:
    try:
        values = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise BackendError(f"{path}: unreadable Elasticsearch settings ({err})") from None
    if not isinstance(values, dict):
        raise BackendError(f"{path}: expected a JSON object with keys {', '.join(CONFIG_KEYS)}")
    unknown = sorted(set(values) - set(CONFIG_KEYS))
    if unknown:
        raise BackendError(
            f"{path}: unknown key(s) {', '.join(unknown)} (known: {', '.join(CONFIG_KEYS)})"
        )
    wrong = sorted(k for k, v in values.items() if k != "timeout" and not isinstance(v, str))
    if wrong:
        raise BackendError(f"{path}: {', '.join(wrong)} must be string(s)")
    return {k: v for k, v in values.items() if v is not None}


def _check_config(config: EsConfig, path: Path) -> None:
    for host in config.hosts or [""]:
        parts = urlsplit(host)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise BackendError(
                f"Elasticsearch URL {mask_userinfo(host)!r} is not an http(s) URL: "
                "set QRES_ES_URL like http://localhost:9200"
            )
        if parts.path.strip("/") or parts.query or parts.fragment:
            extra = parts.path + (f"?{parts.query}" if parts.query else "")
            raise BackendError(
                f"Elasticsearch URL {mask_userinfo(host)!r} has a path ({extra}): qres sends "
                "its requests to the cluster's root, so the path would be read as an index "
                "name; set QRES_ES_URL to scheme, host and port only, like http://localhost:9200"
            )
    if config.user and not config.password:
        raise BackendError(
            f"QRES_ES_USER is set ({config.user!r}) but no password: set QRES_ES_PASSWORD "
            f"(environment or {path})"
        )
    if config.ca_cert and not Path(config.ca_cert).is_file():
        raise BackendError(
            f"CA certificate {config.ca_cert} (QRES_ES_CA_CERT) does not exist: point it at "
            "the cluster's CA file (http_ca.crt)"
        )
    if not config.timeout > 0:
        raise BackendError(f"timeout {config.timeout} must be a positive number of seconds")


def make_client(config: EsConfig, node_class=None) -> Elasticsearch:
    options: dict = {"request_timeout": config.timeout, "max_retries": 2}
    if config.api_key:
        options["api_key"] = config.api_key
    elif config.user:
        options["basic_auth"] = (config.user, config.password)
    if config.ca_cert:
        options["ca_certs"] = config.ca_cert
    if node_class is not None:
        options["node_class"] = node_class
    try:
        return Elasticsearch(config.hosts, **options)
    except ValueError as err:
        message = config.scrub(str(err))
        raise BackendError(f"cannot use Elasticsearch URL {config.safe_url}: {message}") from None
