"""Elasticsearch and Kibana configuration (index templates, saved objects, setup script).

Installed as ``qres.es_config`` and read with ``importlib.resources``; docker-compose mounts
the folder itself.
"""
