"""`doxa mcp`: serve one store to MCP clients (stdio by default, streamable HTTP with --http).

The MCP SDK is imported inside the command only, so no other command pays for it.
Registered by cli/main.py through :func:`register`.
"""

from __future__ import annotations

import os
from typing import Optional

import typer

from doxa.cli.options import DbOption, flag

TOKEN_ENV = "DOXA_MCP_TOKEN"


def register(app: typer.Typer) -> None:
    app.command("mcp")(mcp)


def mcp(
    db: Optional[str] = DbOption,
    http: bool = flag(False, "--http", help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind with --http. Anything but loopback "
                                                         "needs a bearer token."),
    port: int = typer.Option(8765, "--port", min=0, max=65535, help="Port with --http."),
    token: Optional[str] = typer.Option(None, "--token", help=f"Bearer token every HTTP request must carry "
                                                              f"(default: ${TOKEN_ENV}).", show_default=False),
):
    """An MCP server over the store: belief, beliefs, uncertain, context, explain, search, ask, remember, and
    the feedback verbs correct, approve, outcome, reject, instruct. The store is opened per call, never held."""
    from doxa.cli.common import fail, open_memory

    open_memory(db).close()  # refuse a missing store at start, with the CLI's message
    from doxa.data.store import default_db_path

    path = db or default_db_path()
    if not http and (token or host != "127.0.0.1" or port != 8765):
        fail("--host, --port and --token apply to --http only (stdio needs none)", 2)
    token = token or os.environ.get(TOKEN_ENV) or None
    try:
        from doxa.inference.agent import mcp_server
    except ModuleNotFoundError as err:
        if err.name and err.name.split(".")[0] in ("mcp", "mcp_types"):
            fail("the MCP SDK is not installed: python -m pip install 'mcp>=2,<3'")
        raise
    mcp_server.configure_logging()
    server = mcp_server.build_server(path)
    if not http:
        server.run("stdio")
        return
    if not mcp_server.is_loopback(host) and not token:
        fail(f"--host {host} is not loopback: memory is personal data, so serving it there needs a bearer token "
             f"(--token or ${TOKEN_ENV}); or keep the default --host 127.0.0.1", 2)
    mcp_server.serve_http(server, host, port, token)
