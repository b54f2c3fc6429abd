"""doxa's reader on a real model: generated-world messages read by an LLM, against what they state.

Not a CI test: it needs a model server (scripts/setup_llm.sh, then scripts/llm_server.sh).

Protocol. A generated world (``doxa.inference.evaluation.world``, preset ``tiny`` by default) knows, for
every (message, question) pair it defines, what the message states: the option its
template wrote (lasting or one-off wording), *unclear* for a vague message ("… said
something about food, not sure what exactly"), *unrelated* for a cross pair (a message
about one question read against another question of the same person). The people are
drawn at random (seeded) until their messages cover ``--messages``; those messages, in
a seeded random order, are read by the reader through the server — every pair of a
message, the way ``remember`` reads it — until ``--messages`` are read or ``--minutes``
have passed. The readings go into a doxa store with the world's definitions and the
settlements of those people's questions (none of the world's simulated readings), and
``doxa train`` (``doxa.inference.learn.train.train``) fits it: the reader's temperature ``τ``
is learned from the settled facts alone, as in production.

Reported, for the raw reader and after ``τ`` (``r̃ ∝ r^(1/τ)``, the scorer's inverse map):

- *stated option*: pairs whose message states an option, the reading's option
  probabilities renormalised, against the stated option — the part ``τ`` acts on;
- *full reading*: every pair, options + unclear + unrelated, against the stated option,
  unclear or unrelated (after ``τ``: the options' share kept, redistributed by ``r̃``).

Accuracy, ECE (15 equal-mass bins, as ``doxa calibration``), log-loss (nats), plus the ECE
a perfectly calibrated reader with the same confidences would show from binning noise
alone; calls, seconds per call and per message, model and model file size.

    scripts/llm_server.sh 8765
    python bench/real_model.py --url http://127.0.0.1:8765/v1 --messages 300 --minutes 25 --out bench-real

Each measured part is one function (``world_slice``, ``read_pairs``, ``build_store``,
``learn_temperature``, ``reader_scores``), so further measurements (the organizer's) can
be added beside them.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

UNCLEAR, UNRELATED = "unclear", "unrelated"
#: Settlements per question per day in the bench's world: more than the preset's, so the
#: reader's temperature has outcomes to be learned from in a few hundred messages.
SETTLE_RATE = 0.03


# ----------------------------------------------------------------------------- the world's pairs


@dataclass(frozen=True)
class Pair:
    """One (message, question) pair and what the message states about the question."""

    message: dict[str, Any]
    question: dict[str, Any]
    subject_name: str
    truth: str  # an option, UNCLEAR or UNRELATED
    wording: str  # lasting | one_off | vague | cross (what the message's text is, for this question)


@dataclass
class Slice:
    """The part of a world the bench reads: its people's definitions, settlements and pairs."""

    world: Any
    people: list[str]
    definitions: list[dict[str, Any]]
    settlements: list[dict[str, Any]]
    messages: list[list[Pair]]  # one list of pairs per message, in reading order

    @property
    def n_pairs(self) -> int:
        return sum(len(m) for m in self.messages)


def pair_truths(world) -> list[tuple[str, str]]:
    """(what the message states, its wording) for every reading record of the world, in stream order.

    A message's first reading is its main question (the world writes it first); any other
    question of the same message is a cross pair, about which the text says nothing.
    """
    truth = world.truth.readings
    main_question: dict[str, str] = {}
    out: list[tuple[str, str]] = []
    readings = [r for r in world.records if r["type"] == "reading"]
    for i, record in enumerate(readings):
        main = main_question.setdefault(record["message"], record["question"])
        if main != record["question"]:
            out.append((UNRELATED, "cross"))
            continue
        options = world.truth.questions[record["question"]]["options"]
        stated = options[int(truth.stated[i])]
        # the world's texts(): a one-off wording wins over a vague one
        if truth.o[i] > 0.5:
            out.append((stated, "one_off"))
        elif truth.u[i] > 0.5:
            out.append((UNCLEAR, "vague"))
        else:
            out.append((stated, "lasting"))
    return out


