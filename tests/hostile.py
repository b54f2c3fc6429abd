"""Hostile input and its verdicts: the generators behind tests/test_hostile.py and bench/hostile.py.

A *variant* is one record bent the way a hostile user or a careless exporter bends it (a
number sent as a string, an id with a zero-width space, a text that clears the screen, an
integer past its column), with the verdict the contract (docs/formats.md) gives it:
``accept`` or ``refuse``. :func:`run_variant` ingests it into a store through the command
line, as a user would, and returns what went wrong, by class:

- ``wrong_accept``: a record the contract refuses was stored (or one it takes was refused);
- ``internal_error``: a traceback or "internal error" reached the user;
- ``raw_escape``: a C0/C1 control or a bidi/format character reached the terminal in a
  human-readable output (the ingest report, or a read of what was stored);
- ``partial_write``: a refused file changed the store.

Every variant uses fresh ids (a counter), so many run one after another on one store: a
refused one must leave it exactly as it was, an accepted one only adds.
"""

from __future__ import annotations

import itertools
import json
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import records as R

#: The integer columns of the schema are 32-bit: one past each end.
INT32_PAST = (2**31, -(2**31) - 1)
#: The longest free text the contract takes (docs/formats.md).
TEXT_CAP = 1_000_000

#: Text that a terminal would act on: escapes, a bell, a carriage return, C1, bidi overrides.
TERMINAL_TRICKS = [
    "\x1b[2J\x1b[H\x1b[32m→ maya.diet: vegetarian (0.99): act on it",
    "\x1b]0;owned\x07", "\rvegetarian 0.99", "\x9b31m", "\u202eevil\u202c", "a\u2066b\u2069", "\x00nul",
    "\x08\x08\x08", "\x7f", "tab\there", "\u200bzero",
]
#: Characters an id may not hold (docs/formats.md: ids): zero-width, bidi, control, space.
ID_POISON = ["\u200b", "\u200d", "\ufeff", "\u202e", "\u2066", "\u200f", "\x1b", "\x00", "\x85", " ", "\t", "\n"]
#: Ids that look like stored ones; taken (they are new ids), with a warning.
LOOKALIKES = [("maya", "m\u0430ya"), ("maya", "MAYA"), ("maya", "Maya")]

#: Characters that must never reach a terminal raw in human output.
def is_unsafe_for_terminal(ch: str) -> bool:
    if ch in "\n":
        return False
    category = unicodedata.category(ch)
    return category in ("Cc", "Cf", "Zl", "Zp") or ch == "\ufeff"


def raw_escapes(text: str) -> list[str]:
    """The characters of ``text`` that a terminal would act on (newline is fine)."""
    return sorted({ch for ch in text if is_unsafe_for_terminal(ch)})


@dataclass(frozen=True)
class Variant:
    name: str
    lines: tuple[bytes, ...]
    expect: str  # "accept" | "refuse"
    #: commands whose human output must show what was stored, safely (run when accepted)
    reads: tuple[tuple[str, ...], ...] = ()
    #: a check on the store after an accepted ingest: returns a problem or None
    after: Callable[[Any], str | None] | None = field(default=None, compare=False)


def _line(record: Any) -> bytes:
    return json.dumps(record, ensure_ascii=False).encode("utf-8", "surrogatepass")


def _raw_line(record: dict, key: str, raw: str) -> bytes:
    """``record`` as JSON with the value of ``key`` written as the raw JSON text ``raw``."""
    marker = "__RAW__"
    text = json.dumps({**record, key: marker}, ensure_ascii=False)
    return text.replace(json.dumps(marker), raw).encode()


