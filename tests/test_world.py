"""The generated world: deterministic, valid docs/formats.md records, and drawn from docs/design.md §2 as configured.

Statistical checks compare counts with their sampling distribution (binomial /
Poisson-binomial / Poisson) at |z| < 4.5, so a correct generator fails them with
probability ~1e-5 per check, while a generator that ignored a parameter fails them.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict

import numpy as np
import pytest

from doxa.data import models
from doxa.data.text import normalise_text
from doxa.inference.evaluation.world import World, generate_world
from doxa.inference.evaluation.world_config import WorldConfig, WorldConfigError
from doxa.inference.read import params as parameters

Z = 4.5


@pytest.fixture(scope="module")
def tiny() -> World:
    return generate_world(WorldConfig.preset("tiny"))


@pytest.fixture(scope="module")
def quick() -> World:
    return generate_world(WorldConfig.preset("quick"))


def _z(observed: float, expected: float, variance: float) -> float:
    return (observed - expected) / math.sqrt(max(variance, 1e-12))


# ---------------------------------------------------------------------------- determinism


def test_same_seed_same_records_and_truth(tiny):
    again = generate_world(WorldConfig.preset("tiny"))
    assert again.records == tiny.records
    assert np.array_equal(again.record_days, tiny.record_days)
    assert again.truth.node_trust == tiny.truth.node_trust
    assert again.oracle_params() == tiny.oracle_params()


def test_different_seed_differs(tiny):
    other = generate_world(WorldConfig.preset("tiny").with_overrides(seed=4))
    assert other.records != tiny.records
    assert other.truth.node_trust != tiny.truth.node_trust


# ---------------------------------------------------------------------------- format


def test_every_record_is_valid_formats(tiny):
    """Each record passes the store's record models, and references resolve in stream order."""
    defined: dict[str, set] = defaultdict(set)
    options: dict[str, list[str]] = {}
    source_layers: dict[str, list[str]] = {}
    message_source: dict[str, str] = {}
    for record in tiny.records:
        models.record_adapter.validate_python(record)
        kind = record["type"]
        if kind == "source":
            source_layers[record["id"]] = record["layers"]
        elif kind == "question":
            options[record["id"]] = record["options"]
            assert record["subject"] in defined["subject"]
        elif kind == "relation":
            assert record["from"] in defined["subject"] and record["to"] in defined["subject"]
        elif kind == "message":
            assert record["source"] in source_layers
            message_source[record["id"]] = record["source"]
        elif kind == "reading":
            assert record["message"] in message_source, "a reading follows its message"
            assert list(record["probs"]) == options[record["question"]]
            total = sum(record["probs"].values()) + record["unclear"] + record["unrelated"]
            assert abs(total - 1.0) < 1e-6
            assert 0.0 <= record["one_off"] <= 1.0
        elif kind == "settlement":
            assert record["answer"] in options[record["question"]]
        defined[kind + "s"].add(id(record))
        if "id" in record:
            assert record["id"] not in defined[kind], f"duplicate {kind} id {record['id']}"
            defined[kind].add(record["id"])
    assert {"subjects", "relations", "sources", "questions", "messages", "readings", "settlements"} <= set(defined)
    assert any(layers[0] == "assistant" for layers in source_layers.values())


def test_stream_order_definitions_then_time(tiny):
    days = tiny.record_days
    n_def = tiny.n_definitions
    assert all(r["type"] in ("subject", "relation", "source", "question") for r in tiny.records[:n_def])
    assert all(r["type"] in ("message", "reading", "settlement") for r in tiny.records[n_def:])
    assert np.all(np.diff(days[n_def:]) >= 0)
    for record, day in zip(tiny.records[n_def:], days[n_def:]):
        stamp = record.get("sent_at") or record.get("at")
        if stamp is not None:
            assert tiny.day_of(stamp) == pytest.approx(day, abs=1e-9)
    assert 0.0 <= days[n_def] and days[-1] <= tiny.end_day