def world_slice(world, n_messages: int, seed: int = 0, cross: int = 0) -> Slice:
    """People drawn at random until their messages number at least ``n_messages``; their pairs, shuffled by message.

    ``cross`` > 0 adds to each message up to that many more of its person's questions (drawn at
    random), about which the text says nothing: the questions an organizer may link a message to
    besides its own, read as ``remember`` reads them (and in one prompt with the batch path)."""
    rng = np.random.default_rng(seed)
    records = world.records
    questions = {r["id"]: r for r in records if r["type"] == "question"}
    messages = {r["id"]: r for r in records if r["type"] == "message"}
    subjects = {r["id"]: r for r in records if r["type"] == "subject"}
    readings = [r for r in records if r["type"] == "reading"]
    truths = pair_truths(world)

    pairs_of: dict[str, list[Pair]] = {}
    for record, (stated, wording) in zip(readings, truths):
        question = questions[record["question"]]
        pair = Pair(message=messages[record["message"]], question=question,
                    subject_name=subjects[question["subject"]]["name"], truth=stated, wording=wording)
        pairs_of.setdefault(record["message"], []).append(pair)
    subject_of_message = {m: pairs[0].question["subject"] for m, pairs in pairs_of.items()}
    per_person: dict[str, list[str]] = {}
    for message_id, subject in subject_of_message.items():
        per_person.setdefault(subject, []).append(message_id)

    people: list[str] = []
    chosen: list[str] = []
    for person in rng.permutation(sorted(per_person)).tolist():
        if len(chosen) >= n_messages:
            break
        people.append(person)
        chosen += per_person[person]
    chosen = [chosen[i] for i in rng.permutation(len(chosen))]

    if cross > 0:
        by_person: dict[str, list[str]] = {}
        for q, r in questions.items():
            by_person.setdefault(r["subject"], []).append(q)
        for message_id in chosen:
            pairs = pairs_of[message_id]
            person = pairs[0].question["subject"]
            taken = {p.question["id"] for p in pairs}
            others = [q for q in sorted(by_person.get(person, [])) if q not in taken]
            for q in rng.permutation(others)[: max(0, cross - (len(pairs) - 1))].tolist():
                pairs.append(Pair(message=pairs[0].message, question=questions[q], subject_name=pairs[0].subject_name,
                                  truth=UNRELATED, wording="cross"))

    keep_questions = {q for q, r in questions.items() if r["subject"] in set(people)}
    definitions = [r for r in records if r["type"] in ("subject", "relation", "source")
                   or (r["type"] == "question" and r["id"] in keep_questions)]
    settlements = [r for r in records if r["type"] == "settlement" and r["question"] in keep_questions]
    return Slice(world=world, people=people, definitions=definitions, settlements=settlements,
                 messages=[pairs_of[m] for m in chosen])


# ----------------------------------------------------------------------------- reading


@dataclass
class ReadRun:
    """What the reader returned for the messages it got to, and what it cost."""

    pairs: list[Pair] = field(default_factory=list)
    readings: list[Any] = field(default_factory=list)
    messages_read: int = 0
    calls: int = 0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)
    stopped_by: str = "all read"

    def summary(self) -> dict[str, Any]:
        return {"messages": self.messages_read, "pairs": len(self.pairs), "calls": self.calls,
                "seconds": round(self.seconds, 1),
                "seconds_per_call": round(self.seconds / self.calls, 2) if self.calls else None,
                "seconds_per_message": round(self.seconds / self.messages_read, 2) if self.messages_read else None,
                "failures": len(self.failures), "stopped_by": self.stopped_by}


