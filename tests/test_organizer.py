"""The organizer's operations: merge, split, undo (exactly), who did what and when, and replay."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import doxa
import records as R
from doxa.data.errors import IngestError, StoreError
from doxa.data.question_ops import OptionMap, operations
from doxa.data.replay import replay

NOW = datetime(2026, 6, 1)
YES_NO = ["yes", "no"]


def base_records() -> list[dict]:
    """Maya's diet asked twice (a duplicate yes/no question), her home, and evidence for each."""
    return [
        R.subject("maya"), R.subject("sam"),
        R.source("chat", ["person", "self", "chat"]), R.source("notes", ["user", "notes"]),
        R.question("maya.diet", R.DIET, kind="diet", subject="maya"),
        R.question("maya.veggie", YES_NO, kind="is_vegetarian", subject="maya", shape="yes_no",
                   text="Is Maya vegetarian?"),
        R.question("maya.home", ["Elm Street", "Harbour Road"], kind="home", subject="maya"),
        R.question("sam.veggie", YES_NO, kind="is_vegetarian", subject="sam", shape="yes_no"),
        R.message("m1", "notes", "2025-01-10", "Maya is vegetarian."),
        R.reading("m1", "maya.diet", {"vegetarian": 0.9, "eats fish": 0.05, "eats meat": 0.0}, unclear=0.05),
        R.message("m2", "chat", "2026-03-01", "Eating fish again!"),
        R.reading("m2", "maya.veggie", {"yes": 0.05, "no": 0.85}, unclear=0.1),
        R.message("m3", "chat", "2026-04-01", "Still no meat, only fish."),
        R.reading("m3", "maya.veggie", {"yes": 0.2, "no": 0.7}, unclear=0.1, one_off=0.1),
        R.reading("m3", "maya.diet", {"vegetarian": 0.1, "eats fish": 0.8, "eats meat": 0.0}, unclear=0.1),
        R.settlement("maya.veggie", "no", "2026-04-15"),
        R.rejection("maya.veggie", "yes", "2026-04-20"),
        R.message("a1", "notes", "2024-01-01", "Maya lives on Elm Street."),
        R.reading("a1", "maya.home", {"Elm Street": 0.95, "Harbour Road": 0.02}, unclear=0.03),
        R.message("a2", "chat", "2026-02-01", "Moved to Harbour Road! Send parcels to my office though."),
        R.reading("a2", "maya.home", {"Elm Street": 0.02, "Harbour Road": 0.9}, unclear=0.08),
        {"type": "instruction", "id": "i1", "subject": "maya", "text": "Cook vegetarian for Maya", "at": "2025-02-01",
         "rests_on": {"question": "maya.veggie", "answer": "yes"}},
    ]


MERGE = {"type": "question_merge", "id": "op1", "into": "maya.diet", "from": "maya.veggie",
         "option_map": {"yes": "vegetarian", "no": "eats fish"}, "by": "organizer-v1", "at": "2026-05-01"}


@pytest.fixture
def mem():
    memory = doxa.open(":memory:", log_reads=False)
    memory.ingest(base_records())
    yield memory
    memory.close()


def beliefs(mem) -> dict[str, dict[str, float]]:
    return {b.question: b.answers for b in mem.beliefs(at=NOW)}


# ---------------------------------------------------------------------------- merge
def test_merge_carries_evidence_and_undo_restores_every_belief_exactly(mem):
    before, snap = beliefs(mem), R.snapshot(mem.store)
    mem.ingest([MERGE])
    after = beliefs(mem)
    assert "maya.veggie" not in after and mem.store.question("maya.veggie")["status"] == "merged"
    assert after["maya.diet"] != before["maya.diet"]  # the duplicate's evidence now counts
    mem.ingest([{"type": "undo", "op": "op1", "by": "me"}])
    assert beliefs(mem) == before
    assert R.snapshot(mem.store) == snap  # every row as it was, nothing left behind


def test_merge_maps_probabilities_settlements_rejections_and_instructions(mem):
    mem.ingest([MERGE])
    (m2,) = mem.store.execute("SELECT probs, unclear FROM readings WHERE message = 'm2' AND question = 'maya.diet'"
                              ).fetchall()
    assert m2[0] == pytest.approx([0.05, 0.85, 0.0]) and m2[1] == pytest.approx(0.1)
    # m3 already had a reading for maya.diet by the same reader: that one is kept, not overwritten
    (m3,) = mem.store.execute("SELECT probs FROM readings WHERE message = 'm3' AND question = 'maya.diet'").fetchall()
    assert m3[0] == pytest.approx([0.1, 0.8, 0.0])
    assert [s["answer"] for s in mem.store.settlements(["maya.diet"])] == ["eats fish"]
    assert [r["answer"] for r in mem.store.rejections("maya.diet")] == ["vegetarian"]
    (instruction,) = mem.store.instructions(["maya"])
    assert (instruction["rests_on_question"], instruction["rests_on_answer"]) == ("maya.diet", "vegetarian")