def test_replay_by_day_covers_the_stream_once(tiny):
    chunks = list(tiny.iter_days(step=7.0))
    assert [r for _, chunk in chunks for r in chunk] == tiny.records
    assert chunks[-1][0] == tiny.end_day
    position, previous = 0, -math.inf
    for day, chunk in chunks:
        days = tiny.record_days[position : position + len(chunk)]
        assert np.all(days <= day) and (position == 0 or np.all(days > previous))
        position, previous = position + len(chunk), day
    cut = tiny.records_until(30.0)
    assert cut == tiny.records[: len(cut)]
    assert np.all(tiny.record_days[: len(cut)] <= 30.0) and tiny.record_days[len(cut)] > 30.0


def test_texts_unique_except_copies(tiny):
    by_text: dict[str, list[dict]] = defaultdict(list)
    for record in tiny.records:
        if record["type"] == "message":
            by_text[normalise_text(record["text"])].append(record)
    copies = [group for group in by_text.values() if len(group) > 1]
    assert copies, "the world should contain forwarded copies"
    roles = dict(zip(tiny.truth.readings.message.tolist(), tiny.truth.readings.role.tolist()))
    for group in copies:
        original, *later = group
        assert roles.get(original["id"]) != "copy"
        for copy in later:
            assert roles[copy["id"]] == "copy"
            assert copy["source"] != original["source"]
            assert tiny.day_of(copy["sent_at"]) > tiny.day_of(original["sent_at"])
    # a copy's readings are its original's
    readings = defaultdict(list)
    for record in tiny.records:
        if record["type"] == "reading":
            readings[record["message"]].append({k: v for k, v in record.items() if k != "message"})
    for original, *later in copies:
        for copy in later:
            assert readings[copy["id"]] == readings[original["id"]]


def test_truth_rows_align_with_reading_records(tiny):
    rows = [r for r in tiny.records if r["type"] == "reading"]
    t = tiny.truth.readings
    assert len(t) == len(rows)
    assert t.message.tolist() == [r["message"] for r in rows]
    assert t.question.tolist() == [r["question"] for r in rows]
    options = [tiny.truth.questions[q]["options"] for q in t.question]
    assert [opts[a] for opts, a in zip(options, t.answer)] == [
        tiny.truth.answer_at(q, d) for q, d in zip(t.question, t.day)
    ]


def test_settlements_are_the_then_current_truth(tiny):
    settlements = [r for r in tiny.records if r["type"] == "settlement"]
    assert settlements
    for record in settlements:
        assert record["answer"] == tiny.truth.answer_at(record["question"], record["at"])
        assert record["question"] in tiny.truth.settled_questions


def test_ingests_into_the_store(tiny):
    from doxa.data.store import Store

    store = Store.memory()
    store.ingest_records(tiny.records)
    counts = store.counts()
    by_type = Counter(r["type"] for r in tiny.records)
    assert counts["messages"] == by_type["message"]
    assert counts["readings"] == by_type["reading"]
    assert counts["questions"] == by_type["question"]
    store.close()


# ---------------------------------------------------------------------------- the generative story


def test_layer_reliability_matches_the_configured_tree(quick):
    """Per top layer, messages state the truth as often as their sources' α says (docs/design.md §2)."""
    t = quick.truth.readings
    rows = (t.role == "main") & np.isfinite(t.alpha)
    w = t.u + (1.0 - t.u) * t.o
    expected = w / t.n_options + (1.0 - w) * t.alpha
    correct = t.stated == t.answer
    top = np.array([p.split("/", 1)[0] for p in t.path])
    for layer in np.unique(top[rows]):
        sel = rows & (top == layer)
        z = _z(correct[sel].sum(), expected[sel].sum(), (expected[sel] * (1 - expected[sel])).sum())
        assert abs(z) < Z, f"layer {layer}: {correct[sel].sum()} correct, expected {expected[sel].sum():.1f}"
    # the branch to "says nothing lasting" is taken with probability u + (1-u)·o
    sel = t.role == "main"
    assert abs(_z(t.noise[sel].sum(), w[sel].sum(), (w[sel] * (1 - w[sel])).sum())) < Z
    # pinned nodes are exactly the configured reliability
    for node, alpha in quick.config.sources.trust.items():
        assert quick.truth.node_trust[node] == pytest.approx(alpha)


