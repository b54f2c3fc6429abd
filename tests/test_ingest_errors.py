"""Ingest errors a person can act on (issue 10, points 4, 5 and 10).

Every problem names its line and field and says what to change; shape and reference
problems come out of one pass; input that once got in and broke the store later (a NUL
in an id, "0.9" as a probability, two answers settled at one instant, every option
rejected, an edited question) is refused with the store left as it was.
"""

from __future__ import annotations

import json

import pytest

import records as R
from doxa.data.errors import MAX_REPORTED_PROBLEMS, IngestError


def refused(mem, records_or_lines, *, lines: bool = False) -> IngestError:
    before = R.snapshot(mem.store)
    with pytest.raises(IngestError) as caught:
        if lines:
            mem.ingest_lines(records_or_lines)
        else:
            mem.ingest(records_or_lines)
    assert R.snapshot(mem.store) == before
    return caught.value


# ---------------------------------------------------------------------------- error texts
@pytest.mark.parametrize("record,missing", [
    ({"type": "message", "id": "m9", "sent_at": "2026-01-01", "text": "hi there"}, "source"),
    ({"type": "reading", "message": "m1", "reader": "r", "probs": {"lilies": 1.0}}, "question"),
    ({"type": "reading", "question": "maya.flower", "reader": "r", "probs": {"lilies": 1.0}}, "message"),
    ({"type": "settlement", "answer": "lilies", "at": "2026-01-01", "how": "correction"}, "question"),
])
def test_a_missing_field_named_like_a_record_type_is_named(small_mem, record, missing):
    error = refused(small_mem, [record])
    (problem,) = error.problems
    assert problem.field == missing
    assert f"missing field '{missing}'" in str(error) and "missing field ''" not in str(error)
    assert "docs/formats.md" in problem.fix


def test_every_fault_of_a_line_is_listed_with_its_field(small_mem):
    record = {"type": "reading", "message": "m1", "question": "maya.flower", "reader": "r",
              "probs": {"lilies": "0.5", "tulips": "0.5"}, "unclear": "0", "unrelated": "0", "one_off": True}
    error = refused(small_mem, [record])
    assert sorted(p.field for p in error.problems) == ["one_off", "probs.lilies", "probs.tulips", "unclear",
                                                       "unrelated"]
    assert all(p.line == 1 and p.fix for p in error.problems)


def test_shape_and_reference_problems_come_out_of_one_pass(small_mem):
    lines = R.to_lines([
        R.message("x1", "nobody", "2026-01-01", "a message from a source nobody declared"),  # reference
    ]) + ['{"type": "subject", "id": "zed"'] + R.to_lines([  # shape
        R.reading("m1", "maya.nothing", {"a": 1.0}),  # reference
    ])
    error = refused(small_mem, lines, lines=True)
    assert [(p.line, p.field) for p in error.problems] == [(1, "source"), (2, ""), (3, "question")]


def test_a_refused_line_does_not_cascade_into_unknown_reference_problems(mem):
    lines = R.to_lines([R.source("s", ["person"])]) + [
        '{"type": "question", "id": "q1", "kind": "k", "text": "?", "options": ["a"]}'] + R.to_lines([
        R.message("m", "s", "2026-01-01", "text of the message"),
        R.reading("m", "q1", {"a": 1.0})])
    error = refused(mem, lines, lines=True)
    assert [p.line for p in error.problems] == [2]  # the question's own fault, not "unknown question" too


def test_the_first_twenty_problems_are_listed_and_the_rest_counted(mem):
    lines = ['{"type": "subject"}'] * 45
    error = refused(mem, lines, lines=True)
    assert error.total == 45 * 2  # id and name missing on every line
    text = str(error)
    assert text.count("missing field") == MAX_REPORTED_PROBLEMS
    assert f"… and {90 - MAX_REPORTED_PROBLEMS} more" in text
    as_json = error.to_dict()  # --json lists what the text lists, and counts the rest
    assert len(as_json["problems"]) == MAX_REPORTED_PROBLEMS and as_json["more"] == 90 - MAX_REPORTED_PROBLEMS
    assert as_json["total"] == 90


