"""The options every command that talks to a server takes: ``--server`` (else
``ZEUS_BSO_SERVER_URL``, else `DEFAULT_SERVER`) and ``--token`` (else ``ZEUS_BSO_TOKEN``)."""

from __future__ import annotations

from typing import Annotated

import typer

from zeus_bso.errors import ConfigurationError
from zeus_bso.options import SERVER_URL_VARIABLE, checked_server_url, environment_setting

DEFAULT_SERVER = "http://127.0.0.1:8000"


def default_server_words(server: str) -> str:
    """Said after ``server`` could not be reached where it is the default, no
    ``ZEUS_BSO_SERVER_URL`` being set ('' elsewhere)."""
    if server != DEFAULT_SERVER or environment_setting(SERVER_URL_VARIABLE):
        return ""
    return f" ({DEFAULT_SERVER} is the default: pass --server or set {SERVER_URL_VARIABLE})"


def server_url_option(value: str) -> str:
    """A ``--server`` checked as the client checks it (`checked_server_url`): a usage error."""
    try:
        return checked_server_url(value.strip())
    except ConfigurationError as error:  # at every request it would fail as unreachable
        raise typer.BadParameter(str(error)) from None


Server = Annotated[
    str,
    typer.Option(
        "--server",
        envvar=SERVER_URL_VARIABLE,
        help="The zeus-bso server's URL",
        callback=server_url_option,
    ),
]
Token = Annotated[
    str | None,
    typer.Option(
        "--token", envvar="ZEUS_BSO_TOKEN", help="The server's bearer token", show_default=False
    ),
]
