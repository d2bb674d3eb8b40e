"""What ``qres serve`` hands each worker process (:class:`ServiceConfig`), and what it
checks and says before the first request."""

import json
import os
from dataclasses import asdict, dataclass, field

from qres.backends.base import BackendError

CONFIG_ENV = "QRES_SERVE_CONFIG"  # how `qres serve` hands its options to worker processes
API_KEY_ENV = "QRES_API_KEY"
SEARCHES_ENV = "QRES_SEARCHES_AT_ONCE"


@dataclass
class ServiceConfig:
    index_dir: str
    backend: str | None = None
    model: str | None = None  # default: the model the index was built with
    fusion: str | None = None  # a fusion file (default: the model's, or equal weights)
    candidates: int = 100
    dense_candidates: int = 100  # nearest by vector joining BM25's candidates (0: none)
    max_k: int = 100
    max_query_chars: int = 2000
    max_body_bytes: int = 4 * 1024 * 1024
    max_batch: int = 1000  # questions per POST /questions and per commit
    log_queries: bool = False
    cors_origins: list[str] = field(default_factory=list)
    workers: int = 1
    open_writes: bool = False  # writes without QRES_API_KEY (the CLI allows it on loopback only)
    question_url: str | None = None  # a question's page on the forum, "{id}" replaced
    device: str | None = None  # where queries are encoded (default: $QRES_DEVICE, else auto)

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls) -> "ServiceConfig":
        return cls(**json.loads(os.environ[CONFIG_ENV]))


def searches_at_once(workers: int) -> int:
    """How many searches a worker of an embedded index runs at once: its share of the
    machine's cores, at least one (``QRES_SEARCHES_AT_ONCE`` overrides it). The others wait
    their turn; on Elasticsearch a search mostly waits for the cluster, so none wait."""
    given = os.environ.get(SEARCHES_ENV, "").strip()
    if given:
        if not given.isdigit() or int(given) < 1:
            raise BackendError(f"{SEARCHES_ENV} must be a whole number of 1 or more, not {given!r}")
        return int(given)
    return max(1, (os.cpu_count() or 1) // max(1, workers))


LOOPBACK = ("127.0.0.1", "::1", "localhost")


def check_open_writes(host: str) -> None:
    """``--open-writes`` is for a server only this machine can reach."""
    if not (host in LOOPBACK or host.startswith("127.")):
        raise BackendError(
            f"--open-writes lets anyone who reaches {host} change the index: it is allowed on a "
            f"loopback --host only ({', '.join(LOOPBACK)}); set {API_KEY_ENV} instead"
        )


def startup_notes(config: ServiceConfig, access_log: bool, read_only: bool = False) -> list[str]:
    """What an operator should know before the first request: who may write, what is logged
    (``read_only``: the server takes no writes, whatever the key or --open-writes)."""
    if read_only:
        writes = "writes are off: an embedded index takes writes with --workers 1 only"
    elif os.environ.get(API_KEY_ENV):
        writes = f"writes need the API key in {API_KEY_ENV} (header X-API-Key or Bearer)"
    elif config.open_writes:
        writes = "writes are open to anyone who can reach this address (--open-writes)"
    else:
        writes = f"writes are off: set {API_KEY_ENV} to take PUT/POST/DELETE /questions"
    if access_log:
        logged = "the access log records every request line, query texts included (--no-access-log)"
    else:
        logged = "the access log is off: query texts are not logged"
    return [writes, logged]