def test_a_file_of_many_bad_lines_keeps_a_bounded_number_of_problems_and_counts_all(mem):
    from doxa.data.errors import MAX_KEPT_PROBLEMS

    lines = ['{"type": "subject", "id": 1, "name": 2, "aliases": 3}'] * (MAX_KEPT_PROBLEMS + 500)
    error = refused(mem, lines, lines=True)
    assert error.total == 3 * len(lines)  # every problem counted
    assert len(error.problems) == MAX_KEPT_PROBLEMS  # but only the first ones kept
    assert [p.line for p in error.problems[:4]] == [1, 1, 1, 2]
    assert len(error.to_dict()["problems"]) == MAX_REPORTED_PROBLEMS


def test_problems_serialise_as_line_field_reason_fix(mem):
    error = refused(mem, [{"type": "subject", "id": "x", "name": "X", "nmae": "Y"}])
    (problem,) = error.to_dict()["problems"]
    assert set(problem) == {"line", "field", "reason", "fix"}
    assert problem["line"] == 1 and problem["field"] == "nmae" and "did you mean 'name'" in problem["fix"]


def test_an_empty_file_says_it_is_empty(mem, tmp_path):
    from doxa.data.errors import StoreError

    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n", encoding="utf-8")
    with pytest.raises(StoreError, match="empty.jsonl is empty: no records"):
        mem.ingest_file(path)


# ---------------------------------------------------------------------------- bad input that got in
@pytest.mark.parametrize("record,field", [
    (R.subject("ma\x00ya", "Maya"), "id"),
    (R.subject("zoe", "Zo\x1be"), "name"),
    (R.subject("zoe", "Zoe", ["my\x00friend"]), "aliases.0"),
    (R.question("maya.x", ["a\x00", "b"], kind="x", subject="maya"), "options.0"),
    (R.question("maya.x\x7f", ["a", "b"], kind="x", subject="maya"), "id"),
    (R.question("maya.x", ["a", "b"], kind="x\x85", subject="maya"), "kind"),
    (R.source("web\x00", ["web"]), "id"),
    (R.source("web2", ["we\tb"]), "layers.0"),
    (R.subject("x" * 1000, "X"), "id"),
    (R.subject(" maya2", "Maya"), "id"),
], ids=["nul-in-subject-id", "esc-in-name", "nul-in-alias", "nul-in-option", "del-in-question-id",
        "c1-in-kind", "nul-in-source-id", "tab-in-layer", "overlong-id", "padded-id"])
def test_ids_names_and_options_are_checked_for_control_characters_and_length(small_mem, record, field):
    error = refused(small_mem, [record])
    assert [p.field for p in error.problems] == [field]
    assert error.problems[0].fix


def test_a_message_text_is_kept_as_it_arrived_control_characters_and_all(mem):
    mem.ingest([R.source("s", ["person"]), R.message("m", "s", "2026-01-01", "tab\there, bell\x07, nul\x00.")])
    assert mem.store.con.execute("SELECT text FROM messages").fetchone()[0] == "tab\there, bell\x07, nul\x00."


@pytest.mark.parametrize("field,value", [("probs", {"lilies": "0.9", "tulips": 0.1}), ("unclear", "0"),
                                         ("one_off", True)])
def test_a_probability_must_be_a_json_number(small_mem, field, value):
    record = R.reading("m3", "maya.flower", {"lilies": 0.9, "tulips": 0.1}, reader="strict")
    record[field] = value
    error = refused(small_mem, [record])
    assert "must be a JSON number" in str(error) and "without quotes" in str(error)


def test_a_trust_must_be_a_json_number(mem):
    error = refused(mem, [R.source("s", ["web"]) | {"trust": "0.9"}])
    assert [p.field for p in error.problems] == ["trust"]


def test_json_nested_a_thousand_deep_is_refused_with_a_clear_error(mem):
    deep = '{"type": "subject", "id": "x", "name": ' + "[" * 1000 + "]" * 1000 + "}"
    error = refused(mem, [deep], lines=True)
    assert "nested too deeply" in str(error)


