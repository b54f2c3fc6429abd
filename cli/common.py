"""Helpers shared by the commands; no typer or rich here, so `doxa belief` starts fast.

The doxa imports inside the functions are lazy on purpose: duckdb and numpy load when a
command runs, not for `--help` or an argument error.

Errors reach a person as ``Error: …`` on standard error; with ``--json`` as one JSON
object there instead, ``{"error": …, "problems": [{line, field, reason, fix}]}``. Either
way the exit code is non-zero (1: refused or failed; 2: a bad option value).
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Any, Callable, Iterator, Optional

#: Set by the ``--json`` option of the command being run (cli/options.py) or the fast path.
_json_mode = False
#: A warning is printed when ``--at`` lies this many days past the newest evidence.
FUTURE_AT_DAYS = 1.0


def set_json_mode(on: bool) -> None:
    global _json_mode
    _json_mode = on


def fail(message: str, code: int = 1, problems: Optional[list[dict[str, Any]]] = None) -> None:
    if _json_mode:
        print(json.dumps({"error": message, "problems": problems or []}, ensure_ascii=False, default=str),
              file=sys.stderr)
    else:
        print(f"Error: {message}", file=sys.stderr)
    raise SystemExit(code)


def warn(message: str) -> None:
    if _json_mode:
        print(json.dumps({"warning": message}, ensure_ascii=False), file=sys.stderr)
    else:
        print(f"Warning: {message}", file=sys.stderr)


def markup_safe(value: Any) -> str:
    """User text made literal for rich ("[/]" or "[bold" print as written, never as markup)."""
    from rich.markup import escape

    return escape(str(value))


def emit_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=_json_default, ensure_ascii=False))


def _json_default(value: Any):
    if isinstance(value, datetime):
        return value.isoformat()
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"cannot serialise {type(value).__name__}")


def json_lines(handle) -> Iterator[tuple[int, Any, Optional[str]]]:
    """``(line number, value, problem)`` for each non-blank line of a JSON Lines file: the parsed
    value, or ``None`` and why the line is not JSON."""
    for number, line in enumerate(handle, start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line), None
        except json.JSONDecodeError as err:
            yield number, None, f"not valid JSON ({err.msg} at column {err.colno})"


def parse_at(at: Optional[str]) -> Optional[datetime]:
    if at is None:
        return None
    from doxa.data.times import parse_time

    try:
        return parse_time(at)
    except ValueError as err:
        fail(f"--at: {err}", 2)


def guarded(fn: Callable[[], Any]) -> Any:
    """Run a command body, turning doxa's own errors into a clear message and exit code 1."""
    from doxa.data.errors import IngestError, StoreError

    try:
        return fn()
    except IngestError as err:
        fail(str(err) if not _json_mode else err.summary, problems=[p.to_dict() for p in err.problems])
    except StoreError as err:
        fail(str(err))


def warn_if_after_evidence(mem, moment: Optional[datetime]) -> None:
    """Warn when ``--at`` lies more than FUTURE_AT_DAYS past both the newest evidence and now.

    Beliefs there have decayed toward base rates as if nothing had been heard since: right
    for a forecast, a surprise for a typo (2099 for 2026). An ``--at`` up to now is what the
    default (now) gives anyway, however old the evidence, so it never warns.
    """
    if moment is None:
        return
    from doxa.inference.read.memory import utc_now

    newest = mem.store.newest_evidence_time()
    if newest is None:
        return
    gap_days = (moment - max(newest, utc_now())).total_seconds() / 86400
    if gap_days > FUTURE_AT_DAYS:
        days = (moment - newest).total_seconds() / 86400
        warn(f"--at {moment:%Y-%m-%d} is {days:,.0f} days after the newest evidence ({newest:%Y-%m-%d}) and in "
             "the future: beliefs there have decayed toward base rates, as if nothing was heard since")


def open_memory(db: Optional[str], *, must_exist: bool = True):
    from doxa.data.errors import StoreError
    from doxa.data.store import Store, default_db_path
    from doxa.inference.read.memory import Memory

    path = db or default_db_path()
    try:
        # the store is checked at its first use (inside the command's own read or write), so a
        # command opens the file once
        memory = Memory(Store.open(path, create=not must_exist, check=not must_exist))
    except StoreError as err:
        fail(str(err))
    _close_with_the_command(memory)
    return memory


def _close_with_the_command(memory) -> None:
    """Let the file go when the command ends, also when a program runs commands in-process (tests, a
    notebook): anything a command left open on ``Store.con`` is released then, not at interpreter exit."""
    click_globals = sys.modules.get("typer._click.globals")  # typer's own click; the fast path never loads it
    context = click_globals.get_current_context(silent=True) if click_globals is not None else None
    if context is not None:
        context.call_on_close(memory.close)


def memory_at(db: Optional[str], at: Optional[str]):
    """The store opened for a read as of ``--at`` (None: now): ``(memory, moment)``, with the warning
    of :func:`warn_if_after_evidence` where the moment lies far past the evidence."""
    moment = parse_at(at)
    mem = open_memory(db)
    warn_if_after_evidence(mem, moment)
    return mem, moment


def show_belief(question: str, at: Optional[str], act_at: float, db: Optional[str], as_json: bool) -> None:
    """`doxa belief`: shared by the typer command and the start-up fast path."""
    mem, moment = memory_at(db, at)
    if as_json:
        from doxa.inference.agent import tools

        emit_json(guarded(lambda: tools.belief(mem, question, moment, act_at)))
        return
    b = guarded(lambda: mem.belief(question, moment, act_at=act_at))
    print(f"{b.question}: {b.text}")
    for option, p in sorted(b.answers.items(), key=lambda kv: -kv[1]):
        bar = "█" * int(round(p * 30))
        print(f"  {option:<24} {p:6.2f}  {bar}")
    verdict = "act on it" if b.act else f"too uncertain to act on (below {act_at:.2f}): ask"
    version = f"params v{b.params_version}" if b.params_version else "default params (no fit yet)"
    print(f"  → {b.top} ({b.p_top:.2f}): {verdict} · {b.n_evidence} evidence unit(s) · {version}")
