"""The store's schema versions: an older store is brought up to date on open, losing nothing."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

import doxa
from doxa.data.schema import SCHEMA_VERSION
from doxa.data.errors import StoreError
from doxa.data.store import Store

V1_READS = """
    DROP VIEW read_answers; DROP TABLE reads;
    CREATE SEQUENCE reads_seq;
    CREATE TABLE reads (id BIGINT PRIMARY KEY DEFAULT nextval('reads_seq'), question VARCHAR NOT NULL,
                        asked_at TIMESTAMP NOT NULL, read_at TIMESTAMP NOT NULL, answers VARCHAR NOT NULL,
                        top VARCHAR NOT NULL, p_top DOUBLE NOT NULL, params_version INTEGER);
    UPDATE meta SET value = '1' WHERE key = 'schema_version';
"""


def _as_version_1(path, small_records, answers: dict[str, float]):
    with doxa.open(path) as memory:
        memory.ingest(small_records)
        memory.store.con.execute(V1_READS)
        memory.store.con.execute(
            "INSERT INTO reads (question, asked_at, read_at, answers, top, p_top) VALUES (?, ?, ?, ?, ?, ?)",
            ["maya.diet", datetime(2026, 6, 1), datetime(2026, 6, 2), json.dumps(answers), "eats fish", 0.7])


def test_a_version_1_store_is_migrated_on_open_keeping_its_read_log(tmp_path, small_records):
    path = str(tmp_path / "old.duckdb")
    answers = {"vegetarian": 0.2, "eats fish": 0.7, "eats meat": 0.1}
    _as_version_1(path, small_records, answers)
    with doxa.open(path) as memory:
        con = memory.store.con
        assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == SCHEMA_VERSION
        rows = con.execute("SELECT question, probs, top, p_top FROM reads").fetchall()
        assert rows == [("maya.diet", [0.2, 0.7, 0.1], "eats fish", 0.7)]
        assert json.loads(con.execute("SELECT answers FROM read_answers").fetchone()[0]) == answers
        memory.beliefs(at=datetime(2026, 6, 1))  # and the migrated log takes new reads
        assert memory.store.counts()["reads"] == 1 + len(memory.store.question_table().ids)


def test_a_store_from_a_newer_doxa_is_refused_with_the_fix(tmp_path):
    path = str(tmp_path / "new.duckdb")
    with Store.open(path) as store:
        store.con.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match="schema version 99.*upgrade doxa"):
        Store.open(path)


def test_a_version_4_store_loses_the_complete_flag_and_keeps_its_parameter_versions(tmp_path):
    path = str(tmp_path / "v4.duckdb")
    with Store.open(path) as store:
        store.con.execute("ALTER TABLE params ADD COLUMN complete BOOLEAN DEFAULT true")
        store.con.execute("INSERT INTO params (version, body, complete) VALUES (1, '{\"format\": 1}', true)")
        store.con.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    with Store.open(path) as store:
        columns = [r[0] for r in store.con.execute("DESCRIBE params").fetchall()]
        assert columns == ["version", "created_at", "body"]
        assert store.latest_params() == (1, {"format": 1})
        assert [v["version"] for v in store.params_versions()] == [1]
        assert store.con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == SCHEMA_VERSION


def test_a_version_5_store_learns_which_readings_are_copies_and_drops_its_kept_states(tmp_path):
    path = str(tmp_path / "v5.duckdb")
    text = "sam moved to a flat by the river last spring"
    records = [{"type": "source", "id": s, "layers": ["friend"]} for s in ("ann", "bob")] + [
        {"type": "question", "id": "q", "kind": "home", "text": "Where?", "shape": "choice", "options": ["river", "hill"]}]
    for mid, source, day, body in (("m1", "bob", 2, f"Fwd: {text}"), ("m2", "ann", 1, text), ("m3", "ann", 3, "hill now")):
        records += [{"type": "message", "id": mid, "source": source, "sent_at": f"2024-03-0{day}T10:00:00Z", "text": body},
                    {"type": "reading", "message": mid, "question": "q", "reader": "r",
                     "probs": {"river": 0.9, "hill": 0.1}, "unclear": 0.0, "unrelated": 0.0, "one_off": 0.0}]
    with doxa.open(path) as memory:
        memory.ingest(records)
        memory.refresh_states()
        assert memory.store.kept_states(memory.store.question_table(), 0)["found"].all()
        con = memory.store.con
        con.execute("ALTER TABLE readings DROP COLUMN is_copy")
        con.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
    with Store.open(path) as store:
        assert store.con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == SCHEMA_VERSION
        flags = dict(store.con.execute("SELECT message, is_copy FROM readings").fetchall())
        assert flags == {"m1": True, "m2": False, "m3": False}  # bob forwarded what ann had said the day before
        assert not store.kept_states(store.question_table(), 0)["found"].any()


def test_the_question_table_orders_ids_as_duckdb_does():
    """The bulk question table is sorted outside DuckDB; the evidence numbers questions by
    DuckDB's ORDER BY id. Both must agree, for any id a user may write."""
    ids = ["b", "B", "a.b", "a-b", "a_b", "ä", "z10", "z9", "日本", "A", "a~b", "Ω", "ab", "a"]
    store = Store.memory()
    store.ingest_records([{"type": "question", "id": q, "kind": "k", "text": f"{q}?", "shape": "yes_no",
                           "options": ["yes", "no"]} for q in ids])
    table = store.question_table()
    by_duckdb = [r[0] for r in store.execute("SELECT id FROM questions ORDER BY id").fetchall()]
    assert table.ids.tolist() == by_duckdb == sorted(ids, key=lambda q: q.encode("utf-8"))
    assert table.texts.tolist() == [f"{q}?" for q in by_duckdb]
