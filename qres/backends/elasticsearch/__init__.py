"""The Elasticsearch backend, one module per concept.

* :mod:`.config` — where the cluster is and how to log in (:class:`EsConfig`);
* :mod:`.errors` — client errors turned into one sentence;
* :mod:`.requests` — index settings and mappings from ``es_config/``, query and log bodies;
* :mod:`.backend` — :class:`EsBackend`, the :class:`qres.backends.base.Backend` on a cluster.
"""

from qres.backends.elasticsearch.backend import DEFAULT_INDEX, DEFAULT_LOG_INDEX, EsBackend
from qres.backends.elasticsearch.config import (
    EsConfig,
    config_path,
    load_config,
    make_client,
    mask_userinfo,
)
from qres.backends.elasticsearch.errors import explain, missing_index_message
from qres.backends.elasticsearch.requests import (
    CONFIG_DIR,
    COSINE_SCRIPT,
    MAX_RESULT_WINDOW,
    RESCORE_SCRIPT,
    IndexSettings,
    bm25_query,
    load_es_config,
    query_terms,
    search_log_document,
)

__all__ = [
    "CONFIG_DIR",
    "DEFAULT_INDEX",
    "DEFAULT_LOG_INDEX",
    "MAX_RESULT_WINDOW",
    "COSINE_SCRIPT",
    "RESCORE_SCRIPT",
    "bm25_query",
    "EsBackend",
    "EsConfig",
    "IndexSettings",
    "config_path",
    "explain",
    "load_config",
    "load_es_config",
    "make_client",
    "mask_userinfo",
    "missing_index_message",
    "query_terms",
    "search_log_document",
]
