"""Honest changes told by new sources, against campaigns: does doxa follow one and resist the other?

Part 1, honest changes. A generated world (``--world``, the ``quick`` preset by default) with
the ``change_reports`` knob (docs/world.md): every true change of a slowly changing kind
(true half-life ≥ ``--min-half-life`` days: homes, employers, partners) is told by
``--reporters`` sources nobody heard from before, one message each, a day apart
(``--venues distinct``: each from another source group; ``one``: all from one). For each
reported change whose old value every system held on top just before it, the question's
messages after the change are added one at a time (its settlements after the change left
out, so only messages move it) and the count is the first ``n`` at which the top answer
is the new value (``>cap`` when it is not by ``--cap`` messages, or before the answer
changes again). Systems:

- ``oracle``: the scorer with the world's true parameters (:meth:`World.oracle_params`);
- ``exact``: the same without any independence discount (every reading ``c = 1``): the
  exact posterior of the world's story, in which the reporters are independent;
- ``oracle, one key``: the oracle under the discount's earlier key ``(question, answer)``
  (every source in one layer, :func:`doxa.model.independence.source_layers` read as one
  number), for comparison with the rule before the honest-change fix;
- ``doxa-learned``: the scorer with parameters fitted on the whole world by the nightly
  job (``--train-steps`` steps), the reporters' own fitted entries left out (new when they
  report, they are read at their layer's trust, as the oracle reads them);
  ``doxa-learned, one key``: fitted and read under the earlier key (doxa before the fix);
  ``doxa-equal``: every source at the default trust.

The in-stream campaigns of part 2 are read at the cut just after their last claim, and
doxa-learned's fitted entries of their accounts are left out likewise (new when they post).

Printed: per system the share of the scored changes followed within the cap and on the
reports alone, the median and mean messages to follow, and their ratios to the oracle's
(median and mean) and to the exact posterior's (mean).

Part 2, campaigns (``--campaign-world``, the ``campaign`` preset at the size of ``quick``
by default): the planted-claim attack of ``doxa bench`` on the oracle's and
doxa-learned's confident beliefs (claims to flip: new sources, one source repeating,
new sources in the trusted layer), and the in-stream campaigns (fresh accounts of one
trusted layer, a burst of about six claims in a day): the share whose wrong value is on
top just after the burst, for each system.

    python bench/honest_change.py --seed 0 --out /tmp/honest_change [--reporters 3] [--venues distinct] [--delay 0.5] [--diagnose]

Also printed: the layers the reporters sit in, with the trust a new source there is read at by
doxa-learned (the fitted node) and by the oracle (the truth). ``--diagnose`` adds two systems that
say where doxa-learned's gap to the oracle comes from: doxa-learned with the oracle's trust of
every node above a source, and doxa-learned fitted on the world without the reporters' messages;
and, for the oracle's parameters and the fit's, the mean smoothed probability that the answer at
a report's time is the new value (:func:`report_posteriors`; the truth is 1 for every report).

Writes ``results.json`` under ``--out``. Figures: docs/measurements/2026-12-honest-change.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from doxa.data.evidence import Evidence
from doxa.data.store import Store
from doxa.inference.evaluation import baselines
from doxa.inference.evaluation.planted import copy_rows
from doxa.inference.evaluation.world import World, generate_world
from doxa.inference.evaluation.world_config import WorldConfig
from doxa.inference.read import scorer
from doxa.model import independence


# ---------------------------------------------------------------------------- the discount's variants
@contextlib.contextmanager
def discount(rule: str) -> Iterator[None]:
    """``model``: the model's rule; ``one key``: every source in one layer (the key before the
    honest-change fix); ``none``: every reading counts in full (the world's own story)."""
    saved_layers, saved_share = independence.source_layers, scorer.independent_share
    try:
        if rule == "one key":
            independence.source_layers = lambda paths: np.zeros(len(paths), dtype=np.int64)
        elif rule == "none":
            scorer.independent_share = lambda evidence, *a, **k: np.ones(evidence.n_readings)
        elif rule != "model":
            raise ValueError(rule)
        yield
    finally:
        independence.source_layers, scorer.independent_share = saved_layers, saved_share


class Scored:
    """A system for this bench: a name, a params document, and the discount rule it reads under."""

    def __init__(self, name: str, params: dict[str, Any], rule: str = "model", ignore_stated_trust: bool = False):
        self.name, self.rule = name, rule
        self.system = baselines.DoxaScorer(name, params, ignore_stated_trust=ignore_stated_trust)

    def predict(self, evidence: Evidence, at: float) -> np.ndarray:
        with discount(self.rule):
            return self.system.predict(evidence, at)


# ---------------------------------------------------------------------------- evidence of pseudo-questions
def cut_questions(evidence: Evidence, base_q: np.ndarray, cut: np.ndarray, settle_cut: np.ndarray) -> Evidence:
    """Pseudo-question ``p``: question ``base_q[p]`` with its readings at or before ``cut[p]`` and its
    settlements and rejections at or before ``settle_cut[p]`` (days). Sources keep their whole
    history (one table for every pseudo-question), as the planted-claim attack does."""
    qt = evidence.questions
    starts = np.searchsorted(evidence.q, base_q, side="left")
    ends = np.searchsorted(evidence.q, base_q, side="right")
    # readings are sorted by (question, time), so each cut is a prefix of its question's rows:
    # one search on the key question·10⁶ + day (days since 1970 stay far below 10⁶)
    key = evidence.q * 1e6 + evidence.t
    n_keep = np.minimum(np.searchsorted(key, base_q * 1e6 + np.minimum(cut, 9e5), side="right"), ends) - starts
    pseudo = np.repeat(np.arange(len(base_q)), n_keep)
    rows = np.repeat(starts, n_keep) + (np.arange(len(pseudo)) - np.repeat(np.cumsum(n_keep) - n_keep, n_keep))

    def settled(row_q: np.ndarray, row_t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        r, p = copy_rows(row_q, base_q)
        keep = row_t[r] <= settle_cut[p]
        return r[keep].astype(np.int64), p[keep].astype(np.int64)

    s_rows, s_pseudo = settled(evidence.settle_q, evidence.settle_t)
    r_rows, r_pseudo = settled(evidence.reject_q, evidence.reject_t)
    questions = qt.take(base_q, [f"{qt.ids[b]}#{i}" for i, b in enumerate(base_q.tolist())])
    return Evidence(
        questions=questions, q=pseudo.astype(np.int64), t=evidence.t[rows], source_index=evidence.source_index[rows],
        reader_index=evidence.reader_index[rows], probs=evidence.probs[rows][:, :questions.k_max],
        unnamed=None if evidence.unnamed is None else evidence.unnamed[rows][:, :questions.k_max],
        unclear=evidence.unclear[rows], unrelated=evidence.unrelated[rows], one_off=evidence.one_off[rows],
        settle_q=s_pseudo, settle_t=evidence.settle_t[s_rows], settle_answer=evidence.settle_answer[s_rows],
        settle_how=evidence.settle_how[s_rows], reject_q=r_pseudo, reject_t=evidence.reject_t[r_rows],
        reject_answer=evidence.reject_answer[r_rows], sources=evidence.sources, readers=evidence.readers,
        at=float(cut.max()) if len(cut) else evidence.at)


# ---------------------------------------------------------------------------- part 1
def honest_world(args) -> World:
    base = WorldConfig.preset(args.world)
    slow = [k.name for k in base.kinds
            if k.half_life_days is not None and k.half_life_days >= args.min_half_life]
    return generate_world(base.with_overrides(seed=args.seed, change_reports={
        "reporters": args.reporters, "venues": args.venues, "kinds": slow,
        "delay_days": args.delay, "spacing_days": 1.0}))


def trained_params(store: Store, at_day: float, steps: int, seed: int, new_sources: set[str] = frozenset()
                   ) -> dict[str, Any]:
    """The nightly fit on the whole world; the fitted entries of ``new_sources`` left out.

    A reporter is new when it reports: the nightly fit before its message never saw it, and
    doxa reads it at its layer's trust. A fit on the whole world has seen its one message
    and the settlements after it, and would read it with that hindsight.
    """
    from doxa.inference.evaluation.bench import BenchSettings, nightly_trainer

    settings = BenchSettings(train_steps=steps, train_draws=40, train_folds=0, seed=seed)
    doc = nightly_trainer(store, settings)(store.load_evidence(None), at_day)
    return without_sources(doc, new_sources)


def without_sources(doc: dict[str, Any], sources: set[str]) -> dict[str, Any]:
    """``doc`` with the fitted trust entries of ``sources`` left out (read at their layer's)."""
    return {**doc, "trust": {node: entry for node, entry in doc["trust"].items()
                             if node.rsplit("/", 1)[-1] not in sources}}


def follow_counts(world: World, evidence: Evidence, systems: list, cap: int, reporters: int) -> dict[str, Any]:
    """Messages after each reported change until each system's top answer is the new value."""
    qt = evidence.questions
    index = qt.index()
    truth = world.truth
    rows = []  # (question index, change day, next change day, option index, message times)
    for report in world.change_reports:
        q = index.get(report.question)
        if q is None:
            continue
        change = world.epoch_day(report.day)
        later = truth.change_times[report.question]
        following = later[later > report.day + 1e-9]
        next_change = world.epoch_day(float(following[0])) if len(following) else math.inf
        a, b = np.searchsorted(evidence.q, [q, q + 1])
        times = evidence.t[a:b]
        after = times[(times > change) & (times < next_change)][:cap]
        if not len(after):
            continue
        before = later[later < report.day - 1e-9]  # the value the change replaced
        old = int(truth.change_values[report.question][len(before) - 1]) if len(before) else truth.initial[report.question]
        rows.append((q, change, qt.options[q].index(report.option), after, old))
    if not rows:
        return {"changes": 0}
    m = len(rows)
    base_q = np.repeat([r[0] for r in rows], cap + 1)
    change = np.repeat([r[1] for r in rows], cap + 1)
    cut = np.full((m, cap + 1), np.inf)
    cut[:, 0] = [r[1] for r in rows]
    for i, r in enumerate(rows):
        cut[i, 1:1 + len(r[3])] = r[3]
    valid = np.isfinite(cut)
    cut_days = np.where(valid, cut, change.reshape(m, cap + 1)).reshape(-1)
    pseudo = cut_questions(evidence, base_q, cut_days, change)
    new = np.array([r[2] for r in rows])
    old = np.array([r[4] for r in rows])
    # read at "latest": no decay after each pseudo-question's last event, so each is read at its own cut
    tops = {system.name: np.argmax(system.predict(pseudo, math.inf), axis=1).reshape(m, cap + 1)
            for system in systems}
    # an established answer: every system held the old value on top just before the change
    held = np.all([t[:, 0] == old for t in tops.values()], axis=0) & (old != new)
    needed = {}
    for name, top in tops.items():
        followed = (top[:, 1:] == new[:, None]) & valid[:, 1:]
        needed[name] = np.where(followed.any(axis=1), followed.argmax(axis=1) + 1, cap + 1)
    # scored: changes the world's exact posterior follows within the messages there are (one it
    # cannot follow, with the few messages before the answer changes again, says nothing of a system)
    scored = held & (needed["exact"] <= cap)
    out: dict[str, Any] = {"changes": int(len(rows)), "established": int(held.sum()), "scored": int(scored.sum()),
                           "systems": {}}
    for name, n_all in needed.items():
        n = n_all[scored]
        out["systems"][name] = {"followed": float(np.mean(n <= cap)), "median": float(np.median(n)),
                                "mean": float(np.mean(n)),
                                "on_reports": float(np.mean(n <= reporters)),
                                "counts": n.tolist()}
    return out


# ---------------------------------------------------------------------------- part 2
def smoothed(evidence: Evidence, params: dict[str, Any], passes: list[tuple[np.ndarray, np.ndarray]]
             ) -> list[np.ndarray]:
    """For each pass ``(rows, options)``: ``P(z = options[i] at reading rows[i] | every reading and
    settlement of its question)`` under ``params``, the rows of one pass of distinct questions.

    The smoothed marginal of one event is a ratio of two marginal likelihoods: the question's
    evidence with that event's likelihood multiplied by the indicator of the value, over the
    evidence as it is, ``Z(L_e · 1_v) / Z(L)``. The evidence as it is is filtered once; each pass
    is one more filter, with every row of the pass marked at once."""
    inputs = scorer.model_inputs(evidence, params)
    q, t, like = scorer.events(evidence, inputs.likelihood)
    change = scorer.event_change(evidence, inputs.change)
    _, log_z, _ = scorer.forward_filter(inputs.prior, inputs.rate, q, t, like, math.inf, change, inputs.event_prior)
    order = scorer.event_order(evidence)
    out = []
    for rows, options in passes:
        rows, options = np.asarray(rows, dtype=np.int64), np.asarray(options, dtype=np.int64)
        if len(np.unique(evidence.q[rows])) != len(rows):
            raise ValueError("smoothed: one row a question per pass (two rows of one question are a joint event)")
        event = rows if order is None else np.argsort(order)[rows]
        marked = like.copy()
        keep = marked[event, options]
        marked[event] = 0.0
        marked[event, options] = keep
        _, log_z_marked, _ = scorer.forward_filter(inputs.prior, inputs.rate, q, t, marked, math.inf, change,
                                                   inputs.event_prior)
        question = evidence.q[rows]
        out.append(np.exp(log_z_marked[question] - log_z[question]))
    return out


def report_posteriors(world: World, evidence: Evidence, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Where the story puts each change: for each report, ``P(the answer at the report's time is
    the new value | every reading and settlement of its question)`` under ``params``
    (:func:`smoothed`). One pass takes the ``j``-th report of every question at once (a
    question's other reports are left as they are), so ``--reporters`` passes give every report.
    ``evidence`` must be loaded ``with_messages``. Returned per report: its number (0 = first),
    the posterior, and whether the message states the answer true at its time (the world's truth)."""
    row_of = {m: i for i, m in enumerate(evidence.message.tolist())}
    index = evidence.questions.index()
    truth = world.truth.readings
    right = {m: bool(s == a) for m, s, a, role in zip(truth.message.tolist(), truth.stated.tolist(),
                                                       truth.answer.tolist(), truth.role.tolist())
             if role == "change_report"}
    passes: dict[int, dict[int, tuple[int, int, str]]] = {}  # j → question → (reading row, option, message)
    for report in world.change_reports:
        q_index = index.get(report.question)
        if q_index is None:
            continue
        option = evidence.questions.options[q_index].index(report.option)
        for j, message in enumerate(report.messages):
            row = row_of.get(message)
            if row is not None:
                passes.setdefault(j, {}).setdefault(q_index, (row, option, message))
    numbers = sorted(passes)
    batches = [tuple(zip(*passes[j].values())) for j in numbers]  # (rows, options, messages) of each pass
    out = []
    for j, (_, _, messages), posteriors in zip(numbers, batches,
                                               smoothed(evidence, params, [(np.array(b[0]), np.array(b[1]))
                                                                           for b in batches])):
        out += [{"report": j, "posterior": p, "right": right.get(m)} for p, m in zip(posteriors.tolist(), messages)]
    return out


def posterior_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean posterior of the reports, by report number and by whether the report was right."""
    by = {}
    for j in sorted({r["report"] for r in rows}):
        mine = [r for r in rows if r["report"] == j]
        right = [r["posterior"] for r in mine if r["right"]]
        wrong = [r["posterior"] for r in mine if r["right"] is False]
        by[str(j)] = {"n": len(mine), "mean": float(np.mean([r["posterior"] for r in mine])),
                      "right": float(np.mean(right)) if right else None,
                      "wrong": float(np.mean(wrong)) if wrong else None}
    return by


def reporter_layers(world: World, evidence: Evidence, learned: dict[str, Any], oracle: dict[str, Any]
                    ) -> list[dict[str, Any]]:
    """Where the gap to the oracle comes from: each layer the reporters sit in, with the trust a new
    source there is read at by doxa-learned (its fitted entries left out: the layer's fitted node)
    and by the oracle (the layer's true trust), the reports from it, and the messages the fit had
    from the layer's other sources."""
    from doxa.inference.read.params import trust_for_source

    path_of = dict(zip(evidence.sources.ids.tolist(), evidence.sources.paths.tolist()))
    reports: dict[str, int] = {}
    for report in world.change_reports:
        for source in report.sources:
            layer = path_of[source].rsplit("/", 1)[0]
            reports[layer] = reports.get(layer, 0) + 1
    rows = []
    for layer, n in sorted(reports.items(), key=lambda kv: -kv[1]):
        probe = f"{layer}/a-new-source"
        fitted, node = trust_for_source(learned, probe, None)
        true, _ = trust_for_source(oracle, probe, None)
        entry = learned["trust"].get(node, {})
        rows.append({"layer": layer, "reports": n, "read_at_fitted": fitted, "fitted_node": node,
                     "interval": [entry.get("lo"), entry.get("hi")], "true": true, "messages": entry.get("n")})
    return rows


def campaign_part(args, learned_params_for: Callable[[Store, World], dict]) -> dict[str, Any]:
    from doxa.inference.evaluation.planted import planted_resistance

    quick = WorldConfig.preset("quick")
    cfg = WorldConfig.preset(args.campaign_world).with_overrides(
        seed=args.seed, days=quick.days, people=quick.people.model_dump(mode="json"),
        settlements={"rate_per_day": quick.settlements.rate_per_day})
    world = generate_world(cfg)
    store = Store.memory()
    store.ingest_records(world.records)
    evidence = store.load_evidence(None)
    with discount("one key"):
        before = learned_params_for(store, world)
    systems = [Scored("oracle", world.oracle_params()), Scored("oracle, one key", world.oracle_params(), "one key"),
               Scored("doxa-learned", learned_params_for(store, world)),
               Scored("doxa-learned, one key", before, "one key")]
    at = world.epoch_day(world.end_day)
    final = {s.name: s.predict(evidence, at) for s in systems}
    qt = evidence.questions
    truth = np.array([world.truth.answer_index_at(str(qid), world.end_day) for qid in qt.ids.tolist()])
    evaluated = np.flatnonzero(np.bincount(evidence.q, minlength=len(qt.ids)) > 0)
    resistance = planted_resistance(world, evidence, systems, final, evaluated, truth[evaluated], world.end_day,
                                    cap=20, questions=args.planted_questions, seed=args.seed,
                                    tick=lambda *a: None)
    # in-stream campaigns: is the wrong value on top just after the burst?
    index = qt.index()
    camps = [c for c in world.truth.campaigns if c.question in index]
    sent = {r["id"]: day for r, day in zip(world.records, world.record_days.tolist()) if r["type"] == "message"}
    base_q = np.array([index[c.question] for c in camps], dtype=np.int64)
    cut = np.array([world.epoch_day(max(sent[m] for m in c.messages)) + 1.0 / 1440 for c in camps])
    pseudo = cut_questions(evidence, base_q, cut, cut)
    wrong = np.array([qt.options[index[c.question]].index(c.option) for c in camps])
    flipped = {}
    for s in systems:
        top = np.argmax(s.predict(pseudo, math.inf), axis=1)
        flipped[s.name] = float(np.mean(top == wrong)) if len(camps) else None
    return {"world": cfg.name, "questions": int(len(qt.ids)), "campaigns": len(camps),
            "planted": {name: {k: {kk: v[kk] for kk in ("tested", "median", "p10", "held_share")}
                               for k, v in r.get("scenarios", {}).items()} for name, r in resistance.items()},
            "in_stream_flipped": flipped}


# ---------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="draws the worlds (default 0)")
    parser.add_argument("--out", type=Path, required=True, help="folder for results.json")
    parser.add_argument("--world", default="quick", help="world preset or config JSON of the honest changes "
                                                         "(default quick)")
    parser.add_argument("--campaign-world", default="campaign",
                        help="world preset or config JSON of the campaigns, drawn at quick size (default campaign)")
    parser.add_argument("--reporters", type=int, default=3, help="new sources that tell each change (default 3)")
    parser.add_argument("--venues", choices=("distinct", "one"), default="distinct",
                        help="distinct: each reporter in another source group; one: all in one (default distinct)")
    parser.add_argument("--delay", type=float, default=0.5,
                        help="days from a change to its first report (default 0.5); a long one (say 40) puts the "
                             "question's own messages between the change and its reports")
    parser.add_argument("--min-half-life", type=float, default=200.0,
                        help="changes of kinds with at least this half-life (days) are told (default 200)")
    parser.add_argument("--cap", type=int, default=15,
                        help="messages after a change counted before a change not followed counts as cap + 1 "
                             "(default 15)")
    parser.add_argument("--train-steps", type=int, default=300, help="SVI steps of each fit (default 300)")
    parser.add_argument("--planted-questions", type=int, default=60,
                        help="confident beliefs attacked in the campaign part (default 60)")
    parser.add_argument("--skip-campaign", action="store_true", help="leave out the campaign part")
    parser.add_argument("--json", action="store_true",
                        help="print the results as one JSON object instead of the tables")
    parser.add_argument("--diagnose", action="store_true",
                        help="also score doxa-learned with the oracle's trust of the layers (every node above a "
                             "source; the sources keep their fitted trust), and doxa-learned fitted on the world "
                             "without the reporters' messages: where the gap to the oracle comes from")
    args = parser.parse_args(argv)
    # with --json the tables go to standard error and standard output holds the one JSON object
    say = (lambda *a: print(*a, file=sys.stderr)) if args.json else print
    started = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)

    world = honest_world(args)
    store = Store.memory()
    store.ingest_records(world.records)
    evidence = store.load_evidence(None, with_messages=args.diagnose)
    reporters = {s for report in world.change_reports for s in report.sources}
    learned_whole = trained_params(store, world.epoch_day(world.end_day), args.train_steps, args.seed)
    learned = without_sources(learned_whole, reporters)
    with discount("one key"):  # the fit reads the discount through the same function
        learned_before = trained_params(store, world.epoch_day(world.end_day), args.train_steps, args.seed,
                                        reporters)
    oracle = world.oracle_params()
    systems = [Scored("oracle", oracle), Scored("exact", oracle, "none"), Scored("oracle, one key", oracle, "one key"),
               Scored("doxa-learned", learned), Scored("doxa-learned, one key", learned_before, "one key"),
               Scored("doxa-equal", baselines.equal_trust_params(), ignore_stated_trust=True)]
    unreported = None
    if args.diagnose:
        leaves = set(evidence.sources.paths.tolist())
        layered = {**learned, "trust": {**learned["trust"], **{node: entry for node, entry in oracle["trust"].items()
                                                              if node not in leaves}}}
        systems.append(Scored("doxa-learned, true layer trust", layered))
        told = {m for report in world.change_reports for m in report.messages}
        of_a_report = {"source": lambda r: r["id"] in reporters, "message": lambda r: r["id"] in told,
                       "reading": lambda r: r["message"] in told}
        quiet = Store.memory()
        quiet.ingest_records([r for r in world.records if not of_a_report.get(r["type"], lambda r: False)(r)])
        unreported = trained_params(quiet, world.epoch_day(world.end_day), args.train_steps, args.seed, reporters)
        systems.append(Scored("doxa-learned, fit without the reports", unreported))
    honest = follow_counts(world, evidence, systems, args.cap, args.reporters)
    say(f"honest changes ({args.world}, seed {args.seed}, {args.reporters} new reporters a day apart from "
          f"{args.delay:g} days after the change, venues "
          f"{args.venues}): {honest['changes']} reported changes with messages after them, {honest.get('established', 0)} "
          f"whose old value every system held, {honest.get('scored', 0)} of them followed by the exact posterior "
          f"within the messages there are (scored)")
    say(f"{'system':24s} {'followed':>9s} {'on the reports':>15s} {'median':>7s} {'mean':>6s} "
          f"{'× oracle (median)':>18s} {'× oracle (mean)':>16s} {'× exact (mean)':>15s}")
    ref = honest["systems"]
    for name, r in ref.items():
        say(f"{name:24s} {r['followed']:9.2f} {r['on_reports']:15.2f} {r['median']:7.1f} {r['mean']:6.2f} "
              f"{r['median'] / ref['oracle']['median']:18.2f} {r['mean'] / ref['oracle']['mean']:16.2f} "
              f"{r['mean'] / ref['exact']['mean']:15.2f}")
    layers = reporter_layers(world, evidence, learned, oracle)
    if unreported is not None:
        for row, other in zip(layers, reporter_layers(world, evidence, unreported, oracle)):
            row["fitted_without_reports"] = other["read_at_fitted"]
    say(f"\nthe reporters' layers: a new source there is read at (doxa-learned: the fitted node; oracle: the truth)")
    say(f"{'layer':38s} {'reports':>8s} {'fitted':>7s} {'90% interval':>14s} {'true':>6s} {'messages':>9s}"
          + (f" {'fitted without the reports':>27s}" if unreported is not None else ""))
    for row in layers:
        lo, hi = row["interval"]
        span = f"{lo:.2f}–{hi:.2f}" if lo is not None else "–"
        say(f"{row['layer']:38s} {row['reports']:8d} {row['read_at_fitted']:7.2f} {span:>14s} {row['true']:6.2f} "
              f"{row['messages'] if row['messages'] is not None else '–':>9}"
              + (f" {row['fitted_without_reports']:27.2f}" if unreported is not None else ""))
    result = {"seed": args.seed, "world": args.world, "reporters": args.reporters, "venues": args.venues,
              "delay_days": args.delay, "cap": args.cap, "honest_change": {k: v for k, v in honest.items()},
              "reporter_layers": layers}
    if args.diagnose:
        smoothed = {"oracle": posterior_summary(report_posteriors(world, evidence, oracle)),
                    "doxa-learned (the fit, reporters' entries kept)":
                        posterior_summary(report_posteriors(world, evidence, learned_whole))}
        result["report_posteriors"] = smoothed
        say("\nP(the answer at a report's time is the new value | all its question's evidence), mean over "
              "the reports (the truth is 1 for every one; right ones: reports stating the new value)")
        say(f"{'parameters':48s} {'report':>6s} {'n':>5s} {'mean':>6s} {'right ones':>11s} {'wrong ones':>11s}")
        for name, by in smoothed.items():
            for j, row in by.items():
                say(f"{name:48s} {int(j) + 1:6d} {row['n']:5d} {row['mean']:6.2f} {_cell2(row['right']):>11s} "
                      f"{_cell2(row['wrong']):>11s}")

    if not args.skip_campaign:
        def learned_for(cstore: Store, cworld: World) -> dict[str, Any]:  # campaign accounts are new too
            return trained_params(cstore, cworld.epoch_day(cworld.end_day), args.train_steps, args.seed,
                                  set(cworld.truth.planted_sources))

        camp = campaign_part(args, learned_for)
        result["campaign"] = camp
        say(f"\ncampaigns ({camp['world']} at quick size, seed {args.seed}): {camp['campaigns']} in-stream campaigns")
        say(f"{'system':24s} {'wrong on top after the burst':>28s}   planted claims to flip (median / p10): "
              "new sources | one source | trusted layer")
        for name, share in camp["in_stream_flipped"].items():
            scen = camp["planted"].get(name, {})
            cells = " | ".join(f"{_cell(scen.get(k, {}).get('median'))} / {_cell(scen.get(k, {}).get('p10'))}"
                               for k in ("new_sources", "one_source", "trusted_layer"))
            say(f"{name:24s} {share:28.2f}   {cells}")
    result["seconds"] = time.perf_counter() - started
    (args.out / "results.json").write_text(json.dumps(result, indent=1))
    say(f"\n{result['seconds']:.0f} s; {args.out / 'results.json'}")
    if args.json:
        print(json.dumps(result))
    return 0


def _cell2(value) -> str:
    return "—" if value is None else f"{value:.2f}"


def _cell(value) -> str:
    return "—" if value is None else (">20" if value > 20 else f"{value:g}")


if __name__ == "__main__":
    raise SystemExit(main())
