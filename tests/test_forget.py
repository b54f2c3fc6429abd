"""`doxa forget`: what goes, that beliefs then equal those of a store that never had it, and that the
bytes leave the disk (the DuckDB file, its write-ahead log and every file beside the store).

The independent truth for beliefs is a second store built from the same records without what was
forgotten: forgetting must leave exactly what that store holds, as beliefs and explanations.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import doxa
import records as R
from doxa.cli.main import app
from doxa.data.erasure import ErasureError
from doxa.inference.read.forget import erasures

MARK = "ZQXMARK7"  # in the forgotten texts only: its bytes must leave the disk
NOW = "2026-06-01"
HOME = ["12 Elm Street"]


def world() -> list[dict]:
    """Two people; Maya's home is an open question; m1 (the one to forget) is copied by m6, names a new
    value of maya.home that nothing else names, and is the only evidence of a question a model wrote."""
    return [
        R.subject("maya", "Maya", ["May"]), R.subject("sam", "Sam"), R.relation("maya", "sam"),
        R.source("maya-chat", ["person", "self", "chat"]), R.source("notes", ["user", "notes"]),
        R.source("sis", ["person", "about-other", "chat"]),
        R.question("maya.diet", R.DIET, kind="diet", subject="maya"),
        R.question("sam.diet", R.DIET, kind="diet", subject="sam"),
        {**R.question("maya.home", HOME, kind="home", subject="maya"), "open": True},
        R.question("maya.pet", ["cat", "dog"], kind="pet", subject="maya"),
        R.message("m1", "sis", "2026-01-10", f"{MARK} Maya eats fish now and lives at 5 {MARK} Lane"),
        {"type": "option_added", "question": "maya.home", "option": f"5 {MARK} Lane", "at": "2026-01-10"},
        R.reading("m1", "maya.diet", {"vegetarian": 0.1, "eats fish": 0.85, "eats meat": 0.05}),
        R.reading("m1", "maya.home", {f"5 {MARK} Lane": 0.9}, unclear=0.1),
        R.reading("m1", "maya.pet", {"cat": 0.8, "dog": 0.2}),
        R.message("m2", "notes", "2025-11-01", "Maya is vegetarian."),
        R.reading("m2", "maya.diet", {"vegetarian": 0.9, "eats fish": 0.05, "eats meat": 0.05}),
        R.reading("m2", "maya.home", {"12 Elm Street": 0.8}, unclear=0.2),
        R.message("m3", "maya-chat", "2026-02-01", "Sam and I had lentils."),
        R.reading("m3", "sam.diet", {"vegetarian": 0.8, "eats fish": 0.1, "eats meat": 0.1}),
        R.reading("m3", "maya.diet", {"vegetarian": 0.7, "eats fish": 0.2, "eats meat": 0.1}),
        R.message("m4", "notes", "2026-03-01", "Sam eats meat at work."),
        R.reading("m4", "sam.diet", {"vegetarian": 0.1, "eats fish": 0.1, "eats meat": 0.8}),
        R.message("m5", "sis", "2026-02-15", "May says hi"),
        # a later copy of m1 (same text): it becomes the original when m1 goes
        R.message("m6", "notes", "2026-01-20", f"{MARK} Maya eats fish now and lives at 5 {MARK} Lane"),
        R.reading("m6", "maya.diet", {"vegetarian": 0.1, "eats fish": 0.85, "eats meat": 0.05}),
        R.settlement("sam.diet", "vegetarian", "2026-02-20"),
        R.instruction("i1", "Book vegetarian places for Maya", "2026-01-01", subject="maya"),
    ]


def without(records: list[dict], messages: set[str] = frozenset(), questions: set[str] = frozenset(),
            sources: set[str] = frozenset(), subjects: set[str] = frozenset(),
            values: set[str] = frozenset()) -> list[dict]:
    """``records`` as if the named things had never been there."""
    def kept(r: dict) -> bool:
        t = r["type"]
        if t == "message":
            return r["id"] not in messages and r["source"] not in sources
        if t == "reading":
            return r["message"] not in messages and r["question"] not in questions
        if t == "question":
            return r["id"] not in questions
        if t in ("settlement", "rejection"):
            return r["question"] not in questions
        if t == "option_added":
            return r["question"] not in questions and r["option"] not in values
        if t == "source":
            return r["id"] not in sources
        if t == "subject":
            return r["id"] not in subjects
        if t == "relation":
            return r["from"] not in subjects and r["to"] not in subjects
        if t == "instruction":
            return r.get("subject") not in subjects
        return True

    out = [r for r in records if kept(r)]
    dropped = {r["id"] for r in records if r["type"] == "message" and not kept(r)}
    return [r for r in out if not (r["type"] == "reading" and r["message"] in dropped)]


def beliefs_of(mem) -> dict[str, dict[str, float]]:
    return {b.question: b.answers for b in mem.beliefs(at=NOW)}


def _rounded(value):
    if isinstance(value, float):
        return round(value, 10)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def explanations_of(mem) -> dict[str, dict]:
    """Every explanation in full (terms, prior, settlements, calibration), floats to 10 decimals."""
    return {q: _rounded(mem.explain(q, NOW).to_dict()) for q in beliefs_of(mem)}


def assert_same_beliefs(a, b) -> None:
    left, right = beliefs_of(a), beliefs_of(b)
    assert left.keys() == right.keys()
    for q in left:
        assert left[q].keys() == right[q].keys(), q
        for option in left[q]:
            assert left[q][option] == pytest.approx(right[q][option], abs=1e-12), (q, option)


def files_holding(folder: Path, marker: str = MARK) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if p.is_file() and marker.encode() in p.read_bytes())


def store_at(tmp_path: Path, records: list[dict]) -> Path:
    db = tmp_path / "store" / "s.duckdb"
    db.parent.mkdir()
    with doxa.open(str(db)) as mem:
        mem.ingest(records)
        for b in mem.beliefs(at=NOW):  # reads: belief-cache entries and the read log beside the store
            mem.belief(b.question, at=NOW)
    return db


# ------------------------------------------------------------------ what goes, checked against a store that never had it

@pytest.mark.parametrize("kind,target,gone", [
    ("message", "m1", dict(messages={"m1"}, questions={"maya.pet"}, values={f"5 {MARK} Lane"})),
    ("source", "sis", dict(sources={"sis"}, questions={"maya.pet"}, values={f"5 {MARK} Lane"})),
    ("subject", "maya", dict(subjects={"maya"}, questions={"maya.diet", "maya.home", "maya.pet"},
                             messages={"m1", "m2", "m3", "m5", "m6"})),
])
def test_beliefs_and_explanations_after_forget_equal_a_store_that_never_had_it(mem, kind, target, gone):
    records = world()
    mem.ingest(records)
    # maya.pet rests only on m1 and a model wrote it (organizer instructions version 1)
    mem.store.execute("UPDATE questions SET instructions_version = 1 WHERE id = 'maya.pet'").fetchall()
    done = mem.forget(kind, target, reason="asked", by="maya")
    with doxa.open(":memory:") as truth:
        truth.ingest(without(records, **gone))
        assert_same_beliefs(mem, truth)
        assert explanations_of(mem) == explanations_of(truth)
        assert sorted(mem.store.execute("SELECT id FROM messages").fetchall()) == \
            sorted(truth.store.execute("SELECT id FROM messages").fetchall())
        assert sorted(mem.store.execute("SELECT id, options FROM questions").fetchall()) == \
            sorted(truth.store.execute("SELECT id, options FROM questions").fetchall())
    assert set(done.questions) == set(gone["questions"])
    assert done.erasure == f"{kind}:{target}" and not done.dry_run
    if kind != "subject":  # m6 holds m1's text: kept, and said so
        assert done.copies_kept == ["m6"]
        assert [v["value"] for v in done.values] == [f"5 {MARK} Lane"]


def test_forget_subject_removes_its_questions_outcomes_instructions_relations_and_messages_naming_it(mem):
    mem.ingest(world())
    done = mem.forget("subject", "maya")
    con = mem.store.con
    assert con.execute("SELECT count(*) FROM subjects WHERE id = 'maya'").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM relations").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM instructions").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM questions WHERE subject = 'maya'").fetchone()[0] == 0
    # m5 has no reading at all: it goes because it names Maya by her alias, as a whole word
    assert "m5" in done.messages and "m4" not in done.messages
    # m3 was read for Sam too: it goes (it is about Maya), and Sam's belief changes
    assert "m3" in done.messages and done.changed_questions == ["sam.diet"]
    assert con.execute("SELECT count(*) FROM settlements").fetchone()[0] == 1  # Sam's stays
    assert done.removed["relations"] == 1 and done.removed["instructions"] == 1


def test_a_dry_run_changes_nothing_and_says_what_would_go(mem, rec):
    mem.ingest(world())
    before = repr(rec.snapshot(mem.store))  # as text: NaN (a value a reading does not name) equals itself
    preview = mem.forget("source", "sis", dry_run=True)
    assert repr(rec.snapshot(mem.store)) == before
    assert preview.dry_run and preview.erasure is None and preview.messages == ["m1", "m5"]
    assert preview.removed["messages"] == 2 and preview.removed["readings"] == 3
    done = mem.forget("source", "sis")
    assert done.removed == preview.removed and done.messages == preview.messages


def test_the_erasure_record_keeps_who_when_why_and_counts_never_content(mem):
    mem.ingest(world())
    mem.forget("message", "m1", reason="she asked me to", by="maya")
    mem.forget("message", "m6")
    rows = mem.store.execute("SELECT * FROM erasures ORDER BY erased_at").fetchall()
    assert MARK not in repr(rows)
    listed = erasures(mem)
    assert [(e["kind"], e["target"], e["erased_by"], e["reason"]) for e in listed] == [
        ("message", "m1", "maya", "she asked me to"), ("message", "m6", "user", None)]
    assert listed[0]["removed"]["messages"] == 1 and listed[0]["removed"]["readings"] == 3


@pytest.mark.parametrize("kind,target", [("message", "nope"), ("source", "nope"), ("subject", "nope")])
def test_an_unknown_id_is_refused_with_nothing_removed(mem, rec, kind, target):
    mem.ingest(world())
    before = repr(rec.snapshot(mem.store))
    with pytest.raises(ErasureError, match=f"no {kind} 'nope'"):
        mem.forget(kind, target)
    with pytest.raises(ErasureError, match="one of message, source, subject"):
        mem.forget("question", "maya.diet")
    assert repr(rec.snapshot(mem.store)) == before


def test_forgetting_a_message_carried_by_a_merge_leaves_the_merge_undoable(mem):
    mem.ingest([R.subject("maya"), R.source("notes", ["user", "notes"]),
                R.question("maya.diet", R.DIET, kind="diet", subject="maya"),
                R.question("maya.food", R.DIET, kind="diet", subject="maya"),
                R.message("a", "notes", "2026-01-01", "Maya is vegetarian."),
                R.reading("a", "maya.diet", {"vegetarian": 0.9, "eats fish": 0.05, "eats meat": 0.05}),
                R.message("b", "notes", "2026-01-02", f"{MARK} Maya eats fish."),
                R.reading("b", "maya.food", {"vegetarian": 0.1, "eats fish": 0.8, "eats meat": 0.1}),
                {"type": "question_merge", "id": "mg", "from": "maya.food", "into": "maya.diet"}])
    mem.forget("message", "b")
    assert mem.store.execute("SELECT count(*) FROM readings WHERE message = 'b'").fetchone()[0] == 0
    mem.ingest([{"type": "undo", "op": "mg"}])
    assert {b.question for b in mem.beliefs(at=NOW)} == {"maya.diet", "maya.food"}
    assert [t.message for t in mem.explain("maya.diet", NOW).terms] == ["a"]
    assert mem.explain("maya.food", NOW).terms == []


# ------------------------------------------------------------------ the bytes leave the disk

@pytest.mark.parametrize("kind,target", [("message", "m1"), ("source", "sis"), ("subject", "maya")])
def test_the_forgotten_text_leaves_the_file_and_everything_beside_it(tmp_path, kind, target):
    db = store_at(tmp_path, world())
    folder = db.parent
    # m6 holds the same text as m1: forget it first, so that only the erasure under test can remove the rest
    if kind != "subject":
        with doxa.open(str(db)) as mem:
            mem.forget("message", "m6")
    holding = files_holding(folder)
    assert "s.duckdb" in holding  # present before, in the file itself
    with doxa.open(str(db)) as mem:
        done = mem.forget(kind, target)
        assert done.rewritten
        assert files_holding(folder) == []
        assert mem.store.execute("SELECT rewritten FROM erasures WHERE target = ?", [target]).fetchone()[0]
        mem.beliefs(at=NOW)  # the store reads on after the rewrite
    assert sorted(p.name for p in folder.iterdir() if ".rewrite-" in p.name) == []
    assert files_holding(folder) == []


_WAL_WRITER = """
import os, sys
import doxa
mem = doxa.open(sys.argv[1])
with mem.store.writing():
    mem.store.con.execute("SET checkpoint_threshold = '1GB'")
    mem.ingest([{"type": "message", "id": "w1", "source": "notes", "sent_at": "2026-04-01",
                 "text": "%s lives next door"}])
    os._exit(0)  # killed before any checkpoint: the text is only in the write-ahead log
