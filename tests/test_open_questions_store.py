"""Open (value) questions in the store and the formats (issue 36, item 2): a question whose options
are the values the evidence has named so far, readings with an ``unlisted`` mass, ``option_added`` and
``question_opened`` operations (recorded, undoable, carried by merge and replay), settlements that
name a new value, the fast path's fallback, and `doxa add-option` / `doxa open`.

Every store here is ``:memory:`` and hand-written; the read side's numbers are tested elsewhere.
"""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

import doxa
import records as R
from doxa.cli.main import app
from doxa.data import fast_ingest, kept_states
from doxa.data.errors import IngestError
from doxa.data.models import UNLISTED
from doxa.data.question_ops import operations
from doxa.data.replay import replay
from doxa.data.store import Store
from doxa.inference.read.feedback import FeedbackError

HOME = "maya.home"


def open_question(qid: str = HOME, options: list[str] | None = None, **fields) -> dict:
    record = {"type": "question", "id": qid, "subject": "maya", "kind": "home", "text": "Where does Maya live?",
              "open": True, **fields}
    if options is not None:
        record["options"] = options
    return record


def reading(message: str, probs: dict, unlisted: float = 0.0, unclear: float = 0.0, question: str = HOME,
            reader: str = "reader-1") -> dict:
    return dict(R.reading(message, question, probs, reader=reader, unclear=unclear), unlisted=unlisted)


def added(option: str, question: str = HOME, **fields) -> dict:
    return {"type": "option_added", "question": question, "option": option, **fields}


def base() -> list[dict]:
    return [R.subject("maya"), R.source("chat", ["person", "self", "chat"]), R.source("notes", ["user", "notes"]),
            R.message("m1", "chat", "2026-01-05", "I live at 12 Elm Street now."),
            R.message("m2", "notes", "2026-02-01", "Maya moved, no idea where."),
            R.message("m3", "chat", "2026-03-01", "New flat: 7 Harbour Road!")]


def stored(store: Store, qid: str = HOME) -> tuple[list[str], bool]:
    options, is_open = store.con.execute("SELECT options, is_open FROM questions WHERE id = ?", [qid]).fetchone()
    return list(options), is_open


def readings_of(store: Store, qid: str = HOME) -> dict[str, tuple[list[float], float]]:
    rows = store.con.execute("SELECT message, probs, unlisted FROM readings WHERE question = ?", [qid]).fetchall()
    return {m: (list(p), u) for m, p, u in rows}


def refusal(store: Store, records: list[dict]) -> str:
    with pytest.raises(IngestError) as err:
        store.ingest_records(records)
    return str(err.value)


def same(a: list[float], b: list[float]) -> bool:
    """Lists of probabilities equal, NaN (not named) matching NaN."""
    return len(a) == len(b) and all((math.isnan(x) and math.isnan(y)) or x == y for x, y in zip(a, b))


@pytest.fixture
def store():
    s = Store.memory()
    s.ingest_records(base())
    yield s
    s.close()


# ---------------------------------------------------------------------------- the question record
def test_an_open_question_may_list_no_option_yet_and_is_stored_open(store):
    assert store.ingest_records([open_question()]) == {"questions": 1}
    assert stored(store) == ([], True)
    store.ingest_records([open_question("maya.work", ["the bakery"], kind="work")])
    assert stored(store, "maya.work") == (["the bakery"], True)


@pytest.mark.parametrize("record, words", [
    (open_question(options=["12 Elm Street", UNLISTED]), "'unlisted' is reserved"),
    (open_question(shape="yes_no"), "an open question has shape 'choice'"),
    (open_question(shape="scale", options=["low", "high"]), "an open question has shape 'choice'"),
    (open_question(open="true"), "open must be true or false"),
    (R.question("maya.pet", ["cat"]), "at least 2 options"),
    (dict(R.question("maya.pet", ["cat", "dog"]), options=None), "needs 'options'"),
])
def test_question_records_an_open_question_refuses(store, record, words):
    assert words in refusal(store, [record])


def test_a_stored_closed_question_is_opened_by_an_operation_not_by_its_record(store):
    store.ingest_records([R.question(HOME, ["12 Elm Street", "7 Harbour Road"], kind="home", subject="maya")])
    message = refusal(store, [dict(R.question(HOME, ["12 Elm Street", "7 Harbour Road"], kind="home",
                                              subject="maya"), open=True)])
    assert "stored closed" in message and f"doxa open {HOME}" in message


