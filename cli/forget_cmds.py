"""`doxa forget`: erase a message, a source or a subject, with everything derived from it.

The command calls :func:`doxa.inference.agent.tools.forget` (the MCP tool ``forget`` calls the
same function, on a server started with --allow-forget) and prints what went, or with
``--dry-run`` what would go. What is removed and how its bytes leave the disk is
:mod:`doxa.data.erasure`'s. Registered by cli/main.py through :func:`register`.
"""

from __future__ import annotations

import sys
from typing import Any, Optional

import typer

from doxa.cli.options import DbOption, JsonOption, by_option, flag
from doxa.cli.terminal import printable

KINDS = ("message", "source", "subject")


def register(app: typer.Typer) -> None:
    app.command()(forget)


def forget(kind: Optional[str] = typer.Argument(None, help="What to forget: message, source or subject.",
                                                show_default=False),
           target: Optional[str] = typer.Argument(None, metavar="ID", help="Its id (`doxa search WORDS --json` "
                                                                          "shows message ids).", show_default=False),
           reason: Optional[str] = typer.Option(None, "--reason", help="Why (kept in the erasure record; say it "
                                                                       "without repeating what is forgotten)."),
           by: str = by_option("Who asks for it (kept in the erasure record).", "user"),
           dry_run: bool = flag(False, "--dry-run", help="Only show what would be removed; change nothing."),
           yes: bool = flag(False, "--yes", help="Do not ask for confirmation on a terminal."),
           listing: bool = flag(False, "--list", help="List the erasure records (what was forgotten, when, by "
                                                      "whom, why; never its content) and exit."),
           rewrite: bool = flag(False, "--rewrite", help="Rewrite the store file now, finishing an erasure whose "
                                                         "rewrite failed (a full disk) so its bytes leave the file."),
           db: Optional[str] = DbOption, as_json: bool = JsonOption):
    """Erase a message, a source or a subject and everything derived from it, from the store and the disk."""
    from doxa.cli.common import emit_json, fail, guarded, open_memory

    if listing or rewrite:
        if kind is not None or target is not None or dry_run:
            fail("--list and --rewrite take no KIND, ID or --dry-run: e.g. `doxa forget --list`", 2)
        from doxa.inference.read import forget as verbs

        mem = open_memory(db)
        if listing:
            found = guarded(lambda: verbs.erasures(mem))
            _show_list(found, as_json)
        else:
            done = guarded(lambda: verbs.rewrite_pending(mem))
            emit_json(done) if as_json else print(
                f"store file rewritten ({done['bytes']:,} bytes); {done['rewritten']} erasure(s) finished")
        return
    if kind is None or target is None:
        fail("say what to forget: `doxa forget message ID`, `doxa forget source ID` or `doxa forget subject ID` "
             "(add --dry-run to see what would go)", 2)
    if kind not in KINDS:
        fail(f"cannot forget a {kind!r}: the first argument is one of {', '.join(KINDS)}, "
             f"e.g. `doxa forget message {target}`", 2)
    from doxa.inference.agent import tools

    mem = open_memory(db)
    if not dry_run and not yes and not as_json and sys.stdin.isatty() and sys.stdout.isatty():
        preview = guarded(lambda: tools.forget(mem, kind, target, dry_run=True))
        _show(preview)
        if not typer.confirm("Forget all of this? It cannot be undone", default=False):
            fail("nothing was forgotten", 1)
    result = guarded(lambda: tools.forget(mem, kind, target, reason=reason, by=by, dry_run=dry_run))
    if as_json:
        emit_json(result)
        return
    _show(result)


def _show(result: dict[str, Any]) -> None:
    removed = {k: v for k, v in result["removed"].items() if v}
    listed = ", ".join(f"{n} {table.replace('_', ' ')}" for table, n in removed.items()) or "nothing"
    what = f"{result['kind']} {printable(result['id'])}"
    if result["dry_run"]:
        print(f"Forgetting {what} would remove: {listed}.")
    else:
        print(f"Forgot {what} (erasure {printable(result['erasure'])}): removed {listed}.")
        if result["rewritten"]:
            print("  The store file was rewritten: the removed text is no longer on disk in it.")
    if result["messages"]:
        shown = ", ".join(printable(m) for m in result["messages"][:10])
        more = f" and {len(result['messages']) - 10} more" if len(result["messages"]) > 10 else ""
        print(f"  messages: {shown}{more}")
    if result["questions"]:
        print(f"  questions: {', '.join(printable(q) for q in result['questions'])}")
    for v in result["values"]:
        print(f"  value {printable(v['value'])} of {printable(v['question'])}")
    if result["copies_kept"]:
        print(f"  kept, though they hold the same text: {', '.join(printable(m) for m in result['copies_kept'])} "
              f"(forget each by its id too)")
    if result["emptied_sources"]:
        print(f"  sources left with no message (kept; `doxa forget source ID` removes one): "
              f"{', '.join(printable(s) for s in result['emptied_sources'])}")
    if result["dry_run"]:
        if result["changed_questions"]:
            print(f"  beliefs that would change: {', '.join(printable(q) for q in result['changed_questions'])}")
        return
    for b in result["beliefs"]:
        def top(x):
            return f"{printable(x['top'])} {x['p_top']:.2f}" if x and x["top"] else "no answer"

        after = "removed" if b["removed"] else top(b["after"])
        print(f"  {printable(b['question'])}: {top(b['before'])} → {after}")
    print(f"  Note: {result['note']}.")


def _show_list(found: list[dict[str, Any]], as_json: bool) -> None:
    from doxa.cli.common import emit_json

    if as_json:
        emit_json(found)
        return
    if not found:
        print("Nothing has been forgotten in this store.")
        return
    for e in found:
        removed = ", ".join(f"{n} {t.replace('_', ' ')}" for t, n in e["removed"].items() if n)
        pending = "" if e["rewritten"] else "  (file not rewritten yet: run `doxa forget --rewrite`)"
        why = f" — {printable(e['reason'])}" if e["reason"] else ""
        print(f"{e['erased_at'][:19]}  {e['kind']} {printable(e['target'])} by {printable(e['erased_by'])}{why}: "
              f"{removed}{pending}")