@pytest.mark.parametrize("moment", ["0001-01-01T00:00:00+14:00", "9999-12-31T23:00:00-05:00"])
def test_a_time_outside_the_calendar_once_in_utc_is_refused(mem, moment):
    error = refused(mem, [R.source("s", ["person"]), R.message("m", "s", moment, "far away in time")])
    (problem,) = error.problems
    assert problem.field == "sent_at" and "outside the years 1 to 9999" in problem.message


def test_two_answers_settled_for_one_question_at_one_instant_are_refused(small_mem):
    error = refused(small_mem, [R.settlement("maya.flower", "lilies", "2026-05-01T10:00:00"),
                                R.settlement("maya.flower", "tulips", "2026-05-01T10:00:00")])
    (problem,) = error.problems
    assert problem.line == 2 and "same instant" in problem.reason and "line 1" in problem.reason


def test_a_settlement_contradicting_a_stored_one_at_the_same_instant_is_refused(small_mem):
    small_mem.ingest([R.settlement("maya.flower", "lilies", "2026-05-01T10:00:00")])
    error = refused(small_mem, [R.settlement("maya.flower", "tulips", "2026-05-01T10:00:00")])
    assert "the store" in error.problems[0].reason


def test_a_resent_settlement_with_another_how_is_refused_not_dropped(small_mem):
    small_mem.ingest([R.settlement("maya.flower", "lilies", "2026-05-01T10:00:00", how="correction")])
    error = refused(small_mem, [R.settlement("maya.flower", "lilies", "2026-05-01T10:00:00", how="outcome")])
    assert "never edited" in str(error)


def test_rejecting_every_option_is_refused(small_mem):
    small_mem.ingest([R.rejection("maya.diet", "vegetarian", "2026-05-01")])
    error = refused(small_mem, [R.rejection("maya.diet", "eats fish", "2026-05-02"),
                                R.rejection("maya.diet", "eats meat", "2026-05-03")])
    (problem,) = error.problems
    assert problem.line == 2 and "every option" in problem.reason and "settle" in problem.fix


@pytest.mark.parametrize("edit,field", [
    (R.question("maya.flower", ["lilies", "tulips"], kind="flower", subject="maya",
                text="Which flowers does Maya like best?"), "text"),
    (R.question("maya.flower", ["lilies", "tulips"], kind="flower", subject="sam"), "subject"),
])
def test_a_resent_question_that_differs_is_refused_not_dropped(small_mem, edit, field):
    error = refused(small_mem, [edit])
    (problem,) = error.problems
    assert problem.field == field and "never edited" in problem.fix


def test_a_resent_instruction_with_new_text_is_refused_not_dropped(small_mem):
    small_mem.ingest([R.instruction("i1", "Book quiet places for Maya.", "2026-05-01", subject="maya")])
    error = refused(small_mem, [R.instruction("i1", "Book loud places for Maya.", "2026-05-01", subject="maya")])
    assert "instruction 'i1' is stored with other content" in str(error)


# ---------------------------------------------------------------------------- the subject rule
def test_a_redeclared_subject_may_add_aliases_and_ingest_reports_it(small_mem):
    small_mem.ingest([R.subject("priya", "Priya", ["my colleague"])])
    added = small_mem.ingest([R.subject("priya", "Priya", ["my colleague", "P."])])
    assert added == {"subjects_updated": 1}
    assert next(s for s in small_mem.store.subjects() if s["id"] == "priya")["aliases"] == ["my colleague", "P."]
    assert small_mem.ingest([R.subject("priya", "Priya", ["my colleague", "P."])]) == {}


def test_a_redeclared_subject_cannot_drop_an_alias_or_change_its_name(small_mem):
    from doxa.inference.agent.context import context

    small_mem.ingest([R.subject("priya", "Priya", ["my colleague"]),
                      R.question("priya.phone", ["a", "b"], kind="phone", subject="priya")])
    dropped = refused(small_mem, [R.subject("priya", "Priya")])
    assert dropped.problems[0].field == "aliases" and "only ever added" in dropped.problems[0].fix
    renamed = refused(small_mem, [R.subject("priya", "Priya Shah", ["my colleague"])])
    assert renamed.problems[0].field == "name" and "as one of its aliases" in renamed.problems[0].fix
    found = context(small_mem, "call my colleague", at="2026-06-01")
    assert [s["id"] for s in found.subjects if s["hop"] == 0] == ["priya"]