def test_unmapped_mass_becomes_unclear_and_a_rejection_needs_every_old_option():
    omap = OptionMap(["a", "b", "c"], ["x", "y"], {"a": "x", "b": "x"})
    import numpy as np

    probs, unclear = omap.carry(np.array([[0.2, 0.3, 0.4]]), np.array([0.1]))
    assert probs.tolist() == [[0.5, 0.0]] and unclear.tolist() == pytest.approx([0.5])
    assert omap.rejected({"a"}) == [] and omap.rejected({"a", "b"}) == ["x"]


@pytest.mark.parametrize("change, message", [
    ({"from": "maya.nope"}, "unknown question 'maya.nope'"),
    ({"from": "sam.veggie", "option_map": None}, "about 'sam'"),
    ({"option_map": {"maybe": "vegetarian"}}, "'maybe' is not an option"),
    ({"option_map": {"yes": "vegan"}}, "'vegan' is not an option"),
])
def test_bad_merges_are_refused_whole_with_the_line_and_reason(mem, change, message):
    snap = R.snapshot(mem.store)
    record = {k: v for k, v in {**MERGE, **change}.items() if v is not None}
    with pytest.raises(IngestError) as err:
        mem.ingest_lines([json.dumps(R.message("x1", "chat", "2026-05-01", "new evidence")), json.dumps(record)])
    assert "line 2" in str(err.value) and message in str(err.value)
    assert R.snapshot(mem.store) == snap


def test_merging_a_merged_question_again_is_refused(mem):
    mem.ingest([MERGE])
    with pytest.raises(IngestError, match="merged, not active"):
        mem.ingest([dict(MERGE, id="op2")])


def test_operations_are_idempotent_and_never_edited(mem):
    mem.ingest([MERGE])
    assert mem.ingest([MERGE]) == {}
    with pytest.raises(IngestError, match="stored with other content"):
        mem.ingest([dict(MERGE, by="someone else")])


def test_every_operation_is_recorded_with_who_and_when(mem):
    mem.ingest([MERGE, {"type": "undo", "op": "op1", "by": "me", "at": "2026-05-02"}])
    ops = operations(mem.store)
    assert [(o["id"], o["op"], o["by"], o["at"], o["undone"]) for o in ops] == [
        ("op1", "merge", "organizer-v1", datetime(2026, 5, 1), True),
        ("undo:op1", "undo", "me", datetime(2026, 5, 2), False)]
    with pytest.raises(IngestError, match="already undone"):
        mem.ingest([{"type": "undo", "op": "op1", "id": "again"}])


def test_a_later_operation_must_be_undone_first(mem):
    mem.ingest([R.question("maya.diet3", R.DIET, kind="diet", subject="maya"), MERGE,
                {"type": "question_merge", "id": "op2", "into": "maya.diet3", "from": "maya.diet"}])
    with pytest.raises(IngestError, match="undo 'op2' first"):
        mem.ingest([{"type": "undo", "op": "op1"}])
    mem.ingest([{"type": "undo", "op": "op2"}, {"type": "undo", "op": "op1"}])
    assert {"maya.diet", "maya.veggie", "maya.diet3"} <= set(beliefs(mem))


PROBS = st.floats(0.0, 1.0)


@settings(max_examples=4, deadline=None)
@given(st.lists(st.tuples(PROBS, PROBS, PROBS), min_size=1, max_size=4), st.sampled_from(R.DIET))
def test_merge_then_undo_is_exact_for_any_readings(readings, no_maps_to):
    memory = doxa.open(":memory:", log_reads=False)
    records = base_records()
    for i, (a, b, u) in enumerate(readings):
        total = a + b + u or 1.0
        yes, no = a / total, b / total
        records += [R.message(f"h{i}", "chat", f"2026-01-{i + 10}", f"hypothesis {i}"),
                    R.reading(f"h{i}", "maya.veggie", {"yes": yes, "no": no}, unclear=max(0.0, 1.0 - yes - no))]
    memory.ingest(records)
    before = beliefs(memory)
    memory.ingest([dict(MERGE, option_map={"yes": "vegetarian", "no": no_maps_to})])
    memory.ingest([{"type": "undo", "op": "op1"}])
    assert beliefs(memory) == before
    memory.close()


# ---------------------------------------------------------------------------- split
SPLIT = {
    "type": "question_split", "id": "op-split", "question": "maya.home", "by": "organizer-v2",
    "into": [
        {"id": "maya.lives_at", "subject": "maya", "kind": "home", "text": "Where does Maya live?",
         "options": ["Elm Street", "Harbour Road"]},
        {"id": "maya.parcels_to", "subject": "maya", "kind": "delivery", "text": "Where should parcels go?",
         "options": ["home", "office"]},
    ],
    "assign": {"a1": "maya.lives_at", "a2": "maya.lives_at"},
    "readings": [{"message": "a2", "question": "maya.parcels_to", "reader": "reader-1",
                  "probs": {"home": 0.05, "office": 0.9}, "unclear": 0.05}],
}


