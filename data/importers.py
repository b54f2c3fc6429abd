"""`doxa import`: other memories' files read as doxa records, kept as messages pending organization.

Two formats (docs/formats.md, "Import formats", says where each comes from):

``mem0``        what mem0's ``get_all`` returns and its export writes: ``{"results": [memory, …]}``, a
                bare list of memories, or one memory a line (JSON Lines). A memory is an object with
                ``id``, ``memory`` (the text), ``created_at`` (ISO 8601, mem0 writes an offset) and fields
                doxa does not read (``hash``, ``metadata``, ``updated_at``, ``user_id``, ``agent_id``,
                ``run_id``, ``categories``, ``score``, …).
``mcp-memory``  the reference MCP memory server's file (modelcontextprotocol/servers, src/memory): one
                object a line, ``{"type": "entity", "name", "entityType", "observations": [...]}`` or
                ``{"type": "relation", "from", "to", "relationType"}``.

Either becomes records of docs/formats.md — a source (``import/mem0``, ``import/mcp-memory``), messages,
for mcp-memory subjects and relations — written by ingest in one transaction together with each new
message's state in ``remembered``: pending, waiting for the organizer, so `doxa organize` links and reads
them as `doxa remember` would have. Ids are derived from what the file says (a memory's id; an entity's
name and an observation's text), so importing a file again adds nothing.

A file is read whole before anything is written: every bad line or item is reported with its line,
field and fix (:class:`~doxa.data.errors.IngestError`), and nothing is written. This module is pure
parsing but for :meth:`Foreign.records` (which subjects the store holds) and :meth:`Foreign.also`
(the pending rows, inside ingest's transaction).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from .errors import IngestError, Problem, Problems, StoreError
from .ingest_rules import ID, NAME
from .times import parse_time, utc_now

if TYPE_CHECKING:
    from .session import Session

FORMATS = ("mem0", "mcp-memory")
#: Each format's source, as a path (layers, then the source's id): where its messages come from.
SOURCES = {"mem0": ("import", "mem0"), "mcp-memory": ("import", "mcp-memory")}
#: A foreign id kept in a message id as it is up to this many characters (longer: its hash).
MAX_KEPT_ID = 120


@dataclass
class Foreign:
    """A foreign file read as doxa records. ``records`` and ``lines`` run in step: the line of the file
    each record comes from (0: made by the importer, the source), so ingest's problems name the file's
    lines. ``messages``: the ids of the messages, which stay pending for the organizer."""

    format: str
    path: str
    items: int = 0
    records: list[dict[str, Any]] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    subjects: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    pending_added: int = 0

    def add(self, line: int, record: dict[str, Any]) -> None:
        self.records.append(record)
        self.lines.append(line)

    def records_for(self, store: "Session") -> list[dict[str, Any]]:
        """The records to ingest into ``store``: a subject it holds already is left as it is (it may
        have gained aliases since the last import, which a subject record would have to list)."""
        held = set()
        if self.subjects:
            with store.reading():
                held = {i for (i,) in store.con.execute(
                    "SELECT id FROM subjects WHERE id IN (SELECT unnest(?::VARCHAR[]))", [self.subjects]).fetchall()}
        keep = [i for i, r in enumerate(self.records) if not (r["type"] == "subject" and r["id"] in held)]
        self.lines = [self.lines[i] for i in keep]
        self.records = [self.records[i] for i in keep]
        return self.records

    def also(self, con) -> None:
        """Inside ingest's transaction: every imported message the ``remembered`` table does not know yet
        is pending, waiting for the organizer (`doxa organize`); one it knows keeps its state."""
        if not self.messages:
            return
        before = con.execute("SELECT count(*) FROM remembered").fetchone()[0]
        con.execute("""INSERT INTO remembered (message, status, waiting_for, reason, updated_at)
                       SELECT DISTINCT unnest(?::VARCHAR[]), 'pending', 'organizer', ?, ?
                       ON CONFLICT (message) DO NOTHING""",
                    [self.messages, f"imported from {self.format} ({Path(self.path).name})", utc_now()]).fetchall()
        self.pending_added = int(con.execute("SELECT count(*) FROM remembered").fetchone()[0] - before)

    def refused(self, err: IngestError) -> IngestError:
        """``err`` (ingest's, whose lines count records) with the lines of the file the records came from."""
        return IngestError([Problem(self.lines[p.line - 1] if 0 < p.line <= len(self.lines) else p.line,
                                    p.reason, p.fix, p.field) for p in err.problems], total=err.total)


def read(format: str, path: str | os.PathLike, *, at: datetime | None = None) -> Foreign:
    """Read the file ``path`` of ``format`` (one of :data:`FORMATS`); ``at`` dates what the file does not
    date (mcp-memory's observations; default: the file's modification time, in UTC)."""
    if format not in FORMATS:
        raise StoreError(f"unknown import format {format!r}: use one of {', '.join(FORMATS)}")
    path = str(path)
    if Path(path).is_dir():
        raise StoreError(f"{path} is a directory: give the {format} file")
    try:
        with open(path, encoding="utf-8-sig") as handle:
            text = handle.read()
    except FileNotFoundError:
        raise StoreError(f"no such file: {path}") from None
    except UnicodeDecodeError as err:
        raise StoreError(f"{path} is not UTF-8 text ({err.reason} at byte {err.start}): convert it, "
                         "e.g. iconv -f latin1 -t utf-8") from None
    foreign = Foreign(format, path)
    layers, source = SOURCES[format]
    foreign.add(0, {"type": "source", "id": source, "layers": [layers]})
    problems = Problems()
    if format == "mem0":
        _mem0(foreign, text, problems)
    else:
        when = at if at is not None else datetime.fromtimestamp(os.path.getmtime(path), timezone.utc).replace(
            tzinfo=None)
        _mcp_memory(foreign, text, when, problems)
    if problems:
        raise IngestError(list(problems), total=problems.total)
    if foreign.items == 0:
        raise StoreError(f"{path} holds no {'memories' if format == 'mem0' else 'entities or relations'}: "
                         f"give a {format} file (docs/formats.md, \"Import formats\")")
    return foreign


# ---------------------------------------------------------------------------- helpers
def _digest(*parts: str, n: int = 24) -> str:
    return hashlib.sha256("\x00".join(parts).encode("utf-8")).hexdigest()[:n]


def _line_of(text: str, position: int) -> int:
    return text.count("\n", 0, position) + 1


_SPACE = re.compile(r"\s*")


def _skip(text: str, i: int) -> int:
    return _SPACE.match(text, i).end()


def _document_items(text: str) -> Iterator[tuple[int, Any]] | None:
    """The memories of a JSON document with the line each starts on: a bare list, or an object's
    ``results`` list; None when ``text`` is not one JSON document (then it is read as JSON Lines).
    Raises ValueError (with a line) for a document of another shape."""
    decoder = json.JSONDecoder()
    start = _skip(text, 0)
    try:
        whole, end = decoder.raw_decode(text, start)
    except ValueError:
        return None
    if _skip(text, end) != len(text):
        return None  # more than one value: JSON Lines
    if isinstance(whole, dict) and not isinstance(whole.get("results"), list):
        if "memory" in whole:  # a file of one memory, or the first line of JSON Lines
            return iter([(_line_of(text, start), whole)])
        raise ValueError(f"line {_line_of(text, start)}: a JSON object without a \"results\" list")
    if not isinstance(whole, (list, dict)):
        raise ValueError(f"line {_line_of(text, start)}: neither a list of memories nor {{\"results\": [...]}}")

    def located() -> Iterator[tuple[int, Any]]:
        # walk to the list, then decode its items one by one to learn where each starts
        i = start
        if text[i] == "{":
            i = _skip(text, i + 1)
            while True:
                key, i = decoder.raw_decode(text, i)
                i = _skip(text, _skip(text, i) + 1)  # past the colon
                if key == "results":
                    break
                _, i = decoder.raw_decode(text, i)
                i = _skip(text, _skip(text, i) + 1)  # past the comma
        i = _skip(text, i + 1)  # past the '['
        while text[i] != "]":
            item, end = decoder.raw_decode(text, i)
            yield _line_of(text, i), item
            i = _skip(text, end)
            if text[i] == ",":
                i = _skip(text, i + 1)

    return located()


def _json_lines(text: str, problems: Problems) -> Iterator[tuple[int, Any]]:
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except ValueError as err:
            problems.add(number, f"not valid JSON ({getattr(err, 'msg', err)})", "one JSON object a line")
        except RecursionError:
            problems.add(number, "JSON nested too deeply", "one flat JSON object a line")


def _string(problems: Problems, line: int, item: dict, key: str, what: str, *, required: bool = True) -> str | None:
    value = item.get(key)
    if value is None:
        if required:
            problems.add(line, f"{what}: missing field '{key}'", f"add it (docs/formats.md, \"Import formats\")", key)
        return None
    if not isinstance(value, str):
        problems.add(line, f"{what}: '{key}' must be a string, got {json.dumps(value)[:80]}",
                     "write it as a JSON string", key)
        return None
    return value


def _name(problems: Problems, line: int, value: str, key: str, what: str) -> bool:
    """Whether ``value`` may be a doxa name (a subject's name, a relation's kind); else a problem."""
    if NAME.check(value):
        return True
    problems.add(line, f"{what}: '{key}' {NAME.message(value)}", NAME.fix_for(value), key)
    return False


# ---------------------------------------------------------------------------- mem0
def _mem0_id(foreign_id: str) -> str:
    kept = f"mem0-{foreign_id}"
    return kept if len(foreign_id) <= MAX_KEPT_ID and ID.check(kept) else f"mem0-{_digest(foreign_id)}"


def _mem0(foreign: Foreign, text: str, problems: Problems) -> None:
    try:
        items = _document_items(text)
    except ValueError as err:
        line, _, why = str(err).partition(": ")
        problems.add(int(line.removeprefix("line ")), f"not a mem0 export: {why}",
                     'give mem0\'s get_all result ({"results": [...]}), a list of memories, or one memory a line')
        return
    if items is None:
        items = _json_lines(text, problems)
    source = SOURCES["mem0"][1]
    for line, item in items:
        foreign.items += 1
        what = f"memory {foreign.items}"
        if not isinstance(item, dict):
            problems.add(line, f"{what} is not a JSON object", "each memory is an object with id, memory, created_at")
            continue
        found = problems.total
        memory = _string(problems, line, item, "memory", what)
        created = _string(problems, line, item, "created_at", what)
        foreign_id = item.get("id")
        if isinstance(foreign_id, int) and not isinstance(foreign_id, bool):
            foreign_id = str(foreign_id)
        elif foreign_id is not None and not isinstance(foreign_id, str):
            problems.add(line, f"{what}: 'id' must be a string, got {json.dumps(foreign_id)[:80]}",
                         "write mem0's id as a JSON string, or leave it out", "id")
        if memory is not None and not memory.strip():
            problems.add(line, f"{what}: 'memory' is empty", "drop the memory, or give its text", "memory")
        sent_at = None
        if created is not None:
            try:
                sent_at = parse_time(created)
            except ValueError as err:
                problems.add(line, f"{what}: 'created_at' {err}", "write it as mem0 does, e.g. "
                             "2024-07-25T01:23:45.123456-07:00", "created_at")
        if problems.total > found:
            continue
        message_id = _mem0_id(foreign_id if foreign_id else _digest(memory, created))
        foreign.messages.append(message_id)
        foreign.add(line, {"type": "message", "id": message_id, "source": source,
                           "sent_at": sent_at.isoformat(), "text": memory})


# ---------------------------------------------------------------------------- mcp-memory
def subject_id(name: str) -> str:
    """The subject id of an mcp-memory entity: its name where that is an id already (no white space),
    else the name with each run of white space as ``-`` and a hash of the name (``Maya Lind`` →
    ``Maya-Lind-3f2a9c``), so two names never share an id and the same name always gets the same one."""
    if ID.check(name):
        return name
    joined = re.sub(r"\s+", "-", name.strip())[:150] or "entity"
    candidate = f"{joined}-{_digest(name, n=6)}"
    return candidate if ID.check(candidate) else f"entity-{_digest(name, n=16)}"


def _mcp_memory(foreign: Foreign, text: str, at: datetime, problems: Problems) -> None:
    source = SOURCES["mcp-memory"][1]
    subjects: dict[str, tuple[int, str]] = {}  # id → (first line, name)
    relations: list[tuple[int, str, str, str]] = []
    observations: list[tuple[int, str, str]] = []
    for line, item in _json_lines(text, problems):
        foreign.items += 1
        if not isinstance(item, dict):
            problems.add(line, "not a JSON object", 'each line is {"type": "entity", …} or {"type": "relation", …}')
            continue
        kind = item.get("type")
        if kind == "entity":
            name = _string(problems, line, item, "name", "entity")
            listed = item.get("observations", [])
            if not isinstance(listed, list) or not all(isinstance(o, str) for o in listed):
                problems.add(line, "entity: 'observations' must be a list of strings", "write each observation "
                             "as a JSON string", "observations")
                continue
            if item.get("entityType") is not None and not isinstance(item["entityType"], str):
                problems.add(line, "entity: 'entityType' must be a string", "write it as a JSON string", "entityType")
            if name is None or not _name(problems, line, name, "name", "entity"):
                continue
            subjects.setdefault(subject_id(name), (line, name))
            observations += [(line, name, o) for o in listed if o.strip()]
        elif kind == "relation":
            ends = [_string(problems, line, item, key, "relation") for key in ("from", "to", "relationType")]
            if None in ends or not all(_name(problems, line, v, k, "relation")
                                       for v, k in zip(ends, ("from", "to", "relationType"))):
                continue
            relations.append((line, *ends))
        else:
            problems.add(line, f"unknown type {json.dumps(kind)[:60]}",
                         'the memory server writes "entity" and "relation" lines', "type")
    for line, start, end, _ in relations:  # an end no entity line names becomes a subject of its own
        for name in (start, end):
            subjects.setdefault(subject_id(name), (line, name))
    for sid, (line, name) in subjects.items():
        foreign.subjects.append(sid)
        foreign.add(line, {"type": "subject", "id": sid, "name": name})
    for line, start, end, kind in relations:
        foreign.add(line, {"type": "relation", "from": subject_id(start), "to": subject_id(end), "kind": kind})
    for line, name, observation in observations:
        message_id = f"mcp-{_digest(name, observation)}"
        foreign.messages.append(message_id)
        # an observation is a fact about its entity: its text says whom, as the organizer finds subjects by name
        foreign.add(line, {"type": "message", "id": message_id, "source": source, "sent_at": at.isoformat(),
                           "text": f"{name}: {observation}"})


__all__ = ["FORMATS", "SOURCES", "Foreign", "read", "subject_id"]