"""


def test_text_only_in_the_write_ahead_log_leaves_it_too(tmp_path):
    db = store_at(tmp_path, [R.source("notes", ["user", "notes"])])
    marker = "WALONLY9Q"
    subprocess.run([sys.executable, "-c", _WAL_WRITER % marker, str(db)], check=True, cwd=Path(__file__).parent)
    assert files_holding(db.parent, marker) == ["s.duckdb.wal"]
    with doxa.open(str(db)) as mem:
        mem.forget("message", "w1")
    assert files_holding(db.parent, marker) == []
    assert not Path(str(db) + ".wal").exists() or marker.encode() not in Path(str(db) + ".wal").read_bytes()


def test_the_rewritten_file_keeps_its_permissions_and_a_symlinked_path_rewrites_the_real_file(tmp_path):
    db = store_at(tmp_path, world())
    os.chmod(db, 0o600)
    link = tmp_path / "link.duckdb"
    link.symlink_to(db)
    with doxa.open(str(link)) as mem:
        mem.forget("message", "m6")
        mem.forget("message", "m1")
    assert link.is_symlink() and (db.stat().st_mode & 0o777) == 0o600
    assert files_holding(db.parent) == []


def test_a_failed_rewrite_keeps_the_erasure_pending_and_rewrite_finishes_it(tmp_path, monkeypatch):
    db = store_at(tmp_path, world())
    with doxa.open(str(db)) as mem:
        mem.forget("message", "m6")

    real_replace = os.replace

    def full_disk(src, dst):
        if ".rewrite-" in str(src):
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", full_disk)
    with doxa.open(str(db)) as mem:
        with pytest.raises(ErasureError, match="was removed from the store.*No space.*doxa forget --rewrite"):
            mem.forget("message", "m1")
    monkeypatch.setattr(os, "replace", real_replace)
    assert [p.name for p in db.parent.iterdir() if ".rewrite-" in p.name] == []  # the half copy is gone
    with doxa.open(str(db)) as mem:
        assert mem.store.execute("SELECT count(*) FROM messages WHERE id = 'm1'").fetchone()[0] == 0
        assert mem.store.execute("SELECT rewritten FROM erasures WHERE target = 'm1'").fetchone()[0] is False
    result = CliRunner().invoke(app, ["forget", "--rewrite", "--db", str(db), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["rewritten"] == 1
    assert files_holding(db.parent) == []


# ------------------------------------------------------------------ the command line and the MCP tool

def test_the_command_line_forgets_lists_and_refuses_bad_use(tmp_path):
    db = store_at(tmp_path, world())
    run = CliRunner().invoke
    dry = run(app, ["forget", "message", "m1", "--dry-run", "--db", str(db), "--json"])
    assert dry.exit_code == 0 and json.loads(dry.output)["dry_run"] is True
    done = run(app, ["forget", "message", "m1", "--reason", "asked", "--db", str(db)])
    assert done.exit_code == 0 and "Forgot message m1" in done.output and "m6" in done.output
    listed = run(app, ["forget", "--list", "--db", str(db), "--json"])
    assert [e["target"] for e in json.loads(listed.output)] == ["m1"]
    assert run(app, ["forget", "--db", str(db)]).exit_code == 2
    bad = run(app, ["forget", "person", "maya", "--db", str(db)])
    assert bad.exit_code == 2 and "one of message, source, subject" in bad.output
    unknown = run(app, ["forget", "message", "m1", "--db", str(db), "--json"])
    assert unknown.exit_code == 1 and "no message 'm1'" in json.loads(unknown.output)["error"]


def test_the_mcp_tool_exists_only_when_the_server_allows_it(tmp_path):
    import asyncio

    from doxa.inference.agent.mcp_server import build_server

    db = store_at(tmp_path, world())
    names = lambda server: {t.name for t in asyncio.run(server.list_tools())}  # noqa: E731
    assert "forget" not in names(build_server(str(db)))
    server = build_server(str(db), allow_forget=True)
    assert "forget" in names(server)
    result = asyncio.run(server.call_tool("forget", {"kind": "message", "id": "m1", "reason": "asked"}))
    assert not result.is_error
    assert result.structured_content["erasure"] == "message:m1"
    again = asyncio.run(server.call_tool("forget", {"kind": "message", "id": "m1"}))
    assert again.is_error and "no message 'm1'" in again.content[0].text


# ------------------------------------------------------------------ a property: any message, any store

@st.composite
def stores(draw):
    """A few messages from two sources read against two questions (one open), some copies."""
    texts = ["a", "b", "c"]
    n = draw(st.integers(2, 6))
    records = [R.subject("p"), R.source("s1", ["user", "notes"]), R.source("s2", ["person", "about-other", "chat"]),
               R.question("p.q", ["x", "y"], kind="q", subject="p"),
               {**R.question("p.v", ["v0"], kind="v", subject="p"), "open": True}]
    values = ["v0"]
    for i in range(n):
        text = draw(st.sampled_from(texts))
        day = draw(st.integers(1, 28))
        records.append(R.message(f"m{i}", draw(st.sampled_from(["s1", "s2"])), f"2026-01-{day:02d}", text))
        px = draw(st.floats(0.05, 0.95))
        records.append(R.reading(f"m{i}", "p.q", {"x": px, "y": 1 - px}))
        if draw(st.booleans()):
            if draw(st.booleans()):
                values.append(f"v{i + 1}")
                records.append({"type": "option_added", "question": "p.v", "option": values[-1],
                                "at": f"2026-01-{day:02d}"})
            named, p = draw(st.sampled_from(values)), draw(st.floats(0.5, 0.95))
            records.append(R.reading(f"m{i}", "p.v", {named: p}, unclear=1 - p))
    return records, draw(st.integers(0, n - 1))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stores())
def test_forgetting_any_message_gives_the_beliefs_of_a_store_that_never_had_it(drawn):
    records, pick = drawn
    target = f"m{pick}"
    with doxa.open(":memory:") as mem:
        mem.ingest(records)
        done = mem.forget("message", target)
        gone_values = {v["value"] for v in done.values}
        with doxa.open(":memory:") as truth:
            truth.ingest(without(records, messages={target}, values=gone_values))
            assert_same_beliefs(mem, truth)
            assert explanations_of(mem) == explanations_of(truth)


# ------------------------------------------------------------------ beside other processes

_FORGETTER = """
import sys
import doxa
for i in range(int(sys.argv[2])):
    with doxa.open(sys.argv[1]) as mem:
        mem.forget("message", f"old{i}")
