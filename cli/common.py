"""Helpers shared by the commands; no typer or rich here, so `doxa belief` starts fast.

The doxa imports inside the functions are lazy on purpose: duckdb and numpy load when a
command runs, not for `--help` or an argument error.

Errors reach a person as ``Error: …`` on standard error; with ``--json`` as one JSON
object there instead, ``{"error": …, "problems": [{line, field, reason, fix}]}``. Either
way the exit code is non-zero (1: refused or failed; 2: a bad option value).

Every human-readable line goes through :func:`doxa.cli.terminal.printable` (user text, also inside
an ``Error:`` line, can hold characters a terminal would obey); ``--json`` keeps the exact text.
:func:`report_uncaught` is the one top-level handler: every entry point (the fast path of
`doxa belief` in cli/entry.py, the typer group in cli/main.py) turns what escapes a command
into one such line.
"""

from __future__ import annotations

import errno
import json
import os
import sys
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Callable, Iterator, NoReturn, Optional

from doxa.cli.terminal import json_safe, printable

#: Set by the ``--json`` option of the command being run (cli/options.py) or the fast path.
_json_mode = False
#: A warning is printed when ``--at`` lies this many days past the newest evidence.
FUTURE_AT_DAYS = 1.0


def set_json_mode(on: bool) -> None:
    global _json_mode
    _json_mode = on


def fail(message: str, code: int = 1, problems: Optional[list[dict[str, Any]]] = None) -> NoReturn:
    if _json_mode:
        print(json_safe(json.dumps({"error": message, "problems": problems or []}, ensure_ascii=False, default=str)),
              file=sys.stderr)
    else:
        print(f"Error: {printable(message, multiline=True)}", file=sys.stderr)
    raise SystemExit(code)


def warn(message: str) -> None:
    if _json_mode:
        print(json_safe(json.dumps({"warning": message}, ensure_ascii=False)), file=sys.stderr)
    else:
        print(f"Warning: {printable(message, multiline=True)}", file=sys.stderr)


def markup_safe(value: Any) -> str:
    """User text made safe for rich and for the terminal: "[/]" or "[bold" print as written, never as
    markup, and a control or bidi character as its escape (:func:`doxa.cli.terminal.printable`)."""
    from rich.markup import escape

    return escape(printable(value))


def answers_text(answers: dict[str, float]) -> str:
    """A belief's answers on one line, most probable first: ``vegetarian 0.81  vegan 0.12  …``."""
    return "  ".join(f"{o} {p:.2f}" for o, p in sorted(answers.items(), key=lambda kv: -kv[1]))


# ---------------------------------------------------------------------------- the top-level handler
def prepare_streams() -> None:
    """Set once by the console entry point: standard input is read as UTF-8 (what every input of doxa
    is), strictly, whatever the locale, so bytes that are not UTF-8 are refused by name
    (:func:`utf8_input`) instead of read as other text; output a locale cannot encode (an arrow
    under ``LC_ALL=C``) is written as its escape, ``\\u2192``, instead of failing."""
    for stream, settings in ((sys.stdin, {"encoding": "utf-8", "errors": "strict"}),
                             (sys.stdout, {"errors": "backslashreplace"}),
                             (sys.stderr, {"errors": "backslashreplace"})):
        try:
            stream.reconfigure(**settings)
        except (AttributeError, ValueError, OSError):  # no such stream, or one a caller put in its place
            pass


