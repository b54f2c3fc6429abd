"""Open kinds in the generated world, and `doxa bench` on open questions (issue 36).

The world: an open kind's questions list only their first value, values join by
``option_added`` records before any reading names them, readings name a subset of the
options plus ``unlisted`` (the four masses sum to 1), settlements name the true value,
changes land on new values at the Chinese-restaurant rate, the store ingests it all, and a
config without the knob draws exactly what it drew before. The bench: open questions are
scored apart, a system confined to the creation options scores a later value as wrong,
and doxa beats it on open questions. Statistical checks use |z| < 4.5, as tests/test_world.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from doxa.data import records as record_types
from doxa.data.evidence import UNLISTED
from doxa.data.store import Store
from doxa.inference.evaluation import baselines
from doxa.inference.evaluation import bench as harness
from doxa.inference.evaluation import bench_report
from doxa.inference.evaluation.world import World, generate_world
from doxa.inference.evaluation.world_config import WorldConfig, WorldConfigError
from doxa.inference.read import params as parameters

Z = 4.5


@pytest.fixture(scope="module")
def open_world() -> World:
    return generate_world(WorldConfig.preset("open"))


def _open_ids(world: World) -> set[str]:
    return {q for q, info in world.truth.questions.items() if info.get("open")}


# ---------------------------------------------------------------------------- determinism


def test_the_knob_off_draws_exactly_what_it_drew_before():
    """A closed kind ignores the open knob's other fields, and draws nothing more: same records."""
    quick = WorldConfig.preset("quick")
    base = generate_world(quick)
    kinds = [{**k.model_dump(mode="json"), "open": False, "slots": 3, "new_value_weight": 7.0} for k in quick.kinds]
    again = generate_world(quick.with_overrides(kinds=kinds))
    assert again.records == base.records
    assert np.array_equal(again.record_days, base.record_days)
    assert again.oracle_params() == base.oracle_params()
    assert not any(r["type"] == "option_added" or "unlisted" in r or r.get("open") for r in base.records)


def test_an_open_world_is_reproducible(open_world):
    again = generate_world(WorldConfig.preset("open"))
    assert again.records == open_world.records
    assert np.array_equal(again.record_days, open_world.record_days)
    assert again.truth.open_values == open_world.truth.open_values
    other = generate_world(WorldConfig.preset("open").with_overrides(seed=11))
    assert other.records != open_world.records


# ---------------------------------------------------------------------------- what the knob generates


def test_open_questions_start_with_one_value_and_gain_values_over_time(open_world):
    t = open_world.truth
    opened = _open_ids(open_world)
    open_kinds = {k.name for k in open_world.config.kinds if k.open}
    assert opened and opened == {q for q, info in t.questions.items() if info["kind"] in open_kinds}
    questions = {r["id"]: r for r in open_world.records if r["type"] == "question"}
    for qid in opened:
        record = questions[qid]
        assert record["open"] is True and record["shape"] == "choice"
        assert record["options"] == [t.questions[qid]["options"][0]] == [t.answer_at(qid, 0.0)]
    assert not any("open" in questions[q] for q in set(questions) - opened)
    # values appear over time: most questions list more than their first value by the end, and the
    # truth has moved to a value listed after the question was created somewhere
    grew = sum(len(t.open_values[q]) > 1 for q in opened)
    assert grew > len(opened) / 2
    moved = [q for q in opened if t.answer_at(q, open_world.end_day) != t.questions[q]["options"][0]]
    assert moved
    assert all(t.answer_at(q, open_world.end_day) in t.questions[q]["options"] for q in opened)


def test_values_are_added_before_any_reading_names_them(open_world):
    """In stream order: an option_added follows the message that first names the value (same time,
    by the organizer), and every reading names exactly the values listed at that point."""
    t = open_world.truth
    listed: dict[str, list[str]] = {}
    last_message = None
    added_days: dict[str, list[float]] = {}
    names = 0
    for record, day in zip(open_world.records, open_world.record_days.tolist()):
        record_types.record_adapter.validate_python(record)
        kind = record["type"]
        if kind == "question" and record.get("open"):
            listed[record["id"]] = list(record["options"])
            added_days[record["id"]] = [-math.inf]
        elif kind == "message":
            last_message = record
        elif kind == "option_added":
            qid, value = record["question"], record["option"]
            assert value not in listed[qid] and value in t.questions[qid]["options"]
            assert record["by"] == "organizer" and record["at"] == last_message["sent_at"]
            assert value in last_message["text"], "the message just before names the value"
            listed[qid].append(value)
            added_days[qid].append(day)
        elif kind == "reading" and record["question"] in listed:
            names += 1
            assert list(record["probs"]) == listed[record["question"]]
            assert record["unlisted"] >= 0.0
            total = sum(record["probs"].values()) + record["unlisted"] + record["unclear"] + record["unrelated"]
            assert abs(total - 1.0) < 1e-9
        elif kind == "settlement" and record["question"] in listed:
            assert record["answer"] == t.answer_at(record["question"], day)
            if record["answer"] not in listed[record["question"]]:  # the store adds it, as the world records
                listed[record["question"]].append(record["answer"])
                added_days[record["question"]].append(day)
    assert names > 0
    assert {q: [v for _, v in pairs] for q, pairs in t.open_values.items()} == listed
    assert {q: [d for d, _ in pairs] for q, pairs in t.open_values.items()} == added_days
    assert all(t.listed_at(q, open_world.end_day) == values for q, values in listed.items())
    assert all(t.listed_at(q, -1.0) == values[:1] for q, values in listed.items())
    some = next(iter(listed))
    with pytest.raises(ValueError, match="open question"):
        open_world.planted_records(some, listed[some][0], 1, 10.0)
    assert any(r["type"] == "option_added" for r in open_world.records)


