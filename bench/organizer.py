"""doxa's organizer measured: which questions each message bears on, against a gold grouping.

Not a CI test: it needs a model server (scripts/setup_llm.sh, then scripts/llm_server.sh, or any
OpenAI-compatible endpoint). tests/test_organizer_bench.py checks the scores by hand and runs it
end to end against a scripted loopback model.

    scripts/llm_server.sh 8765
    python bench/organizer.py --world tiny --messages 100 --url http://127.0.0.1:8765/v1 \\
        [--data LONGMEMEVAL_PATH --limit 5 --window 10] [--maintain --apply-above 0.5] [--out DIR] [--json] [--seed S]

**Episodes.** Each is one fresh store and a stream of messages whose gold grouping is known:

- *the generated world* (``--world``, ``--messages``; ``bench/real_model.py``'s ``world_slice`` and
  ``organize_messages``): its people drawn at random (seeded) until their messages number
  ``--messages``, in a seeded random order, each ``remember``-ed with the organizer alone (no
  reader) on a store that knows the world's people and sources but none of its questions. The
  world knows, for every message, the question it bears on (its *gold question*), that
  question's person, and what the message states about it: an option, or nothing definite (a
  vague message);
- *conversations* (``--data``, a LongMemEval folder or file, ``--limit`` records taken in turn from
  each category): for each record, its haystack's turns through ``remember_conversation`` (the
  user's turns organized ``--window`` at a time, no reader) on an empty store. The gold: the
  question's ``has_answer`` user turns bear on that question and belong together; every other user
  turn bears on nothing the gold knows. The gold knows no person and no stated option there.

A *step* is the organizer's decision for one message (one turn of a window, in a conversation).
Its *questions* are those ``remember`` tied it to, links first then those it created, in
``remember``'s order; its *primary question* is the first of them. A message tied to several
questions counts in the grouping by its primary question only (so a small model that links a
cross question first is scored on that one). A message whose organizer output was invalid
(``remember`` failed after its one retry) is a *failure*: every per-step score below that applies to
it is 0, and in the grouping it has no question (a cluster of its own, as a message tied to nothing).

**Matching.** Each question the organizer made maps to the gold question that most of the
messages tied to it bear on (every tie of every message counts; a draw goes to the gold question
reached first); a question tied only to messages bearing on nothing the gold knows maps to no gold
question: it is *spurious* (in a conversation, a question about anything but the one question
asked — not necessarily wrong).

**Per step** (rates over the steps where the score applies; failures count, as wrong):

- *action*: the gold action is ``link`` when a question that maps to the message's gold question
  existed before this step (made by an earlier step), ``create`` when none did, ``nothing`` when
  the message bears on nothing the gold knows. The organizer's action is ``nothing`` when the step
  tied the message to no question, ``create`` when its primary question was created by the step,
  else ``link``. ``action`` = right actions / steps with a gold question; the confusion table
  (gold × organizer) has every step, ``nothing`` rows included;
- *question*: the primary question maps to the gold question (steps with a gold question);
  ``question_any``: some question of the step does;
- *subject*: the primary question's subject is the gold question's person (steps whose person is
  known: the world's);
- *option*: where the world says which option the message states and the step proposed options or
  values — the options of the questions it created, the values it added to open questions — the
  stated option is among them, compared by normalised name (``maintenance.option_key``: words
  lower-cased, a final ``s`` dropped from words longer than three letters).

**Per episode**, over the messages of the episode (failures included):

- *B-cubed* (Bagga & Baldwin 1998) of the message → question grouping. Predicted cluster of a
  message: its primary question (none: a cluster of its own); gold cluster: its gold question
  (none: a cluster of its own). For a message ``m`` with predicted cluster ``P(m)`` and gold cluster
  ``G(m)``: ``precision(m) = |P(m) ∩ G(m)| / |P(m)|``, ``recall(m) = |P(m) ∩ G(m)| / |G(m)|``;
  ``P`` and ``R`` are their means over the messages, ``F1 = 2PR / (P + R)``. A duplicate question
  (one gold question's messages split over two questions) lowers recall, an over-merge (two gold
  questions' messages in one) precision. ``bcubed_gold`` is the same averaged over the messages
  with a gold question only (in a conversation, the answer turns: are they grouped together, and
  with what);
- *merges needed* = ``Σ_g max(0, #distinct primary questions of g's messages − 1)`` (messages tied to
  nothing not counted: they need a link, not a merge); *splits needed* =
  ``Σ_q max(0, #distinct gold questions of the messages whose primary question is q − 1)``;
- *duplicates* = ``Σ_g max(0, #questions that map to g − 1)``, and of them *duplicates of one kind* =
  ``Σ_(g, subject, kind) max(0, #questions of that subject and kind that map to g − 1)``, the only ones
  maintenance's merge rule compares; *wrong-subject questions*: questions
  that map to a gold question whose person is not their subject; *gold questions found*: gold
  questions some question maps to, of those the episode's messages bear on; *spurious questions*;
  *unlinked*: messages with a gold question tied to none; *linked without gold*: messages bearing
  on nothing the gold knows tied to some question; *subject accuracy*: the steps' subject score;
- *cost*: the organizer's HTTP calls (retries included), the prompt and completion tokens its
  server reported (``OpenAIChatOrganizer.prompt_tokens`` / ``completion_tokens``, from each reply's
  ``usage``; 0 where the server reports none), seconds (wall clock of the episode's remembering, the
  store's writes included).

With ``--maintain`` each episode's store then goes through maintenance (``doxa organize --maintain
--apply-above P``: :func:`doxa.inference.agent.maintenance.maintain`) and its grouping is scored
again: a merge applied moves the messages of its ``from`` question to its ``into`` question, a split
moves each message to the first new question it is assigned (a message it assigns nowhere is tied
to nothing). Before and after are reported side by side, with what was proposed and applied. The
``remember`` links a question proposed again under a subject and kind that already exist, so the
duplicates the organizer leaves carry another kind, which the merge rule takes at its higher bar for
different kinds; with no reader there are no readings, so a merge scores at most 0.875 (its agreement
term is ½) and no split is ever proposed.

Across conversation episodes: step scores pooled over all their steps, B-cubed the mean of the
episodes', counts and cost summed. ``--out DIR`` writes results.json and report.md; ``--json``
prints the one object; otherwise the table is printed. Progress on stderr.

**Gold cases.** Each episode's truth, as cases instruction search scores (:func:`gold_cases`; each
episode's ``gold_cases`` says how many, by what they expect, and how many its kept decisions get right).
With ``--out DIR`` they are written beside the store whose decisions they name: ``gold_cases.jsonl``
beside ``organized.duckdb`` for the world, ``conversation-<record>.gold_cases.jsonl`` beside
``conversation-<record>.duckdb`` for each conversation; ``doxa organizer-instructions search --db STORE
--cases FILE`` searches on them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Hashable, Iterable, Mapping

sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_model import UNCLEAR, UNRELATED, Slice, organize_messages, world_slice  # noqa: E402

NOTHING, LINK, CREATE = "nothing", "link", "create"
ACTIONS = (LINK, CREATE, NOTHING)
FAILED = "failed"
#: Maintenance's --apply-above when none is given: every proposal scoring at least this is applied.
APPLY_ABOVE = 0.5

#: (message, question) → the question it is tied to after maintenance, or None (tied to nothing)
Resolve = Callable[[str, str], "str | None"]


def _identity(message: str, question: str) -> str | None:
    return question


# ----------------------------------------------------------------------------- steps
@dataclass
class Step:
    """One organizer decision for one message, with what the gold says about the message."""

    message: str
    gold: str | None = None  # the gold question it bears on; None: nothing the gold knows
    person: str | None = None  # the gold question's subject, where known
    stated: str | None = None  # the option the message states, where the world says
    questions: list[str] = field(default_factory=list)  # tied to, links first then created (remember's order)
    created: list[str] = field(default_factory=list)  # those the step created
    proposed: list[str] = field(default_factory=list)  # options of the questions created, values added
    failed: bool = False  # the organizer's output was invalid (remember failed)

    def resolved(self, resolve: Resolve) -> list[str]:
        """The step's questions after ``resolve``, distinct, in order (those resolved to nothing left out)."""
        out = (resolve(self.message, q) for q in self.questions)
        return list(dict.fromkeys(q for q in out if q is not None))

    def primary(self, resolve: Resolve = _identity) -> str | None:
        found = self.resolved(resolve)
        return found[0] if found else None