def _as_bytes(text: str) -> str:
    """``text`` as the bytes it came from, undecodable ones as ``\\xff`` (Python keeps a byte that is
    not UTF-8 in an argument or a file name as a lone surrogate)."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no byte gives
        return printable(text)


def check_arguments(argv: list[str]) -> None:
    """Refuse an argument that is not UTF-8 text, naming it, before anything reads it."""
    for number, arg in enumerate(argv, start=1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            fail(f"argument {number} is not valid UTF-8: {printable(_as_bytes(arg))}: doxa reads its arguments "
                 "as UTF-8 text; convert it, e.g. $(printf %s ARG | iconv -f latin1 -t utf-8)", 2)


def not_utf8(err: UnicodeDecodeError, path: Optional[str] = None) -> str:
    """Why an input was refused: the first byte that is not UTF-8 and the text just before it."""
    name = "standard input" if path == "-" else printable(path) if path else "an input"
    bad = err.object[err.start:err.start + 1] if isinstance(err.object, bytes) else b""
    before = err.object[max(0, err.start - 30):err.start] if isinstance(err.object, bytes) else b""
    before = before.decode("utf-8", "ignore").rsplit("\n", 1)[-1]
    where = f" after “{printable(before)}”" if before else ""
    return (f"{name} is not UTF-8 (byte 0x{bad.hex() or '??'}{where}): doxa reads UTF-8 text; convert it, "
            "e.g. iconv -f latin1 -t utf-8")


@contextmanager
def utf8_input(path: str) -> Iterator[None]:
    """Reading ``path`` (``-``: standard input): bytes that are not UTF-8 end the command with :func:`not_utf8`."""
    try:
        yield
    except UnicodeDecodeError as err:
        fail(not_utf8(err, path))


def _known(err: Exception) -> Optional[str]:
    """What to tell a person about an error that is no bug of doxa's, or None when it is one."""
    from doxa.data.errors import StoreError

    if isinstance(err, StoreError):  # doxa's own refusal, raised where a command did not guard it
        return str(err)
    if isinstance(err, UnicodeDecodeError):
        return not_utf8(err)
    if isinstance(err, UnicodeEncodeError) and any("\ud800" <= c <= "\udfff" for c in err.object[err.start:err.end]):
        near = printable(_as_bytes(err.object[max(0, err.start - 30):err.end + 30]))
        return (f"text that is not valid UTF-8 reached doxa (“{near}”): from an argument, an environment variable "
                "such as DOXA_DB, or an input; give UTF-8 text")
    if isinstance(err, OSError) and err.filename is not None:
        name = os.fsdecode(err.filename) if isinstance(err.filename, bytes) else str(err.filename)
        path = printable(_as_bytes(name))
        reason = err.strerror or type(err).__name__
        fix = {IsADirectoryError: "give a file, not a directory", FileNotFoundError: "check the path",
               PermissionError: "check its permissions", NotADirectoryError: "check the path"}.get(type(err))
        if err.errno == errno.ELOOP:
            fix = "its symbolic links lead in a circle: point the link at a file"
        return f"cannot open {path}: {reason}" + (f": {fix}" if fix else "")
    if isinstance(err, OSError):
        return f"the system refused: {printable(err.strerror or err)}"
    if isinstance(err, RecursionError):
        return "the input is nested too deeply to read (Python's recursion limit): flatten it"
    if isinstance(err, MemoryError):
        return "out of memory: give a smaller input (or a smaller --limit)"
    return None


def report_uncaught(err: Exception, wants_json: bool) -> NoReturn:
    """The last line of defence of every entry point: one ``Error:`` line (or JSON object) for what
    escaped a command. A closed pipe goes on up (the entry point ends quietly); ``DOXA_DEBUG=1``
    re-raises, for the traceback."""
    if os.environ.get("DOXA_DEBUG") or isinstance(err, BrokenPipeError):
        raise err
    set_json_mode(wants_json)
    known = _known(err)
    if known is not None:
        fail(known)
    detail = " ".join(str(err).split())[:300]
    fail(f"internal error ({type(err).__name__}: {detail}). This is a bug in doxa: please report it with the "
         "command you ran; DOXA_DEBUG=1 shows the traceback", 1)


def emit_json(value: Any) -> None:
    print(json_safe(json.dumps(value, indent=2, default=_json_default, ensure_ascii=False)))


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
        except ValueError:  # Python reads integers of at most 4,300 digits
            yield number, None, "number too long (a JSON integer of more than 4300 digits): write numbers of at most 4300 digits"
        except RecursionError:
            yield number, None, "nested too deeply to read: one flat JSON object a line"


def parse_at(at: Optional[str], option: str = "--at") -> Optional[datetime]:
    """A time option's value parsed (None stays None); a bad time is a command-line mistake naming ``option``."""
    if at is None:
        return None
    from doxa.data.times import parse_time

    try:
        return parse_time(at)
    except ValueError as err:
        fail(f"{option}: {err}", 2)


def guarded(fn: Callable[[], Any]) -> Any:
    """Run a command body, turning doxa's own errors into a clear message and exit code 1."""
    from doxa.data.errors import IngestError, StoreError

    try:
        return fn()
    except IngestError as err:
        capped = err.to_dict()  # the first MAX_REPORTED_PROBLEMS, as the text lists them; the rest counted
        more = f" (the first {len(capped['problems'])} listed, {capped['more']} more)" if capped["more"] else ""
        fail(str(err) if not _json_mode else err.summary + more, problems=capped["problems"])
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
    from doxa.data.times import utc_now

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
    b = guarded(lambda: mem.belief(question, moment, act_at=act_at))
    if as_json:  # what tools.belief (the MCP tool) returns, without loading the agent layer for one read
        emit_json(b.to_dict())
        return
    print(f"{printable(b.question)}: {printable(b.text)}")
    for option, p in sorted(b.answers.items(), key=lambda kv: -kv[1]):
        bar = "█" * int(round(p * 30))
        print(f"  {printable(option):<24} {p:6.2f}  {bar}")
    verdict = "act on it" if b.act else f"too uncertain to act on (below {act_at:.2f}): ask"
    version = f"params v{b.params_version}" if b.params_version else "default params (no fit yet)"
    print(f"  → {printable(b.top)} ({b.p_top:.2f}): {verdict} · {b.n_evidence} evidence unit(s) · {version}")