def test_readings_are_the_story_over_the_values_listed_and_unlisted(open_world):
    """Inverted with the true τ, a reading of an open question is Dirichlet(β·1 + e_c) over its
    categories (the values listed then, and ``unlisted`` as one): c is the value its message stated
    where that is listed, else ``unlisted``. Checked on the mean of r̃_c, which is Beta(1+β, (K-1)β):
    the unnamed values' masses summed would put far more on ``unlisted``."""
    t = open_world.truth
    rows = t.readings
    by_key = {(m, q): i for i, (m, q) in enumerate(zip(rows.message.tolist(), rows.question.tolist()))}
    opened = _open_ids(open_world)
    r_c, mean, var, on_unlisted = [], [], [], 0
    for record in open_world.records:
        if record["type"] != "reading" or record["question"] not in opened:
            continue
        i = by_key[(record["message"], record["question"])]
        stated = t.questions[record["question"]]["options"][int(rows.stated[i])]
        masses = np.array([*record["probs"].values(), record["unlisted"]])
        c = list(record["probs"]).index(stated) if stated in record["probs"] else len(masses) - 1
        on_unlisted += c == len(masses) - 1
        with np.errstate(divide="ignore"):
            logs = np.log(masses) / t.reader_temperature[record["reader"]]
        r = np.exp(logs - logs.max())
        r_c.append(r[c] / r.sum())
        a, b = 1.0 + t.reader_beta[record["reader"]], (len(masses) - 1) * t.reader_beta[record["reader"]]
        mean.append(a / (a + b))
        var.append(a * b / ((a + b) ** 2 * (a + b + 1)))
    assert len(r_c) > 500 and on_unlisted > 0
    z = (np.sum(r_c) - np.sum(mean)) / math.sqrt(np.sum(var))
    assert abs(z) < Z, f"mean r̃_c {np.mean(r_c):.4f}, expected {np.mean(mean):.4f}"


def test_changes_land_on_new_values_at_the_chinese_restaurant_rate(open_world):
    """At a change with n values taken so far, a new value with probability θ/(n+θ)."""
    t = open_world.truth
    theta = {k.name: k.new_value_weight for k in open_world.config.kinds if k.open}
    assert t.new_value_weight == theta
    observed = expected = variance = 0.0
    events = 0
    for qid in _open_ids(open_world):
        slots = len(t.questions[qid]["options"])
        th = theta[t.questions[qid]["kind"]]
        assert t.initial[qid] == 0
        n = 1
        for value in t.change_values[qid].tolist():
            if n < slots:
                p = th / (n + th)
                expected += p
                variance += p * (1 - p)
                observed += value == n
                events += 1
            assert value <= n, "a change takes a value taken before or the next new one"
            n += value == n
    assert events > 30
    assert abs(observed - expected) / math.sqrt(variance) < Z


def test_the_oracle_knows_the_new_value_weight(open_world):
    doc = open_world.oracle_params()
    for kind in open_world.config.kinds:
        if kind.open:
            entry = doc["kinds"][kind.name]
            assert entry["options"] == [] and entry["prior"] == []
            assert parameters.new_value_weight(doc, kind.name) == pytest.approx(kind.new_value_weight)
            assert parameters.kind_change_rate(doc, kind.name) == pytest.approx(open_world.truth.change_rate[kind.name])


def test_the_store_ingests_the_open_world_and_lists_what_the_world_listed(open_world):
    store = Store.open(":memory:")
    try:
        for _, chunk in open_world.iter_days(step=60.0):
            store.ingest_records(chunk)
        evidence = store.load_evidence(None)
    finally:
        store.close()
    qt = evidence.questions
    opened = _open_ids(open_world)
    assert {str(q) for q in qt.ids[qt.is_open].tolist()} == opened
    for i in np.flatnonzero(qt.is_open).tolist():
        qid = str(qt.ids[i])
        assert qt.options[i] == [v for _, v in open_world.truth.open_values[qid]] + [UNLISTED]


# ---------------------------------------------------------------------------- the config