def test_the_subject_rule_holds_inside_one_file(mem):
    added = mem.ingest([R.subject("ana", "Ana", ["my aunt"]), R.subject("ana", "Ana", ["my aunt", "Tia"])])
    assert added == {"subjects": 1}
    assert mem.store.subjects()[0]["aliases"] == ["my aunt", "Tia"]
    error = refused(mem, [R.subject("bo", "Bo", ["x"]), R.subject("bo", "Bo")])
    assert "line 1" in error.problems[0].reason


def test_the_cli_reports_a_subject_update(tmp_path):
    from typer.testing import CliRunner

    from doxa.cli.main import app

    db = str(tmp_path / "s.duckdb")
    first = R.write_jsonl(tmp_path / "a.jsonl", [R.subject("tom", "Tom", ["my flatmate"])])
    second = R.write_jsonl(tmp_path / "b.jsonl", [R.subject("tom", "Tom", ["my flatmate", "Tommy"])])
    runner = CliRunner()
    assert runner.invoke(app, ["ingest", first, "--db", db]).exit_code == 0
    result = runner.invoke(app, ["ingest", second, "--db", db])
    assert result.exit_code == 0 and "1 subject(s) updated (aliases added)" in result.stdout
    out = json.loads(runner.invoke(app, ["ingest", second, "--db", db, "--json"]).stdout)
    assert out["added"] == {}


# ---------------------------------------------------------------------------- issue 34: refusals with a fix
def test_a_refused_file_with_json_lists_the_first_problems_and_counts_the_rest(tmp_path, small_records):
    from typer.testing import CliRunner

    import doxa
    from doxa.cli.main import app

    db = str(tmp_path / "doxa.duckdb")
    with doxa.open(db) as memory:
        memory.ingest(small_records)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "subject", "id": 1, "name": 2, "aliases": 3}\n' * 2000, encoding="utf-8")
    result = CliRunner().invoke(app, ["ingest", str(bad), "--db", db, "--json"])
    assert result.exit_code == 1 and result.stdout == ""
    (line,) = result.stderr.splitlines()  # one JSON object, of bounded size
    error = json.loads(line)
    assert len(error["problems"]) == MAX_REPORTED_PROBLEMS and len(line) < 20_000
    assert error["error"] == (f"refused: 6000 problem(s); nothing was ingested (the first {MAX_REPORTED_PROBLEMS} "
                              f"listed, {6000 - MAX_REPORTED_PROBLEMS} more)")
    assert [p["line"] for p in error["problems"][:4]] == [1, 1, 1, 2]


@pytest.mark.parametrize("record, reason, fix", [
    ({"type": "settlement", "question": "maya.flower", "answer": "lilies", "at": "2026-01-01", "how": "outcome",
      "params_version": 2**31}, "params_version must be at most 2147483647, got 2147483648", "within its range"),
    ({"type": "settlement", "question": "maya.flower", "answer": "lilies", "at": "2026-01-01", "how": "outcome",
      "params_version": "7"}, 'params_version must be a JSON integer, got "7"', "without quotes or decimal point"),
    ({"type": "settlement", "question": "maya.flower", "answer": "lilies", "at": "2026-01-01", "how": "outcome",
      "p_before": True}, "p_before must be a JSON number, got true", "without quotes"),
    ({"type": "subject", "id": "maya\u200b", "name": "Maya"},
     "id contains the invisible format character U+200B at position 4", "remove it"),
    ({"type": "subject", "id": "maya lin", "name": "Maya"}, "id 'maya lin' contains white space", "'maya-lin'"),
    ({"type": "subject", "id": "zoe\u0301", "name": "Zoé"},
     "id 'zoe\\u0301' is not in Unicode normal form NFC", "'zo\\xe9'"),
    ({"type": "instruction", "id": "i", "text": "  ", "at": "2026-01-01"}, "text is only white space", "write the"),
])
def test_a_value_outside_the_documented_set_is_refused_with_its_field_and_fix(small_mem, record, reason, fix):
    (problem,) = refused(small_mem, [record]).problems
    assert reason in problem.reason and fix in problem.fix and problem.field == reason.split(" ")[0]