def read_pairs(reader, sliced: Slice, *, max_messages: int, seconds_budget: float, progress: bool = True) -> ReadRun:
    """Read each message against each of its questions, whole messages at a time, within the budget.

    A pair the server fails on (after the reader's own retries) is recorded and left out;
    the message's other pairs are kept.
    """
    from doxa.inference.agent.readers import ReaderError

    run = ReadRun()
    todo = sliced.messages[:max_messages]
    bar = _progress(progress)
    task = bar.add_task("reading", total=len(todo)) if bar else None
    batched = getattr(reader, "batch", 1) > 1
    started = time.perf_counter()
    try:
        for pairs in _within_budget(todo, run, started, seconds_budget):
            sent = getattr(reader, "requests", None)
            if batched:  # the message's questions in as few calls as the reader's batch allows, as remember does
                try:
                    readings = reader.read_many(pairs[0].message["text"], [
                        (p.question["text"], list(p.question["options"]), p.subject_name) for p in pairs])
                except ReaderError as err:
                    run.failures.append(f"{pairs[0].message['id']} × {len(pairs)} questions: {err}")
                    readings = []
                run.pairs += pairs[: len(readings)]
                run.readings += readings
            else:
                for pair in pairs:
                    try:
                        reading = reader.read(pair.message["text"], pair.question["text"],
                                              list(pair.question["options"]), subject=pair.subject_name)
                    except ReaderError as err:
                        run.failures.append(f"{pair.message['id']} × {pair.question['id']}: {err}")
                        continue
                    run.pairs.append(pair)
                    run.readings.append(reading)
            # the reader's own count of HTTP requests (retries and second questions included)
            run.calls += (reader.requests - sent) if sent is not None else len(pairs)
            run.messages_read += 1
            _tick(bar, task, started, run.messages_read, "reading")
    finally:
        if bar:
            bar.stop()
    run.seconds = time.perf_counter() - started
    return run


def _within_budget(todo: list, run, started: float, seconds_budget: float):
    """The items of ``todo`` until ``seconds_budget`` has passed since ``started`` (then ``run.stopped_by`` says so)."""
    for item in todo:
        if time.perf_counter() - started > seconds_budget:
            run.stopped_by = f"time budget ({seconds_budget / 60:.0f} min)"
            return
        yield item


def _tick(bar, task, started: float, done: int, what: str) -> None:
    if bar:
        elapsed = time.perf_counter() - started
        bar.update(task, advance=1, description=f"{what} · {elapsed / max(done, 1):.1f} s/message")


def _progress(enabled: bool):
    if not enabled:
        return None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=Console(stderr=True), transient=True)
    bar.start()
    return bar



# ----------------------------------------------------------------------------- organizing


@dataclass
class OrganizeRun:
    """What the organizer made of the messages it got to (through ``remember``, no reader), and what it cost."""

    results: list[Any] = field(default_factory=list)
    world_question_of: dict[str, str] = field(default_factory=dict)  # message id → its world question
    subject_of_world_question: dict[str, str] = field(default_factory=dict)
    calls: int = 0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)
    stopped_by: str = "all organized"


def organize_messages(organizer, sliced: Slice, db: str, *, max_messages: int, seconds_budget: float,
                      progress: bool = True) -> tuple[OrganizeRun, dict[str, str]]:
    """``remember`` each message with the organizer alone, on a store that knows the world's people and
    sources but none of its questions: the organizer must create them. Returns the run and every
    question the store ends with (id → subject)."""
    import doxa
    from doxa.inference.agent.remember import RememberError, remember

    run = OrganizeRun()
    memory = doxa.open(db)
    try:
        memory.ingest([r for r in sliced.definitions if r["type"] in ("subject", "relation", "source")])
        todo = sliced.messages[:max_messages]
        bar = _progress(progress)
        task = bar.add_task("organizing", total=len(todo)) if bar else None
        started = time.perf_counter()
        try:
            for pairs in _within_budget(todo, run, started, seconds_budget):
                message, main = pairs[0].message, pairs[0].question
                before = organizer.requests
                try:
                    result = remember(memory, message["text"], source=message["source"], sent_at=message["sent_at"],
                                      organizer=organizer, reader=None, use_env=False, message_id=message["id"])
                except RememberError as err:
                    run.failures.append(f"{message['id']}: {err}")
                    continue
                finally:
                    run.calls += organizer.requests - before
                run.results.append(result)
                run.world_question_of[message["id"]] = main["id"]
                run.subject_of_world_question[main["id"]] = main["subject"]
                _tick(bar, task, started, len(run.results), "organizing")
        finally:
            if bar:
                bar.stop()
        run.seconds = time.perf_counter() - started
        questions = dict(memory.store.execute("SELECT id, subject FROM questions").fetchall())
    finally:
        memory.close()
    return run, questions