@pytest.mark.parametrize("change, message", [
    ({"prior": [0.5, 0.5]}, "prior"),
    ({"slots": 50}, "slots per question"),
    ({"shape": "scale"}, "shape"),
    ({"options": ["unlisted", "1 Elm Street", "2 Elm Street"], "slots": 2}, "reserved"),
])
def test_bad_open_kinds_are_refused_naming_the_field(change, message):
    config = WorldConfig.preset("open")
    kinds = [k.model_dump(mode="json") for k in config.kinds]
    i = next(i for i, k in enumerate(kinds) if k["open"])
    kinds[i] = {**kinds[i], **change}
    with pytest.raises(WorldConfigError, match=message) as err:
        config.with_overrides(kinds=kinds)
    assert f"kinds[{i}]" in str(err.value)


# ---------------------------------------------------------------------------- the bench


def test_statements_of_an_open_question_never_name_a_value_listed_after_them(mem, rec):
    """A reading written before a value was added says nothing of it: its statement is ``unlisted``."""
    mem.ingest([
        {"type": "question", "id": "maya.home", "kind": "home", "text": "Where does Maya live?", "shape": "choice",
         "options": ["1 Elm Street"], "open": True},
        rec.source("s1", ["friend", "chat"]),
        rec.message("m1", "s1", "2026-01-02", "Maya moved, not sure where"),
        {**rec.reading("m1", "maya.home", {"1 Elm Street": 0.1}), "unlisted": 0.9},
        {"type": "option_added", "question": "maya.home", "option": "9 Oak Avenue", "at": "2026-01-05"},
    ])
    evidence = mem.store.load_evidence(None)
    assert evidence.questions.options[0] == ["1 Elm Street", "9 Oak Avenue", UNLISTED]
    st = baselines.statements(evidence)
    assert st.option.tolist() == [2]
    assert st.probs[0].tolist() == pytest.approx([0.1, 0.0, 0.9])
    # the system confined to the creation options can say only the first value
    probs = baselines.FixedOptions({"maya.home": 1}).predict(evidence, evidence.t.max() + 1)
    assert probs[0].tolist() == pytest.approx([1.0, 0.0, 0.0])


@pytest.fixture(scope="module")
def open_result(open_world):
    settings = harness.BenchSettings(checkpoints=4, systems=("oracle", "doxa-equal", "latest-wins", "fixed-options"),
                                     planted_cap=4, planted_questions=8)
    return harness.run(open_world, settings)


def test_the_bench_scores_open_questions_apart(open_result, tmp_path):
    rows = {r["system"]: r for r in open_result.systems}
    assert set(rows) == {"oracle", "doxa-equal", "latest-wins", "fixed-options"}
    world = open_result.world
    assert world["open_questions"] > 0 and world["values_added"] > 0
    for row in rows.values():
        assert row["status"] == "ok"
        opened, closed = row["open"], row["closed"]
        assert opened["n_evaluated"] > 0 and closed["n_evaluated"] > 0
        assert opened["n_evaluated"] + closed["n_evaluated"] == row["n_evaluated"]
        assert opened["n_first_value"] + opened["n_later_value"] + opened["n_not_yet_named"] == opened["n_evaluated"]
        for value in (opened["accuracy"], closed["accuracy"]):
            assert 0.0 <= value <= 1.0
        # the pooled accuracy is the two parts' weighted mean
        pooled = (opened["accuracy"] * opened["n_evaluated"] + closed["accuracy"] * closed["n_evaluated"])
        assert row["accuracy"] == pytest.approx(pooled / row["n_evaluated"])
    # a system that cannot name a value added after the question's creation scores it as wrong
    later = rows["fixed-options"]["open"]
    assert later["n_later_value"] > 0 and later["accuracy_later_value"] == 0.0
    assert later["accuracy_first_value"] > 0.9
    # on closed questions it is latest-wins
    assert rows["fixed-options"]["closed"]["accuracy"] == pytest.approx(rows["latest-wins"]["closed"]["accuracy"])
    # doxa follows values it can name: it beats the creation-options memory on open questions
    for doxa in ("oracle", "doxa-equal"):
        assert rows[doxa]["open"]["accuracy"] > later["accuracy"]
        assert rows[doxa]["open"]["accuracy_later_value"] > 0.3
        assert rows[doxa]["open"]["log_loss"] < later["log_loss"]
    text = bench_report.render_markdown(open_result, [])
    assert "## Open questions" in text and "| fixed-options |" in text
    assert bench_report.open_table_rows(open_result)[1][0][0] == "oracle"


def test_the_default_lineup_adds_fixed_options_on_open_worlds_only():
    assert "fixed-options" not in baselines.SYSTEM_NAMES
    assert baselines.ALL_SYSTEM_NAMES == baselines.SYSTEM_NAMES + baselines.OPEN_SYSTEM_NAMES
    assert [s.name for s in baselines.lineup(None, None, ("fixed-options",))] == ["fixed-options"]