def test_split_reassigns_readings_and_both_new_questions_have_beliefs(mem):
    old = beliefs(mem)["maya.home"]
    mem.ingest([SPLIT])
    found = {b.question: b for b in mem.beliefs(at=NOW)}
    assert "maya.home" not in found and mem.store.question("maya.home")["status"] == "split"
    assert found["maya.lives_at"].answers == old  # same readings, same options: same belief
    assert found["maya.lives_at"].n_evidence == 2
    assert found["maya.parcels_to"].top == "office" and found["maya.parcels_to"].n_evidence == 1
    with pytest.raises(StoreError, match="not active"):
        mem.belief("maya.home", NOW)


def test_undo_split_restores_beliefs_and_withdraws_the_new_questions(mem):
    before = beliefs(mem)
    mem.ingest([SPLIT])
    mem.ingest([{"type": "undo", "op": "op-split"}])
    assert beliefs(mem) == before
    assert mem.store.question("maya.lives_at")["status"] == "withdrawn"
    assert mem.store.execute("SELECT count(*) FROM readings WHERE question LIKE 'maya.lives_at'").fetchone()[0] == 0


def test_split_needs_a_way_to_carry_each_assigned_message(mem):
    bad = dict(SPLIT, assign={"a2": "maya.parcels_to"}, readings=[])
    with pytest.raises(IngestError, match="no option of 'maya.home' maps"):
        mem.ingest([bad])
    with pytest.raises(IngestError, match="validation|not a question in 'into'"):
        mem.ingest([dict(SPLIT, assign={"a2": "maya.elsewhere"})])


def test_split_carries_settlements_where_the_options_map(mem):
    mem.ingest([R.settlement("maya.home", "Harbour Road", "2026-03-01"), SPLIT])
    assert [(s["question"], s["answer"]) for s in mem.store.settlements(["maya.lives_at", "maya.parcels_to"])] == [
        ("maya.lives_at", "Harbour Road")]


# ---------------------------------------------------------------------------- replay
def test_replay_rebuilds_the_evidence_under_other_questions(mem, tmp_path):
    before = beliefs(mem)
    questions = [
        R.question("maya.diet", R.DIET, kind="diet", subject="maya"),
        R.question("maya.home", ["Elm Street", "Harbour Road"], kind="home", subject="maya"),
        R.question("maya.allergies", YES_NO, kind="allergies", subject="maya", shape="yes_no"),
    ]
    target, report = replay(mem.store, tmp_path / "replayed.duckdb", questions)
    with doxa.inference.read.memory.Memory(target, log_reads=False) as replayed:
        after = {b.question: b.answers for b in replayed.beliefs(at=NOW)}
        assert after["maya.diet"] == before["maya.diet"] and after["maya.home"] == before["maya.home"]
        assert after["maya.allergies"] == {"yes": 0.5, "no": 0.5}
        assert replayed.store.counts()["messages"] == mem.store.counts()["messages"]
        # the instruction rested on a question this organization does not have
        (instruction,) = replayed.store.instructions()
        assert instruction["rests_on_question"] is None
    assert report["unread"] == ["maya.allergies"] and report["carried_readings"]["maya.diet"] == 2
    with pytest.raises(StoreError, match="exists"):
        replay(mem.store, tmp_path / "replayed.duckdb", questions)


def test_replay_can_carry_an_old_question_to_a_new_id(mem):
    target, report = replay(mem.store, ":memory:", [
        R.question("maya.is_veg", YES_NO, kind="is_vegetarian", subject="maya", shape="yes_no")],
        from_questions={"maya.is_veg": "maya.veggie"})
    with doxa.inference.read.memory.Memory(target, log_reads=False) as replayed:
        assert replayed.belief("maya.is_veg", NOW).answers == mem.belief("maya.veggie", NOW).answers
    assert report["carried_readings"] == {"maya.is_veg": 2}


# ---------------------------------------------------------------------------- command line
def test_cli_merge_ops_and_undo(tmp_path):
    from doxa.cli.main import app

    db = str(tmp_path / "s.duckdb")
    with doxa.open(db) as memory:
        memory.ingest(base_records())
        before = {b.question: b.answers for b in memory.beliefs(at=NOW)}
    runner = CliRunner()
    result = runner.invoke(app, ["merge", "maya.veggie", "--into", "maya.diet", "--map", "yes=vegetarian,no=eats fish",
                                 "--db", db, "--json"])
    assert result.exit_code == 0, result.output
    op = json.loads(result.output)["op"]
    listed = runner.invoke(app, ["ops", "--db", db, "--json"])
    assert [o["id"] for o in json.loads(listed.output)] == [op]
    result = runner.invoke(app, ["undo", op, "--db", db])
    assert result.exit_code == 0 and "Undid" in result.output
    with doxa.open(db) as memory:
        assert {b.question: b.answers for b in memory.beliefs(at=NOW)} == before
    refused = runner.invoke(app, ["merge", "maya.veggie", "--into", "maya.nope", "--db", db])
    assert refused.exit_code == 1 and "unknown question 'maya.nope'" in refused.output