def test_reader_argmax_error_rate_per_layer(quick):
    """Clear, lasting messages: reader's top option vs the truth, as α and the reader's noise predict."""
    t = quick.truth.readings
    recs = [r for r in quick.records if r["type"] == "reading"]
    argmax = np.array([max(range(len(r["probs"])), key=list(r["probs"].values()).__getitem__) for r in recs])
    rng = np.random.default_rng(0)
    # P(reader's argmax = stated option c), by Monte Carlo of r̃ ~ Dirichlet(β + e_c) (τ keeps the argmax)
    hit = {}
    for name, beta in quick.truth.reader_beta.items():
        for k in np.unique(t.n_options):
            shape = np.full(k, beta)
            shape[0] += 1.0
            hit[name, int(k)] = (rng.dirichlet(shape, size=200_000).argmax(axis=1) == 0).mean()
    a = np.array([hit[r, int(k)] for r, k in zip(t.reader, t.n_options)])
    k = t.n_options
    clear = (t.role == "main") & (t.u < 0.1) & (t.o < 0.1) & np.isfinite(t.alpha)
    w = t.u + (1 - t.u) * t.o
    p_stated_true = w / k + (1 - w) * t.alpha
    expected = p_stated_true * a + (1 - p_stated_true) * (1 - a) / (k - 1)
    top = np.array([p.split("/", 1)[0] for p in t.path])
    right = argmax == t.answer
    for layer in np.unique(top[clear]):
        sel = clear & (top == layer)
        z = _z(right[sel].sum(), expected[sel].sum(), (expected[sel] * (1 - expected[sel])).sum())
        assert abs(z) < Z, f"layer {layer}: reader right {right[sel].mean():.3f}, expected {expected[sel].mean():.3f}"


def test_leaf_reliability_is_drawn_around_its_parent(quick):
    """logit α_leaf = logit α_parent + σ_depth · ε with ε ~ N(0, 1)."""
    truth = quick.truth
    sigmas = truth.sigma_by_depth
    z = []
    for node, logit in truth.node_logit.items():
        depth = truth.node_depth[node]
        if node in quick.config.sources.trust or depth == 1:
            continue
        parent = node.rsplit("/", 1)[0]
        z.append((logit - truth.node_logit[parent]) / sigmas[min(depth, len(sigmas)) - 1])
    z = np.array(z)
    n = z.size
    assert n > 300
    assert abs(z.mean()) < Z / math.sqrt(n)
    # the sample variance of n N(0,1) draws has sd ≈ sqrt(2/n)
    assert abs(z.var() - 1.0) < Z * math.sqrt(2.0 / n)


def test_change_events_at_the_configured_rates(quick):
    per_kind_events = Counter()
    per_kind_questions = Counter()
    for qid, info in quick.truth.questions.items():
        per_kind_events[info["kind"]] += len(quick.truth.change_times[qid])
        per_kind_questions[info["kind"]] += 1
    for kind, n_q in per_kind_questions.items():
        expected = quick.truth.change_rate[kind] * quick.truth.days * n_q
        z = _z(per_kind_events[kind], expected, expected)
        assert abs(z) < Z, f"{kind}: {per_kind_events[kind]} changes, expected {expected:.1f}"
    for kind in quick.config.kinds:
        if kind.half_life_days is not None:
            assert quick.truth.change_rate[kind.name] == pytest.approx(math.log(2) / kind.half_life_days)


def test_answers_drawn_from_the_base_rates(quick):
    counts: dict[str, np.ndarray] = {}
    for qid, info in quick.truth.questions.items():
        kind = info["kind"]
        c = counts.setdefault(kind, np.zeros(len(info["options"])))
        c[quick.truth.initial[qid]] += 1
        np.add.at(c, quick.truth.change_values[qid], 1)
    for kind, c in counts.items():
        prior = np.array(quick.truth.prior[kind])
        assert prior.sum() == pytest.approx(1.0)
        n = c.sum()
        for j in range(len(c)):
            assert abs(_z(c[j], n * prior[j], n * prior[j] * (1 - prior[j]))) < Z, (kind, j)


