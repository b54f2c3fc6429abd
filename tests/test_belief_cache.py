"""What a belief read keeps beside the store (data/belief_cache.py) answers the next read of that
question without opening the store, and never once anything has changed (behaviour only; the
speed is bench/concurrency.py's `doxa belief` figure)."""

from __future__ import annotations

import json
import shutil
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

import doxa
from doxa.data import belief_cache
from doxa.data.store import Store
from doxa.inference.learn.train import publish_with_posterior
from doxa.inference.read import states
from doxa.data.times import utc_now
from doxa.inference.read.memory import Memory

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture()
def store_path(tmp_path) -> str:
    path = str(tmp_path / "doxa.duckdb")
    with doxa.open(path) as memory:
        memory.ingest_file(EXAMPLES / "maya.jsonl")
    return path


def fresh_read(path: str, question: str, at=None, keep_states: bool = True) -> dict:
    """`doxa belief` as a fresh process reads: the store opened for this one read."""
    memory = Memory(Store.open(path, create=False, check=False), keep_states=keep_states)
    try:
        return memory.belief(question, at).to_dict()
    finally:
        memory.close()


def from_scratch(path: str, question: str, at=None) -> dict:
    return fresh_read(path, question, at, keep_states=False)


@pytest.fixture()
def opened(monkeypatch):
    """How many times a store is opened from now on."""
    count = {"n": 0}
    original = Store._connect

    def counting(self, mode):
        count["n"] += 1
        return original(self, mode)

    monkeypatch.setattr(Store, "_connect", counting)
    return count


def same_belief(a: dict, b: dict) -> bool:
    return {**a, "at": None} == {**b, "at": None}


def forget_kept(path: str) -> None:
    """Drop every kept entry (the generation stays): the next read of each question opens the store."""
    for entry_file in belief_cache.cache_dir(path).glob("*.json"):
        entry_file.unlink()


def kept_now(path: str) -> set[str]:
    """The questions with an entry that counts in the store's current generation."""
    entries = [json.loads(f.read_text(encoding="utf-8")) for f in belief_cache.cache_dir(path).glob("*.json")]
    return {e["question"] for e in entries if e["generation"] == belief_cache.generation(path).token}


def test_the_second_read_of_a_question_opens_nothing_and_equals_a_read_from_scratch(store_path, opened):
    forget_kept(store_path)
    at = utc_now()
    first = fresh_read(store_path, "maya.diet", at)
    assert opened["n"] == 1
    second = fresh_read(store_path, "maya.diet", at)
    assert opened["n"] == 1  # answered from what the first read kept
    assert first == second and same_belief(second, from_scratch(store_path, "maya.diet", at))


def test_the_first_read_after_a_write_opens_nothing_for_the_questions_it_changed(store_path, opened):
    with doxa.open(store_path) as memory:
        memory.ingest([{"type": "message", "id": "late", "source": "maya-chat", "sent_at": "2026-06-10",
                        "text": "I eat meat again"},
                       {"type": "reading", "message": "late", "question": "maya.diet", "reader": "r",
                        "probs": {"vegetarian": 0.02, "eats fish": 0.02, "eats meat": 0.96}}])
    assert kept_now(store_path) == {"maya.diet"}  # only what the write changed: the rest stopped counting
    before = opened["n"]
    read = fresh_read(store_path, "maya.diet")
    assert opened["n"] == before  # answered from what the writer kept as it closed
    assert same_belief(read, from_scratch(store_path, "maya.diet")) and read["top"] == "eats meat"
    before = opened["n"]
    home = fresh_read(store_path, "maya.home")
    assert opened["n"] == before  # a question the write left alone: what was kept before it still counts
    assert same_belief(home, from_scratch(store_path, "maya.home"))