def option_key(option: str) -> str:
    """An option's normalised name (maintenance's: words lower-cased, the final-``s`` rule)."""
    from doxa.inference.agent.maintenance import option_key as key

    return key(option)


# ----------------------------------------------------------------------------- grouping scores
def bcubed(predicted: Mapping[str, Hashable | None], gold: Mapping[str, Hashable | None],
           over: Iterable[str] | None = None) -> dict[str, float | None]:
    """B-cubed precision, recall and F1 of ``predicted`` against ``gold`` (message → cluster; None: a
    cluster of its own), over the messages of ``gold``, averaged over ``over`` (default: all of them).

    ``precision(m) = |P(m) ∩ G(m)| / |P(m)|``, ``recall(m) = |P(m) ∩ G(m)| / |G(m)|``, ``F1 = 2PR/(P+R)``."""
    items = list(gold)
    pred = {m: ("q", predicted[m]) if predicted.get(m) is not None else ("alone", m) for m in items}
    true = {m: ("g", gold[m]) if gold[m] is not None else ("alone", m) for m in items}
    size_p, size_g = Counter(pred.values()), Counter(true.values())
    both = Counter((pred[m], true[m]) for m in items)
    chosen = items if over is None else [m for m in over if m in true]
    if not chosen:
        return {"precision": None, "recall": None, "f1": None, "n": 0}
    precision = sum(both[pred[m], true[m]] / size_p[pred[m]] for m in chosen) / len(chosen)
    recall = sum(both[pred[m], true[m]] / size_g[true[m]] for m in chosen) / len(chosen)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "n": len(chosen)}