def test_reader_temperature_inverts_to_the_dirichlet_reading(quick):
    """r̃ ∝ (probs/(1-u))^(1/τ) is Dirichlet(β·1 + e_c) given the stated option c.

    Checked on E[r̃_c] (the stated option) and E[log r̃_j] (one other option), whose
    sampling law is taken from Dirichlet draws: τ must be applied as the model inverts it.
    """
    recs = [r for r in quick.records if r["type"] == "reading"]
    t = quick.truth.readings
    groups = defaultdict(list)
    for i, record in enumerate(recs):
        if t.role[i] in ("main", "cross"):
            groups[record["reader"], len(record["probs"])].append(i)
    rng = np.random.default_rng(1)
    checked = 0
    for (reader, k), idx in groups.items():
        if len(idx) < 200:
            continue
        idx = np.array(idx)
        tau = quick.truth.reader_temperature[reader]
        beta = quick.truth.reader_beta[reader]
        probs = np.array([list(recs[i]["probs"].values()) for i in idx])
        with np.errstate(divide="ignore"):
            logs = np.log(probs) / tau
        tilde = np.exp(logs - logs.max(axis=1, keepdims=True))
        tilde /= tilde.sum(axis=1, keepdims=True)
        rows = np.arange(len(idx))
        stated = t.stated[idx]
        other = (stated + 1) % k
        shape = np.full(k, beta)
        shape[0] += 1.0
        draws = rng.dirichlet(shape, size=200_000)
        for observed, reference in ((tilde[rows, stated], draws[:, 0]),
                                    (np.log(tilde[rows, other]), np.log(draws[:, 1]))):
            assert np.isfinite(observed).all()
            z = _z(observed.sum(), len(idx) * reference.mean(), len(idx) * reference.var())
            assert abs(z) < Z, (reader, k, z)
        checked += 1
    assert checked >= 3


def test_assistant_notes_are_present_and_left_out_of_the_oracle(tiny):
    t = tiny.truth.readings
    assert t.assistant.sum() > 0
    assert all(p.startswith("assistant/") for p in t.path[t.assistant])
    assert not any(node.startswith("assistant") for node in tiny.oracle_params()["trust"])


def test_planted_campaigns_in_stream(quick):
    campaigns = quick.truth.campaigns
    assert len(campaigns) == quick.config.planted.campaigns
    t = quick.truth.readings
    planted = t.role == "planted"
    assert planted.sum() == sum(len(c.messages) for c in campaigns)
    # false when the campaign starts; a fast-changing answer may drift into a claim within its window
    assert (t.stated[planted] != t.answer[planted]).mean() > 0.8
    for campaign in campaigns:
        assert campaign.option != campaign.true_option
        assert campaign.true_option == quick.truth.answer_at(campaign.question, campaign.day)


# ---------------------------------------------------------------------------- oracle & planted claims


def test_oracle_params_hold_the_true_parameters(tiny):
    doc = parameters.with_defaults(tiny.oracle_params())
    json.dumps(doc)  # publishable as a JSON body
    for record in tiny.records:
        if record["type"] == "source" and record["layers"][0] != "assistant":
            path = "/".join([*record["layers"], record["id"]])
            if record["id"] in tiny.truth.planted_sources:
                trust, node = parameters.trust_for_source(doc, path, None)
                assert node == "/".join(record["layers"])
            else:
                trust, node = parameters.trust_for_source(doc, path, None)
                assert node == path
                assert trust == pytest.approx(tiny.truth.node_trust[path])
    for kind, options in tiny.truth.kind_options.items():
        assert parameters.kind_prior(doc, kind, options) == pytest.approx(tiny.truth.prior[kind])
        assert parameters.kind_change_rate(doc, kind) == pytest.approx(tiny.truth.change_rate[kind])
    for reader, tau in tiny.truth.reader_temperature.items():
        assert parameters.reader_temperature(doc, reader) == tau


