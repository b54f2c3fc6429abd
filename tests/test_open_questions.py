"""Open (value) questions read through the store, against a hand computation (docs/design.md §2,
"Open questions: answers that are values").

The hand computation below is the filter of the design written out with plain floats, over the
question's current states (its values, then ``unlisted``), under the default parameters of a
store that was never trained: trust 0.9 for a ``person`` source and 0.8 for ``family``, a
half-life of two years, θ = 1, no calibration map. The base rates grow as the evidence names
values (doxa.model.named_values): before a step, ``m_j`` is the largest ``r̃_j w`` of an earlier
reading that names value ``j`` (1 after a settlement of it), and with ``M = Σ m_j`` the base rates
are ``m_j/(M+θ) + θ/(M+θ)·(1-m_j)/(n-M+1)`` for value ``j`` and ``θ/(M+θ)/(n-M+1)`` unlisted. Messages are at least five days apart, so no reading shares its weight with
another (model/independence.py).
"""

from __future__ import annotations

import math

import pytest

import doxa
from doxa.data.errors import IngestError
from doxa.inference.read.params import DEFAULT_CHANGE_RATE

PERSON, FAMILY = 0.9, 0.8
DAY0 = "2026-01-01"


def day(n: float) -> str:
    from datetime import date, timedelta

    return (date.fromisoformat(DAY0) + timedelta(days=n)).isoformat()


def base_rates(m: list[float], n_states: int, theta: float = 1.0) -> list[float]:
    named = sum(m)
    fresh = theta / (named + theta) / (n_states - named)
    return [mj / (named + theta) + fresh * (1 - mj) for mj in m] + [fresh]


def by_hand(n_states: int, events: list[tuple], at: float) -> list[float]:
    """The forward filter of the design with plain floats. ``events``: (day, "reading", (trust,
    r̃ over the states, informative share w[, which values it names])) or (day, "settlement", state
    index), in time order; a reading names every value unless it says otherwise."""
    m = [0.0] * (n_states - 1)
    belief, last = base_rates(m, n_states), None
    for t, what, payload in events:
        prior = base_rates(m, n_states)
        if last is not None:
            rho = math.exp(-DEFAULT_CHANGE_RATE * (t - last))
            belief = [rho * b + (1 - rho) * p for b, p in zip(belief, prior)]
        else:
            belief = prior
        if what == "settlement":
            like = [1.0 if j == payload else 0.0 for j in range(n_states)]
            if payload < n_states - 1:
                m[payload] = 1.0
        else:
            trust, tempered, w, *names = payload
            a = max(trust, 1.0 / n_states)
            like = [(1 - w) / n_states + w * (a * r + (1 - a) * (1 - r) / (n_states - 1)) for r in tempered]
            named = names[0] if names else [True] * (n_states - 1)
            m = [max(mj, tempered[j] * w) if named[j] else mj for j, mj in enumerate(m)]
        belief = [b * x for b, x in zip(belief, like)]
        total = sum(belief)
        belief = [b / total for b in belief]
        last = t
    rho = math.exp(-DEFAULT_CHANGE_RATE * (at - last))
    return [rho * b + (1 - rho) * p for b, p in zip(belief, base_rates(m, n_states))]


def base_records(options: list[str]) -> list[dict]:
    return [
        {"type": "subject", "id": "maya", "name": "Maya"},
        {"type": "source", "id": "maya-chat", "layers": ["person", "self", "chat"]},
        {"type": "source", "id": "sam-chat", "layers": ["family", "partner", "chat"]},
        {"type": "question", "id": "maya.home", "subject": "maya", "kind": "home_address",
         "text": "Where does Maya live?", "open": True, "options": options},
    ]


def message(mid: str, n: float, text: str, source: str = "maya-chat") -> dict:
    return {"type": "message", "id": mid, "source": source, "sent_at": day(n), "text": text}


def reading(mid: str, probs: dict[str, float], unlisted: float, unclear: float = 0.0) -> dict:
    return {"type": "reading", "message": mid, "question": "maya.home", "reader": "r1", "probs": probs,
            "unlisted": unlisted, "unclear": unclear}


def belief(mem, n: float) -> dict[str, float]:
    return mem.belief("maya.home", at=day(n)).answers


@pytest.fixture
def three_readings_then_a_value():
    """Three readings of a question listing one address; then a second address is added."""
    mem = doxa.open(":memory:")
    mem.ingest(base_records(["12 Elm Street"]) + [
        message("m1", 0, "Home at 12 Elm Street"), reading("m1", {"12 Elm Street": 0.9}, 0.1),
        message("m2", 10, "Still on Elm"), reading("m2", {"12 Elm Street": 0.8}, 0.2),
        message("m3", 20, "Packing boxes, new place soon"), reading("m3", {"12 Elm Street": 0.3}, 0.7),
    ])
    return mem


