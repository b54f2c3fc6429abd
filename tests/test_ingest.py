"""Ingest of good input: what lands in which table, times, fingerprints, and which evidence counts."""

from __future__ import annotations

from datetime import datetime

import pytest

from doxa.data.errors import StoreError
from doxa.data.text import fingerprint, normalise_text


def rows(store, sql):
    return store.con.execute(sql).fetchall()


def test_ingest_returns_new_rows_per_table_and_stores_them(mem, small_records):
    added = mem.ingest(small_records)

    by_type = {}
    for r in small_records:
        by_type[r["type"]] = by_type.get(r["type"], 0) + 1
    table_of = {"subject": "subjects", "relation": "relations", "source": "sources", "question": "questions",
                "message": "messages", "reading": "readings"}
    assert added == {table_of[t]: n for t, n in by_type.items()}
    counts = mem.store.counts()
    for table, n in added.items():
        assert counts[table] == n


def test_source_path_is_layers_then_id_and_assistant_layer_is_flagged(small_mem):
    stored = dict((i, (p, a)) for i, p, a in rows(small_mem.store, "SELECT id, path, is_assistant FROM sources"))
    assert stored["florist"] == ("business/about-other/email/marketing/florist", False)
    assert stored["maya-chat"] == ("person/self/chat/maya-chat", False)
    assert stored["helper"] == ("assistant/notes/helper", True)
    trust = dict(rows(small_mem.store, "SELECT id, trust FROM sources"))
    assert trust["florist"] == pytest.approx(0.4) and trust["notes"] is None


def test_records_may_refer_forward_within_one_file(mem, rec):
    # a reading before its message, a message before its source and question: one file is one unit
    records = [
        rec.reading("m1", "q", {"a": 0.7, "b": 0.3}),
        rec.message("m1", "s", "2026-01-01", "the answer is probably a, I think"),
        rec.question("q", ["a", "b"], subject="x"),
        rec.source("s", ["person"]),
        rec.subject("x"),
    ]
    added = mem.ingest(records)
    assert added["readings"] == 1 and added["messages"] == 1


def test_times_are_stored_as_naive_utc(mem, rec):
    mem.ingest([
        rec.source("s", ["person"]),
        rec.message("offset", "s", "2026-06-02T10:00:00+02:00", "a message sent from Berlin at ten"),
        rec.message("zulu", "s", "2026-06-02T10:00:00Z", "a message sent in UTC at ten"),
        rec.message("date", "s", "2026-06-02", "a message with only a date",
                    received_at="2026-06-03T09:30:00"),
    ])
    got = {i: (s, r) for i, s, r in rows(mem.store, "SELECT id, sent_at, received_at FROM messages")}
    assert got["offset"] == (datetime(2026, 6, 2, 8), datetime(2026, 6, 2, 8))  # received_at defaults to sent_at
    assert got["zulu"][0] == datetime(2026, 6, 2, 10)
    assert got["date"] == (datetime(2026, 6, 2), datetime(2026, 6, 3, 9, 30))


def test_yes_no_question_gets_its_options(mem, rec):
    q = rec.question("maya.loud", ["x"], subject=None)
    del q["options"]
    q["shape"] = "yes_no"
    mem.ingest([q])
    assert mem.store.question("maya.loud")["options"] == ["yes", "no"]


def test_reading_probs_are_stored_in_option_order(mem, rec):
    mem.ingest([
        rec.source("s", ["person"]),
        rec.question("q", ["c", "a", "b"]),
        rec.message("m", "s", "2026-01-01", "some words about the question"),
        rec.reading("m", "q", {"a": 0.2, "b": 0.3, "c": 0.5}),  # keys in another order than options
    ])
    (probs,) = rows(mem.store, "SELECT probs FROM readings")[0]
    assert probs == pytest.approx([0.5, 0.2, 0.3])


def test_identical_records_repeated_in_one_file_are_stored_once(mem, rec, small_records):
    settle = rec.settlement("maya.diet", "eats fish", "2026-05-01")
    reject = rec.rejection("maya.diet", "eats meat", "2026-05-02")
    added = mem.ingest(small_records + small_records[-4:] + [settle, settle, reject, reject])
    assert added["messages"] == sum(r["type"] == "message" for r in small_records)
    assert added["settlements"] == 1 and added["rejections"] == 1


def test_forwarded_and_quoted_copies_share_a_fingerprint():
    text = "Maya loves lilies! Order her a bouquet today."
    forms = [text, f"Fwd: {text}", f"FW: Re: {text}", f"> {text}", f"  {text.upper()}  ", text.replace(" ", "\n ")]
    assert {fingerprint(t, "any-source") for t in forms} == {fingerprint(text, "other-source")}
    assert normalise_text(f"Fwd: {text}") == text.lower()
    # a different message is not a copy
    assert fingerprint("Maya loves tulips! Order her a bouquet today.", "s") != fingerprint(text, "s")


def test_short_generic_texts_from_different_sources_are_not_copies():
    assert fingerprint("ok", "maya-chat") != fingerprint("ok", "sam-chat")
    assert fingerprint("ok", "maya-chat") == fingerprint("OK ", "maya-chat")


def test_counted_evidence_skips_assistant_notes_copies_and_later_messages(small_mem, rec):
    small_mem.ingest([
        rec.source("forwards", ["user", "forwards"]),
        rec.message("m4-copy", "forwards", "2026-04-02", "Fwd: Maya loves lilies! Order a bouquet today."),
        rec.reading("m4-copy", "maya.flower", {"lilies": 0.9, "tulips": 0.05}, unclear=0.05),
    ])
    evidence = small_mem.store.load_evidence(datetime(2026, 3, 15), with_messages=True)
    # m4 (April) and its copy are after the cut; n1 is the assistant's; m1, m2, m3, m5 count
    assert sorted(evidence.message.tolist()) == ["m1", "m2", "m3", "m5"]
    everything = small_mem.store.load_evidence(None, with_messages=True)
    assert sorted(everything.message.tolist()) == ["m1", "m2", "m3", "m4", "m5"]


def test_message_words_are_indexed_for_search(small_mem):
    terms = {t for (t,) in rows(small_mem.store, "SELECT term FROM message_terms WHERE message = 'm3'")}
    assert {"tulips", "favourite", "lilies", "sneeze"} <= terms


def test_instruction_keeps_the_belief_it_rests_on(small_mem, rec):
    ins = rec.instruction("i1", "Avoid lily bouquets for Maya", "2026-02-02", subject="maya")
    ins["rests_on"] = {"question": "maya.flower", "answer": "tulips"}
    small_mem.ingest([ins])
    (stored,) = small_mem.store.instructions(["maya"])
    assert stored["rests_on_question"] == "maya.flower" and stored["rests_on_answer"] == "tulips"
    assert stored["given_at"] == datetime(2026, 2, 2)


def test_ingest_file_reads_json_lines(mem, rec, small_records, tmp_path):
    path = rec.write_jsonl(tmp_path / "in.jsonl", small_records)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("\n   \n")  # blank lines are allowed
    added = mem.ingest_file(path)
    assert added["readings"] == 6


def test_missing_or_binary_file_is_a_clear_error(mem, tmp_path):
    with pytest.raises(StoreError, match="no such file"):
        mem.ingest_file(tmp_path / "nope.jsonl")
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(StoreError, match="not UTF-8"):
        mem.ingest_file(binary)