def test_planted_records_are_new_sources_and_grow_with_n(tiny):
    qid = next(iter(tiny.truth.questions))
    options = tiny.truth.questions[qid]["options"]
    day = 100.0
    wrong = next(o for o in options if o != tiny.truth.answer_at(qid, day))
    five = tiny.planted_records(qid, wrong, 5, day)
    eight = tiny.planted_records(qid, wrong, 8, day)
    assert eight[: len(five)] == five
    for record in eight:
        models.record_adapter.validate_python(record)
    sources = [r for r in eight if r["type"] == "source"]
    known = {r["id"] for r in tiny.records if r["type"] == "source"}
    assert len({s["id"] for s in sources}) == 8 and not known & {s["id"] for s in sources}
    assert all(s["layers"] == tiny.config.planted.layers for s in sources)
    messages = [r for r in eight if r["type"] == "message"]
    texts = {normalise_text(r["text"]) for r in tiny.records if r["type"] == "message"}
    assert len({normalise_text(m["text"]) for m in messages}) == 8 and not texts & {normalise_text(m["text"]) for m in messages}
    assert [tiny.day_of(m["sent_at"]) for m in messages] == pytest.approx([day + i / 1440 for i in range(8)], abs=1e-5)
    readings = [r for r in eight if r["type"] == "reading"]
    assert all(r["question"] == qid for r in readings)
    # each claim states the wrong option; the reader mostly reads it so
    tops = [max(r["probs"], key=r["probs"].get) for r in tiny.planted_records(qid, wrong, 60, day) if r["type"] == "reading"]
    assert tops.count(wrong) > 30
    with pytest.raises(ValueError, match="not an option"):
        tiny.planted_records(qid, "nonsense", 1, day)


# ---------------------------------------------------------------------------- config


def test_presets_load_and_have_their_sizes(tiny):
    counts = Counter(r["type"] for r in tiny.records)
    assert counts["subject"] == 30
    assert 1_000 <= counts["reading"] <= 6_000
    quick = WorldConfig.preset("quick")
    default = WorldConfig.preset("default")
    assert quick.kinds == default.kinds and quick.people.count < default.people.count


def test_stated_trust_is_a_noisy_view_of_the_truth(tiny):
    world = generate_world(WorldConfig.preset("tiny").with_overrides(sources={"stated_trust_share": 0.5}))
    stated = [r for r in world.records if r["type"] == "source" and "trust" in r]
    assert stated and all(r["layers"][0] != "assistant" for r in stated)
    for record in stated:
        models.record_adapter.validate_python(record)
    truth = np.array([world.truth.node_trust["/".join([*r["layers"], r["id"]])] for r in stated])
    given = np.array([r["trust"] for r in stated])
    assert np.corrcoef(truth, given)[0, 1] > 0.5


def test_config_errors_name_the_field(tmp_path):
    base = json.loads(WorldConfig.preset("tiny").model_dump_json())
    bad = dict(base, peeple=3)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(WorldConfigError, match="peeple: unknown field"):
        WorldConfig.load(path)
    bad = json.loads(json.dumps(base))
    bad["kinds"][0]["prior"] = [0.5, 0.5]
    with pytest.raises(WorldConfigError, match=r"kinds\[0\] \(diet\)\.prior: has 2 values for 4 options"):
        WorldConfig.from_dict(bad)
    bad = json.loads(json.dumps(base))
    bad["sources"]["trust"]["nowhere"] = 0.5
    with pytest.raises(WorldConfigError, match=r"sources\.trust\['nowhere'\]"):
        WorldConfig.from_dict(bad)
    bad = json.loads(json.dumps(base))
    bad["readers"][0]["temperature"] = -1
    with pytest.raises(WorldConfigError, match=r"readers\.0\.temperature"):
        WorldConfig.from_dict(bad)
    path.write_text('{"seed": 1,\n "days": }')
    with pytest.raises(WorldConfigError, match="line 2"):
        WorldConfig.load(path)
    with pytest.raises(WorldConfigError, match="choose one of"):
        WorldConfig.preset("huge")


# ---------------------------------------------------------------------------- knobs (issue 15)
def _quick_with(**changes):
    return generate_world(WorldConfig.preset("quick").with_overrides(**changes))


