"""Kept filter states (inference/states.py) never change a belief.

A hypothesis property drives one store through a random interleaving of ingests,
parameter publishes (as `doxa train` publishes: states computed from an earlier snapshot
of the evidence, kept with the new version), merges and their undo, explicit refreshes and
reads at random times; after every step, each read from the kept states equals the same
read filtered from scratch to 1e-12.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from datetime import datetime, timedelta

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import doxa
from doxa.inference.read import params as P
from doxa.inference.read import states, tiers
import records as R
from doxa.data.evidence import FRESH_READINGS
from doxa.data.store import Store
from doxa.inference.learn.train import publish_with_posterior
from doxa.inference.read.memory import Memory
from test_scorer_properties import BASE, END, HORIZON_HOURS, worlds

EXAMPLES = int(os.environ.get("DOXA_PROPERTY_EXAMPLES", "12"))
EXACT = 1e-12
#: "ingest" goes through the Memory (which refreshes the touched questions' states in the same
#: write); "bulk ingest" through the store alone, as a big import does, leaving them stale.
ACTIONS = ["ingest", "bulk ingest", "ingest", "snapshot", "publish", "merge", "undo", "refresh", "read"]


def ingest_leaving_states_stale(memory, records):
    """Ingest through the store alone, as a big import does: no kept state is refreshed."""
    memory.store.ingest_records(records)


def both_ways(memory, question_ids, at):
    """(from the kept states, filtered from scratch): raw and calibrated probabilities."""
    kept = tiers.read_beliefs(memory.store, question_ids, at, keep_states=True)
    scratch = tiers.read_beliefs(memory.store, question_ids, at, keep_states=False)
    return kept, scratch


def assert_exact(memory, at, question_ids=None):
    kept, scratch = both_ways(memory, question_ids, at)
    assert kept.evidence.questions.ids.tolist() == scratch.evidence.questions.ids.tolist()
    np.testing.assert_allclose(kept.raw, scratch.raw, rtol=0, atol=EXACT)
    np.testing.assert_allclose(kept.probs, scratch.probs, rtol=0, atol=EXACT)
    assert kept.n_evidence.tolist() == scratch.n_evidence.tolist()
    assert kept.n_settled.tolist() == scratch.n_settled.tolist()
    assert kept.params_version == scratch.params_version


def a_document(draw, world, number: int) -> dict:
    """A parameter document unlike the defaults: fitted-looking trust, priors, rates, calibration."""
    doc = P.default_params()
    doc["diagnostics"] = {"test": number}
    for sid, (layers, _) in world.sources.items():
        doc["trust"]["/".join(layers + [sid])] = {"mean": draw(st.floats(0.3, 0.97)), "lo": 0.1, "hi": 0.99, "n": 3}
    for qid, (kind, options) in world.questions.items():
        weights = draw(st.lists(st.floats(0.1, 5.0), min_size=len(options), max_size=len(options)))
        rate = draw(st.floats(1e-4, 0.05))
        doc["kinds"][kind] = {"options": options, "prior": [w / sum(weights) for w in weights],
                              "change_rate": rate, "half_life_days": float(np.log(2) / rate)}
    doc["calibration"] = draw(st.sampled_from([
        {"method": "none"}, {"method": "temperature", "temperature": 1.7, "floor": 0.01},
        {"method": "isotonic", "x": [0.0, 0.5, 0.9, 1.0], "y": [0.0, 0.45, 0.8, 0.97]}]))
    return doc


def read_alone(path: str, question: str, at, keep_states: bool = True):
    """One question's belief (the scorer's arrays) as a fresh `doxa belief` reads it: the store
    opened for this read alone, from what an earlier read kept beside it where that counts."""
    memory = Memory(Store.open(path, create=False, check=False), keep_states=keep_states)
    try:
        if keep_states:
            return tiers.kept_beside(memory.store, question, at)
        return tiers.read_beliefs(memory.store, [question], at, keep_states=False)
    finally:
        memory.close()


def assert_kept_beside_exact(path: str, question: str, at) -> None:
    """The first fresh read (it keeps the inputs) and the second (it may use them) equal one
    filtered from scratch."""
    scratch = read_alone(path, question, at, keep_states=False)
    for _ in range(2):
        kept = read_alone(path, question, at)
        assert kept.evidence.questions.ids.tolist() == scratch.evidence.questions.ids.tolist()
        np.testing.assert_allclose(kept.raw, scratch.raw, rtol=0, atol=EXACT)
        np.testing.assert_allclose(kept.probs, scratch.probs, rtol=0, atol=EXACT)
        assert (kept.n_evidence.tolist(), kept.n_settled.tolist(), kept.params_version) == (
            scratch.n_evidence.tolist(), scratch.n_settled.tolist(), scratch.params_version)


@pytest.mark.parametrize("on_disk", [False, True], ids=["in memory", "on disk, fresh reads too"])
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                      HealthCheck.data_too_large])
@given(world=worlds(), data=st.data())
def test_beliefs_from_kept_states_equal_beliefs_filtered_from_scratch(on_disk, world, data):
    folder = tempfile.mkdtemp(prefix="doxa-kept-") if on_disk else None
    try:
        check_interleaving(world, data, os.path.join(folder, "doxa.duckdb") if on_disk else ":memory:")
    finally:
        if folder:
            shutil.rmtree(folder, ignore_errors=True)


def check_interleaving(world, data, path: str) -> None:
    draw = data.draw
    records = list(world.records)
    definitions = [r for r in records if r["type"] in ("subject", "source", "question")]
    evidence = [r for r in records if r not in definitions]
    memory = doxa.open(path)
    memory.ingest(definitions)
    with memory.store.reading():  # a snapshot before any evidence: a publish may come from far behind
        snapshot = (memory.store.load_evidence(None), memory.store.evidence_epoch())
    merges: list[str] = []
    published = 0
    for step in range(draw(st.integers(4, 14), label="steps")):
        action = draw(st.sampled_from(ACTIONS), label=f"action {step}")
        if action in ("ingest", "bulk ingest") and evidence:
            n = draw(st.integers(1, len(evidence)))
            # messages before their readings: a batch takes whole message groups from the front
            batch, evidence = evidence[:n], evidence[n:]
            needed = {r["message"] for r in batch if r["type"] == "reading"} - {
                r["id"] for r in batch if r["type"] == "message"}
            batch = [r for r in records if r["type"] == "message" and r["id"] in needed
                     and not memory.store.execute("SELECT 1 FROM messages WHERE id = ?", [r["id"]]).fetchall()] + batch
            # a merge carries the duplicate's readings into the kept question: a later reading of
            # the same message for it by the same reader would be a second reading of one key,
            # which the store refuses (readings are never edited), so the world leaves it out
            carried = set(memory.store.execute("SELECT message, question, reader FROM readings").fetchall())
            batch = [r for r in batch if r["type"] != "reading" or (r["message"], r["question"], r["reader"]) not in carried]
            if action == "ingest":
                memory.ingest(batch)
            else:
                ingest_leaving_states_stale(memory, batch)
        elif action == "snapshot":
            with memory.store.reading():
                snapshot = (memory.store.load_evidence(None), memory.store.evidence_epoch())
        elif action == "publish" and snapshot is not None:
            published += 1
            document = a_document(draw, world, published)
            seen, epoch = snapshot
            publish_with_posterior(memory.store, document, None, None,
                                   kept_states=states.compute(seen, document), epoch=epoch)
        elif action == "merge":
            active = memory.store.question_table()
            by_options = {}
            for qid, key in zip(active.ids.tolist(), active.options_key.tolist()):
                by_options.setdefault(key, []).append(qid)
            pairs = [ids for ids in by_options.values() if len(ids) >= 2]
            if pairs:
                into, duplicate = draw(st.sampled_from(pairs))[:2]
                op = f"op{len(merges)}-{step}"
                memory.ingest([{"type": "question_merge", "id": op, "into": into, "from": duplicate, "by": "t"}])
                merges.append(op)
        elif action == "undo" and merges:
            memory.ingest([{"type": "undo", "op": merges.pop(), "by": "t"}])
        elif action == "refresh":
            memory.refresh_states()
        at = BASE + timedelta(hours=draw(st.integers(0, HORIZON_HOURS + 48), label=f"read time {step}"))
        assert_exact(memory, at)
        ids = memory.store.question_table().ids.tolist()
        if ids:
            one = draw(st.sampled_from(ids), label=f"question {step}")
            assert_exact(memory, at, [one])
            if path != ":memory:":
                memory.store.release()  # a writer that lets go, as every command does
                assert_kept_beside_exact(path, one, at)
    memory.close()


def test_a_trained_store_reads_from_its_kept_states(tmp_path):
    """Not only equal: after a publish, a read at a time past the evidence uses the kept states."""
    memory = doxa.open(str(tmp_path / "k.duckdb"))
    memory.ingest(R.small_store_records())
    with memory.store.reading():
        seen, epoch = memory.store.load_evidence(None), memory.store.evidence_epoch()
    document = P.default_params()
    publish_with_posterior(memory.store, document, None, None, kept_states=states.compute(seen, document),
                           epoch=epoch)
    questions = memory.store.question_table()
    kept = memory.store.kept_states(questions, 1)
    assert kept["found"].all()
    # an ingest touching one question leaves the others' states counting and refreshes its own
    memory.ingest([R.message("late", "maya-chat", "2026-05-30T10:00:00", "still fish"),
                   R.reading("late", "maya.diet", {"vegetarian": 0.1, "eats fish": 0.8, "eats meat": 0.1},
                             reader="r2")])
    assert memory.store.kept_states(questions, 1)["found"].all()
    assert_exact(memory, END)
    memory.close()


def test_a_publish_refreshes_the_states_of_questions_ingested_while_it_fitted(tmp_path):
    """`doxa train` fits on a snapshot; what came in meanwhile is refreshed in its publishing write."""
    memory = doxa.open(str(tmp_path / "k.duckdb"))
    memory.ingest(R.small_store_records())
    with memory.store.reading():
        seen, epoch = memory.store.load_evidence(None), memory.store.evidence_epoch()
    ingest_leaving_states_stale(memory, [  # "during the fit"
        R.message("late", "maya-chat", "2026-05-30T10:00:00", "still fish"),
        R.reading("late", "maya.diet", {"vegetarian": 0.1, "eats fish": 0.8, "eats meat": 0.1}, reader="r2")])
    with memory.store.reading():
        # maya-chat's fourth message gives it a history: every question it was read for counts anew
        assert memory.store.questions_changed_since(epoch) == ["maya.diet", "maya.flower", "sam.diet"]
    document = P.default_params()
    report = {}
    publish_with_posterior(memory.store, document, None, None, kept_states=states.compute(seen, document),
                           epoch=epoch, kept_report=report)
    questions = memory.store.question_table()
    assert report == {"written": len(questions.ids), "refreshed": 3}
    assert memory.store.kept_states(questions, 1)["found"].all()
    assert_exact(memory, END)
    # and nothing came after the publish
    with memory.store.reading():
        assert memory.store.questions_changed_since(memory.store.evidence_epoch()) == []
    memory.close()


def campaign_records(extra_messages: int):
    """Two fresh sources agreeing on day 1 (a campaign); ``fresh-0`` then says ``extra_messages``
    things on questions of their own, on day 30."""
    records = [R.subject("p"), R.source("fresh-0", ["friend"]), R.source("fresh-1", ["friend"]),
               R.question("p.q", ["yes", "no"], kind="k", subject="p")]
    for n, source in enumerate(["fresh-0", "fresh-1"]):
        records += [R.message(f"m{n}", source, f"2024-02-01T1{n}:00:00", f"{source} says yes, and means it"),
                    R.reading(f"m{n}", "p.q", {"yes": 0.9, "no": 0.1}, reader="r")]
    for j in range(extra_messages):
        records += [R.question(f"p.other{j}", ["yes", "no"], kind="k", subject="p"),
                    R.message(f"later{j}", "fresh-0", "2024-03-01T10:00:00", f"something else entirely, {j}"),
                    R.reading(f"later{j}", f"p.other{j}", {"yes": 0.2, "no": 0.8}, reader="r")]
    return records


def test_a_source_gaining_a_history_refreshes_the_states_of_all_it_said():
    memory = doxa.open(":memory:")
    memory.ingest(campaign_records(FRESH_READINGS - 1))
    memory.refresh_states()
    before = memory.belief("p.q", END).answers["yes"]
    memory.ingest(campaign_records(FRESH_READINGS)[-3:])  # fresh-0's fourth message, on another question
    with memory.store.reading():
        assert memory.store.kept_states(memory.store.question_table(["p.q"]), 0)["found"].all()
    assert_exact(memory, END)
    assert memory.belief("p.q", END).answers["yes"] > before  # no campaign any more: two voices
    memory.close()


def test_a_late_original_makes_its_stored_twin_a_copy_and_refreshes_what_that_changes():
    records = campaign_records(FRESH_READINGS)
    # fresh-0's fourth message turns out to be a copy of what a third source said first
    twin = [R.source("first", ["web"]), R.message("orig", "first", "2024-02-20T10:00:00", "Something else entirely, 2"),
            R.reading("orig", "p.other2", {"yes": 0.2, "no": 0.8}, reader="r")]
    memory = doxa.open(":memory:")
    memory.ingest(records)
    memory.refresh_states()
    established = memory.belief("p.q", END).answers["yes"]
    memory.ingest(twin)
    assert dict(memory.store.execute("SELECT message, is_copy FROM readings WHERE question = 'p.other2'").fetchall()) \
        == {"later2": True, "orig": False}
    assert_exact(memory, END)
    assert memory.belief("p.q", END).answers["yes"] < established  # fresh again: a campaign again
    memory.close()


def test_a_read_before_a_source_gained_its_history_reads_it_as_fresh():
    memory = doxa.open(":memory:")
    memory.ingest(campaign_records(FRESH_READINGS))
    memory.refresh_states()
    assert_exact(memory, datetime(2024, 2, 10))  # after p.q's last event, before fresh-0's later messages
    memory.close()