def match_questions(steps: list[Step], resolve: Resolve = _identity) -> dict[str, str | None]:
    """Each question tied to some message → the gold question most of its messages bear on (every tie
    counts; a draw goes to the gold question reached first), or None when none of them bears on one."""
    counts: dict[str, Counter] = {}
    first: dict[str, int] = {}
    for step in steps:
        if step.gold is not None:
            first.setdefault(step.gold, len(first))
        for q in step.resolved(resolve):
            votes = counts.setdefault(q, Counter())
            if step.gold is not None:
                votes[step.gold] += 1
    return {q: (min(votes, key=lambda g: (-votes[g], first[g])) if votes else None) for q, votes in counts.items()}


def gold_actions(steps: list[Step], match: Mapping[str, str | None]) -> list[str]:
    """The gold action of each step: ``link`` when a question mapping to its gold question was made by
    an earlier step, ``create`` when none was, ``nothing`` when it bears on nothing the gold knows."""
    found: set[str] = set()
    out = []
    for step in steps:
        out.append(NOTHING if step.gold is None else LINK if step.gold in found else CREATE)
        found |= {match[q] for q in step.created if match.get(q) is not None}
    return out


def action_of(step: Step) -> str:
    """What the organizer did with the message: failed, nothing, create (its primary question is new) or link."""
    if step.failed:
        return FAILED
    if not step.questions:
        return NOTHING
    return CREATE if step.questions[0] in step.created else LINK


def _rate(right: int, n: int) -> dict[str, Any]:
    return {"right": right, "n": n, "rate": right / n if n else None}


def step_scores(steps: list[Step], subjects: Mapping[str, str | None]) -> dict[str, Any]:
    """The per-step scores of the module docstring: action (with its confusion table), question,
    question_any, subject, option; failures score 0 wherever the score applies."""
    match = match_questions(steps)
    wanted = gold_actions(steps, match)
    confusion: dict[str, Counter] = {g: Counter() for g in ACTIONS}
    action = question = question_any = subject = option = 0
    n_gold = n_person = n_option = 0
    for step, gold_action in zip(steps, wanted):
        did = action_of(step)
        confusion[gold_action][did] += 1
        primary = step.primary()
        if step.gold is not None:
            n_gold += 1
            action += did == gold_action
            question += primary is not None and match.get(primary) == step.gold
            question_any += any(match.get(q) == step.gold for q in step.questions)
        if step.person is not None:
            n_person += 1
            subject += primary is not None and subjects.get(primary) == step.person
        if step.stated is not None and (step.failed or step.proposed):
            n_option += 1
            option += option_key(step.stated) in {option_key(o) for o in step.proposed}
    return {"steps": len(steps), "failures": sum(s.failed for s in steps),
            "action": _rate(action, n_gold), "question": _rate(question, n_gold),
            "question_any": _rate(question_any, n_gold), "subject": _rate(subject, n_person),
            "option": _rate(option, n_option),
            "confusion": {g: {d: c[d] for d in (*ACTIONS, FAILED) if c[d]} for g, c in confusion.items() if c}}


