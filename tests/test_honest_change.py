"""An honest change told by new sources is followed; a campaign of fresh accounts is still resisted
(model/independence.py, issue 36 item 7); the world's ``change_reports`` knob generates what it says."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pytest

from doxa.data.evidence import FRESH_READINGS
from doxa.data.store import Store
from doxa.inference.evaluation.world import generate_world
from doxa.inference.evaluation.world_config import WorldConfig, WorldConfigError
from doxa.inference.read import scorer
from doxa.model.independence import independent_share
from reference import bayes, decay, hand_likelihood, hand_shares

OPTIONS = ["a", "b", "c"]
TRUST, RATE = 0.8, 0.005  # a home or a job: a half-life of about 140 days
PARAMS = {"kinds": {"k": {"options": OPTIONS, "prior": [1 / 3] * 3, "change_rate": RATE}},
          "defaults": {"trust": TRUST, "trust_by_top_layer": {}, "change_rate": RATE},
          "calibration": {"method": "none"}}
START = datetime(2024, 1, 1)
#: Sources with a history (more than FRESH_READINGS messages, on questions of their own) that
#: establish the old answer, and the days they state it: three readings at trust 0.8 (each a
#: likelihood ratio of 0.8 / 0.1 = 8) put it at odds of about 100 : 1 against each other answer
#: by day 40 (the decay toward the prior takes some), so two independent reports (8² = 64) do
#: not turn it and three (8³ = 512) do.
ESTABLISHED = [("friend-0", ["friend"], 20.0), ("friend-1", ["friend"], 27.0), ("friend-2", ["friend"], 34.0)]
VENUES = [["family", "sibling"], ["work", "colleague"], ["friend", "close"]]


def story(reports: list[tuple[str, list[str], float, str]]) -> tuple[list[dict], list[dict]]:
    """Records of one question ``sam.q`` (options a, b, c): ESTABLISHED state ``a``, then ``reports``
    (source, layers, day, answer); and the hand view of every reading of ``sam.q``."""
    records = [{"type": "subject", "id": "sam", "name": "Sam"},
               {"type": "question", "id": "sam.q", "subject": "sam", "kind": "k", "text": "where?",
                "shape": "choice", "options": OPTIONS}]
    hand: list[dict] = []
    sources: dict[str, int] = {}
    n = 0

    def say(source, layers, day, question, answer):
        nonlocal n
        n += 1
        if source not in sources:
            sources[source] = 0
            records.append({"type": "source", "id": source, "layers": layers})
        sources[source] += 1
        records.append({"type": "message", "id": f"m{n}", "source": source, "text": f"{source} says {answer} ({n})",
                        "sent_at": (START + timedelta(days=day)).strftime("%Y-%m-%dT%H:%M:%SZ")})
        records.append({"type": "reading", "message": f"m{n}", "question": question, "reader": "r",
                        "probs": {o: float(o == answer) for o in OPTIONS}, "unclear": 0.0, "unrelated": 0.0,
                        "one_off": 0.0})
        if question == "sam.q":
            hand.append({"question": question, "source": source, "layer": "/".join(layers), "day": day,
                         "probs": [float(o == answer) for o in OPTIONS]})

    for source, layers, _ in ESTABLISHED:  # each has spoken before, about questions of its own
        for j in range(FRESH_READINGS + 1):
            records.append({"type": "question", "id": f"sam.{source}.{j}", "subject": "sam", "kind": "other",
                            "text": f"{source} {j}?", "shape": "choice", "options": OPTIONS})
            say(source, layers, 0.5, f"sam.{source}.{j}", "c")
    for source, layers, day in ESTABLISHED:
        say(source, layers, day, "sam.q", "a")
    for source, layers, day, answer in reports:
        say(source, layers, day, "sam.q", answer)
    for r in hand:
        r["history"] = sources[r["source"]]
    return records, hand


def read(records: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """(independent shares of sam.q's readings, its belief just after its last reading)."""
    store = Store.memory()
    store.ingest_records(records)
    evidence = store.load_evidence(None, ["sam.q"])
    return independent_share(evidence), scorer.score(evidence, PARAMS, at=float(evidence.t.max())).probs[0, :3]


def by_hand(hand: list[dict], discount: bool = True) -> list[float]:
    """The filter of docs/design.md §2 written out: decay to each reading, Bayes with its share
    (``discount=False``: every share 1, the exact posterior of a story of independent readings)."""
    belief, prior, last = [1 / 3] * 3, [1 / 3] * 3, None
    for r, share in zip(hand, hand_shares(hand) if discount else [1.0] * len(hand)):
        if last is not None:
            belief = decay(belief, prior, RATE, r["day"] - last)
        belief = bayes(belief, hand_likelihood(r["probs"], 0.0, 0.0, 0.0, TRUST, share=share))
        last = r["day"]
    return belief


def followed_after(make, answer: str = "b", most: int = 8) -> tuple[int, int]:
    """Reports needed before ``answer`` is on top, by the scorer and by the exact posterior written
    out by hand (``most + 1``: not within ``most``)."""
    model = exact = most + 1
    for n in range(most, 0, -1):
        records, hand = story(make(n))
        if OPTIONS[int(np.argmax(read(records)[1]))] == answer:
            model = n
        if OPTIONS[int(np.argmax(by_hand(hand, discount=False)))] == answer:
            exact = n
    return model, exact


def test_fresh_reporters_of_distinct_venues_on_consecutive_days_are_followed():
    reports = [(f"new-{i}", VENUES[i], 40.0 + i, "b") for i in range(3)]
    records, hand = story(reports)
    shares, belief = read(records)
    np.testing.assert_allclose(shares, 1.0)  # three people in three venues: three authors
    np.testing.assert_allclose(belief, by_hand(hand), atol=1e-9)
    assert OPTIONS[int(np.argmax(belief))] == "b"
    # as fast as the exact posterior of a story in which they are independent (which they are)
    model, exact = followed_after(lambda n: [(f"new-{i}", VENUES[i % 3] + [str(i)], 40.0 + i, "b")
                                             for i in range(n)])
    assert model == exact == 3


def test_fresh_reporters_in_one_venue_over_consecutive_days_read_as_one_burst():
    reports = [(f"new-{i}", ["web", "forum"], 40.0 + i, "b") for i in range(3)]
    records, hand = story(reports)
    shares, belief = read(records)
    np.testing.assert_allclose(shares[-3:], 1 / 3)  # chained within two days, one layer: one author
    np.testing.assert_allclose(belief, by_hand(hand), atol=1e-9)
    assert OPTIONS[int(np.argmax(belief))] == "a"
    model, exact = followed_after(lambda n: [(f"new-{i}", ["web", "forum"], 40.0 + i, "b") for i in range(n)])
    assert exact == 3 and model > 8  # what the layer key gives up (model/independence.py)


def test_a_campaign_of_fresh_accounts_in_one_layer_is_still_resisted():
    burst = [(f"fresh-{i}", ["friend", "close", "chat"], 40.0 + i / 1440, "b") for i in range(6)]
    after = [("friend-0", ["friend"], 45.0, "a")]  # an established source contradicts it afterwards
    records, hand = story(burst)
    shares, belief = read(records)
    np.testing.assert_allclose(shares[-6:], 1 / 6)
    np.testing.assert_allclose(belief, by_hand(hand), atol=1e-9)
    assert OPTIONS[int(np.argmax(belief))] == "a"  # six accounts in a burst move it about as far as one
    _, later = read(story(burst + [(s, layers, d, a) for s, layers, d, a in after])[0])
    assert later[0] > belief[0]


def test_the_layer_is_what_tells_a_campaign_from_news():
    """What the model gives up, as documented: the same six fresh accounts spread over six layers
    are six authors (module doc of model/independence.py)."""
    spread = [(f"fresh-{i}", ["venue", str(i)], 40.0 + i / 1440, "b") for i in range(6)]
    shares, belief = read(story(spread)[0])
    np.testing.assert_allclose(shares[-6:], 1.0)
    assert OPTIONS[int(np.argmax(belief))] == "b"


# ---------------------------------------------------------------------------- the world knob
KNOB = {"reporters": 3, "delay_days": 0.5, "spacing_days": 1.0, "kinds": ["home_city", "employer", "diet"]}


@pytest.fixture(scope="module")
def told():
    base = WorldConfig.preset("tiny")
    return generate_world(base), generate_world(base.with_overrides(change_reports=KNOB))


def test_the_knob_reports_every_change_of_its_kinds_with_new_sources_a_day_apart(told):
    plain, world = told
    truth = world.truth
    expected = []
    for qid, info in truth.questions.items():
        if info["kind"] not in KNOB["kinds"]:
            continue
        previous = truth.initial[qid]
        for day, value in zip(truth.change_times[qid].tolist(), truth.change_values[qid].tolist()):
            if value != previous and day + KNOB["delay_days"] < world.end_day:
                expected.append((qid, round(day, 6), info["options"][value]))
            previous = value
    got = [(r.question, round(r.day, 6), r.option) for r in world.change_reports]
    assert sorted(got) == sorted(expected) and got
    senders: dict[str, list[str]] = {}
    messages = {r["id"]: r for r in world.records if r["type"] == "message"}
    for m in messages.values():
        senders.setdefault(m["source"], []).append(m["id"])
    layers = {r["id"]: tuple(r["layers"]) for r in world.records if r["type"] == "source"}
    for report in world.change_reports:
        offsets = np.array(report.days) - report.day
        np.testing.assert_allclose(offsets, 0.5 + np.arange(len(offsets)), atol=1 / 86400)
        assert len(offsets) == KNOB["reporters"] or report.days[-1] + 1.0 >= world.end_day
        for source, message in zip(report.sources, report.messages):
            assert senders[source] == [message]  # a new source: this one message is all it ever sends
            assert messages[message]["source"] == source
        assert len({layers[s] for s in report.sources}) == len(report.sources)  # venues: distinct
    # nothing else moved: the world without the knob is this one less the reports
    told_ids = {m for r in world.change_reports for m in r.messages} | {s for r in world.change_reports
                                                                       for s in r.sources}
    rest = [r for r in world.records if r.get("id") not in told_ids and r.get("message") not in told_ids]
    assert rest == plain.records


def test_the_reports_are_readings_of_the_story(told):
    _, world = told
    rows = world.truth.readings
    mine = rows.role == "change_report"
    ids = {m for r in world.change_reports for m in r.messages}
    assert set(rows.message[mine].tolist()) == ids
    by_message = {m: r for r in world.change_reports for m in r.messages}
    for message, answer, n_options in zip(rows.message[mine].tolist(), rows.answer[mine].tolist(),
                                          rows.n_options[mine].tolist()):
        report = by_message[message]
        options = world.truth.questions[report.question]["options"]
        assert len(options) == n_options
        later = world.truth.change_times[report.question]
        if not np.any((later > report.day + 1e-9) & (later <= report.days[-1])):
            assert options[answer] == report.option  # the truth they report on is the new value
    store = Store.memory()
    store.ingest_records(world.records)
    evidence = store.load_evidence(None)
    fresh = np.isin(evidence.sources.ids.astype(str), [s for r in world.change_reports for s in r.sources])
    assert fresh.any() and np.all(np.asarray(evidence.sources.readings)[fresh] == 1)


def test_reporters_state_the_truth_at_the_storys_rate():
    """A reporter is any leaf of its group: it states the truth with probability
    ``(u + (1-u)o)/K + (1-u)(1-o)α`` (docs/world.md, the story), its α drawn around its group's."""
    world = generate_world(WorldConfig.preset("tiny").with_overrides(change_reports={"reporters": 3}))
    rows = world.truth.readings
    mine = rows.role == "change_report"
    u, o, alpha, k = rows.u[mine], rows.o[mine], rows.alpha[mine], rows.n_options[mine]
    expected = (u + (1 - u) * o) / k + (1 - u) * (1 - o) * alpha
    hit = rows.stated[mine] == rows.answer[mine]
    assert mine.sum() > 300
    assert abs(hit.mean() - expected.mean()) < 4 * np.sqrt(np.sum(expected * (1 - expected))) / mine.sum()
    groups = {tuple(g.layers): g for g in world.config.sources.groups}
    for path, a in zip(rows.path[mine].tolist()[:50], alpha[:50].tolist()):
        node = world.truth.node_trust[path.rsplit("/", 1)[0]]
        assert tuple(path.split("/")[:-1]) in groups and abs(np.log(a / (1 - a)) - np.log(node / (1 - node))) < 3


def test_one_venue_puts_every_reporter_of_a_change_in_one_group():
    world = generate_world(WorldConfig.preset("tiny").with_overrides(change_reports={**KNOB, "venues": "one"}))
    layers = {r["id"]: tuple(r["layers"]) for r in world.records if r["type"] == "source"}
    assert world.change_reports
    assert all(len({layers[s] for s in r.sources}) == 1 for r in world.change_reports)


def test_knob_errors_name_the_field():
    with pytest.raises(WorldConfigError, match="change_reports.kinds"):
        WorldConfig.preset("tiny").with_overrides(change_reports={"kinds": ["no_such_kind"]})
    with pytest.raises(WorldConfigError, match="change_reports.reporters"):
        WorldConfig.preset("tiny").with_overrides(change_reports={"reporters": 0})