# ---------------------------------------------------------------------------- readings
def test_a_reading_of_an_open_question_names_some_options_and_the_rest_is_nan(store):
    store.ingest_records([open_question(options=["12 Elm Street", "7 Harbour Road"]),
                          reading("m1", {"12 Elm Street": 0.85}, unlisted=0.1, unclear=0.05),
                          reading("m2", {}, unlisted=0.9, unclear=0.1)])
    got = readings_of(store)
    assert same(got["m1"][0], [0.85, math.nan]) and got["m1"][1] == 0.1
    assert same(got["m2"][0], [math.nan, math.nan]) and got["m2"][1] == 0.9


def test_probs_unlisted_unclear_and_unrelated_sum_to_one(store):
    store.ingest_records([open_question(options=["12 Elm Street"])])
    message = refusal(store, [reading("m1", {"12 Elm Street": 0.6}, unlisted=0.3)])
    assert "probs + unlisted + unclear + unrelated sums to 0.9" in message
    assert "unlisted must be a number in [0, 1]" in refusal(store, [reading("m1", {}, unlisted=1.5)])


def test_unlisted_mass_on_a_closed_question_is_refused_with_the_fix(store):
    store.ingest_records([R.question(HOME, ["12 Elm Street", "7 Harbour Road"], kind="home", subject="maya")])
    message = refusal(store, [reading("m1", {"12 Elm Street": 0.8, "7 Harbour Road": 0.0}, unlisted=0.2)])
    assert "closed question" in message and "put that mass in unclear" in message and f"doxa open {HOME}" in message


def test_a_reading_naming_a_value_not_listed_is_refused_naming_how_to_add_it(store):
    store.ingest_records([open_question(options=["12 Elm Street"])])
    message = refusal(store, [reading("m3", {"7 Harbour Road": 0.9}, unclear=0.1)])
    assert "['7 Harbour Road']" in message and f"doxa add-option {HOME} VALUE" in message


def test_a_reading_sent_again_after_a_value_was_added_is_the_same_reading(store):
    first = reading("m1", {"12 Elm Street": 0.85}, unlisted=0.15)
    store.ingest_records([open_question(options=["12 Elm Street"]), first])
    store.ingest_records([added("7 Harbour Road")])
    assert store.ingest_records([first]) == {}
    edited = reading("m1", {"12 Elm Street": 0.8}, unlisted=0.2)
    assert "stored with other values" in refusal(store, [edited])
    also_names = reading("m1", {"12 Elm Street": 0.85, "7 Harbour Road": 0.0}, unlisted=0.15)
    assert "stored with other values" in refusal(store, [also_names])


# ---------------------------------------------------------------------------- option_added
def test_values_are_appended_in_line_order_and_recorded_with_who_and_when(store):
    store.ingest_records([open_question()])
    result = store.ingest_records([added("12 Elm Street", by="organizer-v3", at="2026-01-05"),
                                   added("7 Harbour Road", by="me", at="2026-03-01")])
    assert result == {"options_added": 2}
    assert stored(store) == (["12 Elm Street", "7 Harbour Road"], True)
    ops = [(o["id"], o["op"], o["by"], o["at"].isoformat(), o["questions"]) for o in operations(store)]
    assert ops == [("option:maya.home:12 Elm Street", "option_added", "organizer-v3", "2026-01-05T00:00:00", [HOME]),
                   ("option:maya.home:7 Harbour Road", "option_added", "me", "2026-03-01T00:00:00", [HOME])]


def test_adding_a_listed_value_is_nothing_new(store):
    store.ingest_records([open_question(options=["12 Elm Street"]), added("7 Harbour Road")])
    assert store.ingest_records([added("7 Harbour Road")]) == {}  # the same operation
    assert store.ingest_records([added("12 Elm Street", id="again")]) == {}  # listed by the question record
    assert [o["id"] for o in operations(store)] == ["option:maya.home:7 Harbour Road"]
    assert stored(store)[0] == ["12 Elm Street", "7 Harbour Road"]