def test_a_value_added_after_three_readings_reads_them_as_naming_none_of_it(three_readings_then_a_value):
    mem = three_readings_then_a_value
    # before: two states, 12 Elm Street and unlisted
    readings = [(0, "reading", (PERSON, [0.9, 0.1], 1.0)), (10, "reading", (PERSON, [0.8, 0.2], 1.0)),
                (20, "reading", (PERSON, [0.3, 0.7], 1.0))]
    expected = by_hand(2, readings, at=24)
    got = belief(mem, 24)
    assert list(got) == ["12 Elm Street", "unlisted"]
    assert got["12 Elm Street"] == pytest.approx(expected[0], abs=2e-6)

    mem.ingest([{"type": "option_added", "question": "maya.home", "option": "5 Oak Lane", "at": day(25),
                         "by": "organizer"}])
    # after: three states; each earlier reading gives 5 Oak Lane its unlisted likelihood (r̃ copied)
    widened = [(t, kind, (trust, [r[0], r[1], r[1]], w, [True, False])) for t, kind, (trust, r, w) in readings]
    expected = by_hand(3, widened, at=24)
    got = belief(mem, 24)
    assert list(got) == ["12 Elm Street", "5 Oak Lane", "unlisted"]
    for value, p in zip(got.values(), expected):
        assert p == pytest.approx(value, abs=2e-6)
    assert got["5 Oak Lane"] == pytest.approx(got["unlisted"], abs=1e-12)  # nothing tells them apart yet

    # a reading that names the new value moves the mass to it
    mem.ingest([message("m4", 30, "We live at 5 Oak Lane now!"),
                        reading("m4", {"12 Elm Street": 0.05, "5 Oak Lane": 0.9}, 0.05)])
    expected = by_hand(3, widened + [(30, "reading", (PERSON, [0.05, 0.9, 0.05], 1.0))], at=31)
    got = belief(mem, 31)
    for value, p in zip(got.values(), expected):
        assert p == pytest.approx(value, abs=2e-6)
    assert max(got, key=got.get) == "5 Oak Lane"


def test_a_settlement_naming_a_new_value_adds_it_and_is_certain_at_its_time(three_readings_then_a_value):
    mem = three_readings_then_a_value
    mem.ingest([{"type": "settlement", "question": "maya.home", "answer": "7 Harbour Road", "at": day(40),
                         "how": "outcome", "note": "the parcel arrived there"}])
    options = mem.store.execute("SELECT options FROM questions WHERE id = 'maya.home'").fetchone()[0]
    assert options == ["12 Elm Street", "7 Harbour Road"]
    named = [True, False]  # the readings came before 7 Harbour Road was listed
    readings = [(0, "reading", (PERSON, [0.9, 0.1, 0.1], 1.0, named)),
                (10, "reading", (PERSON, [0.8, 0.2, 0.2], 1.0, named)),
                (20, "reading", (PERSON, [0.3, 0.7, 0.7], 1.0, named)), (40, "settlement", 1)]
    for later in (0, 365):
        expected = by_hand(3, readings, at=40 + later)
        got = belief(mem, 40 + later)
        assert list(got) == ["12 Elm Street", "7 Harbour Road", "unlisted"]
        for value, p in zip(got.values(), expected):
            assert p == pytest.approx(value, abs=2e-6)
    assert belief(mem, 40)["7 Harbour Road"] == pytest.approx(1.0)
    # a year on, the settled value has faded by exp(-λ·365) toward the base rates its evidence made:
    # 12 Elm Street named at 0.9, 7 Harbour Road settled, so 1/(1.9 + 1) for the latter
    rho = math.exp(-DEFAULT_CHANGE_RATE * 365)
    assert belief(mem, 405)["7 Harbour Road"] == pytest.approx(rho + (1 - rho) / 2.9, abs=2e-6)


def test_unlisted_wins_after_she_moved_with_no_new_address_yet():
    mem = doxa.open(":memory:")
    mem.ingest(base_records(["12 Elm Street"]) + [
        message("m1", 0, "I live at 12 Elm Street"), reading("m1", {"12 Elm Street": 0.95}, 0.05),
        message("m2", 60, "We moved out last week!"), reading("m2", {"12 Elm Street": 0.02}, 0.93, unclear=0.05),
        message("s1", 66, "Maya and I have left Elm Street", source="sam-chat"),
        reading("s1", {"12 Elm Street": 0.1}, 0.9),
    ])
    events = [(0, "reading", (PERSON, [0.95, 0.05], 1.0)),
              (60, "reading", (PERSON, [0.02 / 0.95, 0.93 / 0.95], 0.95)),
              (66, "reading", (FAMILY, [0.1, 0.9], 1.0))]
    expected = by_hand(2, events, at=70)
    got = belief(mem, 70)
    assert got["unlisted"] == pytest.approx(expected[1], abs=2e-6)
    assert max(got, key=got.get) == "unlisted"


def test_closed_questions_refuse_what_open_ones_accept():
    mem = doxa.open(":memory:")
    records = base_records(["12 Elm Street"])
    records[-1] = {**records[-1], "open": False, "options": ["12 Elm Street", "7 Harbour Road"]}
    mem.ingest(records + [message("m1", 0, "12 Elm")])
    with pytest.raises(IngestError, match="7 Harbour Road|options"):
        mem.ingest([{"type": "settlement", "question": "maya.home", "answer": "5 Oak Lane", "at": day(1),
                             "how": "outcome"}])
    with pytest.raises(IngestError, match="unlisted"):
        mem.ingest([reading("m1", {"12 Elm Street": 0.5, "7 Harbour Road": 0.3}, 0.2)])