def test_a_writer_keeps_nothing_once_another_writer_has_opened_the_store(store_path, opened):
    forget_kept(store_path)
    store = Store.open(store_path)
    with store.writing():
        store.ingest_records([{"type": "settlement", "question": "maya.diet", "answer": "eats fish",
                               "at": "2026-06-11", "how": "correction"}])
        # another process opens the store the moment this one closes it: its mark comes first
        original_close = store.con.close

        def close_then_other_writer_opens():
            original_close()
            belief_cache.open_generation(store_path)

        store._con = _CloseHook(store.con, close_then_other_writer_opens)
    assert belief_cache.generation(store_path) is None  # still the other writer's: nothing may count
    assert not list(belief_cache.cache_dir(store_path).glob("*.json"))
    store.close()
    assert belief_cache.generation(store_path) is None  # this writer's own close does not mark over it either


class _CloseHook:
    """A connection whose close runs ``on_close`` instead (everything else passes through)."""

    def __init__(self, con, on_close):
        self._con, self._on_close = con, on_close

    def close(self):
        self._on_close()

    def __getattr__(self, name):
        return getattr(self._con, name)


def test_a_read_later_in_time_decays_the_kept_state_as_a_read_from_scratch_does(store_path, opened):
    fresh_read(store_path, "maya.home")
    later = utc_now() + timedelta(days=400)
    before = opened["n"]
    kept = fresh_read(store_path, "maya.home", later)
    assert opened["n"] == before
    assert same_belief(kept, from_scratch(store_path, "maya.home", later))


@pytest.mark.parametrize("write", ["message", "settlement", "rejection"])
def test_any_write_makes_what_was_kept_stop_counting(store_path, write):
    before = fresh_read(store_path, "maya.diet")
    with doxa.open(store_path) as memory:
        if write == "message":
            memory.ingest([{"type": "message", "id": "late", "source": "maya-chat", "sent_at": "2026-06-10",
                            "text": "I eat meat again"},
                           {"type": "reading", "message": "late", "question": "maya.diet", "reader": "r",
                            "probs": {"vegetarian": 0.02, "eats fish": 0.02, "eats meat": 0.96}}])
        elif write == "settlement":
            memory.ingest([{"type": "settlement", "question": "maya.diet", "answer": "eats meat",
                            "at": "2026-06-11", "how": "correction"}])
        else:
            memory.ingest([{"type": "rejection", "question": "maya.diet", "answer": "vegetarian", "at": "2026-06-11"}])
    after = fresh_read(store_path, "maya.diet")
    assert same_belief(after, from_scratch(store_path, "maya.diet"))
    assert after["answers"] != before["answers"]


def test_a_read_before_the_newest_evidence_is_filtered_from_the_store(store_path, opened):
    fresh_read(store_path, "maya.diet")
    with doxa.open(store_path) as memory:
        newest = memory.store.newest_evidence_time()
    before = opened["n"]
    past = newest - timedelta(days=30)
    kept = fresh_read(store_path, "maya.diet", past)
    assert opened["n"] == before + 1
    assert same_belief(kept, from_scratch(store_path, "maya.diet", past))


def test_a_store_changed_behind_doxas_back_is_read_again(store_path, tmp_path):
    other = str(tmp_path / "other.duckdb")
    with doxa.open(other) as memory:
        memory.ingest_file(EXAMPLES / "maya.jsonl")
        memory.ingest([{"type": "settlement", "question": "maya.diet", "answer": "eats fish", "at": "2026-06-11",
                        "how": "correction"}])
    before = fresh_read(store_path, "maya.diet")
    shutil.copyfile(other, store_path)  # a backup restored over the store: no doxa writer saw it
    after = fresh_read(store_path, "maya.diet")
    assert after["answers"] != before["answers"] and same_belief(after, from_scratch(store_path, "maya.diet"))


def test_nothing_is_kept_or_used_while_a_writer_has_the_store(store_path, opened):
    fresh_read(store_path, "maya.diet")
    writer = Store.open(store_path)
    with writer.writing():
        assert belief_cache.generation(store_path) is None
        before = opened["n"]
        assert same_belief(fresh_read(store_path, "maya.diet"), from_scratch(store_path, "maya.diet"))
        assert opened["n"] > before  # read from the store, not from what was kept
    writer.close()
    assert belief_cache.generation(store_path) is not None


