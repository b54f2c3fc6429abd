"""`doxa demo`: the Maya example end to end, and the beliefs tell its story."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import doxa
from doxa.cli.main import app
from doxa.data.demo import DEMO_DB, DEMO_NOW, demo_records, is_demo_store
from doxa.data.times import parse_time


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> dict:
    path = str(tmp_path_factory.mktemp("demo") / "demo.duckdb")
    result = CliRunner().invoke(app, ["demo", "--db", path, "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    out["beliefs_by_question"] = {b["question"]: b for b in out["beliefs"]}
    out["explained"] = {e["belief"]["question"]: e for e in out["explanations"]}
    return out


def answers(demo, question) -> dict[str, float]:
    return demo["beliefs_by_question"][question]["answers"]


def top(demo, question) -> str:
    return demo["beliefs_by_question"][question]["top"]


def ignored(demo, question, message) -> str | None:
    (term,) = [t for t in demo["explained"][question]["terms"] if t["message"] == message]
    return term["ignored"]


def test_demo_json_has_its_parts(demo):
    assert set(demo) >= {"db", "at", "added", "beliefs", "explanations", "instructions"}
    assert demo["at"].startswith("2026-12-01T12:00:00")
    assert demo["added"]["messages"] == sum(r["type"] == "message" for r in demo_records())


def test_maya_s_own_word_beats_the_florist_for_flowers(demo):
    flowers = answers(demo, "maya.favourite_flower")
    assert top(demo, "maya.favourite_flower") == "tulips"
    assert flowers["tulips"] > flowers["lilies"]


def test_the_forwarded_florist_email_is_ignored_as_a_copy(demo):
    assert "copy of f2" in ignored(demo, "maya.favourite_flower", "f3")
    assert ignored(demo, "maya.favourite_flower", "f2") is None


def test_the_move_wins_for_the_address(demo):
    home = answers(demo, "maya.home")
    assert top(demo, "maya.home") == "7 Harbour Road" and home["7 Harbour Road"] > home["12 Elm Street"]


def test_maya_eats_fish_now_and_the_assistant_note_is_ignored(demo):
    assert top(demo, "maya.diet") == "eats fish"
    assert "assistant" in ignored(demo, "maya.diet", "n1")


def test_sam_is_vegetarian(demo):
    assert top(demo, "sam.diet") == "vegetarian"


def test_a_vague_birthday_says_ask_and_the_loud_places_instruction_stands(demo):
    assert demo["beliefs_by_question"]["maya.birthday"]["act"] is False
    assert [i["id"] for i in demo["instructions"]] == ["i1"]


def test_the_copy_and_the_assistant_note_change_no_belief(demo):
    """Same beliefs as a store that never saw the forwarded copy nor the assistant note."""
    dropped = {"f3", "n1"}
    kept = [r for r in demo_records()
            if not (r["type"] == "message" and r["id"] in dropped) and r.get("message") not in dropped]
    with doxa.open(":memory:", log_reads=False) as memory:
        memory.ingest(kept)
        without = {b.question: b.answers for b in memory.beliefs(at=parse_time(DEMO_NOW))}
    assert without == {q: b["answers"] for q, b in demo["beliefs_by_question"].items()}


def test_demo_runs_as_text_and_starts_fresh_each_time(tmp_path):
    path = str(tmp_path / "demo.duckdb")
    runner = CliRunner()
    first = runner.invoke(app, ["demo", "--db", path])
    assert first.exit_code == 0, first.output
    assert "maya.favourite_flower" in first.stdout and "Instruction" in first.stdout
    second = runner.invoke(app, ["demo", "--db", path, "--json"])
    assert second.exit_code == 0, second.output
    # everything is new again: the second run replaced the store the first run made
    assert json.loads(second.stdout)["added"]["messages"] == sum(r["type"] == "message" for r in demo_records())


def _user_store(path) -> dict[str, int]:
    with doxa.open(str(path)) as memory:
        memory.ingest(demo_records()[:12])
        return memory.store.counts()


def test_demo_refuses_a_store_it_did_not_make_and_leaves_it_as_it_was(tmp_path):
    path = tmp_path / "mine.duckdb"
    before = _user_store(path)
    result = CliRunner().invoke(app, ["demo", "--db", str(path)])
    assert result.exit_code == 1
    assert "is not a demo store" in result.output and "without --db" in result.output
    with doxa.open(str(path)) as memory:
        assert memory.store.counts() == before


def test_demo_refuses_a_file_that_is_not_a_store_and_a_directory(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my own notes, not a store\n")
    result = CliRunner().invoke(app, ["demo", "--db", str(notes)])
    assert result.exit_code == 1 and "is not a demo store" in result.output
    assert notes.read_text() == "my own notes, not a store\n"
    folder = CliRunner().invoke(app, ["demo", "--db", str(tmp_path)])
    assert folder.exit_code == 1 and "is a directory" in folder.output


def test_demo_writes_its_own_file_whatever_doxa_db_names(tmp_path, monkeypatch):
    """$DOXA_DB and ./doxa.duckdb are the user's default store: the demo touches neither."""
    monkeypatch.chdir(tmp_path)
    mine, default = tmp_path / "real.duckdb", tmp_path / "doxa.duckdb"
    before_mine, before_default = _user_store(mine), _user_store(default)
    monkeypatch.setenv("DOXA_DB", str(mine))
    result = CliRunner().invoke(app, ["demo", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["db"] == DEMO_DB and is_demo_store(tmp_path / DEMO_DB)
    assert not is_demo_store(mine) and not is_demo_store(default)
    for path, before in ((mine, before_mine), (default, before_default)):
        with doxa.open(str(path)) as memory:
            assert memory.store.counts() == before


def test_demo_never_deletes_what_the_user_added_to_its_store(tmp_path):
    """A store the demo made, then used for the user's own records: the demo refuses to rebuild it."""
    path = tmp_path / "d.duckdb"
    runner = CliRunner()
    assert runner.invoke(app, ["demo", "--db", str(path)]).exit_code == 0
    mine = tmp_path / "mine.jsonl"
    mine.write_text(json.dumps({"type": "message", "id": "mine", "source": "my-notes", "sent_at": "2026-01-01",
                                "text": "my own note"}) + "\n")
    assert runner.invoke(app, ["ingest", str(mine), "--db", str(path)]).exit_code == 0
    again = runner.invoke(app, ["demo", "--db", str(path)])
    assert again.exit_code == 1
    assert "holds records the demo did not write (messages: mine)" in again.output
    assert "give --db a new path" in again.output
    with doxa.open(str(path)) as memory:
        assert memory.store.execute("SELECT text FROM messages WHERE id = 'mine'").fetchall() == [("my own note",)]


def test_demo_refuses_its_store_once_the_user_settled_a_question_there(tmp_path):
    path = tmp_path / "d.duckdb"
    runner = CliRunner()
    assert runner.invoke(app, ["demo", "--db", str(path)]).exit_code == 0
    with doxa.open(str(path)) as memory:
        memory.ingest([{"type": "settlement", "question": "maya.birthday", "answer": "April",
                        "at": "2026-12-02", "how": "correction"}])
    again = runner.invoke(app, ["demo", "--db", str(path)])
    assert again.exit_code == 1 and "settlements: 1 rows where the demo writes 0" in again.output
    with doxa.open(str(path)) as memory:
        assert memory.store.counts()["settlements"] == 1


def test_demo_rebuilds_its_store_after_reads_alone(tmp_path):
    """Reads are the store's own log, not records: a store read from is still the demo's to rebuild."""
    path = str(tmp_path / "d.duckdb")
    runner = CliRunner()
    assert runner.invoke(app, ["demo", "--db", path]).exit_code == 0
    assert runner.invoke(app, ["belief", "maya.diet", "--db", path]).exit_code == 0
    with doxa.open(path) as memory:
        assert memory.store.fold_reads() > 0  # the reads are in the store itself now
    again = runner.invoke(app, ["demo", "--db", path, "--json"])
    assert again.exit_code == 0, again.output
