"""``qres kibana-setup``: the qres data views and dashboard, imported into Kibana."""

from __future__ import annotations

import click

from qres.backends.base import BackendError
from qres.backends.elasticsearch import load_config, mask_userinfo
from qres.backends.elasticsearch.kibana import (
    DASHBOARD_ID,
    DEFAULT_KIBANA_URL,
    SAVED_OBJECTS,
    KibanaError,
    import_saved_objects,
)
from qres.cli.group import CommandError


@click.command("kibana-setup")
@click.option(
    "--kibana-url",
    envvar="QRES_KIBANA_URL",
    help=f"Kibana address [default: $QRES_KIBANA_URL, es.json kibana_url or {DEFAULT_KIBANA_URL}].",
)
@click.option("--space", help="Kibana space to import into [default: the default space].")
def kibana_setup(kibana_url: str | None, space: str | None) -> None:
    """Import the qres data views and search-analytics dashboard into Kibana.

    Credentials are the Elasticsearch ones: QRES_ES_USER and QRES_ES_PASSWORD, or
    QRES_ES_API_KEY (environment or $QRES_HOME/es.json); QRES_ES_CA_CERT for TLS. Running it
    again overwrites the objects with this version's.

    \b
    Example:
      QRES_ES_USER=elastic QRES_ES_PASSWORD=... qres kibana-setup --kibana-url http://localhost:5601
    """
    try:
        config = load_config()
        url = kibana_url or config.kibana_url or DEFAULT_KIBANA_URL
        count = import_saved_objects(url, SAVED_OBJECTS.read_bytes(), config, space)
    except OSError as err:
        raise CommandError(f"{SAVED_OBJECTS}: cannot read the saved objects ({err})") from None
    except (BackendError, KibanaError) as err:
        raise CommandError(str(err)) from None
    where = mask_userinfo(url.rstrip("/")) + (f"/s/{space}" if space else "")
    click.echo(
        f"imported {count} saved objects into Kibana at {where}; dashboard: "
        f"{where}/app/dashboards#/view/{DASHBOARD_ID}"
    )
