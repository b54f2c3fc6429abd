"""`doxa import mem0` and `doxa import mcp-memory` (data/importers.py): each real format read from a
small file of tests/data/import/, kept as messages pending organization; a second import adds nothing;
a bad line is refused naming its line, field and fix, with nothing written; `doxa organize` sees them."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

import doxa
import records as R
from doxa.cli.main import app
from doxa.data.errors import IngestError, StoreError
from doxa.data.importers import subject_id

FILES = Path(__file__).resolve().parent / "data" / "import"
#: No model: what the import keeps stays pending.
NO_MODELS = {name: None for name in ("DOXA_READER_URL", "DOXA_ORGANIZER_URL", "DOXA_READER_MODEL",
                                     "DOXA_ORGANIZER_MODEL")}


def run(*args: str, code: int = 0):
    result = CliRunner().invoke(app, list(args), env=NO_MODELS)
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    return result


def run_json(*args: str, code: int = 0):
    result = run(*args, "--json", code=code)
    return json.loads(result.stdout if code == 0 else (result.stderr or result.stdout))


def messages(mem) -> dict[str, tuple]:
    rows = mem.store.con.execute("SELECT id, source, sent_at, text FROM messages").fetchall()
    return {i: (s, at, text) for i, s, at, text in rows}


def pending(mem) -> dict[str, tuple]:
    rows = mem.store.con.execute("SELECT message, status, waiting_for FROM remembered").fetchall()
    return {m: (status, waiting) for m, status, waiting in rows}


@pytest.fixture
def mem():
    memory = doxa.open(":memory:")
    yield memory
    memory.close()


# ---------------------------------------------------------------------------- mem0
def test_mem0_get_all_becomes_pending_messages_verbatim_dated_in_utc(mem):
    result = mem.import_file("mem0", FILES / "mem0_get_all.json")
    assert result["items"] == 3 and result["added"] == {"sources": 1, "messages": 3} and result["pending_added"] == 3
    got = messages(mem)
    assert got["mem0-8d4b5a1c-2f3e-4d6a-9b7c-1e2f3a4b5c6d"] == (
        "mem0", datetime(2024, 7, 25, 8, 23, 45, 123456), "Is a vegetarian and allergic to nuts")
    assert got["mem0-0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"][1] == datetime(2024, 8, 2, 18, 5)
    assert got["mem0-a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"][1] == datetime(2024, 9, 10, 6, 30, 0, 500000)
    assert mem.store.con.execute("SELECT path FROM sources WHERE id = 'mem0'").fetchone()[0] == "import/mem0"
    assert set(pending(mem).values()) == {("pending", "organizer")} and set(pending(mem)) == set(got)


def test_mem0_json_lines_and_a_bare_list_are_read_too(mem, tmp_path):
    assert mem.import_file("mem0", FILES / "mem0_memories.jsonl")["added"]["messages"] == 2
    listed = json.loads((FILES / "mem0_get_all.json").read_text())["results"]
    bare = tmp_path / "list.json"
    bare.write_text(json.dumps(listed, indent=2))
    assert mem.import_file("mem0", bare)["added"]["messages"] == 3
    got = messages(mem)
    assert got["mem0-c0ffee00-0000-4000-8000-000000000002"][1] == datetime(2025, 1, 16, 14, 0, 0, 250000)


def test_a_memory_without_an_id_gets_one_from_what_it_says(mem, tmp_path):
    path = tmp_path / "noid.jsonl"
    path.write_text(json.dumps({"memory": "Loves hiking", "created_at": "2025-03-01T12:00:00+01:00"}) + "\n")
    first = mem.import_file("mem0", path)
    assert first["added"]["messages"] == 1
    assert mem.import_file("mem0", path)["added"] == {}
    (only,) = messages(mem)
    assert only.startswith("mem0-")


def test_importing_again_changes_nothing(tmp_path):
    db = str(tmp_path / "i.duckdb")
    run("import", "mem0", str(FILES / "mem0_get_all.json"), "--db", db)
    run("import", "mcp-memory", str(FILES / "memory.jsonl"), "--at", "2026-01-01", "--db", db)
    with doxa.open(db) as before:
        snapshot = R.snapshot(before.store)
    again = run_json("import", "mem0", str(FILES / "mem0_get_all.json"), "--db", db)
    assert again["added"] == {} and again["pending_added"] == 0
    assert run_json("import", "mcp-memory", str(FILES / "memory.jsonl"), "--at", "2026-01-01", "--db", db)["added"] == {}
    with doxa.open(db) as after:
        assert R.snapshot(after.store) == snapshot


def test_an_organized_message_keeps_its_state_when_imported_again(mem):
    mem.import_file("mem0", FILES / "mem0_memories.jsonl")
    mem.store.con.execute("UPDATE remembered SET status = 'done', waiting_for = NULL")
    assert mem.import_file("mem0", FILES / "mem0_memories.jsonl")["pending_added"] == 0
    assert set(pending(mem).values()) == {("done", None)}


def test_a_bad_mem0_line_is_refused_whole_with_its_line_and_field(tmp_path):
    db = str(tmp_path / "bad.duckdb")
    run("init", "--db", db)
    with doxa.open(db) as before:
        snapshot = R.snapshot(before.store)
    error = run_json("import", "mem0", str(FILES / "mem0_bad.jsonl"), "--db", db, code=1)
    (problem,) = error["problems"]
    assert problem["line"] == 2 and problem["field"] == "created_at" and "2024-07-25T01:23:45" in problem["fix"]
    with doxa.open(db) as after:
        assert R.snapshot(after.store) == snapshot  # line 1 was good: nothing of it either


@pytest.mark.parametrize("text, line, field", [
    ('{"results": [\n  {"id": "a", "memory": "ok", "created_at": "2025-01-01"},\n  {"id": "b", "created_at": '
     '"2025-01-01"}\n]}', 3, "memory"),
    ('[{"id": "a", "memory": "", "created_at": "2025-01-01"}]', 1, "memory"),
    ('{"id": "a", "memory": "x", "created_at": "2025-01-01"}\nnot json\n', 2, ""),
    ('[{"id": {"x": 1}, "memory": "x", "created_at": "2025-01-01"}]', 1, "id"),
])
def test_each_bad_memory_is_named(mem, tmp_path, text, line, field):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(IngestError) as refused:
        mem.import_file("mem0", path)
    (problem,) = refused.value.problems
    assert (problem.line, problem.field) == (line, field) and problem.fix
    assert messages(mem) == {}


def test_a_file_that_is_no_mem0_export_is_refused(mem, tmp_path):
    path = tmp_path / "other.json"
    path.write_text('{"memories": []}')
    with pytest.raises(IngestError) as refused:
        mem.import_file("mem0", path)
    assert "results" in str(refused.value)
    empty = tmp_path / "empty.json"
    empty.write_text('{"results": []}')
    with pytest.raises(StoreError, match="no memories"):
        mem.import_file("mem0", empty)


# ---------------------------------------------------------------------------- mcp-memory
def test_mcp_memory_entities_relations_and_observations(mem):
    result = mem.import_file("mcp-memory", FILES / "memory.jsonl", at="2026-01-01T09:00:00+01:00")
    assert result["added"] == {"subjects": 3, "relations": 2, "sources": 1, "messages": 3}
    subjects = {i: name for i, name in mem.store.con.execute("SELECT id, name FROM subjects").fetchall()}
    maya = subject_id("Maya Lind")
    assert subjects == {maya: "Maya Lind", "Bloom": "Bloom", "Sam": "Sam"}
    assert maya.startswith("Maya-Lind-") and subject_id("Maya Lind") == maya != subject_id("Maya  Lind")
    assert set(mem.store.con.execute("SELECT from_id, to_id, kind FROM relations").fetchall()) == {
        (maya, "Sam", "partner"), (maya, "Bloom", "works_at")}
    texts = {text: (source, at) for source, at, text in messages(mem).values()}
    assert texts == {"Maya Lind: Is vegetarian": ("mcp-memory", datetime(2026, 1, 1, 8)),
                     "Maya Lind: Works at Bloom florist": ("mcp-memory", datetime(2026, 1, 1, 8)),
                     "Bloom: Florist on Elm Street": ("mcp-memory", datetime(2026, 1, 1, 8))}
    assert set(pending(mem).values()) == {("pending", "organizer")}


def test_mcp_memory_is_dated_by_the_file_without_at(mem, tmp_path):
    path = tmp_path / "memory.jsonl"
    path.write_text((FILES / "memory.jsonl").read_text())
    moment = datetime(2025, 5, 4, 3, 2, 1).timestamp()
    os.utime(path, (moment, moment))
    mem.import_file("mcp-memory", path)
    (when,) = {at for _, at, _ in messages(mem).values()}
    assert when == datetime.fromtimestamp(moment, timezone.utc).replace(tzinfo=None)


def test_a_subject_that_gained_aliases_is_kept_on_a_second_import(mem):
    mem.import_file("mcp-memory", FILES / "memory.jsonl", at="2026-01-01")
    mem.ingest([R.subject("Sam", "Sam", ["my partner"])])
    assert mem.import_file("mcp-memory", FILES / "memory.jsonl", at="2026-01-01")["added"] == {}
    assert mem.store.con.execute("SELECT aliases FROM subjects WHERE id = 'Sam'").fetchone()[0] == ["my partner"]


def test_a_bad_mcp_memory_line_is_refused_with_nothing_written(tmp_path):
    db = str(tmp_path / "bad.duckdb")
    error = run_json("import", "mcp-memory", str(FILES / "memory_bad.jsonl"), "--db", db, code=1)
    (problem,) = error["problems"]
    assert (problem["line"], problem["field"]) == (2, "to") and problem["fix"]
    with doxa.open(db) as after:
        assert after.store.counts()["messages"] == 0 and after.store.counts()["subjects"] == 0


@pytest.mark.parametrize("line, field", [
    ('{"type": "node", "name": "x"}', "type"),
    ('{"type": "entity", "name": "x", "observations": "one"}', "observations"),
    ('{"type": "entity", "name": " padded "}', "name"),
    ('{"type": "relation", "from": "a", "to": "b", "relationType": 3}', "relationType"),
])
def test_each_bad_mcp_memory_line_is_named(mem, tmp_path, line, field):
    path = tmp_path / "memory.jsonl"
    path.write_text('{"type": "entity", "name": "ok", "observations": ["fine"]}\n' + line + "\n")
    with pytest.raises(IngestError) as refused:
        mem.import_file("mcp-memory", path, at="2026-01-01")
    (problem,) = refused.value.problems
    assert (problem.line, problem.field) == (2, field) and problem.fix
    assert messages(mem) == {}


# ---------------------------------------------------------------------------- organize
def test_doxa_organize_finds_the_imported_messages_pending(tmp_path):
    db = str(tmp_path / "o.duckdb")
    added = run_json("import", "mem0", str(FILES / "mem0_memories.jsonl"), "--db", db)
    assert added["pending_added"] == 2
    out = run_json("organize", "--db", db)
    assert out["pending_before"] == 2 and out["pending_after"] == 2
    assert {r["message"] for r in out["results"]} == {"mem0-c0ffee00-0000-4000-8000-000000000001",
                                                       "mem0-c0ffee00-0000-4000-8000-000000000002"}
    assert all(r["status"] == "pending" and r["skipped"] == ["organizer"] for r in out["results"])


def test_the_human_output_says_what_was_added(tmp_path):
    db = str(tmp_path / "h.duckdb")
    first = run("import", "mcp-memory", str(FILES / "memory.jsonl"), "--at", "2026-01-01", "--db", db).stdout
    assert "3 subjects" in first and "pending organization" in first
    assert "Nothing new" in run("import", "mcp-memory", str(FILES / "memory.jsonl"), "--at", "2026-01-01",
                                "--db", db).stdout


def test_an_unknown_file_is_named(tmp_path):
    assert "no such file" in run("import", "mem0", str(tmp_path / "missing.json"), "--db",
                                 str(tmp_path / "x.duckdb"), code=1).output
