"""The scorer against posteriors worked out by hand (tests/reference.py) on tiny stores.

Each test publishes a parameter document it controls, so every number the scorer uses
is known here: priors, change rates, trust, reader temperatures, calibration.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta

import pytest

import doxa
from doxa.data.errors import StoreError
from doxa.inference.read import params as parameters
from reference import bayes, decay, hand_likelihood, tempered

T0 = datetime(2026, 1, 1)
DIET = ["vegetarian", "eats fish", "eats meat"]
HALF_LIFE_10_DAYS = math.log(2) / 10.0


def iso(moment: datetime) -> str:
    return moment.isoformat()


def days(n: float) -> timedelta:
    return timedelta(days=n)


def publish(mem, *, rate=0.0, prior=(1, 1, 1), options=DIET, kind="diet", trust=None, readers=None,
            calibration=None, by_top=None, default_trust=0.6, confusion=None) -> int:
    body = {
        "trust": {node: {"mean": a, "lo": a, "hi": a, "n": 10} for node, a in (trust or {}).items()},
        "kinds": {kind: {"options": list(options), "prior": list(prior), "change_rate": rate}},
        "readers": {name: {"temperature": t} for name, t in (readers or {}).items()},
        "calibration": calibration or {"method": "none"},
        "defaults": {"change_rate": rate, "trust": default_trust,
                     "trust_by_top_layer": by_top if by_top is not None else {"person": 0.8}},
    }
    if confusion:
        body["confusion"] = confusion
    return mem.store.publish_params(body)


@pytest.fixture
def diet(mem, rec):
    """Maya's diet question and two sources: her own chat (trust by layer) and a florist (stated 0.4)."""
    mem.ingest([
        rec.subject("maya"),
        rec.source("maya-chat", ["person", "self", "chat"]),
        rec.source("florist", ["business", "email"], trust=0.4),
        rec.question("maya.diet", DIET, kind="diet", subject="maya"),
    ])
    return mem


def say(mem, rec, mid, when, probs, source="maya-chat", reader="reader-1", unclear=0.0, unrelated=0.0, one_off=0.0):
    mem.ingest([
        rec.message(mid, source, iso(when), f"message {mid} about what Maya eats these days"),
        rec.reading(mid, "maya.diet", dict(zip(DIET, probs)), reader=reader, unclear=unclear,
                    unrelated=unrelated, one_off=one_off),
    ])


def answers(mem, when, question="maya.diet") -> list[float]:
    found = mem.belief(question, when).answers
    return [found[o] for o in mem.store.question(question)["options"]]


# ---------------------------------------------------------------------------- the filter
def test_no_evidence_reads_the_kind_prior(diet):
    assert answers(diet, T0) == pytest.approx([1 / 3] * 3, abs=1e-6)  # nothing published: uniform
    publish(diet, prior=(2, 1, 1))
    assert answers(diet, T0) == pytest.approx([0.5, 0.25, 0.25], abs=1e-6)


def test_one_reading_then_decay_toward_the_prior(diet, rec):
    publish(diet, rate=HALF_LIFE_10_DAYS, prior=(2, 1, 1))
    say(diet, rec, "m1", T0, [0.1, 0.8, 0.05], unclear=0.05, one_off=0.1)
    prior = [0.5, 0.25, 0.25]
    at_once = bayes(prior, hand_likelihood([0.1, 0.8, 0.05], 0.05, 0.0, 0.1, alpha=0.8))
    assert answers(diet, T0) == pytest.approx(at_once, abs=1e-6)
    # ten days is one half-life: half the evidence is left
    assert answers(diet, T0 + days(10)) == pytest.approx([(a + p) / 2 for a, p in zip(at_once, prior)], abs=1e-6)


def test_readings_are_filtered_in_time_order_with_decay_between_them(diet, rec):
    publish(diet, rate=HALF_LIFE_10_DAYS)
    say(diet, rec, "late", T0 + days(30), [0.05, 0.05, 0.9], source="florist")  # ingested first on purpose
    say(diet, rec, "early", T0, [0.9, 0.05, 0.05])
    prior = [1 / 3] * 3
    b = bayes(prior, hand_likelihood([0.9, 0.05, 0.05], 0, 0, 0, alpha=0.8))
    b = decay(b, prior, HALF_LIFE_10_DAYS, 30)
    b = bayes(b, hand_likelihood([0.05, 0.05, 0.9], 0, 0, 0, alpha=0.4))
    b = decay(b, prior, HALF_LIFE_10_DAYS, 15)
    assert answers(diet, T0 + days(45)) == pytest.approx(b, abs=1e-6)


def test_settlement_is_certain_at_its_time_then_fades_toward_the_prior(diet, rec):
    publish(diet, rate=HALF_LIFE_10_DAYS, prior=(2, 1, 1))
    say(diet, rec, "m1", T0, [0.9, 0.05, 0.05])
    diet.ingest([rec.settlement("maya.diet", "eats meat", iso(T0 + days(5)))])
    assert answers(diet, T0 + days(5)) == pytest.approx([0, 0, 1], abs=1e-6)
    rho = 0.5  # ten days later
    assert answers(diet, T0 + days(15)) == pytest.approx([(1 - rho) * 0.5, (1 - rho) * 0.25, rho + (1 - rho) * 0.25],
                                                         abs=1e-6)
    assert diet.belief("maya.diet", T0 + days(15)).n_settled == 1