def organizer_scores(run: OrganizeRun, questions: dict[str, str]) -> dict[str, Any]:
    """Questions created against the world's, and how many of them are duplicates.

    Each created question is matched to the world question most of the messages linking it are
    about; a world question matched by more than one created question has duplicates (all but one
    count). A message is *on subject* when it links at least one question about its world
    question's person, *unlinked* when it links none.
    """
    from collections import Counter

    linked_by: dict[str, Counter] = {}
    on_subject = unlinked = new_subjects = 0
    for result in run.results:
        world_q = run.world_question_of[result.message]
        ids = list(dict.fromkeys([*result.linked, *result.created]))
        new_subjects += len(result.new_subjects)
        if not ids:
            unlinked += 1
        if any(questions.get(q) == run.subject_of_world_question[world_q] for q in ids):
            on_subject += 1
        for q in ids:
            linked_by.setdefault(q, Counter())[world_q] += 1
    matched: Counter = Counter()
    wrong_subject = 0
    for q, counts in linked_by.items():
        world_q = counts.most_common(1)[0][0]
        matched[world_q] += 1
        wrong_subject += questions.get(q) != run.subject_of_world_question[world_q]
    created = sum(len(r.created) for r in run.results)
    duplicates = sum(n - 1 for n in matched.values())
    world_questions = len(set(run.world_question_of.values()))
    n = len(run.results)
    return {"messages": n, "world_questions": world_questions, "questions_created": created,
            "world_questions_found": len(matched), "duplicates": duplicates,
            "duplicate_rate": round(duplicates / max(len(linked_by), 1), 3),
            "questions_about_another_person": int(wrong_subject),
            "messages_on_subject": on_subject, "messages_unlinked": unlinked, "new_subjects": new_subjects,
            "calls": run.calls, "seconds": round(run.seconds, 1),
            "seconds_per_message": round(run.seconds / n, 2) if n else None,
            "calls_per_message": round(run.calls / n, 2) if n else None,
            "failures": len(run.failures), "stopped_by": run.stopped_by}


# ----------------------------------------------------------------------------- store and τ


def build_store(sliced: Slice, run: ReadRun, db: str):
    """A doxa store with the slice's definitions, the messages read, their readings and the settlements."""
    from doxa.data.store import Store

    store = Store.open(db)
    seen: set[str] = set()
    records: list[dict[str, Any]] = list(sliced.definitions)
    for pair, reading in zip(run.pairs, run.readings):
        if pair.message["id"] not in seen:
            seen.add(pair.message["id"])
            records.append(pair.message)
        records.append(reading.to_record(pair.message["id"], pair.question["id"]))
    records += sliced.settlements
    store.ingest_records(records)
    return store


def learn_temperature(store, reader_name: str, *, seed: int = 0, max_steps: int = 3000) -> dict[str, Any]:
    """``doxa train`` on the store; the reader's fitted temperature (posterior geometric mean, 90% interval)."""
    from doxa.inference.learn.train import train

    result = train(store, fit_options={"max_steps": max_steps}, folds=0, seed=seed, progress=False)
    entry = result.document["readers"][reader_name]
    diag = result.document["diagnostics"]
    return {"temperature": entry["temperature"], "lo": entry.get("lo"), "hi": entry.get("hi"),
            "train_seconds": round(result.seconds, 1), "steps": diag.get("steps"),
            "converged": diag.get("converged"), "n_readings": diag.get("n_readings"),
            "n_settlements": diag.get("n_settlements"), "version": result.version}


# ----------------------------------------------------------------------------- scores


