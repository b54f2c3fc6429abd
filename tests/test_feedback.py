"""Feedback as settled facts (issue 12): correct, approve, outcome, reject, instruct on the Python
API and the command line; idempotence; validation through the ingest path; the v2 → v3
migration; and `uncertain`: which beliefs to ask about, most useful first."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import doxa
import records as R
from doxa.cli.main import app
from doxa.data.schema import SCHEMA_VERSION
from doxa.data.store import Store
from doxa.inference.read.feedback import FeedbackError, instruction_id
from doxa.inference.read.uncertain import RECENT_DAYS

T = datetime(2026, 6, 1)
LATER = "2026-06-02T10:00:00"


def settlements(mem) -> list[dict]:
    return mem.store.settlements()


# ---------------------------------------------------------------------------- the verbs
def test_a_correction_is_a_settlement_and_the_belief_then_reads_it(small_mem):
    before = small_mem.belief("maya.diet", T)
    assert before.top == "eats fish"
    done = small_mem.correct("maya.diet", "vegetarian", at=T, by="ana")
    assert done.recorded and done.verb == "correct"
    (stored,) = settlements(small_mem)
    assert (stored["question"], stored["answer"], stored["settled_at"], stored["how"], stored["by"]) == (
        "maya.diet", "vegetarian", T, "correction", "ana")
    assert stored["p_before"] == pytest.approx(before.answers["vegetarian"])
    after = small_mem.belief("maya.diet", T)
    assert after.top == "vegetarian" and after.p_top == 1.0 and after.n_settled == 1
    assert done.before["top"] == "eats fish" and done.after["top"] == "vegetarian"
    assert done.after["answers"] == after.answers


def test_approve_defaults_to_the_top_answer_then_and_records_its_probability(small_mem):
    shown = small_mem.belief("maya.flower", T)
    done = small_mem.approve("maya.flower", at=T)
    assert done.record["answer"] == shown.top
    (stored,) = settlements(small_mem)
    assert stored["how"] == "approval" and stored["answer"] == shown.top
    assert stored["p_before"] == pytest.approx(shown.p_top) and stored["params_version"] == shown.params_version
    # an answer named explicitly is recorded with what doxa said of it, however low
    low = small_mem.belief("sam.diet", T).answers["eats meat"]
    small_mem.approve("sam.diet", "eats meat", at=T)
    sam = [s for s in settlements(small_mem) if s["question"] == "sam.diet"][0]
    assert (sam["answer"], sam["p_before"]) == ("eats meat", pytest.approx(low))


def test_an_outcome_says_how_the_world_showed_it(small_mem):
    done = small_mem.outcome("maya.flower", "lilies", how="she kept the lily bouquet", at=T)
    (stored,) = settlements(small_mem)
    assert (stored["how"], stored["note"], stored["by"]) == ("outcome", "she kept the lily bouquet", "world")
    assert done.after["top"] == "lilies"
    with pytest.raises(FeedbackError, match="how the world showed it"):
        small_mem.outcome("maya.flower", "lilies", how="  ")


def test_a_rejected_answer_reads_zero_from_then_on(small_mem):
    done = small_mem.reject("maya.diet", "eats fish", at=T)
    assert done.recorded and done.after["answers"]["eats fish"] == 0.0
    assert small_mem.belief("maya.diet", T).rejected == ["eats fish"]
    assert small_mem.belief("maya.diet", T - timedelta(days=1)).answers["eats fish"] > 0


def test_an_instruction_is_kept_with_who_gave_it_and_what_it_rests_on(small_mem):
    done = small_mem.instruct("maya", "Book a table without fish", at=T, by="ana",
                              rests_on={"question": "maya.diet", "answer": "vegetarian"})
    assert done.recorded and done.record["id"] == instruction_id("maya", "Book a table without fish")
    (stored,) = small_mem.store.instructions(["maya"])
    assert (stored["text"], stored["by"], stored["rests_on_question"], stored["rests_on_answer"]) == (
        "Book a table without fish", "ana", "maya.diet", "vegetarian")


@pytest.mark.parametrize("text", ["   ", "\t\n", ""])
def test_a_blank_instruction_is_refused_and_nothing_recorded(small_mem, rec, text):
    stored = rec.snapshot(small_mem.store)
    with pytest.raises(FeedbackError, match="refused, nothing recorded: text is (only white space|empty)"):
        small_mem.instruct("maya", text, at=T)
    assert rec.snapshot(small_mem.store) == stored


def test_an_outcome_note_longer_than_any_text_is_refused(small_mem, rec):
    from doxa.data.models import MAX_TEXT_CHARS

    stored = rec.snapshot(small_mem.store)
    with pytest.raises(FeedbackError, match=f"note is {MAX_TEXT_CHARS + 1} characters long \\(at most"):
        small_mem.outcome("maya.diet", "eats meat", how="x" * (MAX_TEXT_CHARS + 1), at=T)
    assert rec.snapshot(small_mem.store) == stored
    assert small_mem.outcome("maya.diet", "eats meat", how="x" * MAX_TEXT_CHARS, at=T).recorded


# ---------------------------------------------------------------------------- idempotence
@pytest.mark.parametrize("verb, call", [
    ("correct", lambda m, at: m.correct("maya.diet", "vegetarian", at=at)),
    ("approve", lambda m, at: m.approve("maya.diet", at=at)),
    ("outcome", lambda m, at: m.outcome("maya.diet", "eats meat", how="ordered steak", at=at)),
    ("reject", lambda m, at: m.reject("maya.diet", "eats meat", at=at)),
    ("instruct", lambda m, at: m.instruct("maya", "No lilies", at=at)),
])
@pytest.mark.parametrize("at", [T, None], ids=["explicit-at", "now"])
def test_every_verb_is_idempotent(small_mem, rec, verb, call, at):
    first = call(small_mem, at)
    assert first.recorded
    stored = rec.snapshot(small_mem.store)
    again = call(small_mem, at)
    assert not again.recorded and again.message.startswith("already recorded")
    assert again.record == first.record  # the stored record, not a new one
    assert rec.snapshot(small_mem.store) == stored


def test_a_later_settlement_with_another_answer_is_new(small_mem):
    small_mem.correct("maya.diet", "vegetarian")
    assert small_mem.correct("maya.diet", "eats fish").recorded
    assert [s["answer"] for s in settlements(small_mem)] == ["vegetarian", "eats fish"]


def test_the_same_time_and_answer_with_another_verb_is_an_edit_and_refused(small_mem, rec):
    small_mem.correct("maya.diet", "vegetarian", at=T)
    stored = rec.snapshot(small_mem.store)
    with pytest.raises(FeedbackError, match="settlements are never edited"):
        small_mem.approve("maya.diet", "vegetarian", at=T)
    assert rec.snapshot(small_mem.store) == stored


# ---------------------------------------------------------------------------- validation
@pytest.mark.parametrize("call, expected", [
    (lambda m: m.correct("maya.dit", "vegetarian"), r"unknown question 'maya\.dit'.*closest first: 'maya\.diet'"),
    (lambda m: m.approve("maya.dit"), r"unknown question 'maya\.dit'.*closest first: 'maya\.diet'"),
    (lambda m: m.reject("maya.dit", "x"), r"unknown question 'maya\.dit'"),
    (lambda m: m.correct("maya.diet", "vegan"),
     r"'vegan' is not an option of 'maya\.diet': options are \['vegetarian', 'eats fish', 'eats meat'\]"),
    (lambda m: m.reject("maya.flower", "roses"), r"options are \['lilies', 'tulips'\]"),
    (lambda m: m.instruct("mya", "x"), r"unknown subject 'mya'.*'maya'"),
    (lambda m: m.instruct("maya", "x", rests_on={"question": "maya.diet", "answer": "vegan"}),
     r"not an option of 'maya\.diet'"),
    (lambda m: m.correct("maya.diet", "vegetarian", at="soon"), r"at: cannot read time 'soon'"),
    (lambda m: m.correct("maya.diet", ""), r"answer"),
])
def test_bad_feedback_is_refused_naming_what_exists_and_nothing_is_written(small_mem, rec, call, expected):
    stored = rec.snapshot(small_mem.store)
    with pytest.raises(FeedbackError, match=expected) as err:
        call(small_mem)
    assert "nothing recorded" in str(err.value) or "at:" in str(err.value)
    assert rec.snapshot(small_mem.store) == stored


def test_feedback_on_a_merged_question_is_refused(small_mem, rec):
    small_mem.ingest([rec.question("maya.diet2", R.DIET, kind="diet", subject="maya"),
                      {"type": "question_merge", "id": "op1", "from": "maya.diet2", "into": "maya.diet",
                       "by": "user", "at": "2026-05-01"}])
    with pytest.raises(FeedbackError, match="'maya.diet2' is merged"):
        small_mem.correct("maya.diet2", "vegetarian")


def test_a_version_2_store_is_migrated_keeping_its_settlements(tmp_path, small_records):
    path = str(tmp_path / "v2.duckdb")
    with doxa.open(path) as memory:
        memory.ingest(small_records + [R.settlement("maya.diet", "vegetarian", "2026-05-01")])
        con = memory.store.con
        for column in ("note", "p_before", "params_version"):
            con.execute(f"ALTER TABLE settlements DROP COLUMN {column}")
        con.execute("ALTER TABLE instructions DROP COLUMN given_by")
        con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    with doxa.open(path) as memory:
        assert memory.store.con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == (
            SCHEMA_VERSION)
        (old,) = memory.store.settlements()
        assert (old["answer"], old["how"], old["note"], old["p_before"]) == ("vegetarian", "correction", None, None)
        memory.instruct("maya", "Quiet places", at=T, by="ana")
        assert memory.store.instructions(["maya"])[0]["by"] == "ana"


# ---------------------------------------------------------------------------- uncertain
def uncertain_records() -> list[dict]:
    """Five yes/no questions read once each with known strength; one instruction rests on q4."""
    out = [R.subject("p"), R.source("s", ["person", "chat"], trust=0.9)]
    strengths = {"p.q0": 0.97, "p.q1": 0.7, "p.q2": 0.6, "p.q3": 0.75, "p.q4": 0.97}
    for i, (qid, p) in enumerate(strengths.items()):
        out.append(R.question(qid, ["yes", "no"], kind=f"k{i}", subject="p", shape="yes_no"))
        out.append(R.message(f"m{i}", "s", "2026-05-01", f"message {i}"))
        out.append(R.reading(f"m{i}", qid, {"yes": p, "no": 1 - p}))
    out.append(R.instruction("i1", "Plan as if q4 is no", "2026-05-02", subject="p")
               | {"rests_on": {"question": "p.q4", "answer": "no"}})
    return out


def test_uncertain_lists_what_to_ask_most_useful_first(mem):
    mem.ingest(uncertain_records())
    everything = {b.question: b for b in mem.beliefs(at=T)}  # one read each, in the window
    for _ in range(3):  # q3 is needed often: three more reads
        mem.belief("p.q3", T)
    mem.belief("p.q1", T - timedelta(days=RECENT_DAYS + 1))  # outside the window: does not count
    found = mem.uncertain(at=T)
    # q0 is sure and nothing rests on it: not listed; q4 is sure, but an instruction rests on "no"
    assert {u.belief["question"] for u in found} == {"p.q1", "p.q2", "p.q3", "p.q4"}
    reads = {"p.q1": 1, "p.q2": 1, "p.q3": 4, "p.q4": 1}
    expected = {}
    for qid, n in reads.items():
        b = everything[qid]
        p_wrong = 1 - b.answers["no"] if qid == "p.q4" else 1 - b.p_top
        expected[qid] = round(p_wrong, 6) * (1 + n)
    assert [u.belief["question"] for u in found] == sorted(expected, key=lambda q: -expected[q])
    for u in found:
        assert u.recent_reads == reads[u.belief["question"]]
        assert u.usefulness == pytest.approx(expected[u.belief["question"]], abs=1e-6)
    q4 = next(u for u in found if u.belief["question"] == "p.q4")
    assert q4.belief["act"] and q4.why == ["an instruction rests on another answer"]
    assert q4.instructions[0]["id"] == "i1" and "Keep following “Plan as if q4 is no”" in q4.ask_user
    assert [u.belief["question"] for u in mem.uncertain(at=T, limit=2)] == [u.belief["question"] for u in found[:2]]


def test_uncertain_breaks_ties_by_entropy_and_logs_no_read(mem):
    records = [R.subject("p"), R.source("s", ["person", "chat"], trust=0.9)]
    records.append(R.question("p.a", ["x", "y", "z"], kind="a", subject="p"))
    records.append(R.question("p.b", ["x", "y", "z"], kind="b", subject="p"))
    records += [R.message("m1", "s", "2026-05-01", "one"), R.message("m2", "s", "2026-05-01", "two")]
    # same top probability (so the same P(wrong)), the rest spread evenly on p.a, on one answer on p.b
    records.append(R.reading("m1", "p.a", {"x": 0.6, "y": 0.2, "z": 0.2}))
    records.append(R.reading("m2", "p.b", {"x": 0.6, "y": 0.4, "z": 0.0}))
    mem.ingest(records)
    reads = mem.store.counts()["reads"]
    found = mem.uncertain(at=T)
    assert mem.store.counts()["reads"] == reads
    a, b = found
    assert a.usefulness == pytest.approx(b.usefulness, abs=1e-9)  # the same top probability, the same demand
    assert a.entropy > b.entropy and a.belief["question"] == "p.a"


def test_uncertain_by_subject_and_unknown_subject(small_mem):
    found = small_mem.uncertain("maya", at=T)
    assert found and {u.belief["subject"] for u in found} == {"maya"}
    with pytest.raises(Exception, match="no subject 'nobody'"):
        small_mem.uncertain("nobody")


# ---------------------------------------------------------------------------- the command line
def run(*args: str, code: int = 0):
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    return result


@pytest.fixture
def db(tmp_path, small_records) -> str:
    path = str(tmp_path / "doxa.duckdb")
    with doxa.open(path) as memory:
        memory.ingest(small_records)
    return path


def test_a_blank_instruction_is_refused_on_the_command_line(db):
    result = run("instruct", "maya", "   ", "--db", db, code=1)
    assert "text is only white space" in result.output and "write the text" in result.output
    with doxa.open(db) as memory:
        assert memory.store.instructions(["maya"]) == []


def test_the_verbs_on_the_command_line(db):
    out = json.loads(run("correct", "maya.diet", "vegetarian", "--at", LATER, "--by", "ana", "--db", db,
                         "--json").stdout)
    assert out["recorded"] and out["record"]["how"] == "correction" and out["record"]["by"] == "ana"
    assert out["after"]["top"] == "vegetarian"
    again = json.loads(run("correct", "maya.diet", "vegetarian", "--at", LATER, "--by", "ana", "--db", db,
                           "--json").stdout)
    assert not again["recorded"]
    text = run("approve", "maya.flower", "--at", LATER, "--db", db).stdout
    assert text.startswith("recorded: maya.flower = tulips (approval, doxa said")
    out = json.loads(run("outcome", "sam.diet", "vegetarian", "--how", "he ordered the lentils", "--db", db,
                         "--json").stdout)
    assert out["record"]["note"] == "he ordered the lentils" and out["record"]["by"] == "world"
    assert json.loads(run("reject", "maya.flower", "lilies", "--db", db, "--json").stdout)["recorded"]
    out = json.loads(run("instruct", "maya", "Fish is fine", "--rests-on", "maya.diet=eats fish", "--db", db,
                         "--json").stdout)
    assert out["record"]["rests_on"] == {"question": "maya.diet", "answer": "eats fish"}
    with doxa.open(db) as memory:
        assert [s["how"] for s in memory.store.settlements()] == ["correction", "approval", "outcome"]


def test_verb_errors_on_the_command_line_say_what_exists(db):
    result = run("correct", "maya.dit", "vegetarian", "--db", db, code=1)
    assert result.stderr.startswith("Error: refused, nothing recorded: unknown question 'maya.dit'")
    assert "'maya.diet'" in result.stderr
    assert "options are ['lilies', 'tulips']" in run("reject", "maya.flower", "roses", "--db", db, code=1).stderr
    assert "QUESTION=ANSWER" in run("instruct", "maya", "x", "--rests-on", "maya.diet", "--db", db, code=1).stderr
    assert "--how" in run("outcome", "maya.diet", "vegetarian", "--db", db, code=2).stderr
    with doxa.open(db) as memory:
        assert memory.store.counts()["settlements"] == 0 and memory.store.counts()["instructions"] == 0


def test_beliefs_uncertain_on_the_command_line_matches_the_api(db):
    listed = json.loads(run("beliefs", "--uncertain", "--at", "2026-06-01", "--db", db, "--json").stdout)
    with doxa.open(db) as memory:
        assert listed == [u.to_dict() for u in memory.uncertain(at=T)]
    assert listed and all(not u["belief"]["act"] for u in listed)
    assert "most useful first" in run("beliefs", "--uncertain", "--at", "2026-06-01", "--db", db).stdout


@pytest.mark.parametrize("command", ["correct", "approve", "outcome", "reject", "instruct", "mcp"])
def test_every_new_command_has_help(command):
    out = run(command, "--help").stdout
    assert "--json" in out or command == "mcp"
    assert "--db" in out


# ---------------------------------------------------------------------------- uncertain: invariants
@st.composite
def small_worlds(draw):
    """Questions read once each with a random strength, some read again lately, some with an instruction."""
    n = draw(st.integers(2, 6))
    records = [R.subject("p"), R.source("s", ["person", "chat"], trust=0.9)]
    extra_reads, rests = {}, {}
    for i in range(n):
        options = ["a", "b"] if draw(st.booleans()) else ["a", "b", "c"]
        qid = f"p.q{i}"
        records.append(R.question(qid, options, kind=f"k{i}", subject="p"))
        records.append(R.message(f"m{i}", "s", "2026-05-01", f"message {i}"))
        raw = [draw(st.floats(0.01, 1.0)) for _ in options]
        records.append(R.reading(f"m{i}", qid, {o: x / sum(raw) for o, x in zip(options, raw)}))
        extra_reads[qid] = draw(st.integers(0, 3))
        if draw(st.booleans()):
            rests[qid] = draw(st.sampled_from(options))
    for j, (qid, answer) in enumerate(rests.items()):
        records.append(R.instruction(f"i{j}", f"assume {qid} is {answer}", "2026-05-02", subject="p")
                       | {"rests_on": {"question": qid, "answer": answer}})
    act_at = draw(st.sampled_from([0.5, 0.8, 0.95]))
    return records, extra_reads, rests, act_at


@settings(max_examples=15, deadline=None)
@given(small_worlds())
def test_uncertain_lists_exactly_the_uncertain_and_contradicted_in_order_of_usefulness(world):
    records, extra_reads, rests, act_at = world
    with doxa.open(":memory:") as memory:
        memory.ingest(records)
        for qid, k in extra_reads.items():
            for _ in range(k):
                memory.belief(qid, T)
        reference, _ = memory.scored(None, T, act_at=act_at)  # not logged
        found = memory.uncertain(at=T, act_at=act_at)
    expected = {}
    for b in reference:
        conflict = b.question in rests and b.top is not None and b.top != rests[b.question]
        if not b.act or conflict:
            p_wrong = max(0.0 if b.act else 1 - b.p_top, 1 - b.answers[rests[b.question]] if conflict else 0.0)
            expected[b.question] = (p_wrong, extra_reads[b.question])
    assert {u.belief["question"] for u in found} == set(expected)
    for u in found:
        p_wrong, reads = expected[u.belief["question"]]
        assert u.recent_reads == reads
        assert u.p_wrong == pytest.approx(p_wrong, abs=1e-6)
        assert u.usefulness == pytest.approx(round(p_wrong, 6) * (1 + reads), abs=1e-6)
    keys = [(-u.usefulness, -u.entropy, u.belief["question"]) for u in found]
    assert keys == sorted(keys, key=lambda k: (round(k[0], 9), round(k[1], 9), k[2]))