def grouping_scores(steps: list[Step], subjects: Mapping[str, str | None], resolve: Resolve = _identity,
                    kinds: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The per-episode scores of the module docstring, the messages' questions taken through ``resolve``
    (maintenance's merges and splits; by default as the organizer left them). With ``kinds`` (question →
    kind), also ``duplicates_same_kind``: the duplicates that share their subject and kind with another
    question standing for the same gold question, the only ones maintenance's merge rule compares."""
    predicted = {s.message: s.primary(resolve) for s in steps}
    gold = {s.message: s.gold for s in steps}
    match = match_questions(steps, resolve)
    person_of = {s.gold: s.person for s in steps if s.gold is not None}
    by_gold: dict[str, set[str]] = {}
    by_question: dict[str, set[str]] = {}
    for s in steps:
        q = predicted[s.message]
        if s.gold is not None and q is not None:
            by_gold.setdefault(s.gold, set()).add(q)
            by_question.setdefault(q, set()).add(s.gold)
    mapped = Counter(g for g in match.values() if g is not None)
    with_person = [s for s in steps if s.person is not None]
    out = {
        "messages": len(steps),
        "bcubed": bcubed(predicted, gold),
        "bcubed_gold": bcubed(predicted, gold, over=[m for m, g in gold.items() if g is not None]),
        "merges_needed": sum(max(0, len(qs) - 1) for qs in by_gold.values()),
        "splits_needed": sum(max(0, len(gs) - 1) for gs in by_question.values()),
        "questions": len(match),
        "duplicates": sum(n - 1 for n in mapped.values()),
        "wrong_subject_questions": sum(1 for q, g in match.items() if g is not None and person_of.get(g) is not None
                                       and subjects.get(q) != person_of[g]),
        "gold_questions": len(person_of),
        "gold_questions_found": len(mapped),
        "spurious_questions": sum(1 for g in match.values() if g is None),
        "unlinked": sum(1 for s in steps if s.gold is not None and predicted[s.message] is None),
        "linked_without_gold": sum(1 for s in steps if s.gold is None and predicted[s.message] is not None),
        "subject_accuracy": (sum(subjects.get(predicted[s.message]) == s.person for s in with_person) / len(with_person)
                             if with_person else None),
    }
    if kinds is not None:
        same = Counter((g, subjects.get(q), kinds.get(q)) for q, g in match.items() if g is not None)
        out["duplicates_same_kind"] = sum(n - 1 for n in same.values())
    return out


# ----------------------------------------------------------------------------- maintenance
def maintenance_resolver(records: list[dict[str, Any]]) -> Resolve:
    """``(message, question)`` → where the applied ``question_merge`` / ``question_split`` records took it:
    a merge's ``from`` to its ``into`` (followed along chains), a split question to the first new question
    its ``assign`` names for the message (None where it names none)."""
    merged: dict[str, str] = {}
    split: dict[str, dict[str, Any]] = {}
    for record in records:
        if record.get("type") == "question_merge":
            merged[record["from"]] = record["into"]
        elif record.get("type") == "question_split":
            split[record["question"]] = record.get("assign") or {}

    def resolve(message: str, question: str) -> str | None:
        seen: set[str] = set()
        q: str | None = question
        while q is not None and q not in seen:
            seen.add(q)
            if q in merged:
                q = merged[q]
            elif q in split:
                target = split[q].get(message)
                q = (target if isinstance(target, str) else target[0]) if target else None
            else:
                return q
        return q

    return resolve


def run_maintenance(memory, apply_above: float) -> dict[str, Any]:
    """``doxa organize --maintain --apply-above P`` on the store: what it proposed and applied, the
    records applied, and every question's subject afterwards."""
    from doxa.inference.agent.maintenance import maintain

    result = maintain(memory, apply_above=apply_above)
    applied = [a["record"] for a in result.applied]
    return {"apply_above": apply_above,
            "proposed": len(result.proposed) + len(result.applied) + len(result.not_applied),
            "applied": len(applied), "not_applied": len(result.not_applied),
            "proposals": [{"id": p.id, "kind": p.kind, "score": round(p.score, 3)} for p in result.proposed][:20],
            "applied_records": applied, "subjects": question_subjects(memory.store),
            "kinds": question_kinds(memory.store)}


def question_subjects(store) -> dict[str, str | None]:
    return dict(store.execute("SELECT id, subject FROM questions").fetchall())


def question_kinds(store) -> dict[str, str]:
    return dict(store.execute("SELECT id, kind FROM questions").fetchall())


def _with_maintenance(episode: dict[str, Any], steps: list[Step], subjects: dict[str, str | None],
                      kinds: dict[str, str], maintenance: dict[str, Any] | None) -> dict[str, Any]:
    episode["steps"] = step_scores(steps, subjects)
    episode["grouping"] = grouping_scores(steps, subjects, kinds=kinds)
    if maintenance is not None:
        resolve = maintenance_resolver(maintenance["applied_records"])
        after = grouping_scores(steps, maintenance.pop("subjects"), resolve, kinds=maintenance.pop("kinds"))
        episode["maintenance"] = {**maintenance, "after": after}
    return episode


# ----------------------------------------------------------------------------- cost
class Meter:
    """The organizer's calls, reported tokens and seconds over a block (``with meter: …``)."""

    def __init__(self, organizer) -> None:
        self.organizer = organizer
        self.cost = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "seconds": 0.0}

    def _now(self) -> tuple[int, int, int]:
        o = self.organizer
        return (getattr(o, "requests", 0) or 0, getattr(o, "prompt_tokens", 0) or 0,
                getattr(o, "completion_tokens", 0) or 0)

    def __enter__(self) -> "Meter":
        self._start, self._clock = self._now(), time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        end = self._now()
        for key, a, b in zip(("calls", "prompt_tokens", "completion_tokens"), self._start, end):
            self.cost[key] += b - a
        self.cost["seconds"] += time.perf_counter() - self._clock


