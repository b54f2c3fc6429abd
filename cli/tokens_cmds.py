"""`doxa tokens add|list|revoke`: the principals of a folder of stores served by `doxa mcp --http --stores DIR`.

Each principal has a name, a store (DIR/NAME.duckdb) and a bearer token; the token is printed once,
by `add`, and only its SHA-256 is kept (:mod:`doxa.inference.agent.principals`). A running server
sees an added or a revoked token at its next request. Registered by cli/main.py through
:func:`register`.
"""

from __future__ import annotations

from typing import Callable, TypeVar

import typer

from doxa.cli.options import Commands, JsonOption
from doxa.cli.terminal import printable

T = TypeVar("T")

#: `doxa tokens …`: one sub-command per verb.
tokens = Commands(help="The principals of `doxa mcp --http --stores DIR`: each a name, a store DIR/NAME.duckdb and "
                       "a bearer token (add, list, revoke).", no_args_is_help=True)

StoresOption = typer.Option(..., "--stores", help="The folder of stores and principals that `doxa mcp --http "
                                                  "--stores DIR` serves.", metavar="DIR", show_default=False)
NameArg = typer.Argument(..., help="The principal's name: lower-case letters, digits, - and _ (it names the "
                                   "store file NAME.duckdb).")


def register(app: typer.Typer) -> None:
    app.add_typer(tokens, name="tokens")


def _refused(fn: Callable[[], T]) -> T:
    """Run ``fn``, turning a refusal about principals into the CLI's error line (exit code 1)."""
    from doxa.cli.common import fail
    from doxa.data.errors import StoreError
    from doxa.inference.agent.principals import PrincipalsError

    try:
        return fn()
    except (PrincipalsError, StoreError) as err:
        fail(str(err))
    except OSError as err:
        fail(f"{err.strerror or err}: {err.filename or ''}; check the folder given to --stores and its "
             f"permissions")


@tokens.command("add")
def add(name: str = NameArg, stores: str = StoresOption, as_json: bool = JsonOption):
    """Make a principal a bearer token (and its store, if absent); the token is printed this once."""
    from doxa.cli.common import emit_json
    from doxa.inference.agent import principals

    from doxa.cli.common import warn

    principal, token, made = _refused(lambda: principals.add(stores, name))
    store = principals.store_path(stores, name)
    if exposed := principals.exposure(stores):
        warn(exposed)
    if as_json:
        emit_json({"name": principal.name, "store": store, "store_created": made, "created": principal.created,
                   "token": token})
        return
    print(f"Principal {principal.name}: store {printable(store)} ({'created' if made else 'kept'}).")
    print("Its bearer token, shown this once (give it to that person only; doxa keeps only its hash):")
    print(token)


@tokens.command("list")
def list_principals(stores: str = StoresOption, as_json: bool = JsonOption):
    """The principals: name, when made, when revoked (never a token)."""
    from doxa.cli.common import emit_json
    from doxa.inference.agent import principals

    found = _refused(lambda: principals.read(stores))
    rows = [{"name": p.name, "created": p.created, "revoked": p.revoked,
             "store": principals.store_path(stores, p.name)} for p in sorted(found.values(), key=lambda p: p.name)]
    if as_json:
        emit_json(rows)
        return
    if not rows:
        print(f"No principals in {printable(stores)}: add one with `doxa tokens add NAME --stores {printable(stores)}`.")
        return
    width = max(len(row["name"]) for row in rows)
    for row in rows:
        state = f"revoked {row['revoked']}" if row["revoked"] else "active"
        print(f"{row['name']:<{width}}  created {row['created']}  {state}  {printable(row['store'])}")


@tokens.command("revoke")
def revoke(name: str = NameArg, stores: str = StoresOption, as_json: bool = JsonOption):
    """Revoke a principal's token from the next request on, a running server included; its store is kept."""
    from doxa.cli.common import emit_json
    from doxa.inference.agent import principals

    principal, already = _refused(lambda: principals.revoke(stores, name))
    store = principals.store_path(stores, name)
    if as_json:
        emit_json({"name": principal.name, "revoked": principal.revoked, "already_revoked": already, "store": store})
        return
    if already:
        print(f"Principal {principal.name} was already revoked ({principal.revoked}); nothing changed.")
        return
    print(f"Revoked {principal.name}: its token is refused from now on, a running server included. Its store "
          f"{printable(store)} is kept.")