def reading_arrays(pairs: list[Pair], readings: list[Any]) -> dict[str, np.ndarray]:
    """Readings as arrays: option probabilities (padded with 0), unclear, unrelated, and the truth's column."""
    k_max = max(len(p.question["options"]) for p in pairs)
    n = len(pairs)
    options = np.zeros((n, k_max))
    unclear = np.zeros(n)
    unrelated = np.zeros(n)
    truth = np.zeros(n, dtype=np.int64)  # < k_max: an option; k_max: unclear; k_max + 1: unrelated
    for i, (pair, reading) in enumerate(zip(pairs, readings)):
        opts = list(pair.question["options"])
        options[i, : len(opts)] = [reading.probs[o] for o in opts]
        unclear[i], unrelated[i] = reading.unclear, reading.unrelated
        if pair.truth == UNCLEAR:
            truth[i] = k_max
        elif pair.truth == UNRELATED:
            truth[i] = k_max + 1
        else:
            truth[i] = opts.index(pair.truth)
    return {"options": options, "unclear": unclear, "unrelated": unrelated, "truth": truth,
            "wording": np.asarray([p.wording for p in pairs])}


def tempered(options: np.ndarray, temperature: float) -> np.ndarray:
    """``r̃ ∝ r^(1/τ)`` over each row's options (the scorer's inverse of the reader's temperature)."""
    with np.errstate(divide="ignore"):
        logs = np.where(options > 0, np.log(np.where(options > 0, options, 1.0)), -np.inf) / temperature
    logs -= logs.max(axis=1, keepdims=True)
    weights = np.exp(logs)
    return weights / weights.sum(axis=1, keepdims=True)


def reader_scores(arrays: dict[str, np.ndarray], temperature: float | None) -> dict[str, Any]:
    """Accuracy, ECE, log-loss: stated option (options only) and full reading, raw and after ``τ``."""
    from doxa.inference.learn.metrics import calibration_metrics as metrics

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from crowd import ece_noise_floor

    options, truth = arrays["options"], arrays["truth"]
    k_max = options.shape[1]
    stated = truth < k_max
    option_share = options.sum(axis=1, keepdims=True)
    normalised = options / np.where(option_share > 0, option_share, 1.0)

    def full(option_probs: np.ndarray) -> np.ndarray:
        return np.column_stack([option_probs * option_share, arrays["unclear"], arrays["unrelated"]])

    def scored(probs: np.ndarray, answer: np.ndarray) -> dict[str, float]:
        out = metrics(probs, answer) if len(answer) else {"n": 0}
        if len(answer):
            out["ece_noise_floor"] = ece_noise_floor(probs)
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}

    result: dict[str, Any] = {
        "stated_option": {"raw": scored(normalised[stated], truth[stated])},
        "full_reading": {"raw": scored(full(normalised), truth)},
    }
    if temperature is not None:
        warmed = tempered(options, temperature)
        result["stated_option"]["after_tau"] = scored(warmed[stated], truth[stated])
        result["full_reading"]["after_tau"] = scored(full(warmed), truth)
    by_wording = {}
    dist = full(normalised)
    for wording in ("lasting", "one_off", "vague", "cross"):
        rows = arrays["wording"] == wording
        if rows.any():
            by_wording[wording] = {"n": int(rows.sum()),
                                   "accuracy": round(float((dist[rows].argmax(1) == truth[rows]).mean()), 3),
                                   "mean_p_truth": round(float(dist[rows, truth[rows]].mean()), 3)}
    result["by_wording"] = by_wording
    return result


# ----------------------------------------------------------------------------- report