def test_a_torn_or_foreign_entry_is_a_miss(store_path):
    forget_kept(store_path)
    fresh_read(store_path, "maya.diet")
    folder = belief_cache.cache_dir(store_path)
    entry_file = next(p for p in folder.iterdir() if p.suffix == ".json")
    entry_file.write_text('{"format": 1, "question": "maya.di', encoding="utf-8")
    assert same_belief(fresh_read(store_path, "maya.diet"), from_scratch(store_path, "maya.diet"))
    entry = json.loads(entry_file.read_text(encoding="utf-8"))  # rewritten whole by that read
    entry["question"] = "sam.diet"
    entry_file.write_text(json.dumps(entry), encoding="utf-8")
    assert same_belief(fresh_read(store_path, "maya.diet"), from_scratch(store_path, "maya.diet"))


def test_a_read_of_an_unknown_question_still_says_so(store_path):
    fresh_read(store_path, "maya.diet")
    with pytest.raises(Exception, match="nowhere"):
        fresh_read(store_path, "nowhere")


def test_the_cli_answers_from_what_an_earlier_read_kept(store_path):
    import subprocess
    import sys

    command = [sys.executable, "-c", "from doxa.cli import main; main()", "belief", "maya.diet", "--db", store_path,
               "--json"]
    first = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
    second = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
    assert same_belief(first, second)
    np.testing.assert_allclose(list(second["answers"].values()),
                               list(from_scratch(store_path, "maya.diet")["answers"].values()), atol=1e-6)


def read_opens(path: str, question: str, opened) -> bool:
    """Whether a fresh read of ``question`` opens the store; its belief equals one from scratch either way."""
    before = opened["n"]
    kept = fresh_read(path, question)
    opens = opened["n"] > before
    assert same_belief(kept, from_scratch(path, question))
    return opens


def test_what_a_write_changes_everywhere_ends_what_was_kept_before_it(store_path, opened):
    assert not read_opens(store_path, "maya.home", opened)  # kept by the write that made the store
    with doxa.open(store_path) as memory:
        with memory.store.reading():
            seen, epoch = memory.store.load_evidence(None), memory.store.evidence_epoch()
        document = {**memory.params(), "version": None}
        publish_with_posterior(memory.store, document, None, None, kept_states=states.compute(seen, document),
                               epoch=epoch)
    assert read_opens(store_path, "maya.home", opened)  # a new parameter version changes every belief
    assert not read_opens(store_path, "maya.home", opened)
    with doxa.open(store_path) as memory:
        memory.ingest([{"type": "question", "id": "maya.food", "subject": "maya", "kind": "diet",
                        "text": "What does Maya eat, again?", "shape": "choice",
                        "options": ["vegetarian", "eats fish", "eats meat"]}])
    assert not read_opens(store_path, "maya.home", opened)  # a new question changes no other belief
    with doxa.open(store_path) as memory:
        memory.ingest([{"type": "question_merge", "id": "m1", "into": "maya.diet", "from": "maya.food", "by": "t"}])
    assert read_opens(store_path, "maya.home", opened)  # so does a merge


def test_after_a_writer_that_died_nothing_kept_before_it_counts(store_path, opened):
    assert not read_opens(store_path, "maya.home", opened)
    belief_cache.open_generation(store_path)  # a writer that marked the store and died
    assert read_opens(store_path, "maya.home", opened)  # nothing is used while the mark stands
    with doxa.open(store_path) as memory:
        memory.ingest([{"type": "settlement", "question": "maya.diet", "answer": "eats fish", "at": "2026-06-11",
                        "how": "correction"}])
    assert read_opens(store_path, "maya.home", opened)  # what the dead writer changed is not known
    assert not read_opens(store_path, "maya.home", opened)


