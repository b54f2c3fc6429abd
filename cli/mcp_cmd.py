"""`doxa mcp`: serve one store to MCP clients (stdio by default, streamable HTTP with --http), or with
--http --stores DIR one store per principal, each reached by that principal's own bearer token.

The MCP SDK is imported inside the command only, so no other command pays for it.
Registered by cli/main.py through :func:`register`.
"""

from __future__ import annotations

import json
import os
from typing import Optional

import typer

from doxa.cli.options import DbOption, JsonOption, flag

TOKEN_ENV = "DOXA_MCP_TOKEN"


def register(app: typer.Typer) -> None:
    app.command("mcp")(mcp)


def mcp(
    db: Optional[str] = DbOption,
    http: bool = flag(False, "--http", help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind with --http. Anything but loopback "
                                                         "(localhost, 127.0.0.0/8, ::1) needs a bearer token."),
    port: int = typer.Option(8765, "--port", min=0, max=65535, help="Port with --http."),
    token: Optional[str] = typer.Option(None, "--token", help=f"Bearer token every HTTP request must carry "
                                                              f"(default: ${TOKEN_ENV}); at least 43 visible "
                                                              f"characters: make one with --new-token.",
                                        show_default=False),
    allow_host: Optional[list[str]] = typer.Option(None, "--allow-host", help="Also accept this name in Host and "
                                                                             "Origin, on any port (a reverse "
                                                                             "proxy's public name); repeatable.",
                                                   metavar="NAME", show_default=False),
    new_token: bool = flag(False, "--new-token", help="Print a fresh bearer token (32 random bytes) and exit."),
    stores: Optional[str] = typer.Option(None, "--stores", help="With --http: serve the folder DIR of `doxa tokens`, "
                                                                "one store per principal; a request's bearer token "
                                                                "picks the principal and reaches its store only. "
                                                                "Not with --db or --token.",
                                         metavar="DIR", show_default=False),
    allow_forget: bool = flag(False, "--allow-forget", help="Offer the tool forget (erasure, as `doxa forget`); "
                                                            "without it no client can erase."),
    json_out: bool = JsonOption,
):
    """An MCP server over the store: belief, beliefs, uncertain, context, explain, search, ask, remember, and
    the feedback verbs correct, approve, outcome, reject, instruct. The store is opened per call, never held."""
    from doxa.cli.common import fail

    try:
        from doxa.inference.agent import mcp_http, mcp_server
    except ModuleNotFoundError as err:
        if err.name and err.name.split(".")[0] in ("mcp", "mcp_types"):
            fail("the MCP SDK is not installed: python -m pip install 'mcp>=2,<3'")
        raise
    if new_token:
        fresh = mcp_http.new_token()
        print(json.dumps({"token": fresh}) if json_out else fresh)
        return
    allow_hosts = tuple(allow_host or ())
    if stores is not None and (db is not None or token is not None):
        given = " and ".join(name for name, value in (("--db", db), ("--token", token)) if value is not None)
        fail(f"--stores serves one store per principal, each with its own token: it does not take {given}; "
             f"serve one store with --db and --token, or the principals of DIR with --stores DIR alone "
             f"(`doxa tokens add NAME --stores DIR` makes them)", 2)
    if stores is not None and not http:
        fail("--stores serves HTTP only (over stdio there is one client and one store): add --http, or serve "
             "one store over stdio with --db", 2)
    if not http and (token is not None or host != "127.0.0.1" or port != 8765 or allow_hosts):
        fail("--host, --port, --token and --allow-host apply to --http only (stdio needs none)", 2)
    if stores is not None:
        for name in allow_hosts:
            if problem := mcp_http.allow_host_problem(name):
                fail(problem, 2)
        _serve_principals(stores, host, port, allow_hosts, allow_forget)
        return
    given_as = "--token" if token is not None else f"${TOKEN_ENV}"
    token = token if token is not None else (os.environ.get(TOKEN_ENV) or None)
    if http:
        if token is not None and (problem := mcp_http.token_problem(token)):
            fail(f"the bearer token ({given_as}) is refused: {problem}", 2)
        if not mcp_http.is_loopback(host) and token is None:
            fail(f"--host {host} is not loopback: memory is personal data, so serving it there needs a bearer "
                 f"token (--token or ${TOKEN_ENV}; `doxa mcp --new-token` makes one); or keep the default "
                 f"--host 127.0.0.1", 2)
        for name in allow_hosts:
            if problem := mcp_http.allow_host_problem(name):
                fail(problem, 2)
    from doxa.cli.common import guarded
    from doxa.data.store import Store, default_db_path

    path = db or default_db_path()
    # a missing store, or a file doxa did not make, is refused at start with the CLI's message
    guarded(lambda: Store.open(path, create=False).close())
    mcp_server.configure_logging()
    server = mcp_server.build_server(path, allow_forget=allow_forget)
    if not http:
        server.run("stdio")
        return
    mcp_http.serve_http(server, host, port, token, allow_hosts)


def _serve_principals(folder: str, host: str, port: int, allow_hosts: tuple[str, ...], allow_forget: bool) -> None:
    """`doxa mcp --http --stores DIR`: every principal's token reaches its own store only; a token is always
    needed (it says whose store), so any bind may serve. ``$DOXA_MCP_TOKEN`` is not read here."""
    from doxa.cli.common import fail
    from doxa.inference.agent import mcp_http, mcp_server, principals

    try:
        table = principals.PrincipalTable(folder)
        if table.problem is not None:
            raise principals.PrincipalsError(table.problem)
    except principals.PrincipalsError as err:
        fail(f"--stores {folder}: {err}")
    mcp_server.configure_logging()

    def build(name: str):
        return mcp_server.build_server(table.store_path(name), allow_forget=allow_forget)

    mcp_http.serve_tenants(build, table, host, port, allow_hosts)
