"""No value reaches SQL except through one quoting function (data/sql.py) (issue 10, point 10).

`doxa.data.sql.sql_literal` is fed arbitrary text and must give it back exactly; `bind` must find
only the template's own placeholders. Then the commands that broke: a `?` in a subject
id (`search --subject`, `ask`) and a NUL in a store written before ingest refused it.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import doxa
import records as R
from doxa.data import search
from doxa.data.sql import bind, sql_literal
from doxa.data.store import Store

ANY_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)


@pytest.fixture(scope="module")
def store():
    s = Store.memory()
    yield s
    s.close()


def test_any_text_round_trips_through_the_quoting_function(store):
    @settings(max_examples=300, deadline=None)
    @given(ANY_TEXT)
    def round_trip(text):
        assert store.con.execute(f"SELECT {sql_literal(text)}").fetchone()[0] == text

    round_trip()


def test_any_values_bind_into_their_own_placeholders(store):
    @settings(max_examples=200, deadline=None)
    @given(ANY_TEXT, st.lists(ANY_TEXT, max_size=4), st.floats(allow_nan=False) | st.integers(-10**12, 10**12))
    def bound(text, items, number):
        sql = "SELECT ?, '?' AS mark, ?, ? -- a comment's ?\n"
        row = store.execute(sql, [text, items, number]).fetchone()
        assert row == (text, "?", items, number)

    bound()
    # a double whose decimal text, read as a DECIMAL and cast, rounds to its neighbour (found by hypothesis)
    assert store.execute("SELECT ?", [0.00022332116758564942]).fetchone()[0] == 0.00022332116758564942


def test_a_template_with_a_placeholder_inside_a_string_counts_only_the_real_ones():
    assert bind("SELECT '?', \"?\", ? /* ? */", ["x"]) == "SELECT '?', \"?\", 'x' /* ? */"
    with pytest.raises(ValueError, match="1 placeholders but 2 parameters"):
        bind("SELECT ?", [1, 2])


def test_non_finite_numbers_are_literals_too(store):
    row = store.con.execute(f"SELECT {sql_literal(float('nan'))}, {sql_literal(float('inf'))}").fetchone()
    assert row[0] != row[0] and row[1] == float("inf")


QUESTION_MARK_STORE = [
    R.subject("who?", "Who", ["the mystery guest"]),
    R.source("chat", ["person", "self", "chat"]),
    R.question("who?.diet", ["vegetarian", "eats meat"], kind="diet", subject="who?",
               text="What does the mystery guest eat?"),
    R.message("m1", "chat", "2026-01-01", "Who? is vegetarian, the mystery guest said"),
    R.reading("m1", "who?.diet", {"vegetarian": 0.9, "eats meat": 0.1}),
]


def test_a_question_mark_in_a_subject_id_searches_and_asks(tmp_path):
    from doxa.cli.main import app

    db = str(tmp_path / "q.duckdb")
    with doxa.open(db) as mem:
        mem.ingest(QUESTION_MARK_STORE)
        hits = search.search_messages(mem.store, ["vegetarian"], subject="who?")
        assert [h.message for h in hits] == ["m1"]
    runner = CliRunner()
    found = runner.invoke(app, ["search", "vegetarian", "--subject", "who?", "--db", db])
    assert found.exit_code == 0 and "m1" in found.stdout, found.output
    asked = runner.invoke(app, ["ask", "Is the mystery guest vegetarian?", "--subject", "who?",
                                "--options", "yes,no", "--db", db], env={"DOXA_READER_URL": ""})
    assert asked.exit_code == 0, asked.output
    assert "Found 1 message(s) that bear on it" in asked.stdout and "m1" in asked.stdout


def test_a_nul_written_into_a_store_before_ingest_refused_it_does_not_break_reads(tmp_path):
    from doxa.cli.main import app

    db = str(tmp_path / "old.duckdb")
    with doxa.open(db) as mem:
        mem.ingest(QUESTION_MARK_STORE)
        # as an older doxa let it in: straight into the tables
        mem.store.con.execute("INSERT INTO subjects (id, name) VALUES ('nu' || chr(0) || 'l', 'Nul')")
        mem.store.con.execute(
            "INSERT INTO questions (id, subject, kind, text, shape, options) VALUES "
            "('nu' || chr(0) || 'l.diet', 'nu' || chr(0) || 'l', 'diet', 'What does Nul eat?', 'choice', "
            "['vegetarian', 'eats' || chr(0) || 'meat'])")
        assert "nu\x00l.diet" in set(mem.beliefs().question_ids.tolist())
        assert mem.belief("nu\x00l.diet").answers["eats\x00meat"] == pytest.approx(0.5)
    runner = CliRunner()
    for args in (["beliefs"], ["beliefs", "--json"], ["context", "what does Nul eat"]):
        result = runner.invoke(app, [*args, "--db", db])
        assert result.exit_code == 0 and result.exception is None, (args, result.output)
