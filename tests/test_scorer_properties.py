"""Properties of beliefs over generated small stores (hypothesis), through the public API.

Each example is a store of a few sources, questions, messages, readings, settlements
and rejections at random times; every property is checked with `doxa.open(":memory:")`,
ingest and `beliefs`, as a caller would. The λ = 0 property recomputes the belief by
hand from the formula of docs/design.md §2 / inference/read/scorer.py, with code of its own.

Examples per property: $DOXA_PROPERTY_EXAMPLES (default 12; each example builds one or
two DuckDB stores, ~0.3 s each).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import doxa
import records as R
from doxa.model.independence import FRESH_READINGS
from reference import hand_likelihood, hand_shares, hand_trust

EXAMPLES = int(os.environ.get("DOXA_PROPERTY_EXAMPLES", "12"))
PROPERTY = settings(max_examples=EXAMPLES, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

BASE = datetime(2026, 1, 1)
HORIZON_HOURS = 400 * 24
#: Beliefs are read a day after the last possible event, so the final decay step is never empty.
END = BASE + timedelta(hours=HORIZON_HOURS + 24)
#: Belief answers are rounded to 6 decimals by the API.
ROUNDING = 2e-6

SOURCE_LAYERS = [["person", "self", "chat"], ["person", "self", "social"], ["user", "notes"],
                 ["business", "email", "marketing"], ["family", "chat"], ["web"], ["mystery", "feed"]]
KINDS = ["diet", "home", "mood"]
READERS = ["reader-a", "reader-b"]


def at_hours(hours: int) -> str:
    return (BASE + timedelta(hours=hours)).isoformat()


@dataclass
class Reading:
    message: str
    question: str
    reader: str
    probs: list[float]
    unclear: float
    unrelated: float
    one_off: float


@dataclass
class World:
    """A generated store, as records plus the facts the properties reason with."""

    sources: dict[str, tuple[list[str], float | None]]  # id -> (layers, stated trust)
    questions: dict[str, tuple[str, list[str]]]  # id -> (kind, options)
    messages: dict[str, tuple[str, int, str]]  # id -> (source, hours, text)
    readings: list[Reading]
    settlements: list[tuple[str, str, int]]  # (question, answer, hours)
    rejections: list[tuple[str, str, int]]
    records: list[dict] = field(default_factory=list)

    def build_records(self) -> list[dict]:
        out = [R.subject("p")]
        for sid, (layers, trust) in self.sources.items():
            out.append(R.source(sid, layers, trust))
        for qid, (kind, options) in self.questions.items():
            out.append(R.question(qid, options, kind=kind, subject="p"))
        for mid, (sid, hours, text) in self.messages.items():
            out.append(R.message(mid, sid, at_hours(hours), text))
        for r in self.readings:
            options = self.questions[r.question][1]
            out.append(R.reading(r.message, r.question, dict(zip(options, r.probs)), reader=r.reader,
                                 unclear=r.unclear, unrelated=r.unrelated, one_off=r.one_off))
        for qid, answer, hours in self.settlements:
            out.append(R.settlement(qid, answer, at_hours(hours)))
        for qid, answer, hours in self.rejections:
            out.append(R.rejection(qid, answer, at_hours(hours)))
        return out


@st.composite
def reading_masses(draw, k: int) -> tuple[list[float], float, float, float]:
    """probs over k options plus unclear and unrelated, summing to 1; and one_off."""
    weights = draw(st.lists(st.integers(0, 20), min_size=k + 2, max_size=k + 2).filter(lambda w: sum(w) > 0))
    total = sum(weights)
    masses = [w / total for w in weights]
    return masses[:k], masses[k], masses[k + 1], draw(st.integers(0, 10)) / 10


@st.composite
def worlds(draw, settlements: bool = True, rejections: bool = True) -> World:
    n_sources = draw(st.integers(1, 4))
    sources = {}
    for s in range(n_sources):
        layers = draw(st.sampled_from(SOURCE_LAYERS))
        trust = draw(st.none() | st.floats(0.05, 0.99).map(lambda x: round(x, 3)))
        sources[f"src{s}"] = (layers, trust)
    questions = {}
    for q in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(KINDS))
        k = draw(st.integers(2, 4))
        questions[f"p.q{q}"] = (kind, [f"{kind}-{j}" for j in range(k)])
    messages, readings = {}, []
    for m in range(draw(st.integers(0, 8))):
        mid = f"m{m}"
        # some in the first days: messages close together make campaigns and repetitions
        hours = draw(st.integers(0, HORIZON_HOURS) | st.integers(0, 96))
        messages[mid] = (draw(st.sampled_from(sorted(sources))), hours,
                         f"message number {m}, with enough words to be itself")
        for qid in draw(st.sets(st.sampled_from(sorted(questions)))):
            readers = draw(st.sampled_from([READERS[:1], READERS[1:], READERS]))
            for reader in readers:
                probs, unclear, unrelated, one_off = draw(reading_masses(len(questions[qid][1])))
                readings.append(Reading(mid, qid, reader, probs, unclear, unrelated, one_off))
    settled, rejected = [], []
    if settlements:
        for _ in range(draw(st.integers(0, 2))):
            qid = draw(st.sampled_from(sorted(questions)))
            settled.append((qid, draw(st.sampled_from(questions[qid][1])), draw(st.integers(0, HORIZON_HOURS))))
    if rejections:
        for _ in range(draw(st.integers(0, 2))):
            qid = draw(st.sampled_from(sorted(questions)))
            taken = {a for q, a, _ in settled + rejected if q == qid}
            free = [o for o in questions[qid][1] if o not in taken]
            if len(free) >= 2:  # leave at least one answer standing
                rejected.append((qid, draw(st.sampled_from(free)), draw(st.integers(0, HORIZON_HOURS))))
    # settlements at one moment must agree, as the primary key (question, time, answer) allows both
    settled = list({(q, h): (q, a, h) for q, a, h in settled}.values())
    world = World(sources, questions, messages, readings, settled, rejected)
    world.records = world.build_records()
    return world


def fresh(records: list[dict] | None = None):
    memory = doxa.open(":memory:")
    if records:
        memory.ingest(records)
    return memory


def answers_by_question(memory, at: datetime) -> dict[str, dict[str, float]]:
    return {b.question: b.answers for b in memory.beliefs(at=at)}


def assert_same_beliefs(a: dict, b: dict, tolerance: float = ROUNDING) -> None:
    assert a.keys() == b.keys()
    for qid in a:
        assert a[qid].keys() == b[qid].keys()
        for option in a[qid]:
            assert abs(a[qid][option] - b[qid][option]) <= tolerance, (qid, a[qid], b[qid])


# ---------------------------------------------------------------------------- properties
@PROPERTY
@given(world=worlds(), hours=st.integers(0, HORIZON_HOURS + 24))
def test_answers_are_probabilities_that_sum_to_one(world, hours):
    with fresh(world.records) as memory:
        at = BASE + timedelta(hours=hours)
        found = memory.beliefs(at=at)
        assert {b.question for b in found} == set(world.questions)
        for b in found:
            assert list(b.answers) == world.questions[b.question][1]
            assert all(0.0 <= p <= 1.0 for p in b.answers.values())
            assert abs(sum(b.answers.values()) - 1.0) <= ROUNDING
            assert b.answers[b.top] == max(b.answers.values())
            # one question alone (the `doxa belief` path) reads the same as all at once
            assert b.answers == memory.belief(b.question, at).answers


@PROPERTY
@given(world=worlds(), data=st.data())
def test_ingest_order_and_batching_do_not_change_beliefs(world, data):
    shuffled = data.draw(st.permutations(world.records), label="order")
    # definitions must be stored before a later file uses them; within a file any order goes
    rank = {"subject": 0, "source": 1, "question": 1, "message": 2}
    staged = sorted(shuffled, key=lambda r: rank.get(r["type"], 3))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(staged)), max_size=2), label="cuts"))
    batches = [staged[a:b] for a, b in zip([0, *cuts], [*cuts, len(staged)])]
    with fresh(world.records) as in_order, fresh() as reordered:
        for batch in batches:
            batch = data.draw(st.permutations(batch), label="batch order")
            reordered.ingest_lines(R.to_lines(batch))
        assert R.snapshot(in_order.store)["counts"] == R.snapshot(reordered.store)["counts"]
        for at in (END, BASE + timedelta(hours=data.draw(st.integers(0, HORIZON_HOURS), label="at"))):
            assert_same_beliefs(answers_by_question(in_order, at), answers_by_question(reordered, at))


@st.composite
def copy_text(draw, text: str) -> str:
    return draw(st.sampled_from([text, f"Fwd: {text}", f"RE: fwd: {text}", f"> {text}", text.upper(),
                                 "  " + text.replace(" ", "\n") + "  "]))


@PROPERTY
@given(world=worlds(), data=st.data())
def test_a_later_copy_of_a_message_changes_no_belief(world, data):
    read = {}
    for r in world.readings:
        read.setdefault(r.message, set()).add(r.question)
    assume(read)
    extra = [R.source("forwarder", ["user", "forwards"], trust=0.99)]
    originals = data.draw(st.lists(st.sampled_from(sorted(read)), min_size=1, max_size=4), label="copied")
    for n, original in enumerate(originals):
        _source, hours, text = world.messages[original]
        copy_id = f"copy{n}"
        source = data.draw(st.sampled_from(["forwarder", *sorted(world.sources)]), label="copy source")
        later = hours + data.draw(st.integers(1, 2000), label="hours later")
        extra.append(R.message(copy_id, source, at_hours(later), data.draw(copy_text(text), label="text")))
        for qid in sorted(read[original]):  # the questions the original was read for, nothing new
            probs, unclear, unrelated, one_off = data.draw(reading_masses(len(world.questions[qid][1])))
            extra.append(R.reading(copy_id, qid, dict(zip(world.questions[qid][1], probs)),
                                   reader=data.draw(st.sampled_from(READERS + ["reader-0"])),
                                   unclear=unclear, unrelated=unrelated, one_off=one_off))
    with fresh(world.records) as memory:
        at = END
        before = answers_by_question(memory, at)
        added = memory.ingest(extra)
        assert added["messages"] == len(originals)
        assert_same_beliefs(answers_by_question(memory, at), before, tolerance=0.0)


@PROPERTY
@given(world=worlds(), data=st.data())
def test_assistant_notes_change_no_belief(world, data):
    texts = [text for _s, _h, text in world.messages.values()] + ["Assistant note: the answer is settled now."]
    extra = [R.source("aide", ["assistant", "notes"], trust=0.99)]
    for n in range(data.draw(st.integers(1, 4), label="notes")):
        note = f"note{n}"
        # any time, even before the message it repeats; any question
        text = data.draw(st.sampled_from(texts) | st.just(f"assistant note {n}: my own summary"), label="text")
        extra.append(R.message(note, "aide", at_hours(data.draw(st.integers(0, HORIZON_HOURS))), text))
        for qid in data.draw(st.sets(st.sampled_from(sorted(world.questions)), min_size=1), label="questions"):
            probs, unclear, unrelated, one_off = data.draw(reading_masses(len(world.questions[qid][1])))
            extra.append(R.reading(note, qid, dict(zip(world.questions[qid][1], probs)), reader="reader-0",
                                   unclear=unclear, unrelated=unrelated, one_off=one_off))
    with fresh(world.records) as memory:
        at = BASE + timedelta(hours=data.draw(st.integers(0, HORIZON_HOURS + 24), label="at"))
        before = answers_by_question(memory, at)
        memory.ingest(extra)
        assert_same_beliefs(answers_by_question(memory, at), before, tolerance=0.0)


@PROPERTY
@given(world=worlds(), data=st.data())
def test_a_rejected_answer_reads_zero(world, data):
    qid = data.draw(st.sampled_from(sorted(world.questions)), label="question")
    options = world.questions[qid][1]
    out = {a for q, a, _ in world.rejections if q == qid}
    free = [o for o in options if o not in out]
    assume(len(free) >= 2)
    answer = data.draw(st.sampled_from(free), label="rejected")
    hours = data.draw(st.integers(0, HORIZON_HOURS), label="when")
    with fresh(world.records) as memory:
        memory.ingest([R.rejection(qid, answer, at_hours(hours))])
        b = memory.belief(qid, END)
        assert b.answers[answer] == 0.0
        assert answer in b.rejected and b.top != answer
        assert abs(sum(b.answers.values()) - 1.0) <= ROUNDING
        # before the rejection was made, it did not apply
        if hours > 0:
            assert answer not in memory.belief(qid, BASE + timedelta(hours=hours - 1)).rejected


@PROPERTY
@given(world=worlds(), data=st.data())
def test_evidence_after_the_at_time_is_ignored(world, data):
    cut = data.draw(st.integers(0, HORIZON_HOURS), label="cut")
    late_messages = {mid for mid, (_s, hours, _t) in world.messages.items() if hours > cut}

    def is_late(r: dict) -> bool:
        if r["type"] == "message":
            return r["id"] in late_messages
        if r["type"] == "reading":
            return r["message"] in late_messages
        if r["type"] in ("settlement", "rejection"):
            return r["at"] > at_hours(cut)
        return False

    early = [r for r in world.records if not is_late(r)]
    late = [r for r in world.records if is_late(r)]
    at = BASE + timedelta(hours=cut)
    with fresh(early) as memory:
        before = answers_by_question(memory, at)
        if late:
            memory.ingest(late)
        assert_same_beliefs(answers_by_question(memory, at), before, tolerance=1e-12)


@PROPERTY
@given(world=worlds(), data=st.data())
def test_a_reading_that_favours_an_answer_never_lowers_it(world, data):
    qid = data.draw(st.sampled_from(sorted(world.questions)), label="question")
    options = world.questions[qid][1]
    k = len(options)
    favoured = data.draw(st.integers(0, k - 1), label="favoured")
    probs, unclear, unrelated, one_off = data.draw(reading_masses(k), label="reading")
    # make the favoured answer the reader's top (ties allowed): move the largest mass onto it
    top = max(range(k), key=lambda j: probs[j])
    probs[favoured], probs[top] = probs[top], probs[favoured]
    trust = data.draw(st.floats(1.0 / k + 1e-3, 0.99), label="trust")
    hours = data.draw(st.integers(0, HORIZON_HOURS), label="when")
    at = BASE + timedelta(hours=hours)
    # The new source has a history (older readings on a question of its own), so its reading joins
    # no campaign of fresh accounts: a campaign reads as about one reading of its members' strength,
    # so by design a weak fresh echo of a fresh claim can weaken it (tests/test_independence.py).
    history = [R.question("new-source.history", ["a", "b"], subject="p")]
    for i in range(FRESH_READINGS + 1):
        history += [R.message(f"history-{i}", "new-source", at_hours(0), f"an older message, number {i}"),
                    R.reading(f"history-{i}", "new-source.history", {"a": 1.0, "b": 0.0})]
    with fresh(world.records) as memory:
        before = memory.belief(qid, at).answers[options[favoured]]
        memory.ingest([
            R.source("new-source", data.draw(st.sampled_from(SOURCE_LAYERS), label="layers"), trust=trust),
            *history,
            R.message("new-message", "new-source", at_hours(hours), "a brand new message about the question"),
            R.reading("new-message", qid, dict(zip(options, probs)), reader=data.draw(st.sampled_from(READERS)),
                      unclear=unclear, unrelated=unrelated, one_off=one_off),
        ])
        after = memory.belief(qid, at).answers[options[favoured]]
        assert after >= before - ROUNDING / 2


# ---------------------------------------------------------------------------- λ = 0, by hand
@PROPERTY
@given(world=worlds(settlements=False), data=st.data())
def test_without_change_the_belief_is_the_prior_plus_the_sum_of_log_likelihood_ratios(world, data):
    # a parameter document the test controls entirely: priors, trust, reader temperatures, λ = 0
    kinds = {}
    for kind, options in world.questions.values():
        weights = data.draw(st.lists(st.integers(1, 9), min_size=len(options), max_size=len(options)))
        kinds[kind] = {"options": options, "prior": weights, "change_rate": 0.0}
    nodes = sorted({"/".join(layers[:d]) for layers, _ in world.sources.values() for d in range(1, len(layers) + 1)}
                   | {"/".join([*layers, sid]) for sid, (layers, _) in world.sources.items()})
    fitted = data.draw(st.dictionaries(st.sampled_from(nodes), st.floats(0.2, 0.98).map(lambda x: round(x, 3)),
                                       max_size=3), label="fitted trust")
    temperatures = {r: data.draw(st.floats(0.5, 2.0).map(lambda x: round(x, 2)), label=r) for r in READERS}
    by_top = {"person": 0.85, "user": 0.7, "business": 0.45}
    body = {
        "trust": {node: {"mean": mean, "lo": mean, "hi": mean, "n": 1} for node, mean in fitted.items()},
        "kinds": kinds,
        "readers": {r: {"temperature": t} for r, t in temperatures.items()},
        "calibration": {"method": "none"},
        "defaults": {"change_rate": 0.0, "trust": 0.6, "trust_by_top_layer": by_top},
    }
    at_h = data.draw(st.integers(0, HORIZON_HOURS + 24), label="at")
    at = BASE + timedelta(hours=at_h)

    with fresh(world.records) as memory:
        version = memory.store.publish_params(body)
        found = {b.question: b for b in memory.beliefs(at=at)}

    # a source's history: its messages with a reading up to the read's time
    history: dict[str, set[str]] = {}
    for r in world.readings:
        sid, hours, _ = world.messages[r.message]
        if hours <= at_h:
            history.setdefault(sid, set()).add(r.message)
    for qid, (kind, options) in world.questions.items():
        k = len(options)
        prior = kinds[kind]["prior"] if kinds[kind]["options"] == options else [1] * k
        log_odds = [math.log(prior[j] / sum(prior)) for j in range(k)]
        # the reading that counts per message: the first reader by name (texts are all distinct)
        counted: dict[str, Reading] = {}
        for r in sorted(world.readings, key=lambda r: r.reader):
            if r.question == qid and world.messages[r.message][1] <= at_h:
                counted.setdefault(r.message, r)
        shares = hand_shares([{"question": qid, "source": world.messages[r.message][0],
                               "layer": "/".join(world.sources[world.messages[r.message][0]][0]),
                               "day": world.messages[r.message][1] / 24.0, "probs": r.probs,
                               "unclear": r.unclear, "unrelated": r.unrelated, "one_off": r.one_off,
                               "history": len(history[world.messages[r.message][0]])} for r in counted.values()])
        for r, share in zip(counted.values(), shares):
            sid = world.messages[r.message][0]
            layers, stated = world.sources[sid]
            alpha = hand_trust("/".join([*layers, sid]), stated, fitted, by_top, 0.6)
            like = hand_likelihood(r.probs, r.unclear, r.unrelated, r.one_off, alpha, temperatures[r.reader], share)
            for j in range(k):
                log_odds[j] += math.log(like[j])
        rejected = {a for q, a, h in world.rejections if q == qid and h <= at_h}
        weights = [0.0 if options[j] in rejected else math.exp(log_odds[j] - max(log_odds)) for j in range(k)]
        expected = {o: w / sum(weights) for o, w in zip(options, weights)}

        got = found[qid]
        assert got.params_version == version
        for option in options:
            assert abs(got.answers[option] - expected[option]) <= ROUNDING, (qid, got.answers, expected)