"""

_WRITER = """
import sys
import doxa
for i in range(int(sys.argv[2])):
    with doxa.open(sys.argv[1]) as mem:
        mem.ingest([{"type": "message", "id": f"new{i}", "source": "notes", "sent_at": "2026-05-01",
                     "text": f"kept {i}"}])
        mem.beliefs()
"""


def test_writes_and_reads_of_other_processes_during_forgets_are_never_lost(tmp_path):
    n = 12
    db = store_at(tmp_path, [R.source("notes", ["user", "notes"]),
                             *[R.message(f"old{i}", "notes", "2026-01-01", f"{MARK} {i}") for i in range(n)]])
    here = Path(__file__).parent
    procs = [subprocess.Popen([sys.executable, "-c", code, str(db), str(n)], cwd=here, stderr=subprocess.PIPE)
             for code in (_FORGETTER, _WRITER)]
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read().decode()
    with doxa.open(str(db)) as mem:
        ids = {i for (i,) in mem.store.execute("SELECT id FROM messages").fetchall()}
        assert ids == {f"new{i}" for i in range(n)}
        assert mem.store.execute("SELECT count(*) FROM erasures WHERE rewritten").fetchone()[0] == n
    assert files_holding(db.parent) == []


def test_after_a_forget_the_store_exports_and_reimports_to_the_same_beliefs(mem):
    """Operations that named a removed message (a split assigning it) still read as records of what remains."""
    import io

    mem.ingest([R.subject("maya"), R.source("notes", ["user", "notes"]),
                R.question("maya.home", ["Elm", "Oak"], kind="home", subject="maya"),
                R.message("a", "notes", "2026-01-01", "Maya lives on Elm"),
                R.reading("a", "maya.home", {"Elm": 0.9, "Oak": 0.1}),
                R.message("b", "notes", "2026-01-02", f"{MARK} Maya lives on Oak"),
                R.reading("b", "maya.home", {"Elm": 0.1, "Oak": 0.9}),
                {"type": "question_split", "id": "sp", "question": "maya.home",
                 "into": [R.question("maya.elm", ["yes", "no"], kind="home", subject="maya"),
                          R.question("maya.oak", ["yes", "no"], kind="home", subject="maya")],
                 "assign": {"a": "maya.elm", "b": "maya.oak"},
                 "option_map": {"maya.elm": {"Elm": "yes", "Oak": "no"}, "maya.oak": {"Oak": "yes", "Elm": "no"}}}])
    mem.forget("message", "b")
    exported = io.StringIO()
    mem.export(exported)
    assert MARK not in exported.getvalue()
    with doxa.open(":memory:") as copy:
        copy.ingest_lines(exported.getvalue().splitlines())
        assert_same_beliefs(mem, copy)
        assert explanations_of(mem) == explanations_of(copy)
    mem.ingest([{"type": "undo", "op": "sp"}])  # the split stays undoable
    assert [t.message for t in mem.explain("maya.home", NOW).terms] == ["a"]


def test_forgetting_removes_the_maintenance_proposals_that_name_what_went(mem):
    from doxa.inference.agent import maintenance

    mem.ingest([R.subject("maya"), R.source("notes", ["user", "notes"]),
                R.question("maya.diet", R.DIET, kind="diet", subject="maya", text="What does Maya eat?"),
                R.question("maya.food", R.DIET, kind="diet", subject="maya", text="What does Maya usually eat?"),
                R.message("a", "notes", "2026-01-01", "Maya is vegetarian."),
                R.reading("a", "maya.diet", {"vegetarian": 0.9, "eats fish": 0.05, "eats meat": 0.05}),
                R.reading("a", "maya.food", {"vegetarian": 0.9, "eats fish": 0.05, "eats meat": 0.05})])
    maintenance.maintain(mem)
    assert [p.id for p in maintenance.proposals(mem)] == ["merge:maya.diet+maya.food"]
    done = mem.forget("subject", "maya")
    assert done.removed["proposed_ops"] == 1 and maintenance.proposals(mem) == []


def test_the_organizers_kept_decisions_that_hold_the_text_go_too(tmp_path):
    from llm_server import FakeChatServer, value_organizer

    from doxa.inference.agent.organizer_client import OpenAIChatOrganizer

    db = store_at(tmp_path, [R.subject("maya", "Maya"), R.source("chat", ["person", "self", "chat"])])
    with FakeChatServer({}, organizer=value_organizer()) as server, doxa.open(str(db)) as mem:
        organizer = OpenAIChatOrganizer(url=server.url, retries=0)
        done = mem.remember(f"Maya wrote: we live at 12 {MARK} Street", source="chat", sent_at="2026-01-01",
                            organizer=organizer, reader=None, use_env=False)
        mem.remember("Maya wrote: we moved to 7 Oak Lane", source="chat", sent_at="2026-02-01",
                     organizer=organizer, reader=None, use_env=False)
        decisions = mem.store.execute("SELECT count(*) FROM organizer_decisions").fetchone()[0]
        assert decisions == 2 and MARK in repr(mem.store.execute("SELECT prompt FROM organizer_decisions").fetchall())
        forgotten = mem.forget("message", done.message)
        # the question stays (the second message named a value of it); the first value, named by the
        # forgotten message alone, goes — and with it both decisions: the second one's prompt showed it
        assert [(v["question"], v["value"]) for v in forgotten.values] == [("maya.home", f"12 {MARK} Street")]
        assert mem.store.execute("SELECT options FROM questions WHERE id = 'maya.home'").fetchone()[0] == \
            ["7 Oak Lane"]
        assert forgotten.removed["organizer_decisions"] == 2
    assert files_holding(db.parent) == []


def test_what_a_killed_ingest_staged_is_removed_and_a_live_ones_is_not(tmp_path, monkeypatch):
    import tempfile

    from doxa.data import erasure

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    left = tmp_path / f"doxa-ingest-{dead.pid}-abc"
    left.mkdir()
    (left / "stage-0.duckdb").write_text(f"{MARK} staged")
    spool = tmp_path / f"doxa-ingest-{dead.pid}-x.arrows"
    spool.write_text(MARK)
    live = tmp_path / f"doxa-ingest-{os.getpid()}-mine"
    live.mkdir()
    assert erasure.remove_dead_staging() == 2
    assert not left.exists() and not spool.exists() and live.exists()