# ----------------------------------------------------------------------------- the world
def world_steps(sliced: Slice, run, options: Mapping[str, list[str]], attempted: int) -> list[Step]:
    """The steps of ``organize_messages``'s run over the first ``attempted`` messages of the slice.

    The options proposed when a question was created are its options now less the values later steps
    added (``remember`` adds a later value to an open question, never to the question's record)."""
    results = {r.message: r for r in run.results}
    failed = {f.split(": ", 1)[0] for f in run.failures}
    steps: list[Step] = []
    later: dict[str, set[str]] = {}  # question → values added by the steps after the one looked at
    added_later: dict[str, dict[str, set[str]]] = {}  # message → {question it created: values added after}
    rows = []
    for pairs in sliced.messages[:attempted]:
        message, main = pairs[0].message, pairs[0].question
        result = results.get(message["id"])
        if result is None and message["id"] not in failed:
            break  # the time budget stopped the run here
        rows.append((pairs[0], result))
    for pair, result in reversed(rows):  # the values each question gets after its creating step
        if result is not None:
            added_later[result.message] = {q: set(later.get(q, ())) for q in result.created}
            for q, values in result.values_added.items():
                later.setdefault(q, set()).update(values)
    for pair, result in rows:
        stated = pair.truth if pair.truth not in (UNCLEAR, UNRELATED) else None
        step = Step(message=pair.message["id"], gold=pair.question["id"], person=pair.question["subject"],
                    stated=stated, failed=result is None)
        if result is not None:
            step.questions = list(dict.fromkeys([*result.linked, *result.created]))
            step.created = list(result.created)
            after = added_later[result.message]
            proposed = [o for q in result.created for o in options.get(q, []) if o not in after[q]]
            proposed += [v for values in result.values_added.values() for v in values]
            step.proposed = list(dict.fromkeys(proposed))
        steps.append(step)
    return steps


def stored_options(store) -> dict[str, list[str]]:
    """Every question's options as stored (an open question's ``unlisted`` state left out)."""
    from doxa.data.evidence import UNLISTED

    return {q: [o for o in opts if o != UNLISTED]
            for q, opts in store.execute("SELECT id, options FROM questions").fetchall()}


