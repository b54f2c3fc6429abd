"""Helpers shared by the commands; no typer or rich here, so `doxa belief` starts fast."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Any, Callable, Optional


def fail(message: str, code: int = 1) -> None:
    print(f"Error: {message}", file=sys.stderr)
    raise SystemExit(code)


def emit_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=_json_default, ensure_ascii=False))


def _json_default(value: Any):
    if isinstance(value, datetime):
        return value.isoformat()
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"cannot serialise {type(value).__name__}")


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
    except (StoreError, IngestError) as err:
        fail(str(err))


def open_memory(db: Optional[str], *, must_exist: bool = True):
    from doxa.data.errors import StoreError
    from doxa.data.store import Store, default_db_path
    from doxa.inference.memory import Memory

    path = db or default_db_path()
    try:
        # the store is checked at its first use (inside the command's own read or write), so a
        # command opens the file once
        return Memory(Store.open(path, create=not must_exist, check=not must_exist))
    except StoreError as err:
        fail(str(err))


def show_belief(question: str, at: Optional[str], act_at: float, db: Optional[str], as_json: bool) -> None:
    """`doxa belief`: shared by the typer command and the start-up fast path."""
    moment = parse_at(at)
    mem = open_memory(db)
    b = guarded(lambda: mem.belief(question, moment, act_at=act_at))
    if as_json:
        emit_json(b.to_dict())
        return
    print(f"{b.question}: {b.text}")
    for option, p in sorted(b.answers.items(), key=lambda kv: -kv[1]):
        bar = "█" * int(round(p * 30))
        print(f"  {option:<24} {p:6.2f}  {bar}")
    verdict = "act on it" if b.act else f"too uncertain to act on (below {act_at:.2f}): ask"
    version = f"params v{b.params_version}" if b.params_version else "default params (no fit yet)"
    print(f"  → {b.top} ({b.p_top:.2f}): {verdict} · {b.n_evidence} evidence unit(s) · {version}")