def test_a_value_is_added_only_to_an_open_question(store):
    store.ingest_records([R.question(HOME, ["12 Elm Street", "7 Harbour Road"], kind="home", subject="maya")])
    message = refusal(store, [added("3 Mill Lane")])
    assert "is closed" in message and "open it first" in message and f"doxa open {HOME}" in message
    assert "'unlisted' (every value not listed yet)" in refusal(store, [added(UNLISTED)])
    assert "unknown question 'maya.nowhere'" in refusal(store, [added("x", question="maya.nowhere")])


def test_a_value_added_in_the_same_file_may_be_named_by_its_readings(store):
    store.ingest_records([open_question(), reading("m3", {"7 Harbour Road": 0.9}, unclear=0.1),
                          added("7 Harbour Road")])
    assert stored(store)[0] == ["7 Harbour Road"]
    assert same(readings_of(store)["m3"][0], [0.9])


def test_adding_a_value_marks_its_question_changed_not_every_question(store):
    store.ingest_records([open_question(), R.question("maya.pet", ["cat", "dog"])])
    epoch = kept_states.evidence_epoch(store)
    structure = store.con.execute("SELECT value FROM meta WHERE key = 'structure_epoch'").fetchone()
    store.ingest_records([added("12 Elm Street")])
    assert kept_states.questions_changed_since(store, epoch) == [HOME]
    assert store.con.execute("SELECT value FROM meta WHERE key = 'structure_epoch'").fetchone() == structure


# ---------------------------------------------------------------------------- settlements
def test_a_settlement_naming_a_new_value_adds_it_in_the_same_transaction(store):
    store.ingest_records([open_question(options=["12 Elm Street"])])
    result = store.ingest_records([dict(R.settlement(HOME, "7 Harbour Road", "2026-03-02"), by="maya")])
    assert result == {"settlements": 1, "options_added": 1}
    assert stored(store)[0] == ["12 Elm Street", "7 Harbour Road"]
    (op,) = operations(store)
    assert (op["op"], op["by"], op["at"].isoformat(), op["record"]["option"]) == (
        "option_added", "maya", "2026-03-02T00:00:00", "7 Harbour Road")
    # sent again, nothing new; a later settlement of the same value adds no value
    assert store.ingest_records([dict(R.settlement(HOME, "7 Harbour Road", "2026-03-02"), by="maya")]) == {}
    assert store.ingest_records([R.settlement(HOME, "7 Harbour Road", "2026-04-01")]) == {"settlements": 1}
    assert len(operations(store)) == 1


def test_a_value_a_settlement_added_is_listed_for_a_later_option_added_of_it(store):
    store.ingest_records([open_question()])
    assert store.ingest_records([R.settlement(HOME, "7 Harbour Road", "2026-03-02"), added("7 Harbour Road")]) == {
        "settlements": 1, "options_added": 1}
    assert store.ingest_records([added("7 Harbour Road", by="someone else")]) == {}
    assert stored(store)[0] == ["7 Harbour Road"]


def test_a_refused_file_leaves_no_value_and_no_settlement(store):
    store.ingest_records([open_question(options=["12 Elm Street"]),
                          R.question("maya.pet", ["cat", "dog"], subject="maya")])
    before = R.snapshot(store)
    # the settlement is fine, the second line is not (refused while writing: after the settlement's rows)
    message = refusal(store, [R.settlement(HOME, "7 Harbour Road", "2026-03-02"), added("hamster", "maya.pet")])
    assert "line 2" in message and "'maya.pet' is closed" in message
    assert R.snapshot(store) == before and stored(store)[0] == ["12 Elm Street"] and operations(store) == []
    # refused while checking: a bad line anywhere
    refusal(store, [R.settlement(HOME, "7 Harbour Road", "2026-03-02"), R.message("m9", "nobody", "2026-01-01", "x")])
    assert R.snapshot(store) == before and operations(store) == []


def test_a_closed_question_still_refuses_a_settlement_naming_another_value(store):
    store.ingest_records([R.question(HOME, ["12 Elm Street", "7 Harbour Road"], kind="home", subject="maya")])
    message = refusal(store, [R.settlement(HOME, "3 Mill Lane", "2026-03-02")])
    assert "'3 Mill Lane' is not an option of 'maya.home'" in message
    assert "options are ['12 Elm Street', '7 Harbour Road']" in message