def _groups_with(config, layers, **fields):
    groups = [g.model_dump(mode="json") for g in config.sources.groups]
    for g in groups:
        if g["layers"] == layers:
            g.update(fields)
    return {"groups": groups}


def test_compromised_sources_turn_unreliable_on_their_day():
    base = WorldConfig.preset("quick")
    sources = _groups_with(base, ["friend", "close", "chat"],
                           compromised={"share": 1.0, "day": 180.0, "trust": 0.2})
    world = _quick_with(sources=sources)
    t = world.truth.readings
    rows = (t.role == "main") & ~t.noise & np.array([p.startswith("friend/close/chat/") for p in t.path.tolist()])
    before, after = rows & (t.day < 180.0), rows & (t.day >= 180.0)
    assert before.sum() > 100 and after.sum() > 100
    assert (t.stated[before] == t.answer[before]).mean() > 0.45  # the friends' α (≈ 0.6)
    assert (t.stated[after] == t.answer[after]).mean() == pytest.approx(0.2, abs=0.07)
    np.testing.assert_allclose(t.alpha[after], 0.2)


@pytest.mark.parametrize("bias", [1.0, 0.5])
def test_biased_sources_state_their_favourite_when_wrong(bias):
    base = WorldConfig.preset("quick")
    world = _quick_with(sources=_groups_with(base, ["web", "forum"], bias=bias))
    t = world.truth.readings
    favourite = world.truth.favourite
    assert favourite and all(sid.startswith("forum-user") for sid in favourite)
    kind_of = {qid: info["kind"] for qid, info in world.truth.questions.items()}
    options = world.truth.kind_options
    fav = np.array([options[kind_of[q]].index(favourite[s][kind_of[q]]) if s in favourite else -1
                    for s, q in zip(t.source.tolist(), t.question.tolist())])
    rows = (t.role == "main") & ~t.noise & (fav >= 0) & (fav != t.answer) & (t.stated != t.answer)
    k = t.n_options[rows]
    assert rows.sum() > 100
    # wrong: the favourite with probability bias, else uniformly one of the K-1 others
    expected = np.mean(bias + (1 - bias) / (k - 1))
    assert (t.stated[rows] == fav[rows]).mean() == pytest.approx(expected, abs=0.06)


def test_settlements_fall_in_their_window():
    world = _quick_with(settlements={"window_days": [200.0, 300.0]})
    days = [world.record_days[i] for i, r in enumerate(world.records) if r["type"] == "settlement"]
    assert len(days) > 50 and 200.0 <= min(days) and max(days) <= 300.0


def test_a_group_carries_its_stated_trust():
    base = WorldConfig.preset("tiny")
    world = generate_world(base.with_overrides(sources=_groups_with(base, ["family", "parent", "call"],
                                                                    stated_trust=0.9)))
    stated = {r["id"]: r.get("trust") for r in world.records if r["type"] == "source"}
    parents = [sid for sid, r in stated.items() if sid.startswith("parent")]
    assert parents and all(stated[sid] == 0.9 for sid in parents)
    assert all(v is None for sid, v in stated.items() if not sid.startswith("parent"))


def test_knob_errors_name_the_field():
    with pytest.raises(WorldConfigError, match="window_days"):
        WorldConfig.preset("quick").with_overrides(settlements={"window_days": [300.0, 200.0]})
    with pytest.raises(WorldConfigError, match=r"compromised\.day"):
        WorldConfig.preset("quick").with_overrides(
            sources=_groups_with(WorldConfig.preset("quick"), ["web", "forum"],
                                 compromised={"share": 0.5, "day": 9999.0, "trust": 0.3}))


def test_the_campaign_preset_attacks_a_trusted_layer_with_few_settlements():
    campaign, default = WorldConfig.preset("campaign"), WorldConfig.preset("default")
    assert campaign.planted.layers == ["friend", "close", "chat"] and campaign.planted.campaigns == 150
    assert campaign.settlements.question_share == 0.1
    assert campaign.kinds == default.kinds and campaign.sources.groups == default.sources.groups