def markdown(report: dict[str, Any]) -> str:
    run, tau = report["reading"], report.get("temperature") or {}
    lines = [f"Model: {report['model']['name']} ({report['model']['file_size_mb']} MB), reader "
             f"{report['reader']['name']} {report['reader']['version']}"
             f"{', up to %d questions a prompt' % report['reader']['batch'] if report['reader'].get('batch', 1) > 1 else ''}"
             f", world {report['world']} "
             f"({len(report['people'])} people).",
             f"Read {run['messages']} messages = {run['pairs']} pairs in {run['calls']} calls, "
             f"{run['seconds']:.0f} s: {run['seconds_per_call']} s/call, {run['seconds_per_message']} s/message "
             f"({run['failures']} failed pairs; stopped by {run['stopped_by']}).", ""]
    if tau:
        lines.append(f"Learned reader temperature τ = {tau['temperature']:.3f} (90% {tau['lo']:.3f}–{tau['hi']:.3f}) "
                     f"from {tau['n_settlements']} settlements and {tau['n_readings']} readings, "
                     f"`doxa train` {tau['train_seconds']} s.")
        lines.append("")
    lines += ["| pairs | scored against | when | n | accuracy | ECE | ECE noise floor | log-loss |",
              "|---|---|---|---|---|---|---|---|"]
    for part, label in (("stated_option", "stated option (options only)"),
                        ("full_reading", "stated / unclear / unrelated")):
        for when in ("raw", "after_tau"):
            m = report["scores"][part].get(when)
            if m and m.get("n"):
                lines.append(f"| {'stating an option' if part == 'stated_option' else 'all'} | {label} | "
                             f"{'raw' if when == 'raw' else 'after τ'} | {m['n']} | {m['accuracy']:.3f} | "
                             f"{m['ece']:.3f} | {m['ece_noise_floor']:.3f} | {m['log_loss']:.3f} |")
    org = report.get("organizer")
    if org:
        lines += ["", f"Organizer {org['name']} (instructions v{org['instructions_version']}, response_format "
                  f"{org.get('response_format') or 'none'}): {org['messages']} messages "
                  f"in {org['calls']} calls, {org['seconds']:.0f} s ({org['seconds_per_message']} s/message, "
                  f"{org['calls_per_message']} calls/message; {org['failures']} failed; stopped by {org['stopped_by']}). "
                  f"The messages are about {org['world_questions']} world questions: {org['questions_created']} "
                  f"questions created, {org['world_questions_found']} world questions found, {org['duplicates']} "
                  f"duplicates (rate {org['duplicate_rate']}), {org['questions_about_another_person']} about the wrong "
                  f"person; {org['messages_on_subject']} messages linked on subject, {org['messages_unlinked']} "
                  f"linked nothing; {org['new_subjects']} new subjects (the world's people were all known)."]
    lines += ["", "By wording (raw full reading): " + ", ".join(
        f"{w} n={v['n']} acc {v['accuracy']:.2f} p(truth) {v['mean_p_truth']:.2f}"
        for w, v in report["scores"]["by_wording"].items())]
    return "\n".join(lines)