def test_a_later_settlement_overrides_an_earlier_one_even_without_change(diet, rec):
    publish(diet, rate=0.0)
    diet.ingest([rec.settlement("maya.diet", "vegetarian", iso(T0)),
                 rec.settlement("maya.diet", "eats fish", iso(T0 + days(1)), how="approval")])
    assert answers(diet, T0 + days(2)) == pytest.approx([0, 1, 0], abs=1e-6)


def test_rejection_zeroes_the_answer_from_its_time_on(diet, rec):
    publish(diet, rate=0.0)
    say(diet, rec, "m1", T0, [0.2, 0.5, 0.3])
    diet.ingest([rec.rejection("maya.diet", "eats fish", iso(T0 + days(5)))])
    unrejected = bayes([1 / 3] * 3, hand_likelihood([0.2, 0.5, 0.3], 0, 0, 0, alpha=0.8))
    assert answers(diet, T0 + days(4)) == pytest.approx(unrejected, abs=1e-6)
    rest = unrejected[0] + unrejected[2]
    assert answers(diet, T0 + days(6)) == pytest.approx([unrejected[0] / rest, 0.0, unrejected[2] / rest], abs=1e-6)
    b = diet.belief("maya.diet", T0 + days(6))
    assert b.rejected == ["eats fish"] and b.top != "eats fish"


@pytest.mark.parametrize("masses", [{"unclear": 1.0}, {"unrelated": 1.0}, {"one_off": 1.0}],
                         ids=["unclear", "unrelated", "one-off"])
def test_a_reading_that_says_nothing_lasting_changes_nothing(diet, rec, masses):
    publish(diet, prior=(3, 2, 1))
    probs = [0.0, 0.0, 0.0] if "one_off" not in masses else [0.0, 1.0, 0.0]
    say(diet, rec, "m1", T0, probs, **masses)
    assert answers(diet, T0) == pytest.approx([0.5, 1 / 3, 1 / 6], abs=1e-6)


def test_the_earliest_copy_of_a_message_is_the_one_that_counts(diet, rec):
    publish(diet)
    text = "Maya told everyone she eats meat again, she loves steak!"
    diet.ingest([
        rec.message("fwd", "florist", iso(T0 + days(1)), f"Fwd: {text}"),
        rec.reading("fwd", "maya.diet", dict(zip(DIET, [0.0, 0.0, 1.0]))),
        rec.message("orig", "maya-chat", iso(T0), text),
        rec.reading("orig", "maya.diet", dict(zip(DIET, [0.0, 0.0, 1.0]))),
    ])
    # one evidence unit, with the trust of the earliest sender (Maya, 0.8), not the forwarder's
    assert answers(diet, T0 + days(2)) == pytest.approx(bayes([1 / 3] * 3, hand_likelihood([0, 0, 1], 0, 0, 0, 0.8)),
                                                        abs=1e-6)
    assert diet.belief("maya.diet", T0 + days(2)).n_evidence == 1


# ---------------------------------------------------------------------------- where the numbers come from
def test_the_deepest_fitted_node_sets_trust_even_for_a_source_never_seen_in_the_fit(diet, rec):
    publish(diet, trust={"person": 0.6, "person/self": 0.95})
    diet.ingest([rec.source("maya-new-phone", ["person", "self", "sms"], trust=0.3)])  # stated trust loses to fit
    say(diet, rec, "m1", T0, [0.1, 0.9, 0.0], source="maya-new-phone")
    expected = bayes([1 / 3] * 3, hand_likelihood([0.1, 0.9, 0.0], 0, 0, 0, alpha=0.95))
    assert answers(diet, T0) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("layers,stated,alpha", [
    (["person", "self"], None, parameters.DEFAULT_TRUST_BY_TOP_LAYER["person"]),
    (["business", "email"], None, parameters.DEFAULT_TRUST_BY_TOP_LAYER["business"]),
    (["somewhere", "else"], None, parameters.DEFAULT_TRUST),
    (["business", "email"], 0.85, 0.85),
], ids=["person-default", "business-default", "unknown-layer", "stated"])
def test_without_a_fit_trust_is_stated_or_the_default_of_the_top_layer(mem, rec, layers, stated, alpha):
    mem.ingest([rec.source("s", layers, trust=stated), rec.question("maya.diet", DIET, kind="diet")])
    say(mem, rec, "m1", T0, [0.7, 0.2, 0.1], source="s")
    expected = bayes([1 / 3] * 3, hand_likelihood([0.7, 0.2, 0.1], 0, 0, 0, alpha=alpha))
    assert answers(mem, T0) == pytest.approx(expected, abs=1e-6)  # read at its time: no decay
    assert mem.belief("maya.diet", T0).params_version is None


