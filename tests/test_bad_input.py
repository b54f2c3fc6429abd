"""Bad input is refused whole: the line number, what to fix, and a store left exactly as it was.

Each case is one bad line placed among good, new lines of a file; the good lines must
not be ingested either (a file is ingested whole or not at all). Every case runs through
the Python API and through `doxa ingest`.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import doxa
import records as R
from doxa.cli.main import app
from doxa.data.errors import IngestError

GOOD_BEFORE = [R.subject("zoe"), R.source("zoe-chat", ["person", "self", "chat"])]
GOOD_AFTER = [R.message("z1", "zoe-chat", "2026-05-01", "Zoe says hello to everyone here"),
              R.reading("m2", "sam.diet", {"vegetarian": 0.5, "eats fish": 0.3, "eats meat": 0.1}, unclear=0.1)]
BAD_LINE = len(GOOD_BEFORE) + 1

DIET_READING = '"type":"reading","message":"m1","question":"maya.diet","reader":"r9"'

#: (case id, the bad line, fragments the error must contain: what is wrong and how to fix it)
CASES = [
    ("malformed-json", '{"type": "subject", "id": "x"', ["not valid JSON", "one JSON object a line"]),
    ("not-an-object", '["subject", "x"]', ["must be a JSON object", '"type"']),
    ("unknown-type", '{"type": "belief", "id": "x"}', ["unknown type 'belief'", "use one of", "reading"]),
    ("missing-type", '{"id": "x", "name": "X"}', ["missing field 'type'"]),
    ("missing-field", '{"type":"message","id":"m9","source":"maya-chat","text":"where is the time"}',
     ["missing field 'sent_at'", "add it"]),
    ("unknown-field", '{"type":"subject","id":"x","name":"X","nmae":"Y"}', ["unknown field 'nmae'", "spelling"]),
    ("unknown-question", '{' + DIET_READING.replace("maya.diet", "maya.dit") + ',"probs":{"vegetarian":1.0}}',
     ["unknown question 'maya.dit'", "add a question record"]),
    ("unknown-message", '{' + DIET_READING.replace('"m1"', '"m404"')
     + ',"probs":{"vegetarian":1,"eats fish":0,"eats meat":0}}', ["unknown message 'm404'", "ingest the message"]),
    ("unknown-option-in-reading",
     '{' + DIET_READING + ',"probs":{"vegetarian":0.5,"eats fish":0.5,"pasta":0.0}}',
     ["probs must cover exactly the options", "'pasta'", "missing ['eats meat']"]),
    ("unknown-option-in-settlement",
     '{"type":"settlement","question":"maya.diet","answer":"pasta","at":"2026-05-01","how":"correction"}',
     ["'pasta' is not an option of 'maya.diet'", "options are"]),
    ("unknown-option-in-rejection", '{"type":"rejection","question":"maya.diet","answer":"pasta","at":"2026-05-01"}',
     ["'pasta' is not an option of 'maya.diet'", "options are"]),
    ("unknown-source", '{"type":"message","id":"m9","source":"nobody","sent_at":"2026-05-01","text":"who sent this"}',
     ["unknown source 'nobody'", "add a source record"]),
    ("unknown-subject", '{"type":"question","id":"bob.diet","subject":"bob","kind":"diet","text":"?",'
                        '"options":["a","b"]}', ["unknown subject 'bob'", "add a subject record"]),
    ("probs-do-not-sum-to-1",
     '{' + DIET_READING + ',"probs":{"vegetarian":0.5,"eats fish":0.4,"eats meat":0.4}}',
     ["must sum to 1", "got 1.3", "renormalise"]),
    ("negative-probability",
     '{' + DIET_READING + ',"probs":{"vegetarian":1.2,"eats fish":-0.2,"eats meat":0.0}}',
     ["must be a number in [0, 1]"]),
    ("negative-one-off", '{' + DIET_READING + ',"probs":{"vegetarian":1,"eats fish":0,"eats meat":0},"one_off":-0.1}',
     ["one_off must be a number in [0, 1]", "-0.1"]),
    ("nan-value", '{' + DIET_READING + ',"probs":{"vegetarian":1,"eats fish":0,"eats meat":0},"unclear":NaN}',
     ["unclear must be a number in [0, 1]", "nan"]),
    ("nan-probability", '{' + DIET_READING + ',"probs":{"vegetarian":NaN,"eats fish":0,"eats meat":1}}',
     ["must be a number in [0, 1]", "nan"]),
    ("negative-trust", '{"type":"source","id":"shady","layers":["web"],"trust":-0.1}',
     ["trust must be at least 0", "-0.1"]),
    ("unparseable-time", '{"type":"message","id":"m9","source":"maya-chat","sent_at":"yesterday","text":"hi hi"}',
     ["cannot read time 'yesterday'", "ISO 8601", "2026-06-02"]),
    ("impossible-date", '{"type":"settlement","question":"maya.diet","answer":"eats fish","at":"2026-13-45",'
                        '"how":"correction"}', ["cannot read time '2026-13-45'", "ISO 8601"]),
    ("unknown-settlement-how", '{"type":"settlement","question":"maya.diet","answer":"eats fish",'
                               '"at":"2026-05-01","how":"guess"}', ["how", "correction"]),
]


def bad_file_lines(bad_line: str) -> list[str]:
    return R.to_lines(GOOD_BEFORE) + [bad_line] + R.to_lines(GOOD_AFTER)


def assert_says(text: str, fragments: list[str]) -> None:
    assert f"line {BAD_LINE}:" in text
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} missing from the error:\n{text}"


@pytest.fixture
def db_path(tmp_path, small_records):
    path = str(tmp_path / "store.duckdb")
    with doxa.open(path) as memory:
        memory.ingest(small_records)
    return path


def file_snapshot(path: str):
    with doxa.open(path) as memory:
        return R.snapshot(memory.store)


@pytest.mark.parametrize("bad_line,fragments", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_line_is_refused_through_the_python_api(small_mem, bad_line, fragments):
    before = R.snapshot(small_mem.store)
    with pytest.raises(IngestError) as caught:
        small_mem.ingest_lines(bad_file_lines(bad_line))
    assert [p.line for p in caught.value.problems] == [BAD_LINE]
    assert_says(str(caught.value), fragments)
    assert "nothing was ingested" in str(caught.value)
    assert R.snapshot(small_mem.store) == before


@pytest.mark.parametrize("bad_line,fragments", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_line_is_refused_by_the_cli(db_path, tmp_path, bad_line, fragments):
    before = file_snapshot(db_path)
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(bad_file_lines(bad_line)) + "\n", encoding="utf-8")

    result = CliRunner().invoke(app, ["ingest", str(path), "--db", db_path])

    assert result.exit_code != 0
    assert_says(result.stderr, fragments)
    assert file_snapshot(db_path) == before


def test_every_bad_line_of_a_file_is_reported(small_mem):
    lines = bad_file_lines(CASES[0][1]) + [CASES[2][1], CASES[13][1]]
    with pytest.raises(IngestError) as caught:
        small_mem.ingest_lines(lines)
    assert [p.line for p in caught.value.problems] == [BAD_LINE, len(lines) - 1, len(lines)]
    assert caught.value.total == 3


def test_one_bad_line_among_many_good_ones_ingests_nothing(small_mem, rec):
    before = R.snapshot(small_mem.store)
    good = [rec.source("s2", ["web"])]
    for i in range(50):
        good.append(rec.message(f"x{i}", "s2", f"2026-05-{1 + i % 28:02d}", f"message number {i} from the web"))
        good.append(rec.reading(f"x{i}", "maya.flower", {"lilies": 0.6, "tulips": 0.4}))
    lines = R.to_lines(good)
    lines.insert(77, '{"type":"reading","message":"x3","question":"maya.flower","reader":"r","probs":{"lilies":2}}')
    with pytest.raises(IngestError) as caught:
        small_mem.ingest_lines(lines)
    assert [p.line for p in caught.value.problems] == [78]
    assert R.snapshot(small_mem.store) == before


def test_reingesting_the_same_file_changes_nothing(mem, small_records, tmp_path):
    path = R.write_jsonl(tmp_path / "store.jsonl", small_records + [R.settlement("maya.diet", "eats fish", "2026-05-01")])
    first = mem.ingest_file(path)
    assert first
    after_first = R.snapshot(mem.store)
    assert mem.ingest_file(path) == {}
    assert R.snapshot(mem.store) == after_first


def test_reingesting_through_the_cli_says_nothing_new(db_path, small_records, tmp_path):
    path = R.write_jsonl(tmp_path / "store.jsonl", small_records)
    before = file_snapshot(db_path)
    result = CliRunner().invoke(app, ["ingest", path, "--db", db_path, "--json"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["added"] == {}
    assert file_snapshot(db_path) == before


@pytest.mark.parametrize("field,value", [("text", "Maya is vegan now."), ("source", "maya-chat"),
                                         ("sent_at", "2025-01-11")])
def test_editing_a_stored_message_is_refused(small_mem, rec, field, value):
    before = R.snapshot(small_mem.store)
    edited = rec.message("m1", "notes", "2025-01-10", "Maya is vegetarian, remember it for dinners.")
    edited[field] = value
    with pytest.raises(IngestError) as caught:
        small_mem.ingest([rec.subject("zed"), edited])
    assert [p.line for p in caught.value.problems] == [2]
    assert "message 'm1'" in str(caught.value) and "never edited" in str(caught.value)
    assert "its own id" in str(caught.value)
    assert R.snapshot(small_mem.store) == before


@pytest.mark.parametrize("edit,says", [
    (R.reading("m1", "maya.diet", {"vegetarian": 0.1, "eats fish": 0.85, "eats meat": 0.0}, unclear=0.05),
     ["readings are never edited", "new reader name or version"]),
    (R.source("florist", ["business", "about-other", "email", "marketing"], trust=0.9),
     ["sources are never edited", "new source id"]),
    (R.source("florist", ["business", "email"], trust=0.4), ["sources are never edited"]),
    (R.question("maya.diet", ["vegan", "omnivore"], kind="diet", subject="maya"), ["use a new question id"]),
], ids=["reading", "source-trust", "source-layers", "question-options"])
def test_editing_a_stored_reading_source_or_question_is_refused(small_mem, rec, edit, says):
    before = R.snapshot(small_mem.store)
    with pytest.raises(IngestError) as caught:
        small_mem.ingest([rec.subject("zed"), edit])
    (problem,) = caught.value.problems
    assert problem.line == 2
    for fragment in says:
        assert fragment in problem.message
    assert R.snapshot(small_mem.store) == before


def test_one_id_given_twice_differently_in_one_file_is_refused(mem, rec):
    with pytest.raises(IngestError) as caught:
        mem.ingest([rec.source("s", ["person"]),
                    rec.message("x", "s", "2026-01-01", "first version of the text"),
                    rec.message("x", "s", "2026-01-01", "second version of the text")])
    (problem,) = caught.value.problems
    assert problem.line == 3 and "already given differently on line 2" in problem.message
    assert mem.store.counts()["messages"] == 0