def test_unlisted_is_never_an_answer(store):
    store.ingest_records([open_question(options=["12 Elm Street"])])
    message = refusal(store, [R.settlement(HOME, UNLISTED, "2026-03-02")])
    assert "reserved word 'unlisted'" in message and "name the value itself" in message
    assert stored(store)[0] == ["12 Elm Street"]


def test_the_feedback_verbs_add_a_new_value_of_an_open_question():
    with doxa.open(":memory:") as mem:
        mem.ingest(base() + [open_question(options=["12 Elm Street"]),
                             reading("m1", {"12 Elm Street": 0.9}, unclear=0.1)])
        done = mem.correct(HOME, "7 Harbour Road", at="2026-03-05")
        assert done.recorded and mem.store.question(HOME)["options"] == ["12 Elm Street", "7 Harbour Road"]
        with pytest.raises(FeedbackError, match="name the value itself"):
            mem.correct(HOME, UNLISTED, at="2026-03-06")


def test_every_listed_value_of_an_open_question_may_be_rejected(store):
    store.ingest_records([open_question(options=["12 Elm Street"])])
    assert store.ingest_records([R.rejection(HOME, "12 Elm Street", "2026-03-01")]) == {"rejections": 1}
    assert "not an option" in refusal(store, [R.rejection(HOME, "3 Mill Lane", "2026-03-01")])


# ---------------------------------------------------------------------------- undo
def test_undoing_a_value_nothing_names_removes_it_and_its_places(store):
    store.ingest_records([open_question(options=["12 Elm Street"]), added("7 Harbour Road"),
                          reading("m1", {"12 Elm Street": 0.9}, unlisted=0.1)])
    assert same(readings_of(store)["m1"][0], [0.9, math.nan])
    assert store.ingest_records([{"type": "undo", "op": "option:maya.home:7 Harbour Road"}]) == {"organizer_ops": 1}
    assert stored(store)[0] == ["12 Elm Street"] and same(readings_of(store)["m1"][0], [0.9])
    assert [(o["op"], o["undone"]) for o in operations(store)] == [("option_added", True), ("undo", False)]
    # to add it again, a new operation id
    assert "was undone" in refusal(store, [added("7 Harbour Road")])
    assert store.ingest_records([added("7 Harbour Road", id="harbour-again")]) == {"options_added": 1}


@pytest.mark.parametrize("naming", [
    reading("m3", {"7 Harbour Road": 0.9}, unclear=0.1),
    R.settlement(HOME, "7 Harbour Road", "2026-03-02"),
    R.rejection(HOME, "7 Harbour Road", "2026-03-02"),
    dict(R.instruction("i1", "Send the card to her new flat", "2026-03-02", subject="maya"),
         rests_on={"question": HOME, "answer": "7 Harbour Road"}),
])
def test_a_value_something_names_is_not_undone(store, naming):
    store.ingest_records([open_question(options=["12 Elm Street"]), added("7 Harbour Road"), naming])
    before = repr(R.snapshot(store))  # repr: NaN (not named) equals NaN
    message = refusal(store, [{"type": "undo", "op": "option:maya.home:7 Harbour Road"}])
    assert "'7 Harbour Road' of 'maya.home' is named by" in message and "doxa reject maya.home 7 Harbour Road" in message
    assert repr(R.snapshot(store)) == before and stored(store)[0] == ["12 Elm Street", "7 Harbour Road"]


def test_a_value_added_before_another_is_undone_after_it(store):
    store.ingest_records([open_question(), added("12 Elm Street"), added("7 Harbour Road")])
    assert "undo 'option:maya.home:7 Harbour Road' first" in refusal(
        store, [{"type": "undo", "op": "option:maya.home:12 Elm Street"}])