def test_reader_temperature_softens_the_reading(diet, rec):
    publish(diet, readers={"shouty": 2.0})
    say(diet, rec, "m1", T0, [0.6, 0.3, 0.1], reader="shouty")
    expected = bayes([1 / 3] * 3, hand_likelihood([0.6, 0.3, 0.1], 0, 0, 0, alpha=0.8, temperature=2.0))
    assert answers(diet, T0) == pytest.approx(expected, abs=1e-6)
    assert tempered([0.6, 0.3, 0.1], 2.0)[0] < 0.6  # the temperature does move the numbers


def test_a_question_whose_options_differ_from_its_kind_gets_a_uniform_prior(diet, rec):
    diet.ingest([rec.question("sam.diet", ["vegan", "omnivore"], kind="diet")])
    publish(diet, prior=(8, 1, 1))
    assert answers(diet, T0, "sam.diet") == pytest.approx([0.5, 0.5], abs=1e-6)
    assert answers(diet, T0) == pytest.approx([0.8, 0.1, 0.1], abs=1e-6)


def test_confusion_matrix_of_a_biased_source_replaces_its_trust(diet, rec):
    # the florist says "eats meat" 70% of the time whatever the truth
    matrix = [[0.25, 0.05, 0.7], [0.05, 0.25, 0.7], [0.1, 0.1, 0.8]]
    publish(diet, confusion={"business/email": {"diet": matrix}})
    say(diet, rec, "m1", T0, [0.0, 0.1, 0.8], source="florist", unclear=0.1, one_off=0.2)
    r = tempered([0.0, 0.1, 0.8])
    u, o = 0.1, 0.2
    like = [(u + (1 - u) * o) / 3 + (1 - u) * (1 - o) * sum(r[c] * matrix[j][c] for c in range(3)) for j in range(3)]
    assert answers(diet, T0) == pytest.approx(bayes([1 / 3] * 3, like), abs=1e-6)


def test_temperature_calibration_maps_the_output(diet, rec):
    publish(diet)
    say(diet, rec, "m1", T0, [0.7, 0.2, 0.1])
    raw = answers(diet, T0)
    publish(diet, calibration={"method": "temperature", "temperature": 2.0})
    powered = [p ** 0.5 for p in raw]
    assert answers(diet, T0) == pytest.approx([p / sum(powered) for p in powered], abs=1e-5)


# ---------------------------------------------------------------------------- reading beliefs
def test_reads_never_change_beliefs_and_each_read_is_logged(small_mem):
    at = datetime(2026, 6, 1)
    first = small_mem.beliefs(at=at)
    second = small_mem.beliefs(at=at)
    assert [b.to_dict() for b in first] == [b.to_dict() for b in second]
    assert small_mem.store.counts()["reads"] == 2 * len(first)
    one = small_mem.belief("maya.diet", at)
    rows = small_mem.store.con.execute(
        "SELECT question, asked_at, answers, top, p_top, params_version FROM read_answers ORDER BY read_at DESC LIMIT 1").fetchall()
    question, asked_at, answers_json, top, p_top, version = rows[0]
    assert (question, asked_at, top, version) == ("maya.diet", at, one.top, None)
    assert json.loads(answers_json) == one.answers and p_top == pytest.approx(one.p_top)


def test_reads_are_not_logged_when_logging_is_off(small_records):
    with doxa.open(":memory:", log_reads=False) as memory:
        memory.ingest(small_records)
        memory.beliefs(at=datetime(2026, 6, 1))
        assert memory.store.counts()["reads"] == 0


def test_act_flag_follows_the_threshold(small_mem):
    at = datetime(2026, 6, 1)
    b = small_mem.belief("maya.flower", at)
    assert 0.01 < b.p_top < 0.99
    assert small_mem.belief("maya.flower", at, act_at=b.p_top - 0.01).act
    assert not small_mem.belief("maya.flower", at, act_at=b.p_top + 0.01).act


def test_beliefs_of_one_subject(small_mem):
    found = small_mem.beliefs("maya", datetime(2026, 6, 1))
    assert sorted(b.question for b in found) == ["maya.diet", "maya.flower"]
    assert all(b.subject == "maya" for b in found)


def test_unknown_question_or_subject_is_a_clear_error(small_mem):
    with pytest.raises(StoreError, match=r"no question 'maya\.dite' \(did you mean 'maya\.diet'\?\)"):
        small_mem.belief("maya.dite")
    with pytest.raises(StoreError, match="no subject 'mya'"):
        small_mem.beliefs("mya")


def test_many_beliefs_come_as_a_sequence_that_builds_each_belief_on_demand(small_mem):
    at = datetime(2026, 6, 1)
    found = small_mem.beliefs(at=at)
    one_by_one = [small_mem.belief(b.question, at) for b in found]
    assert len(found) == len(one_by_one) > 1
    assert [b.to_dict() for b in found] == [b.to_dict() for b in one_by_one] == found.to_dicts()
    assert found[-1].to_dict() == found[len(found) - 1].to_dict() and [b.question for b in found[1:3]] == [
        b.question for b in one_by_one[1:3]]
    with pytest.raises(IndexError):
        found[len(found)]