def world_episode(organizer, sliced: Slice, db: str, *, max_messages: int, seconds_budget: float,
                  apply_above: float | None, progress: bool = True,
                  name: str = "world") -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The generated world's episode (see the module docstring) and its gold cases (:func:`gold_cases`,
    taken before maintenance changes the store); ``apply_above`` None: no maintenance."""
    import doxa

    meter = Meter(organizer)
    with meter:
        run, _ = organize_messages(organizer, sliced, db, max_messages=max_messages, seconds_budget=seconds_budget,
                                   progress=progress)
    memory = doxa.open(db)
    try:
        options = stored_options(memory.store)
        steps = world_steps(sliced, run, options, max_messages)
        cases = gold_cases(steps, memory.store, name)
        subjects, kinds = question_subjects(memory.store), question_kinds(memory.store)
        maintenance = run_maintenance(memory, apply_above) if apply_above is not None else None
    finally:
        memory.close()
    episode = {"episode": name, "kind": "world", "people": len(sliced.people), "stopped_by": run.stopped_by,
               "instructions_version": run.results[0].instructions_version if run.results else None,
               "cost": _rounded(meter.cost), "failure_examples": run.failures[:5],
               "gold_cases": gold_case_summary(cases)}
    return _with_maintenance(episode, steps, subjects, kinds, maintenance), cases


# ----------------------------------------------------------------------------- gold cases
def gold_cases(steps: list[Step], store, episode: str, *, unrelated_expect_nothing: bool = True
               ) -> list[dict[str, Any]]:
    """The world's truth as cases instruction search can score (``doxa organizer-instructions search --cases``;
    docs/formats.md, "Organizer cases"): one per step with a gold question and a kept decision, expecting
    what the gold says the step should have done with what its request showed.

    With ``match`` (:func:`match_questions`) and the shown questions ``S`` of the step's kept decision:
    *right* ``R = {q ∈ S : match(q) = gold}``, *wrong* ``W = S − R``. When ``R`` is not empty the
    message should link one of them (``links_one_of: R``); when it is empty (the gold question was not made
    yet, or retrieval did not show it) it should create a question about the gold person (``creates``,
    ``subject_one_of``). Either way it should neither link nor create any of ``W`` (``not_links: W``). A step
    bearing on nothing the gold knows expects nothing made (``nothing``), where ``unrelated_expect_nothing``
    (the world's: every message of its stream bears on a question it knows); in a conversation such a turn
    gives no case (it may tell something worth tracking that the benchmark's one question does not ask). A
    failed step, or one with no kept decision, gives no case."""
    from doxa.data import organizer_decisions as kept_data
    from doxa.inference.agent.instruction_search import judge
    from doxa.inference.agent.organizer_memory import GOLD, WORLD, Case

    match = match_questions(steps)
    decided: dict[str, dict[str, Any]] = {}
    for d in kept_data.decisions(store, messages=[s.message for s in steps]):
        if d["instructions_version"] is not None:  # a replay has none
            for m in d["messages"]:
                decided[m] = d
    out = []
    for step in steps:
        decision = decided.get(step.message)
        if step.failed or decision is None or (step.gold is None and not unrelated_expect_nothing):
            continue
        shown = [q["id"] for q in decision["request"].get("questions", [])]
        right = [q for q in shown if step.gold is not None and match.get(q) == step.gold]
        wrong = [q for q in shown if q not in right]
        if step.gold is None:
            expected: dict[str, Any] = {"nothing": True}
            observed = "bears on nothing the gold knows"
        elif right:
            expected = {"links_one_of": right, "not_links": wrong}
            observed = f"bears on {step.gold}, made as {', '.join(right)} and shown"
        else:
            expected = {"creates": True, "not_links": wrong}
            if step.person is not None:
                expected["subject_one_of"] = [step.person]
            observed = f"bears on {step.gold}, not among the questions shown"
        case = Case(f"{GOLD}:{episode}:{step.message}", GOLD, decision["key"], [step.message], right, observed,
                    expected, WORLD)
        row = case.to_dict()
        row["right_when_kept"] = judge(case, decision, decision["output"])
        out.append(row)
    return out


def gold_case_summary(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """How many gold cases, by what they expect, and how many the kept decisions got right."""
    kinds = Counter("link" if "links_one_of" in c["expected"] else "create" if c["expected"].get("creates")
                    else "nothing" for c in cases)
    right = sum(c["right_when_kept"] for c in cases)
    return {"cases": len(cases), "by_expected": dict(sorted(kinds.items())), "right_when_kept": right,
            "rate": right / len(cases) if cases else None}


def _file_safe(name: str) -> str:
    """A record id as a file name's part: letters, digits, ``-``, ``_`` and ``.`` kept, the rest ``_``."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)[:100] or "record"


def write_cases(cases: list[dict[str, Any]], path: Path) -> None:
    """Write gold cases as JSON Lines (the fields ``read_cases`` takes; ``right_when_kept`` left out)."""
    with open(path, "w", encoding="utf-8") as f:
        for c in cases:
            f.write(json.dumps({k: v for k, v in c.items() if k != "right_when_kept"}, ensure_ascii=False) + "\n")


# ----------------------------------------------------------------------------- conversations
def conversation_steps(record, store) -> list[Step]:
    """One step per user turn of a LongMemEval record, from each turn's remembered state: the questions
    the organizer named for it; a question counts as created by the first turn naming it (the store
    started with none). A turn still waiting for the organizer (its window failed) is a failure."""
    from doxa.data import remembered
    from doxa.inference.agent.conversation import turn_message_id

    turns = list(record.user_turns)
    ids = [turn_message_id(t.session, t.index) for t in turns]
    states = {row["message"]: row for row in remembered.pending_messages(store, message_ids=ids, status=None)}
    seen: set[str] = set()
    steps = []
    for turn, mid in zip(turns, ids):
        state = states.get(mid)
        failed = state is None or (state["status"] == remembered.PENDING and state["waiting_for"] == "organizer")
        questions = [] if failed else list(dict.fromkeys(state["questions"] or []))
        created = [q for q in questions if q not in seen]
        seen |= set(questions)
        steps.append(Step(message=mid, gold=record.id if turn.has_answer else None, questions=questions,
                          created=created, failed=failed))
    return steps


def conversation_episode(organizer, record, *, window: int, apply_above: float | None,
                         db: str = ":memory:") -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One LongMemEval record's episode (see the module docstring) and its gold cases (:func:`gold_cases`:
    its answer turns; ``db``, a file, keeps the store the cases' decisions are in)."""
    import doxa
    from doxa.inference.agent.remember import RememberError

    from conversations import conversation_sessions

    memory = doxa.open(db, log_reads=False)
    meter = Meter(organizer)
    failures = []
    try:
        with meter:
            try:
                memory.remember_conversation(conversation_sessions(record), organizer=organizer, reader=None,
                                             window=window, use_env=False)
            except RememberError as err:
                failures.append(str(err)[:500])
        steps = conversation_steps(record, memory.store)
        name = f"longmemeval:{record.id}"
        cases = gold_cases(steps, memory.store, name, unrelated_expect_nothing=False)
        subjects, kinds = question_subjects(memory.store), question_kinds(memory.store)
        maintenance = run_maintenance(memory, apply_above) if apply_above is not None else None
    finally:
        memory.close()
    episode = {"episode": f"longmemeval:{record.id}", "kind": "conversation", "category": record.category,
               "answer_turns": sum(s.gold is not None for s in steps), "cost": _rounded(meter.cost),
               "failure_examples": failures, "gold_cases": gold_case_summary(cases)}
    return _with_maintenance(episode, steps, subjects, kinds, maintenance), cases


def pooled(episodes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Conversation episodes together: step scores pooled, B-cubed the episodes' mean, counts and cost summed."""
    if not episodes:
        return None

    def steps_of(parts: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {"steps": sum(p["steps"] for p in parts), "failures": sum(p["failures"] for p in parts)}
        for key in ("action", "question", "question_any", "subject", "option"):
            right, n = sum(p[key]["right"] for p in parts), sum(p[key]["n"] for p in parts)
            out[key] = _rate(right, n)
        confusion: dict[str, Counter] = {}
        for p in parts:
            for g, row in p["confusion"].items():
                confusion.setdefault(g, Counter()).update(row)
        out["confusion"] = {g: dict(c) for g, c in confusion.items()}
        return out

    def grouping_of(parts: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in ("bcubed", "bcubed_gold"):
            scored = [p[key] for p in parts if p[key]["n"]]
            out[key] = {m: (sum(b[m] for b in scored) / len(scored) if scored else None)
                        for m in ("precision", "recall", "f1")}
            out[key]["n"] = sum(b["n"] for b in scored)
        for key, value in parts[0].items():
            if key not in out and isinstance(value, int):
                out[key] = sum(p[key] for p in parts)
        subject = [p["subject_accuracy"] for p in parts if p["subject_accuracy"] is not None]
        out["subject_accuracy"] = sum(subject) / len(subject) if subject else None
        return out

    cost = {k: sum(e["cost"][k] for e in episodes) for k in episodes[0]["cost"]}
    out = {"episode": f"longmemeval ({len(episodes)} records)", "kind": "conversations", "records": len(episodes),
           "answer_turns": sum(e["answer_turns"] for e in episodes), "cost": _rounded(cost),
           "steps": steps_of([e["steps"] for e in episodes]),
           "grouping": grouping_of([e["grouping"] for e in episodes])}
    if all("maintenance" in e for e in episodes):
        out["maintenance"] = {"apply_above": episodes[0]["maintenance"]["apply_above"],
                              "proposed": sum(e["maintenance"]["proposed"] for e in episodes),
                              "applied": sum(e["maintenance"]["applied"] for e in episodes),
                              "not_applied": sum(e["maintenance"]["not_applied"] for e in episodes),
                              "after": grouping_of([e["maintenance"]["after"] for e in episodes])}
    return out


# ----------------------------------------------------------------------------- report
def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


COLUMNS = ("messages", "failures", "action", "question", "subject", "option", "B³ P", "B³ R", "B³ F1",
           "B³ F1 gold", "merges needed", "splits needed", "duplicates", "wrong-subject Qs", "found / gold",
           "spurious Qs", "unlinked", "calls", "prompt tok", "completion tok", "seconds")


def _row(name: str, episode: dict[str, Any], grouping: dict[str, Any], with_steps: bool) -> str:
    steps, cost = episode["steps"], episode["cost"]
    cells = [name, grouping["messages"] if "messages" in grouping else steps["steps"]]
    cells += [steps["failures"]] + [steps[k]["rate"] if with_steps else None
                                    for k in ("action", "question", "subject", "option")]
    b, bg = grouping["bcubed"], grouping["bcubed_gold"]
    cells += [b["precision"], b["recall"], b["f1"], bg["f1"], grouping["merges_needed"], grouping["splits_needed"],
              grouping["duplicates"], grouping["wrong_subject_questions"],
              f"{grouping['gold_questions_found']} / {grouping['gold_questions']}", grouping["spurious_questions"],
              grouping["unlinked"]]
    cost_cells = [cost["calls"], cost["prompt_tokens"], cost["completion_tokens"], cost["seconds"]]
    cells += cost_cells if with_steps else [None] * len(cost_cells)
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def markdown(report: dict[str, Any]) -> str:
    org = report["organizer"]
    lines = [f"Organizer {org['name']} (model {org['model']}, response_format {org.get('response_format') or 'none'}, "
             f"instructions v{org.get('instructions_version')}), seed {report['seed']}.", "",
             "| episode | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    shown = report["episodes"] if len(report["episodes"]) <= 12 else [
        e for e in report["episodes"] if e["kind"] == "world"]
    if report.get("conversations") and report["conversations"] not in shown:
        shown = shown + [report["conversations"]]
    for e in shown:
        lines.append(_row(e["episode"], e, e["grouping"], True))
        if "maintenance" in e:
            lines.append(_row("  after maintenance", e, e["maintenance"]["after"], False))
    lines += ["", "Rates: action, question (steps with a gold question), subject (steps whose person is known), "
              "option (steps stating an option where the organizer proposed some); B³ over every message, "
              "'B³ F1 gold' over the messages with a gold question; failures score 0 "
              "(the docstring of bench/organizer.py)."]
    for e in shown:
        conf = e["steps"]["confusion"]
        lines += ["", f"{e['episode']}: actions (gold → organizer): " + "; ".join(
            f"{g} → " + ", ".join(f"{d} {n}" for d, n in row.items()) for g, row in conf.items())]
        m = e.get("maintenance")
        if m:
            before, after = e["grouping"], m["after"]
            lines.append(f"maintenance (--apply-above {m['apply_above']}): {m['proposed']} proposed, {m['applied']} "
                         f"applied, {m['not_applied']} refused; duplicates {before['duplicates']} → "
                         f"{after['duplicates']} (of them with the subject and kind of another: "
                         f"{before.get('duplicates_same_kind', '—')} → "
                         f"{after.get('duplicates_same_kind', '—')}), "
                         f"wrong-subject questions {before['wrong_subject_questions']} → "
                         f"{after['wrong_subject_questions']}, merges needed {before['merges_needed']} → "
                         f"{after['merges_needed']}, B³ F1 {_cell(before['bcubed']['f1'])} → "
                         f"{_cell(after['bcubed']['f1'])}.")
        for f in e.get("failure_examples") or []:
            lines.append(f"failure: {f[:300]}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("DOXA_ORGANIZER_URL") or os.environ.get(
        "DOXA_READER_URL", "http://127.0.0.1:8765/v1"), help="OpenAI-compatible base URL (default "
                        "$DOXA_ORGANIZER_URL, else $DOXA_READER_URL, else port 8765)")
    parser.add_argument("--model", default=os.environ.get("DOXA_ORGANIZER_MODEL") or os.environ.get(
        "DOXA_READER_MODEL", "organizer"))
    parser.add_argument("--world", default="tiny", help="world preset or config JSON (default tiny)")
    parser.add_argument("--messages", type=int, default=100,
                        help="world messages to organize (default 100; 0: no world episode)")
    parser.add_argument("--minutes", type=float, default=30.0, help="stop the world episode after this long")
    parser.add_argument("--data", default=None, help="LongMemEval folder or file: conversation episodes too")
    parser.add_argument("--limit", type=int, default=5, help="LongMemEval records at most, taken in turn from each "
                        "category (default 5; 0: all)")
    parser.add_argument("--window", type=int, default=None,
                        help="user turns per organizer call in conversations (default remember_conversation's)")
    parser.add_argument("--maintain", action="store_true",
                        help="run maintenance (doxa organize --maintain) after each episode and score again")
    parser.add_argument("--apply-above", type=float, default=APPLY_ABOVE,
                        help=f"with --maintain: apply the proposals scoring at least this (default {APPLY_ABOVE})")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per call before a retry")
    parser.add_argument("--structured", default="auto", choices=("auto", "schema", "object", "none"),
                        help="how the organizer sends its reply's schema (default auto)")
    parser.add_argument("--steps", action="store_true", help="organize in steps: each link checked by a narrow "
                        "call, and asked again with no question shown when none holds (OpenAIChatOrganizer.steps)")
    parser.add_argument("--out", default=None, help="folder for results.json and report.md")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if args.messages <= 0 and not args.data:
        raise SystemExit("nothing to measure: give --messages N for the world, or --data for conversations")

    from doxa.inference.agent.conversation import DEFAULT_WINDOW
    from doxa.inference.agent.organizer_client import OpenAIChatOrganizer

    organizer = OpenAIChatOrganizer(url=args.url, model=args.model, timeout_s=args.timeout, retries=1,
                                    structured=args.structured, steps=args.steps)
    apply_above = args.apply_above if args.maintain else None
    progress = not args.no_progress and not args.json
    out = Path(args.out) if args.out else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    episodes: list[dict[str, Any]] = []
    world_name = None
    if args.messages > 0:
        from doxa.inference.evaluation.world import generate_world
        from doxa.inference.evaluation.world_config import WorldConfig

        config = WorldConfig.load(args.world) if Path(args.world).is_file() else WorldConfig.preset(args.world)
        world_name = config.name
        sliced = world_slice(generate_world(config), args.messages, seed=args.seed)
        with tempfile.TemporaryDirectory() as tmp:
            db = str((out or Path(tmp)) / "organized.duckdb")
            if Path(db).exists():
                raise SystemExit(f"{db} exists: the bench writes a fresh store; pass another --out or delete it")
            episode, cases = world_episode(organizer, sliced, db, max_messages=args.messages,
                                           seconds_budget=args.minutes * 60, apply_above=apply_above,
                                           progress=progress, name=f"world:{world_name}")
        episodes.append(episode)
        if out:
            write_cases(cases, out / "gold_cases.jsonl")
    if args.data:
        from conversations import load_records, spread

        records = spread(load_records(args.data), args.limit or None)
        for i, record in enumerate(records, start=1):
            if progress:
                print(f"conversation {i}/{len(records)}: {record.id}", file=sys.stderr)
            stem = f"conversation-{_file_safe(record.id)}"
            db = str(out / f"{stem}.duckdb") if out else ":memory:"
            if out and Path(db).exists():
                raise SystemExit(f"{db} exists: the bench writes a fresh store; pass another --out or delete it")
            episode, cases = conversation_episode(organizer, record, window=args.window or DEFAULT_WINDOW,
                                                  apply_above=apply_above, db=db)
            episodes.append(episode)
            if out:
                write_cases(cases, out / f"{stem}.gold_cases.jsonl")
    version = next((e.get("instructions_version") for e in episodes if e.get("instructions_version")), None)
    report = {
        "organizer": {"name": organizer.name, "model": args.model, "url": args.url, "structured": args.structured,
                      "steps": args.steps,
                      "response_format": organizer.response_format, "instructions_version": version,
                      "tokens_counted": True},
        "world": world_name, "messages": args.messages, "seed": args.seed, "data": args.data,
        "window": args.window or DEFAULT_WINDOW if args.data else None,
        "maintain": args.maintain, "apply_above": apply_above,
        "episodes": [_rounded(e) for e in episodes],
        "conversations": _rounded(pooled([e for e in episodes if e["kind"] == "conversation"])),
    }
    text = markdown(report)
    if out:
        (out / "results.json").write_text(json.dumps(report, indent=1, default=str))
        (out / "report.md").write_text(text + "\n")
    print(json.dumps(report, default=str) if args.json else text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