def test_opening_a_closed_question_is_recorded_and_undone(store):
    store.ingest_records([R.question(HOME, ["12 Elm Street", "7 Harbour Road"], kind="home", subject="maya")])
    opened = {"type": "question_opened", "question": HOME, "by": "me", "at": "2026-03-01"}
    assert store.ingest_records([opened]) == {"questions_opened": 1}
    assert store.ingest_records([opened]) == {}
    assert stored(store) == (["12 Elm Street", "7 Harbour Road"], True)
    (op,) = operations(store)
    assert (op["id"], op["op"], op["by"]) == ("open:maya.home", "open", "me")
    # the record it was written with (closed, two options) is still the same question
    assert store.ingest_records([R.question(HOME, ["12 Elm Street", "7 Harbour Road"], kind="home",
                                            subject="maya")]) == {}
    assert store.ingest_records([{"type": "undo", "op": "open:maya.home"}]) == {"organizer_ops": 1}
    assert stored(store) == (["12 Elm Street", "7 Harbour Road"], False)


def test_an_opened_question_stays_open_while_what_needs_it_is_stored(store):
    store.ingest_records([R.question(HOME, ["12 Elm Street", "7 Harbour Road"], kind="home", subject="maya"),
                          {"type": "question_opened", "question": HOME}, added("3 Mill Lane")])
    assert "undo 'option:maya.home:3 Mill Lane' first" in refusal(store, [{"type": "undo", "op": "open:maya.home"}])
    store.ingest_records([{"type": "undo", "op": "option:maya.home:3 Mill Lane"}])
    store.ingest_records([reading("m2", {}, unlisted=0.9, unclear=0.1)])
    message = refusal(store, [{"type": "undo", "op": "open:maya.home"}])
    assert "give mass to a value not listed" in message and stored(store)[1] is True


def test_only_a_choice_question_opens(store):
    store.ingest_records([R.question("maya.moved", ["yes", "no"], shape="yes_no", subject="maya")])
    message = refusal(store, [{"type": "question_opened", "question": "maya.moved"}])
    assert "only a choice question opens" in message and "doxa merge maya.moved --into" in message


# ---------------------------------------------------------------------------- merge and replay
def test_merging_two_open_questions_lists_the_values_of_both(store):
    store.ingest_records([
        open_question(options=["12 Elm Street"]), open_question("maya.address", ["7 Harbour Road", "12 Elm Street"]),
        reading("m1", {"12 Elm Street": 0.9}, unlisted=0.1),
        reading("m3", {"7 Harbour Road": 0.8}, unlisted=0.1, unclear=0.1, question="maya.address"),
        reading("m2", {}, unlisted=0.7, unclear=0.3, question="maya.address")])
    merge = {"type": "question_merge", "id": "merge-address", "into": HOME, "from": "maya.address"}
    assert store.ingest_records([merge]) == {"organizer_ops": 1}
    assert stored(store)[0] == ["12 Elm Street", "7 Harbour Road"]
    got = readings_of(store)
    assert same(got["m1"][0], [0.9]) and same(got["m3"][0], [math.nan, 0.8]) and got["m3"][1] == 0.1
    assert same(got["m2"][0], [math.nan, math.nan]) and got["m2"][1] == 0.7
    store.ingest_records([{"type": "undo", "op": "merge-address"}])
    assert stored(store)[0] == ["12 Elm Street"] and set(readings_of(store)) == {"m1"}


def test_merging_an_open_question_into_a_closed_one_reads_unlisted_as_unclear(store):
    store.ingest_records([
        R.question(HOME, ["12 Elm Street", "7 Harbour Road"], kind="home", subject="maya"),
        open_question("maya.address", ["7 Harbour Road"]),
        reading("m3", {"7 Harbour Road": 0.8}, unlisted=0.15, unclear=0.05, question="maya.address")])
    store.ingest_records([{"type": "question_merge", "id": "m", "into": HOME, "from": "maya.address"}])
    probs, unclear, unlisted = store.con.execute(
        "SELECT probs, unclear, unlisted FROM readings WHERE question = ?", [HOME]).fetchone()
    assert list(probs) == [0.0, 0.8] and unclear == pytest.approx(0.2) and unlisted == 0.0


