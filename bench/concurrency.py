"""Concurrency benchmark (issue 14): reads and ingests while `doxa train` fits. A script, not a test.

    nice -n 10 .venv/bin/python bench/concurrency.py --dir /tmp/conc            # 100k questions, 1M readings
    nice -n 10 .venv/bin/python bench/concurrency.py --dir /tmp/conc --questions 10000 --readings 100000
    nice -n 10 .venv/bin/python bench/concurrency.py --dir /tmp/conc --reuse    # the store already there

1. builds a store with bench/store_scale.py's generator (or reuses one);
2. **during a fit**: starts `doxa train`; once it reports the evidence loaded, 4 processes
   call `doxa belief` in a loop and 1 process ingests a small new file (one message, one
   reading) in a loop, until the train has published; then **idle**: the same loops for
   the same time with no train. Prints failed calls, lost reads (reads acknowledged but
   not in the log) and lost records (ingests acknowledged but not stored), and p50/p99 of
   the `doxa belief` latencies in both phases (goal: p99 during the fit ≤ 3× idle p99);
3. every belief at once in-process (`Memory.beliefs` with its read log, from the kept
   states the train published) against one scan of the readings table
   (`SELECT count(*), sum(unclear) FROM readings`) timed in the same run;
4. `doxa belief` right after one new message was ingested, as a fresh process, against the
   cold-start floor `python -c "import duckdb, numpy"` run right after it (the median of the
   --runs ratios, pair by pair);
5. the cost a long-lived owner pays for releasing the store between operations: one
   belief with the file held against one belief that opens and closes it;
6. **kill -9 at any moment**: the same loops, each `doxa belief` asking at a time of its own
   (``--at``, so its read can be found in the log) and each ingest writing three messages
   with their readings, while a `doxa train` runs; a share of every kind of process is
   SIGKILLed after a random delay (seeded), and so is the train. Then: every acknowledged
   read is in the log, every acknowledged ingest is stored whole, every killed ingest is
   stored whole or not at all, and every published version has its posterior file.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import store_scale as S  # noqa: E402

# PYTHONDONTWRITEBYTECODE is dropped: a user's doxa starts from its bytecode cache, as numpy and
# duckdb (compiled when installed) do in the floor it is measured against
ENV = {**{k: v for k, v in os.environ.items() if k not in ("DOXA_DB", "PYTHONDONTWRITEBYTECODE")},
       "DOXA_LOCK_TIMEOUT": "120"}


def doxa(*args: str) -> list[str]:
    return [*S.doxa_command(), *args]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else float("nan")


class Loops:
    """4 `doxa belief` loops and 1 small-ingest loop, each in its own thread driving processes.

    With ``kill_share`` > 0 (the kill phase) that share of the processes is SIGKILLed after a
    delay drawn uniformly from [0, ``kill_within[kind]``] s, unless it has ended by then (an
    ingest of the 1M store takes longer than a read, so its window is wider and some die after
    their commit); each read asks at a time of its own (``--at``) so that an acknowledged read
    can be found in the log, and each ingest writes ``MESSAGES_PER_KILLED_INGEST`` messages, so
    a half-stored file would show."""

    def __init__(self, db: str, work: Path, questions: list[str], tag: str, kill_share: float = 0.0,
                 kill_within: dict[str, float] | None = None, seed: int = 0):
        self.db, self.work, self.questions, self.tag = db, work, questions, tag
        self.kill_share, self.seed = kill_share, seed
        self.kill_within = kill_within or {"belief": 1.0, "ingest": 3.0}
        self.stop = threading.Event()
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self.reads = 0
        self.read_times: list[str] = []  # the --at of every acknowledged read (kill phase)
        self.ingested: list[str] = []
        self.killed_ingests: list[list[str]] = []
        self.killed = {"belief": 0, "ingest": 0}
        self.threads = [threading.Thread(target=self._reader, args=(i,)) for i in range(4)]
        self.threads.append(threading.Thread(target=self._ingester))

    def _call(self, command: list[str], rng: random.Random, kind: str) -> tuple[int, float, str]:
        """(exit code, seconds, stderr) of one process, killed at a random moment where drawn."""
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
        if self.kill_share and rng.random() < self.kill_share:
            try:
                process.wait(timeout=rng.uniform(0.0, self.kill_within[kind]))
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGKILL)
        _, err = process.communicate()
        return process.returncode, time.perf_counter() - start, err

    def _reader(self, i: int) -> None:
        rng = random.Random(self.seed * 100 + i)
        n = 0
        while not self.stop.is_set():
            question = self.questions[(i * 7919 + n) % len(self.questions)]
            n += 1
            command = doxa("belief", question, "--db", self.db, "--json")
            if self.kill_share:
                asked = (S.AT + timedelta(seconds=i * 1_000_000 + n)).isoformat()
                command += ["--at", asked]
            code, elapsed, err = self._call(command, rng, "belief")
            if code == -signal.SIGKILL:
                self.killed["belief"] += 1
            elif code != 0:
                self.failures.append(err.strip()[-300:])
            else:
                self.latencies.append(elapsed)
                self.reads += 1
                if self.kill_share:
                    self.read_times.append(asked)

    def _ingester(self) -> None:
        rng = random.Random(self.seed * 100 + 99)
        n = 0
        while not self.stop.is_set():
            mids = [f"conc-{self.tag}-{n}-{k}" for k in range(MESSAGES_PER_KILLED_INGEST if self.kill_share else 1)]
            path = self.work / f"{mids[0]}.jsonl"
            lines = []
            for k, mid in enumerate(mids):
                question = self.questions[(n + k) % len(self.questions)]
                lines.append({"type": "message", "id": mid, "source": "src00001",
                              "sent_at": (S.AT - timedelta(hours=1)).isoformat(), "text": f"benchmark message {mid}"})
                lines.append({"type": "reading", "message": mid, "question": question, "reader": "reader-1",
                              "probs": self.probs[question]})
            path.write_text("".join(json.dumps(line) + "\n" for line in lines))
            code, _, err = self._call(doxa("ingest", str(path), "--db", self.db), rng, "ingest")
            path.unlink()
            if code == -signal.SIGKILL:
                self.killed["ingest"] += 1
                self.killed_ingests.append(mids)
            elif code != 0:
                self.failures.append(err.strip()[-300:])
            else:
                self.ingested.extend(mids)
            n += 1

    def start(self, probs: dict[str, dict[str, float]]) -> "Loops":
        self.probs = probs
        for thread in self.threads:
            thread.start()
        return self

    def finish(self) -> "Loops":
        self.stop.set()
        for thread in self.threads:
            thread.join()
        return self


#: Messages (each with one reading) per ingest in the kill phase: a file cut short would show.
MESSAGES_PER_KILLED_INGEST = 3


def counted(db: str, ids: list[str]) -> tuple[int, int]:
    """(reads in the log, folded or pending; how many of ``ids`` are stored messages)."""
    from doxa.data.store import Store

    with Store.open(db) as store:
        reads = store.counts()["reads"]
        found = store.execute("SELECT count(*) FROM messages WHERE id IN (SELECT unnest(?))", [ids or [""]]
                              ).fetchone()[0]
    return reads, int(found)


def phase(db: str, work: Path, questions: list[str], probs, tag: str, train_args: list[str] | None,
          seconds: float | None) -> dict:
    reads_before, _ = counted(db, [])
    train = None
    if train_args is not None:
        train = subprocess.Popen(doxa("train", "--db", db, *train_args, "--json"), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=ENV)
        for line in train.stderr:
            if line.startswith("loaded "):
                break
    start = time.perf_counter()
    loops = Loops(db, work, questions, tag).start(probs)
    if train is not None:
        out, err = train.communicate()
        if train.returncode != 0:
            raise SystemExit(f"train failed: {err[-2000:]}")
        result = json.loads(out)
    else:
        time.sleep(seconds)
        result = None
    loops.finish()
    elapsed = time.perf_counter() - start
    reads_after, landed = counted(db, loops.ingested)
    return {"seconds": elapsed, "calls": len(loops.latencies) + len(loops.failures) + len(loops.ingested),
            "belief calls": loops.reads, "ingests": len(loops.ingested), "failed": len(loops.failures),
            "failures": loops.failures[:3], "lost reads": loops.reads - (reads_after - reads_before),
            "lost records": 2 * (len(loops.ingested) - landed), "p50": percentile(loops.latencies, 0.5),
            "p99": percentile(loops.latencies, 0.99), "train": result}


def kill_phase(db: str, work: Path, questions: list[str], probs, seconds: float, train_args: list[str],
               seed: int = 0) -> dict:
    """The loops for ``seconds`` with a third of their processes SIGKILLed at random moments, and a
    `doxa train` killed at a random moment of its run; then what was acknowledged is looked for."""
    from doxa.data.store import Store

    rng = random.Random(seed)
    with Store.open(db) as store:
        versions_before = [v["version"] for v in store.params_versions()]
    loops = Loops(db, work, questions, "kill", kill_share=1 / 3, seed=seed).start(probs)
    train = subprocess.Popen(doxa("train", "--db", db, *train_args), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env=ENV)
    train_killed_after = rng.uniform(0.0, seconds)
    try:
        train.wait(timeout=train_killed_after)
    except subprocess.TimeoutExpired:
        train.send_signal(signal.SIGKILL)
    train.wait()
    time.sleep(max(0.0, seconds - train_killed_after))
    loops.finish()
    with Store.open(db) as store:
        store.fold_reads()
        logged = {str(t) for (t,) in store.execute(
            "SELECT DISTINCT strftime(asked_at, '%Y-%m-%dT%H:%M:%S') FROM reads WHERE asked_at > ?",
            [S.AT.replace(tzinfo=None)]).fetchall()}
        stored = dict(store.execute(
            "SELECT m.id, count(r.message) FROM messages m LEFT JOIN readings r ON r.message = m.id "
            "WHERE m.id LIKE 'conc-kill-%' GROUP BY m.id").fetchall())
        published = [v["version"] for v in store.params_versions()]
    folder = Path(db + ".posterior")

    def how_stored(mids: list[str]) -> str:  # a message counts as stored with exactly its one reading
        found = [stored.get(mid) for mid in mids]
        return "whole" if found == [1] * len(mids) else "not at all" if found == [None] * len(mids) else "in part"

    killed = [how_stored(mids) for mids in loops.killed_ingests]
    return {"seconds": seconds, "belief calls": loops.reads, "ingests": len(loops.ingested) // MESSAGES_PER_KILLED_INGEST,
            "killed": {**loops.killed, "train": train.returncode == -signal.SIGKILL},
            "train ended after": min(train_killed_after, seconds), "train exit": train.returncode,
            "failed": len(loops.failures), "failures": loops.failures[:3],
            "lost reads": sum(t[:19] not in logged for t in loops.read_times),
            "lost records": sum(stored.get(mid, 0) != 1 for mid in loops.ingested) * 2,
            **{f"killed ingests stored {how}": killed.count(how) for how in ("whole", "not at all", "in part")},
            "versions published": [v for v in published if v not in versions_before],
            "versions without their posterior file": [v for v in published if not (folder / f"v{v}.nc").exists()]}


def all_beliefs_ratio(db: str, repeats: int) -> dict:
    from doxa.data.store import Store
    from doxa.inference.read.memory import Memory

    with Memory(Store.open(db)) as mem:
        beliefs, scans = [], []
        for _ in range(repeats):
            start = time.perf_counter()
            with mem.store.reading():
                mem.store.execute("SELECT count(*), sum(unclear) FROM readings").fetchall()
            scans.append(time.perf_counter() - start)
            start = time.perf_counter()
            found = mem.beliefs(at=S.AT)
            beliefs.append(time.perf_counter() - start)
        with mem.store.reading():
            kept = int(mem.store.kept_states(mem.store.question_table(), found.params_version or 0)["found"].sum())
    return {"beliefs": len(found), "kept states used": kept, "all beliefs (median)": statistics.median(beliefs),
            "scan (median)": statistics.median(scans),
            "ratio": statistics.median(beliefs) / statistics.median(scans)}


def after_new_message(db: str, work: Path, question: str, runs: int, other: str | None = None) -> dict:
    """`doxa belief` of a question that just heard one new message, as fresh processes, against the floor.

    ``first read after a new message``: each run ingests a new message about ``question`` first;
    the ingest keeps the question's inputs beside the store as it closes it
    (data/belief_cache.py), and the read uses them. ``first read of another question``: the
    same, reading ``other``, which the message did not touch: what a read of it kept before the
    write still counts (the first run's read opens the store and keeps it). ``doxa belief``: a
    second read right after the first, from what was kept. Each is a median of ratios to a floor
    process run right after it."""
    from doxa.data.store import Store

    with Store.open(db) as store:
        options = store.question(question)["options"]

    def ingest_one() -> None:
        path = work / "one-new.jsonl"
        mid = f"one-new-{time.time_ns()}"
        path.write_text(json.dumps({"type": "message", "id": mid, "source": "src00002",
                                    "sent_at": (S.AT - timedelta(hours=2)).isoformat(), "text": "one new message"})
                        + "\n" + json.dumps({"type": "reading", "message": mid, "question": question,
                                             "reader": "reader-1",
                                             "probs": {o: 1.0 / len(options) for o in options}}) + "\n")
        subprocess.run(doxa("ingest", str(path), "--db", db), check=True, capture_output=True, env=ENV)

    def timed(command) -> float:
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, env=ENV)
        return time.perf_counter() - start

    belief = doxa("belief", question, "--db", db, "--json")
    floor = [sys.executable, "-c", "import duckdb, numpy"]
    for command in (belief, floor):
        subprocess.run(command, check=True, capture_output=True, env=ENV)  # writes the bytecode cache, if missing
    # each read is paired with a floor process run right after it, and the ratio taken pair by
    # pair: the machine's speed drifts less within a pair than over the whole run
    times: dict[str, list[float]] = {"first read after a new message": [], "doxa belief": [],
                                     "first read of another question after a new message": []}
    ratios: dict[str, list[float]] = {name: [] for name in times}
    floors: list[float] = []

    def paired(name: str, command: list[str]) -> None:
        wall, base = timed(command), timed(floor)
        times[name].append(wall)
        floors.append(base)
        ratios[name].append(wall / base)

    for _ in range(runs):
        ingest_one()
        paired("first read after a new message", belief)
        paired("doxa belief", belief)
        if other is not None:
            ingest_one()
            paired("first read of another question after a new message", doxa("belief", other, "--db", db, "--json"))
    walls = {name: statistics.median(values) for name, values in times.items() if values}
    walls["python -c 'import duckdb, numpy'"] = statistics.median(floors)
    walls["ratio, first read"] = statistics.median(ratios["first read after a new message"])
    if other is not None:
        walls["ratio, first read of another question"] = statistics.median(
            ratios["first read of another question after a new message"])
    walls["ratio"] = statistics.median(ratios["doxa belief"])
    return walls


def release_cost(db: str, question: str, repeats: int) -> dict:
    """One belief with the store held against one that opens and closes it (what releasing costs)."""
    from doxa.data.store import Store
    from doxa.inference.read.memory import Memory

    mem = Memory(Store.open(db), log_reads=False)
    released = []
    for _ in range(repeats):
        start = time.perf_counter()
        mem.belief(question)
        released.append(time.perf_counter() - start)
    held = []
    with mem.store.reading():
        for _ in range(repeats):
            start = time.perf_counter()
            mem.belief(question)
            held.append(time.perf_counter() - start)
    mem.close()
    return {"belief, store released between calls": statistics.median(released),
            "belief, store held": statistics.median(held)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=100_000)
    parser.add_argument("--readings", type=int, default=1_000_000)
    parser.add_argument("--sources", type=int, default=2_000)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--reuse", action="store_true")
    parser.add_argument("--max-steps", type=int, default=300, help="SVI steps of the train (the fit's length)")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kill-seconds", type=float, default=60.0, help="length of the kill -9 phase")
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill -9 phase's moments")
    parser.add_argument("--json-out", default=None, help="write every figure to this JSON file")
    args = parser.parse_args()

    work = Path(args.dir or tempfile.mkdtemp(prefix="doxa-conc-"))
    work.mkdir(parents=True, exist_ok=True)
    db = str(work / "scale.duckdb")
    print(f"doxa concurrency benchmark: {args.questions:,} questions, {args.readings:,} readings "
          f"({os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; {work})")
    if not args.reuse:
        for stale in (Path(db), Path(db + ".wal")):
            stale.unlink(missing_ok=True)
        counts = S.generate(work / "scale.jsonl", args.questions, args.readings, args.sources, 0)
        seconds, lines, _ = S.ingest_file(db, work / "scale.jsonl", 250_000)
        print(f"built: {sum(counts.values()):,} records ingested in {seconds:.0f} s")
    from doxa.data.store import Store

    with Store.open(db) as store:
        rows = store.execute("SELECT id, options FROM questions ORDER BY id LIMIT 200").fetchall()
    questions = [r[0] for r in rows]
    probs = {q: {o: 1.0 / len(opts) for o in opts} for q, opts in rows}

    train_args = ["--max-steps", str(args.max_steps), "--folds", "0", "--no-progress"]
    during = phase(db, work, questions, probs, "fit", train_args, None)
    idle = phase(db, work, questions, probs, "idle", None, during["seconds"])
    print(f"\nreads and ingests for the whole fit ({during['seconds']:.0f} s; train published version "
          f"{during['train']['version']}) and for as long with no fit (load average now {os.getloadavg()[0]:.1f}):")
    print(f"  {'':<8} {'belief calls':>12} {'ingests':>8} {'failed':>7} {'lost reads':>11} {'lost records':>13} "
          f"{'p50':>8} {'p99':>8}")
    for name, p in (("fit", during), ("idle", idle)):
        print(f"  {name:<8} {p['belief calls']:>12} {p['ingests']:>8} {p['failed']:>7} {p['lost reads']:>11} "
              f"{p['lost records']:>13} {p['p50']:7.3f}s {p['p99']:7.3f}s")
        for failure in p["failures"]:
            print(f"    failure: {failure}")
    print(f"  p99 during the fit / idle p99 = {during['p99'] / idle['p99']:.2f} (goal ≤ 3)")

    ratio = all_beliefs_ratio(db, args.repeats)
    print(f"\nevery belief at once with the read log ({ratio['beliefs']:,} beliefs, {ratio['kept states used']:,} "
          f"from kept states): {ratio['all beliefs (median)']:.3f} s; one scan of readings "
          f"{ratio['scan (median)']:.3f} s; ratio {ratio['ratio']:.1f}")
    cold = after_new_message(db, work, questions[3], args.runs, other=questions[4])
    floor = cold["python -c 'import duckdb, numpy'"]
    print(f"`doxa belief` after one new message (floor {floor:.3f} s; goal ≤ 1.2× the floor): the question it "
          f"touched, first read {cold['first read after a new message']:.3f} s ({cold['ratio, first read']:.2f}×); "
          f"another question, first read {cold['first read of another question after a new message']:.3f} s "
          f"({cold['ratio, first read of another question']:.2f}×); the reads after those {cold['doxa belief']:.3f} s "
          f"({cold['ratio']:.2f}×)")
    cost = release_cost(db, questions[5], 20)
    print("a long-lived owner: " + "; ".join(f"{k} {v * 1000:.1f} ms" for k, v in cost.items()))

    kills = kill_phase(db, work, questions, probs, args.kill_seconds, train_args, seed=args.seed)
    print(f"\nkill -9 at random moments ({kills['seconds']:.0f} s; a third of all processes killed): "
          f"{kills['killed']['belief']} `doxa belief` and {kills['killed']['ingest']} `doxa ingest` killed, "
          f"the train {'killed' if kills['killed']['train'] else 'ended (exit %s)' % kills['train exit']} "
          f"after {kills['train ended after']:.1f} s; acknowledged: {kills['belief calls']} reads, "
          f"{kills['ingests']} ingests")
    print(f"  failed {kills['failed']}, lost reads {kills['lost reads']}, lost records {kills['lost records']}; "
          f"killed ingests stored whole {kills['killed ingests stored whole']}, not at all "
          f"{kills['killed ingests stored not at all']}, in part {kills['killed ingests stored in part']}; "
          f"versions published {kills['versions published']}, without their posterior file "
          f"{kills['versions without their posterior file']}")
    for failure in kills["failures"]:
        print(f"    failure: {failure}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"fit": during, "idle": idle, "all beliefs": ratio,
                                                   "after new message": cold, "release": cost, "kill": kills},
                                                  indent=2, default=str))


if __name__ == "__main__":
    main()
