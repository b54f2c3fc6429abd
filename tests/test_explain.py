"""`explain`: every reading of a question, term by term, with why it counts or does not."""

from __future__ import annotations

import json
import math
from datetime import datetime

import pytest

from doxa.data.errors import StoreError
from reference import hand_likelihood

NOW = datetime(2026, 6, 1)


@pytest.fixture
def explained(small_mem, rec):
    """The small store plus a second reader of m1, a forwarded copy of m2, a settlement and a rejection."""
    small_mem.ingest([
        rec.reading("m1", "maya.diet", {"vegetarian": 0.8, "eats fish": 0.2, "eats meat": 0.0}, reader="a-reader"),
        rec.source("forwards", ["user", "forwards"]),
        rec.message("m2-fwd", "forwards", "2026-03-05", "Fwd: I have started eating fish again, finally!"),
        rec.reading("m2-fwd", "maya.diet", {"vegetarian": 0.4, "eats fish": 0.6, "eats meat": 0.0}),
        rec.settlement("maya.flower", "tulips", "2026-05-01", how="approval"),
        rec.rejection("maya.diet", "eats meat", "2026-05-02"),
    ])
    return small_mem


def terms_by_key(ex):
    return {(t.message, t.reader): t for t in ex.terms}


def test_every_reading_is_a_term_and_ignored_ones_say_why(explained):
    ex = explained.explain("maya.diet", NOW)
    terms = terms_by_key(ex)
    assert set(terms) == {("m1", "a-reader"), ("m1", "reader-1"), ("m2", "reader-1"), ("m2-fwd", "reader-1"),
                          ("n1", "reader-1")}
    counted = sorted(key for key, t in terms.items() if t.ignored is None)
    assert counted == [("m1", "a-reader"), ("m2", "reader-1")]
    assert len(counted) == ex.belief.n_evidence
    assert "assistant" in terms["n1", "reader-1"].ignored
    assert "copy of m2" in terms["m2-fwd", "reader-1"].ignored
    assert "another reader" in terms["m1", "reader-1"].ignored


def test_evidence_after_the_at_time_is_listed_as_ignored(explained):
    ex = explained.explain("maya.diet", datetime(2026, 2, 1))
    terms = terms_by_key(ex)
    assert "after the --at time" in terms["m2", "reader-1"].ignored
    assert terms["m2", "reader-1"].llr_top is None and terms["m2", "reader-1"].weight_left is None
    assert ex.belief.n_evidence == 1


def test_counted_terms_carry_their_trust_log_likelihood_ratio_and_weight_left(explained):
    ex = explained.explain("maya.diet", NOW)
    assert ex.belief.top == "eats fish"
    top = ["vegetarian", "eats fish", "eats meat"].index(ex.belief.top)
    m2 = terms_by_key(ex)["m2", "reader-1"]
    assert (m2.source, m2.source_path, m2.trust, m2.trust_from) == (
        "maya-chat", "person/self/chat/maya-chat", pytest.approx(0.9), "default:person")
    like = hand_likelihood([0.05, 0.9, 0.0], 0.05, 0.0, 0.0, alpha=0.9)
    others = [like[j] for j in range(3) if j != top]
    assert m2.llr_top == pytest.approx(math.log(like[top]) - math.log(sum(others) / len(others)))
    age_days = (NOW - datetime(2026, 3, 1)).days
    assert m2.weight_left == pytest.approx(math.exp(-ex.change_rate_per_day * age_days))
    assert ex.half_life_days == pytest.approx(math.log(2) / ex.change_rate_per_day)
    # a reading for the runner-up pushes against the top answer
    assert terms_by_key(ex)["m1", "a-reader"].llr_top < 0 < m2.llr_top


def test_with_no_change_the_log_likelihood_ratios_add_up_to_the_log_odds(small_mem):
    small_mem.store.publish_params({"kinds": {"flower": {"options": ["lilies", "tulips"], "prior": [1, 1],
                                                         "change_rate": 0.0}}})
    ex = small_mem.explain("maya.flower", NOW)
    assert ex.half_life_days is None and ex.change_rate_per_day == 0.0
    counted = [t for t in ex.terms if t.ignored is None]
    assert len(counted) == 2 and all(t.weight_left == 1.0 for t in counted)
    p_top = ex.belief.p_top
    assert sum(t.llr_top for t in counted) == pytest.approx(math.log(p_top / (1 - p_top)), abs=1e-4)


def test_the_explained_belief_is_the_belief(explained):
    ex = explained.explain("maya.diet", NOW)
    assert ex.belief.to_dict() == explained.belief("maya.diet", NOW).to_dict()
    assert ex.prior == pytest.approx({"vegetarian": 1 / 3, "eats fish": 1 / 3, "eats meat": 1 / 3})
    assert [r["answer"] for r in ex.rejections] == ["eats meat"]
    assert ex.calibration == {"method": "none"}


def test_settlements_are_listed(explained):
    ex = explained.explain("maya.flower", NOW)
    (settled,) = ex.settlements
    assert (settled["answer"], settled["how"], settled["settled_at"]) == ("tulips", "approval", datetime(2026, 5, 1))


def test_the_explanation_is_plain_json(explained):
    document = json.loads(json.dumps(explained.explain("maya.diet", NOW).to_dict()))
    assert set(document) >= {"belief", "prior", "change_rate_per_day", "half_life_days", "terms", "settlements",
                             "rejections", "calibration"}
    term = document["terms"][0]
    assert set(term) >= {"message", "sent_at", "text", "source", "source_path", "trust", "trust_from", "reader",
                         "reader_probs", "llr_top", "weight_left", "ignored"}


def test_explaining_an_unknown_question_is_a_clear_error(small_mem):
    with pytest.raises(StoreError, match="did you mean 'maya.diet'"):
        small_mem.explain("maya.deit")


def test_a_question_with_one_state_has_no_push_and_no_warning():
    """An open question with no value named yet has one state (`unlisted`): its messages push
    toward nothing, and nothing divides by an empty mean."""
    import warnings

    import numpy as np

    from doxa.inference.read.scorer import log_likelihood_ratio
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert log_likelihood_ratio(np.array([0.7]), 0, 1) == 0.0
        assert log_likelihood_ratio(np.array([0.6, 0.2]), 0, 2) == pytest.approx(np.log(3.0))