def test_a_file_whose_merge_adds_values_places_its_readings_where_the_operations_leave_them(store):
    # the merge (line 1) appends 7 Harbour Road to maya.home before the option_added (line 2) appends 3 Mill
    # Lane: the reading, written before the operations run, is placed by the order they leave (as
    # `doxa export` writes a store whose merge of open questions came before a value was added)
    store.ingest_records([open_question(options=["12 Elm Street"]),
                          open_question("maya.address", ["12 Elm Street", "7 Harbour Road"])])
    store.ingest_records([{"type": "question_merge", "id": "m", "into": HOME, "from": "maya.address"},
                          added("3 Mill Lane"), reading("m3", {"3 Mill Lane": 0.9}, unclear=0.1)])
    assert stored(store)[0] == ["12 Elm Street", "7 Harbour Road", "3 Mill Lane"]
    probs, _ = readings_of(store)["m3"]
    assert math.isnan(probs[0]) and math.isnan(probs[1]) and probs[2] == 0.9


def test_a_split_may_make_open_questions(store):
    store.ingest_records([R.question(HOME, ["12 Elm Street", "7 Harbour Road"], kind="home", subject="maya"),
                          R.reading("m1", HOME, {"12 Elm Street": 0.9, "7 Harbour Road": 0.0}, unclear=0.1),
                          R.reading("m3", HOME, {"12 Elm Street": 0.0, "7 Harbour Road": 0.9}, unclear=0.1)])
    split = {"type": "question_split", "id": "split-home", "question": HOME,
             "into": [open_question("maya.lives_at", ["7 Harbour Road"])],
             "assign": {"m1": "maya.lives_at", "m3": "maya.lives_at"},
             "readings": [reading("m2", {}, unlisted=0.8, unclear=0.2, question="maya.lives_at")]}
    closed = dict(split, into=[R.question("maya.lives_at", ["7 Harbour Road", "elsewhere"])],
                  readings=[reading("m2", {"7 Harbour Road": 0.1, "elsewhere": 0.0}, unlisted=0.8, unclear=0.1,
                                    question="maya.lives_at")])
    assert "is closed: put that mass in unclear" in refusal(store, [closed])
    store.ingest_records([split])
    assert stored(store, "maya.lives_at") == (["7 Harbour Road"], True)
    got = readings_of(store, "maya.lives_at")
    # 12 Elm Street is not listed there: a message stating it states a value not listed (a closed
    # question's reading names every option, so 7 Harbour Road keeps its 0)
    assert same(got["m1"][0], [0.0]) and got["m1"][1] == pytest.approx(0.9)
    assert same(got["m3"][0], [0.9]) and got["m3"][1] == 0.0
    assert same(got["m2"][0], [math.nan]) and got["m2"][1] == 0.8


def test_replay_carries_the_values_added_to_an_open_question(store, tmp_path):
    store.ingest_records([open_question(options=["12 Elm Street"]),
                          added("7 Harbour Road", by="organizer-v3", at="2026-03-01"),
                          reading("m1", {"12 Elm Street": 0.9}, unlisted=0.1),
                          reading("m3", {"7 Harbour Road": 0.9}, unclear=0.1),
                          R.settlement(HOME, "3 Mill Lane", "2026-04-01")])
    target, report = replay(store, ":memory:", [open_question(options=["12 Elm Street"])])
    try:
        assert stored(target)[0] == ["12 Elm Street", "7 Harbour Road", "3 Mill Lane"]
        assert report["carried_readings"] == {HOME: 2}
        got = readings_of(target)
        assert same(got["m1"][0], [0.9, math.nan, math.nan]) and got["m1"][1] == 0.1
        assert same(got["m3"][0], [math.nan, 0.9, math.nan])
        assert [s["answer"] for s in target.settlements([HOME])] == ["3 Mill Lane"]
        assert [(o["record"]["option"], o["by"]) for o in operations(target)] == [
            ("7 Harbour Road", "organizer-v3"), ("3 Mill Lane", "user")]
    finally:
        target.close()


# ---------------------------------------------------------------------------- the fast path
def big_file(n_messages: int) -> list[dict]:
    records = base()[:3] + [open_question(options=["12 Elm Street"]),
                            R.question("maya.pet", ["cat", "dog"], subject="maya")]
    for i in range(n_messages):
        records.append(R.message(f"b{i}", "chat", f"2026-01-{1 + i % 28:02d}", f"note {i} about where she lives"))
        records.append(reading(f"b{i}", {"12 Elm Street": 0.5}, unlisted=0.5) if i % 2 else
                       R.reading(f"b{i}", "maya.pet", {"cat": 0.6, "dog": 0.4}))
    return records