def test_an_entry_kept_by_a_read_from_before_a_write_does_not_count_for_what_the_write_changed(store_path, opened):
    forget_kept(store_path)
    stale = fresh_read(store_path, "maya.diet")
    entry_file = next(belief_cache.cache_dir(store_path).glob("*.json"))
    stale_entry = entry_file.read_text(encoding="utf-8")
    with doxa.open(store_path) as memory:
        memory.ingest([{"type": "settlement", "question": "maya.diet", "answer": "eats meat", "at": "2026-06-11",
                        "how": "correction"}])
    # a reader that read the generation before that write saves what it read after the write closed
    entry_file.write_text(stale_entry, encoding="utf-8")
    assert read_opens(store_path, "maya.diet", opened)
    assert fresh_read(store_path, "maya.diet")["answers"] != stale["answers"]


def test_the_trace_of_earlier_generations_is_bounded(store_path, opened, monkeypatch):
    monkeypatch.setattr(belief_cache, "MAX_TRACED_WRITES", 2)
    assert not read_opens(store_path, "maya.home", opened)
    for day in (11, 12):
        with doxa.open(store_path) as memory:
            memory.ingest([{"type": "settlement", "question": "maya.diet", "answer": "eats fish",
                            "at": f"2026-06-{day}", "how": "correction"}])
        assert not read_opens(store_path, "maya.home", opened)  # kept before both writes, still traced
    with doxa.open(store_path) as memory:
        memory.ingest([{"type": "settlement", "question": "maya.diet", "answer": "eats fish", "at": "2026-06-13",
                        "how": "correction"}])
    assert read_opens(store_path, "maya.home", opened)  # three writes back: no longer traced


@pytest.mark.parametrize("question_id", ["maya.lieblingsblume-über-alles", "maya." + "long-id-" * 20])
def test_any_question_id_is_kept_under_a_file_name_of_its_own(store_path, opened, question_id):
    """An entry is named by its id's bytes (hex), a long id by its hash: it is found again, outlives a
    write that leaves its question alone, and an entry kept before a write that changed its question
    never counts again (the links list the ids themselves)."""
    with doxa.open(store_path) as memory:
        memory.ingest([{"type": "question", "id": question_id, "subject": "maya", "kind": "flower",
                        "text": "Which flower?", "shape": "choice", "options": ["lilies", "tulips"]}])
    forget_kept(store_path)
    first = fresh_read(store_path, question_id)
    entries = list(belief_cache.cache_dir(store_path).glob("*.json"))
    assert len(entries) == 1 and len(entries[0].name.encode()) < 255
    assert entries[0].name.startswith("q-" if len(question_id.encode()) <= belief_cache.LONGEST_NAMED_ID else "h-")
    kept_before_the_write = entries[0].read_bytes()
    before = opened["n"]
    assert same_belief(fresh_read(store_path, question_id), first) and opened["n"] == before
    with doxa.open(store_path) as memory:  # a write that changes another question: the entry still counts
        memory.ingest([{"type": "message", "id": "other", "source": "maya-chat", "sent_at": "2026-06-10",
                        "text": "I eat meat again"},
                       {"type": "reading", "message": "other", "question": "maya.diet", "reader": "r",
                        "probs": {"vegetarian": 0.02, "eats fish": 0.02, "eats meat": 0.96}}])
    before = opened["n"]
    assert same_belief(fresh_read(store_path, question_id), first) and opened["n"] == before
    with doxa.open(store_path) as memory:  # a write that changes it
        memory.ingest([{"type": "message", "id": "flowers", "source": "maya-chat", "sent_at": "2026-06-11",
                        "text": "tulips, always"},
                       {"type": "reading", "message": "flowers", "question": question_id, "reader": "r",
                        "probs": {"lilies": 0.05, "tulips": 0.95}}])
    entries[0].write_bytes(kept_before_the_write)  # the entry as kept before it, not the writer's
    before = opened["n"]
    read = fresh_read(store_path, question_id)
    assert opened["n"] == before + 1  # the links name the question: the old entry does not count
    assert read["top"] == "tulips" and same_belief(read, from_scratch(store_path, question_id))