class Generator:
    """Fresh, valid records around the demo store (examples/maya.jsonl), and their hostile twins."""

    def __init__(self, seed: int = 0, start: int = 0):
        import random

        self._ids = itertools.count(start)
        self.rng = random.Random(seed)

    def fresh(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids)}"

    # ------------------------------------------------------------------ valid records, fresh ids
    def message(self, text: str = "Maya mentioned the new gym downtown") -> dict:
        return R.message(self.fresh("hm"), "maya-chat", "2026-05-01", text)

    def question(self, text: str = "Which gym does Maya go to?") -> dict:
        qid = self.fresh("maya.gym")
        return R.question(qid, ["north gym", "south gym"], kind="gym", subject="maya", text=text)

    def settlement(self) -> dict:
        # a settlement is identified by its question and time: a fresh second for each
        second = next(self._ids)
        at = f"2026-05-02T{second // 3600 % 24:02d}:{second // 60 % 60:02d}:{second % 60:02d}Z"
        return {**R.settlement("maya.home", "12 Elm Street", at, how="outcome"),
                "note": "letter delivered", "p_before": 0.5, "params_version": 1}

    def instruction(self, text: str = "Book quiet places for Maya") -> dict:
        return R.instruction(self.fresh("hi"), text, "2026-05-03", subject="maya")

    def reading(self, message_id: str) -> dict:
        return R.reading(message_id, "maya.diet", {"vegetarian": 0.6, "eats fish": 0.2, "eats meat": 0.1},
                         unclear=0.1)

    def source(self, layers: list[str] | None = None, trust: float | None = 0.7) -> dict:
        return R.source(self.fresh("hs"), layers or ["person", "self", "chat"], trust=trust)

    # ------------------------------------------------------------------ the catalogue
    def numeric(self) -> Iterator[Variant]:
        """Every number of the contract sent as a string, a boolean, past its range, or too long to read."""
        for label, make, key, kind in self._numeric_fields():
            parents, good = make()
            yield Variant(f"{label}=ok", (*map(_line, parents), _line(good)), "accept")
            bad: list[tuple[str, str]] = [("string", json.dumps(str(good[key]))), ("true", "true"),
                                          ("false", "false"), ("digits-5000", "9" * 5000),
                                          ("exp-overflow", "1e999"), ("list", "[0.5]"), ("object", "{}")]
            if kind == "int":
                bad += [("int32+1", str(INT32_PAST[0])), ("int32-1", str(INT32_PAST[1])),
                        ("int64+1", str(2**63)), ("fraction", "7.5"),
                        ("int-random", str(self.rng.choice([1, -1]) * self.rng.randint(2**31, 2**90)))]
            else:
                bad += [("above-1", "1.5"), ("negative", "-0.25")]
            for how, raw in bad:
                parents, record = make()
                yield Variant(f"{label}={how}", (*map(_line, parents), _raw_line(record, key, raw)), "refuse")

    def _numeric_fields(self):
        """(label, a maker of (records it needs first, the record), the numeric key, int or prob)."""
        def reading():
            message = self.message()
            return [message], self.reading(message["id"])

        return [
            ("source.trust", lambda: ([], self.source()), "trust", "prob"),
            ("settlement.p_before", lambda: ([], self.settlement()), "p_before", "prob"),
            ("settlement.params_version", lambda: ([], self.settlement()), "params_version", "int"),
            ("question.instructions_version", lambda: ([], {**self.question(), "instructions_version": 1}),
             "instructions_version", "int"),
            ("reading.one_off", reading, "one_off", "prob"),
            ("reading.unrelated", reading, "unrelated", "prob"),
        ]

    def ids(self) -> Iterator[Variant]:
        """Ids holding characters that make two ids look alike or reorder a line; and look-alikes of stored ids."""
        for poison in ID_POISON:
            shown = poison.encode("unicode_escape").decode()
            for label, lines in self._id_records(lambda prefix: self._poisoned(self.fresh(prefix), poison)):
                yield Variant(f"{label}.id+{shown}", lines, "refuse")
        for stored, twin in LOOKALIKES:
            # a new subject whose id is a look-alike of a stored one: taken, with a warning
            yield Variant(f"subject.id~{stored}", (_line(R.subject(twin + self.fresh("_"), "Twin")),), "accept")

    def _poisoned(self, clean: str, poison: str) -> str:
        at = self.rng.randint(0, len(clean))
        return clean[:at] + poison + clean[at:]

    def trick(self) -> str:
        """One to three terminal tricks, joined by random printable text."""
        parts = self.rng.sample(TERMINAL_TRICKS, self.rng.randint(1, 3))
        glue = "".join(self.rng.choice("abc xyz→é漢🙂") for _ in range(self.rng.randint(0, 6)))
        return glue.join(parts)

    def _id_records(self, bad_id: Callable[[str], str]):
        yield "subject", (_line(R.subject(bad_id("hsub"), "Someone")),)
        yield "source", (_line(R.source(bad_id("hs"), ["person", "self", "chat"])),)
        yield "question", (_line(R.question(bad_id("maya.q"), ["a", "b"], kind="k", subject="maya")),)
        yield "message", (_line(R.message(bad_id("hm"), "maya-chat", "2026-05-01", "hello")),)
        yield "instruction", (_line(R.instruction(bad_id("hi"), "be kind", "2026-05-01")),)

    def texts(self) -> Iterator[Variant]:
        """Free texts that would drive a terminal: kept verbatim, and shown escaped."""
        for trick in [*TERMINAL_TRICKS, self.trick(), self.trick()]:
            shown = trick.encode("unicode_escape").decode()[:24]
            message = self.message(f"Maya loves lilies {trick}")
            yield Variant(f"message.text~{shown}", (_line(message),), "accept",
                          reads=(("search", "lilies"), ("explain", "maya.diet")),
                          after=_stored_text("messages", message["id"], message["text"]))
            question = self.question(f"Which gym? {trick}")
            yield Variant(f"question.text~{shown}", (_line(question),), "accept",
                          reads=(("belief", question["id"]), ("beliefs", "--subject", "maya"),
                                 ("context", "gym for Maya")),
                          after=_stored_text("questions", question["id"], question["text"]))
            instruction = self.instruction(f"Quiet places {trick}")
            yield Variant(f"instruction.text~{shown}", (_line(instruction),), "accept",
                          reads=(("context", "dinner with Maya"),),
                          after=_stored_text("instructions", instruction["id"], instruction["text"]))
            settlement = {**self.settlement(), "note": f"arrived {trick}"}
            yield Variant(f"settlement.note~{shown}", (_line(settlement),), "accept")

    def caps(self) -> Iterator[Variant]:
        """Every free text one character past the cap, and blank instructions."""
        long = "x" * (TEXT_CAP + 1)
        yield Variant("message.text>cap", (_line(self.message(long)),), "refuse")
        yield Variant("question.text>cap", (_line(self.question(long)),), "refuse")
        yield Variant("instruction.text>cap", (_line(self.instruction(long)),), "refuse")
        yield Variant("settlement.note>cap", (_line({**self.settlement(), "note": long}),), "refuse")
        yield Variant("subject.name>cap", (_line(R.subject(self.fresh("hsub"), long)),), "refuse")
        for blank in ("", "   ", "\t\n", "\u3000"):
            yield Variant(f"instruction.text=blank{len(blank)}", (_line(self.instruction(blank)),), "refuse")

    def layers(self) -> Iterator[Variant]:
        """The assistant's own notes never count, however the layer is spelt."""
        for spelling in ("assistant", "Assistant", "ASSISTANT", "aSSistant"):
            source = self.source([spelling, "notes"], trust=None)
            yield Variant(f"source.layers={spelling}", (_line(source),), "accept",
                          after=_is_assistant(source["id"]))

    def structure(self) -> Iterator[Variant]:
        """Lines that are not records: not UTF-8, not JSON, not objects, unknown or missing fields."""
        good = self.message()
        yield Variant("not-utf8", (_line(good)[:-2] + b"\xff\xfe\"}",), "refuse")
        yield Variant("not-json", (b'{"type": "message", "id": ',), "refuse")
        yield Variant("not-object", (b'["message"]',), "refuse")
        yield Variant("unknown-field", (_line({**self.message(), "sql": "DROP TABLE messages"}),), "refuse")
        missing = self.message()
        del missing["sent_at"]
        yield Variant("missing-field", (_line(missing),), "refuse")
        yield Variant("nul-in-json", (_line(self.message()).replace(b'"type"', b'"ty\\u0000pe"'),), "refuse")
        yield Variant("lone-surrogate", (_line(self.message("\ud800 half a pair")),), "refuse")
        yield Variant("deep-nesting", (b'{"type": "message", "text": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",),
                      "refuse")

    def all(self) -> list[Variant]:
        return [*self.numeric(), *self.ids(), *self.texts(), *self.caps(), *self.layers(), *self.structure()]


def _stored_text(table: str, record_id: str, text: str):
    def check(con) -> str | None:
        row = con.execute(f"SELECT text FROM {table} WHERE id = ?", [record_id]).fetchone()
        if row is None:
            return f"{table} {record_id!r} not stored"
        return None if row[0] == text else f"{table} {record_id!r} stored as {row[0]!r}, not verbatim"
    return check


def _is_assistant(source_id: str):
    def check(con) -> str | None:
        row = con.execute("SELECT is_assistant FROM sources WHERE id = ?", [source_id]).fetchone()
        return None if row and row[0] else f"source {source_id!r} is not the assistant's"
    return check


# ---------------------------------------------------------------------------- running a variant
@dataclass
class Outcome:
    variant: str
    problems: dict[str, str]  # class → detail


def snapshot(db: str) -> dict:
    from doxa.data.store import Store

    with Store.open(db) as store:
        return R.snapshot(store)


def run_variant(invoke: Callable[[list[str]], tuple[int, str]], db: str, work: Path, variant: Variant,
                *, pad: tuple[bytes, ...] = (), as_json: bool = False, check_unchanged: bool = True) -> Outcome:
    """Ingest ``variant`` (after ``pad``, lines already stored) into ``db``; what went wrong, by class.

    ``invoke(argv)`` runs the command line and returns (exit code, everything printed).
    """
    path = work / "variant.jsonl"
    path.write_bytes(b"\n".join((*pad, *variant.lines)) + b"\n")
    before = snapshot(db) if check_unchanged else None
    code, output = invoke(["ingest", str(path), "--db", db, *(["--json"] if as_json else [])])
    problems: dict[str, str] = {}
    _look_at_output(problems, "ingest", code, output, human=not as_json)
    accepted = code == 0
    if accepted != (variant.expect == "accept"):
        problems["wrong_accept"] = f"expected {variant.expect}, exit {code}: {output[:300]!r}"
    if not accepted and before is not None and snapshot(db) != before:
        problems["partial_write"] = "a refused file changed the store"
    if accepted and variant.expect == "accept":
        if variant.after is not None:
            import duckdb

            con = duckdb.connect(db, read_only=True)
            try:
                detail = variant.after(con)
            finally:
                con.close()
            if detail:
                problems["wrong_accept"] = detail
        for argv in variant.reads:
            code, output = invoke([*argv, "--db", db])
            _look_at_output(problems, " ".join(argv[:1]), code, output, human=True)
    return Outcome(variant.name, problems)


def _look_at_output(problems: dict[str, str], label: str, code: int, output: str, *, human: bool) -> None:
    if "Traceback" in output or "internal error" in output or code not in (0, 1, 2):
        problems.setdefault("internal_error", f"{label}: exit {code}: {output[-300:]!r}")
    escapes = raw_escapes(output) if human else []
    if escapes:
        problems.setdefault("raw_escape", f"{label}: {[hex(ord(c)) for c in escapes]} in {output[:200]!r}")


def cli_runner_invoke(argv: list[str]) -> tuple[int, str]:
    """Run the command line in-process (typer's test runner), as tests/test_cli.py does."""
    from typer.testing import CliRunner

    from doxa.cli.main import app

    result = CliRunner().invoke(app, argv)
    output = result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        import traceback

        output += "Traceback\n" + "".join(traceback.format_exception(result.exception))
    return result.exit_code, output


#: A file of this many lines goes through the fast path (data/fast_ingest.py).
FAST_LINES = 5_000


def padding(db: str, work: Path) -> tuple[bytes, ...]:
    """FAST_LINES message lines, stored once: sent again beside a variant they add nothing, but they make the
    file long enough for the fast path."""
    lines = tuple(json.dumps({"type": "message", "id": f"pad{i}", "source": "maya-chat", "sent_at": "2025-01-01",
                              "text": f"padding line {i}"}).encode() for i in range(FAST_LINES))
    path = work / "padding.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    code, output = cli_runner_invoke(["ingest", str(path), "--db", db])
    if code != 0:
        raise RuntimeError(f"could not store the padding: {output}")
    return lines


def demo_store(db: str) -> None:
    """The demo's records (examples/maya.jsonl) in a new store at ``db``."""
    import doxa

    examples = Path(__file__).resolve().parent.parent / "examples" / "maya.jsonl"
    with doxa.open(db) as mem:
        mem.ingest_file(examples)


# ---------------------------------------------------------------------------- hostile command lines
@dataclass(frozen=True)
class CommandCase:
    """A command line (and standard input) a user can type; refused or answered, never a traceback."""
    name: str
    argv: tuple[bytes, ...]
    stdin: bytes = b""
    env: tuple[tuple[str, str], ...] = ()
    #: files that must be byte for byte unchanged afterwards
    untouched: tuple[str, ...] = ()


def command_cases(work: Path, db: str) -> list[CommandCase]:
    """Arguments that are not UTF-8, numbers past any range, directories, loops and foreign files as paths,
    standard input in another encoding under a strict locale."""
    import duckdb

    directory = work / "a-directory"
    directory.mkdir(exist_ok=True)
    loop = work / "loop.duckdb"
    if not loop.is_symlink():
        loop.symlink_to(work / "loop2.duckdb")
        (work / "loop2.duckdb").symlink_to(loop)
    text_file = work / "notes.txt"
    text_file.write_text("not a database\n")
    foreign = work / "analytics.duckdb"
    if not foreign.exists():
        con = duckdb.connect(str(foreign))
        con.execute("CREATE TABLE visits (day DATE, n INTEGER); CREATE TABLE messages (x INTEGER)")
        con.close()
    strict = (("LC_ALL", "C"), ("PYTHONIOENCODING", "ascii:strict"), ("PYTHONUTF8", "0"))
    d = db.encode()
    cases = [
        CommandCase("belief-arg-not-utf8", (b"belief", b"maya.\xff", b"--db", d)),
        CommandCase("belief-json-arg-not-utf8", (b"belief", b"\xffmaya", b"--json", b"--db", d)),
        CommandCase("search-arg-not-utf8", (b"search", b"lil\xe9es", b"--db", d)),
        CommandCase("db-not-utf8", (b"beliefs", b"--db", str(work).encode() + b"/\xff.duckdb")),
        CommandCase("act-at-huge", (b"belief", b"maya.diet", b"--act-at", b"1e999999", b"--db", d)),
        CommandCase("act-at-nan", (b"belief", b"maya.diet", b"--act-at", b"nan", b"--db", d)),
        CommandCase("at-year-99999", (b"belief", b"maya.diet", b"--at", b"99999-01-01", b"--db", d)),
        CommandCase("at-digits", (b"beliefs", b"--at", b"9" * 5000, b"--db", d)),
        CommandCase("limit-huge", (b"search", b"lilies", b"--limit", b"9" * 40, b"--db", d)),
        CommandCase("instruct-blank", (b"instruct", b"maya", b"   ", b"--db", d)),
        CommandCase("instruct-not-utf8", (b"instruct", b"maya", b"quiet \xff places", b"--db", d)),
        CommandCase("stdin-latin1-strict", (b"ingest", b"-", b"--db", d),
                    stdin='{"type":"message","id":"lat1","source":"maya-chat","sent_at":"2026-01-01",'
                          '"text":"café"}\n'.encode("latin-1"), env=strict),
        CommandCase("stdin-utf8-strict", (b"ingest", b"-", b"--db", d),
                    stdin='{"type":"message","id":"u8-0","source":"maya-chat","sent_at":"2026-01-01",'
                          '"text":"caf\u00e9 \u202e"}\n'.encode(), env=strict),
        CommandCase("stdin-utf16", (b"ingest", b"-", b"--db", d), stdin='{"type":"subject"}\n'.encode("utf-16")),
    ]
    for verb in (b"belief", b"beliefs", b"search", b"explain", b"ops", b"calibration", b"train", b"context",
                 b"ingest"):
        args = {b"belief": (b"maya.diet",), b"search": (b"lilies",), b"explain": (b"maya.diet",),
                b"context": (b"dinner",), b"ingest": (str(text_file).encode(),)}.get(verb, ())
        for label, path in (("dir", directory), ("loop", loop), ("text-file", text_file), ("foreign", foreign)):
            cases.append(CommandCase(f"{verb.decode()}-db-{label}", (verb, *args, b"--db", str(path).encode()),
                                     untouched=(str(text_file), str(foreign))))
    cases.append(CommandCase("ingest-a-directory", (b"ingest", str(directory).encode(), b"--db", d)))
    cases.append(CommandCase("ingest-a-loop", (b"ingest", str(loop).encode(), b"--db", d)))
    return cases


def run_command_case(case: CommandCase, doxa_command: list[str], timeout: float = 120) -> dict[str, str]:
    """Run ``case`` as a process (real bytes in argv, a real locale); what went wrong, by class."""
    import hashlib
    import os
    import subprocess

    def digest(path: str) -> str:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()

    before = {path: digest(path) for path in case.untouched}
    env = {**os.environ, **dict(case.env)}
    env.pop("DOXA_DEBUG", None)
    done = subprocess.run([os.fsencode(a) for a in doxa_command] + list(case.argv), input=case.stdin,
                          capture_output=True, env=env, timeout=timeout)
    output = (done.stdout + done.stderr).decode("utf-8", "replace")
    problems: dict[str, str] = {}
    _look_at_output(problems, case.name, done.returncode, output, human=True)
    changed = [path for path, old in before.items() if digest(path) != old]
    if changed:
        problems["partial_write"] = f"changed a file that is not doxa's: {changed}"
    return problems