def load_reader_class(spec: str):
    """``path/to/file.py:ClassName`` → the class (a Reader subclass taking OpenAIChatReader's arguments)."""
    path, _, name = spec.rpartition(":")
    if not path or not name:
        raise SystemExit(f"--reader-class: expected FILE.py:ClassName, got {spec!r}")
    module_spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    if module_spec is None or module_spec.loader is None:
        raise SystemExit(f"--reader-class: cannot load {path}")
    module = importlib.util.module_from_spec(module_spec)
    sys.path.insert(0, str(Path(path).resolve().parent))
    module_spec.loader.exec_module(module)
    return getattr(module, name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("DOXA_READER_URL", "http://127.0.0.1:8765/v1"),
                        help="OpenAI-compatible base URL (default $DOXA_READER_URL, else port 8765)")
    parser.add_argument("--model", default=os.environ.get("DOXA_READER_MODEL", "reader"))
    parser.add_argument("--model-file", default=os.path.expanduser(
        "~/.cache/doxa-llm/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"), help="the served GGUF, for the size reported")
    parser.add_argument("--world", default="tiny", help="world preset or config JSON (default tiny)")
    parser.add_argument("--settle-rate", type=float, default=SETTLE_RATE,
                        help="settlements per question per day (every question settled)")
    parser.add_argument("--messages", type=int, default=300, help="messages to read at most")
    parser.add_argument("--minutes", type=float, default=25.0, help="stop reading new messages after this long")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-one-off", action="store_true", help="skip the reader's one-off digit")
    parser.add_argument("--cross", type=int, default=0,
                        help="read each message against up to this many other questions of its person too (default 0)")
    parser.add_argument("--batch", type=int, default=1,
                        help="questions of one message per prompt (the reader's batch path; default 1)")
    parser.add_argument("--reader-class", default=None,
                        help="FILE.py:Class, an OpenAIChatReader subclass to measure instead (e.g. another prompt)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per call before a retry")
    parser.add_argument("--out", default="bench-real", help="folder for store.duckdb, readings and report")
    parser.add_argument("--organizer-messages", type=int, default=0,
                        help="also run the organizer (through remember) on this many messages first (default 0: off)")
    parser.add_argument("--organizer-minutes", type=float, default=15.0, help="time budget of the organizer part")
    parser.add_argument("--structured", default="auto", choices=("auto", "schema", "object", "none"),
                        help="how the organizer sends its reply's schema (OpenAIChatOrganizer.structured; default auto)")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)

    from doxa.inference.evaluation.world import generate_world
    from doxa.inference.evaluation.world_config import WorldConfig
    from doxa.inference.agent.readers import OpenAIChatReader

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    db = out / "store.duckdb"
    if db.exists():
        raise SystemExit(f"{db} exists: the bench writes a fresh store; pass another --out or delete it")

    config = WorldConfig.load(args.world) if Path(args.world).is_file() else WorldConfig.preset(args.world)
    config = config.with_overrides(settlements={"rate_per_day": args.settle_rate, "question_share": 1.0})
    world = generate_world(config)
    sliced = world_slice(world, args.messages, seed=args.seed, cross=args.cross)

    organizer_report = None
    if args.organizer_messages:
        from doxa.inference.agent.organizer_client import OpenAIChatOrganizer

        organizer = OpenAIChatOrganizer(url=args.url, model=args.model, timeout_s=args.timeout, retries=1,
                                        structured=args.structured)
        org_run, org_questions = organize_messages(organizer, sliced, str(out / "organized.duckdb"),
                                                   max_messages=args.organizer_messages,
                                                   seconds_budget=args.organizer_minutes * 60,
                                                   progress=not args.no_progress)
        version = org_run.results[0].instructions_version if org_run.results else None
        organizer_report = {"name": organizer.name, "instructions_version": version,
                            "structured": args.structured, "response_format": organizer.response_format,
                            **organizer_scores(org_run, org_questions), "failure_examples": org_run.failures[:5]}

    reader_cls = load_reader_class(args.reader_class) if args.reader_class else OpenAIChatReader
    reader = reader_cls(url=args.url, model=args.model, timeout_s=args.timeout, retries=1,
                        ask_one_off=not args.no_one_off, **({"batch": args.batch} if args.batch > 1 else {}))
    run = read_pairs(reader, sliced, max_messages=args.messages, seconds_budget=args.minutes * 60,
                     progress=not args.no_progress)
    if not run.pairs:
        raise SystemExit("no pair was read: " + (run.failures[0] if run.failures else "nothing to read"))
    with open(out / "readings.jsonl", "w", encoding="utf-8") as handle:
        for pair, reading in zip(run.pairs, run.readings):
            handle.write(json.dumps({**reading.to_record(pair.message["id"], pair.question["id"]),
                                     "text": pair.message["text"], "truth": pair.truth,
                                     "wording": pair.wording}) + "\n")

    store = build_store(sliced, run, str(db))
    try:
        temperature = learn_temperature(store, reader.name, seed=args.seed)
    finally:
        store.close()
    model_file = Path(args.model_file)
    report = {
        "model": {"name": args.model, "file": str(model_file),
                  "file_size_mb": round(model_file.stat().st_size / 2**20) if model_file.exists() else None},
        "reader": {"name": reader.name, "version": reader.version, "one_off_question": not args.no_one_off,
                   "batch": getattr(reader, "batch", 1),
                   "versions_read": sorted({r.reader_version for r in run.readings})},
        "world": config.name, "seed": args.seed, "people": sliced.people,
        "settlements_in_store": len(sliced.settlements),
        "organizer": organizer_report,
        "reading": run.summary(), "failures": run.failures[:20],
        "temperature": temperature,
        "scores": reader_scores(reading_arrays(run.pairs, run.readings), temperature["temperature"]),
    }
    (out / "report.json").write_text(json.dumps(report, indent=1))
    text = markdown(report)
    (out / "report.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
