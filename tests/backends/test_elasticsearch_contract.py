"""The backend contract on a real Elasticsearch cluster, the one ``QRES_ES_URL`` names.

Skipped (with the reason printed by ``-ra``) when ``QRES_ES_URL`` is unset, as in CI. Against
the docker-compose cluster::

    QRES_ES_URL=http://localhost:9200 QRES_ES_USER=elastic QRES_ES_PASSWORD=... \\
        pytest tests/backends

Every test works on its own uniquely named index (``qres-test-<run>-<name>``), deleted after.
"""

from __future__ import annotations

import os
import uuid

import pytest

from qres.backends.elasticsearch import EsBackend

from .contract import BackendContract

pytestmark = pytest.mark.skipif(
    not os.environ.get("QRES_ES_URL"),
    reason="QRES_ES_URL is not set: start a cluster (`docker compose up -d`) and export "
    "QRES_ES_URL, QRES_ES_USER and QRES_ES_PASSWORD to run the Elasticsearch contract suite",
)


@pytest.fixture
def make_backend():
    run = uuid.uuid4().hex[:12]
    names: list[str] = []

    def make(name: str, reopen: bool = False) -> EsBackend:
        index = f"qres-test-{run}-{name}"
        backend = EsBackend(index=index, create=not reopen)
        if not reopen:
            names.append(index)
        return backend

    yield make
    for index in names:
        with EsBackend(index=index) as backend:
            backend.drop()


class TestElasticsearchContract(BackendContract):
    pass