def test_a_large_file_with_an_open_question_is_stored_as_the_per_line_path_stores_it():
    records = big_file(2_500)
    lines = [json.dumps(r) + "\n" for r in records]
    assert len(lines) >= fast_ingest.FAST_MIN_LINES
    fast, slow = Store.memory(), Store.memory()
    assert fast.ingest_lines(lines) == slow.ingest_lines(lines, fast=False)
    assert fast.last_ingest_path == "per-line"
    tables = {"questions": "id, options, is_open", "readings": "message, question, probs::VARCHAR, unlisted",
              "messages": "id, text"}
    for table, columns in tables.items():
        assert (fast.con.execute(f"SELECT {columns} FROM {table} ORDER BY ALL").fetchall()
                == slow.con.execute(f"SELECT {columns} FROM {table} ORDER BY ALL").fetchall())


@pytest.mark.parametrize("record", [
    open_question("maya.work", kind="work"), added("3 Mill Lane"), {"type": "question_opened", "question": HOME},
    reading("m2", {}, unlisted=0.9, unclear=0.1)])
def test_the_fast_checks_leave_open_questions_to_the_per_line_path(monkeypatch, record):
    monkeypatch.setattr(fast_ingest, "FAST_MIN_LINES", 50)
    first = base() + [open_question(options=["12 Elm Street"])]
    filler = [R.message(f"f{i}", "chat", "2026-01-02", f"filler {i}") for i in range(60)]
    fast, slow = Store.memory(), Store.memory()
    for s in (fast, slow):
        s.ingest_records(first)
    lines = [json.dumps(r) + "\n" for r in filler + [record]]
    assert fast.ingest_lines(lines, fast=True) == slow.ingest_lines(lines, fast=False)
    assert fast.last_ingest_path == "per-line"
    assert stored(fast) == stored(slow)


# ---------------------------------------------------------------------------- the command line and the API
def run(*args: str, code: int = 0):
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == code, result.output
    return result


def test_add_option_and_open_on_the_command_line(tmp_path):
    db = str(tmp_path / "open.duckdb")
    path = tmp_path / "records.jsonl"
    R.write_jsonl(path, base() + [R.question(HOME, ["12 Elm Street", "7 Harbour Road"], kind="home",
                                             subject="maya")])
    run("ingest", str(path), "--db", db)
    refused = run("add-option", HOME, "3 Mill Lane", "--db", db, code=1)
    assert "open it first" in refused.output
    opened = json.loads(run("open", HOME, "--by", "me", "--db", db, "--json").stdout)
    assert opened["recorded"] and opened["op"] == "open:maya.home" and opened["record"]["by"] == "me"
    got = json.loads(run("add-option", HOME, "3 Mill Lane", "--at", "2026-04-01", "--db", db, "--json").stdout)
    assert got["verb"] == "add_option" and got["recorded"] and got["op"] == "option:maya.home:3 Mill Lane"
    assert got["options"] == ["12 Elm Street", "7 Harbour Road", "3 Mill Lane"]
    assert got["record"]["at"] == "2026-04-01T00:00:00"
    again = json.loads(run("add-option", HOME, "3 Mill Lane", "--db", db, "--json").stdout)
    assert not again["recorded"] and again["op"] is None
    assert "3 Mill Lane" in run("add-option", HOME, "3 Mill Lane", "--db", db).stdout
    run("undo", "option:maya.home:3 Mill Lane", "--db", db)
    # the id of an undone operation is not reused: the value comes back under a new one
    back = json.loads(run("add-option", HOME, "3 Mill Lane", "--db", db, "--json").stdout)
    assert back["op"] == "option:maya.home:3 Mill Lane-2"


def test_memory_adds_values_and_opens_questions():
    with doxa.open(":memory:") as mem:
        mem.ingest(base() + [R.question(HOME, ["12 Elm Street", "7 Harbour Road"], kind="home", subject="maya")])
        with pytest.raises(FeedbackError, match="open it first"):
            mem.add_option(HOME, "3 Mill Lane")
        assert mem.open_question(HOME, by="me").recorded
        change = mem.add_option(HOME, "3 Mill Lane", by="me", at="2026-04-01")
        assert change.recorded and change.options[-1] == "3 Mill Lane"
        assert not mem.add_option(HOME, "3 Mill Lane").recorded
