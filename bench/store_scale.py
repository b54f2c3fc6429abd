"""Scale benchmark of the store and the read path (issue 2). A script, not a test: it prints numbers.

    .venv/bin/python bench/store_scale.py                      # 100k questions, 1M readings
    .venv/bin/python bench/store_scale.py --questions 10000 --readings 100000

What it does:

1. generates a store's worth of docs/formats.md records, vectorised (numpy arrays, written as
   JSON Lines by DuckDB's ``COPY … (FORMAT json)``): subjects, sources under several
   layers, questions of 2-4 options, messages (5 % are copies of an earlier text),
   one or two readings per message, a few settlements and rejections;
2. ingests the file through the real path, ``Store.ingest_lines`` (validation, reference
   checks, one transaction), and reports records/s and peak memory; then ingests a
   small batch into the full store (an agent's everyday ingest) and the same batch again;
3. times every belief at once in-process (``Memory.beliefs`` with its read log; it returns
   a columnar ``BeliefList``), then turning all of them into ``Belief`` objects or dicts,
   split into load (SQL → arrays), model inputs, the forward filter, the result and
   logging the reads; and the pure scorer over already loaded evidence. Wall and CPU
   seconds are both printed: on a shared machine the CPU time is the steadier figure;
4. times ``doxa belief Q`` as a fresh process (median of several runs) and lists the
   heaviest imports from ``python -X importtime``.

Targets (issue 2): all beliefs ≤ 2 s; ``doxa belief`` cold start ≤ 0.5 s.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

START = datetime(2024, 12, 1)
SPAN_DAYS = 730
AT = START + timedelta(days=SPAN_DAYS + 1)
N_KINDS = 24
LAYER_PATHS = [["person", "self", "chat"], ["person", "self", "social"], ["person", "other", "chat"],
               ["user", "notes"], ["family", "about-other", "chat"], ["business", "about-other", "email", "marketing"],
               ["web", "news"], ["crowd", "worker"]]


def kind_options(kind: int) -> list[str]:
    return [f"kind{kind:02d}-option{j}" for j in range(2 + kind % 3)]


# ---------------------------------------------------------------------------- generation
def generate(path: Path, n_questions: int, n_readings: int, n_sources: int, seed: int) -> dict[str, int]:
    """Write one JSON Lines file (definitions first) and return how many records of each type."""
    rng = np.random.default_rng(seed)
    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    parts: list[Path] = []

    def copy(name: str, sql: str) -> None:
        part = path.with_name(f"{path.stem}.{name}.jsonl")
        con.execute(f"COPY ({sql}) TO '{part}' (FORMAT json)")
        parts.append(part)

    n_subjects = max(1, n_questions // 4)
    n_messages = max(1, int(round(n_readings / 1.25)))
    n_second = n_readings - n_messages  # messages read for a second question, by a second reader

    kinds = rng.integers(0, N_KINDS, n_questions)
    con.register("kinds_t", pa.table({
        "kind": np.arange(N_KINDS),
        "options": pa.array([kind_options(k) for k in range(N_KINDS)], pa.list_(pa.string())),
    }))
    con.register("questions_t", pa.table({"qi": np.arange(n_questions), "kind": kinds,
                                          "subject": np.arange(n_questions) % n_subjects}))
    con.execute("""CREATE TABLE q AS SELECT qi, 'q' || lpad(qi::VARCHAR, 7, '0') AS id,
                          's' || lpad(subject::VARCHAR, 6, '0') AS subject,
                          'kind' || lpad(kind::VARCHAR, 2, '0') AS kind, k.options
                   FROM questions_t JOIN kinds_t k USING (kind)""")

    copy("subjects", f"""SELECT 'subject' AS type, 's' || lpad(i::VARCHAR, 6, '0') AS id,
                                'Person ' || i AS name FROM range({n_subjects}) t(i)""")
    layer_index = rng.integers(0, len(LAYER_PATHS), n_sources)
    stated = np.where(rng.random(n_sources) < 0.3, np.round(rng.uniform(0.3, 0.95, n_sources), 3), np.nan)
    con.register("sources_t", pa.table({
        "id": [f"src{i:05d}" for i in range(n_sources)],
        "layers": pa.array([LAYER_PATHS[j] for j in layer_index], pa.list_(pa.string())),
        "trust": pa.array(stated, pa.float64(), from_pandas=True),
    }))
    copy("sources", "SELECT 'source' AS type, id, layers, trust FROM sources_t WHERE trust IS NOT NULL")
    copy("sources_untrusted", "SELECT 'source' AS type, id, layers FROM sources_t WHERE trust IS NULL")
    copy("questions", """SELECT 'question' AS type, id, subject, kind, 'What is ' || id || '?' AS text,
                                'choice' AS shape, options FROM q""")

    # messages: 5 % repeat the text of an earlier message (forwarded copies)
    seconds = rng.integers(0, SPAN_DAYS * 86400, n_messages)
    text_of = np.arange(n_messages)
    copies = rng.random(n_messages) < 0.05
    text_of[copies] = (rng.random(copies.sum()) * np.arange(n_messages)[copies]).astype(np.int64)
    con.register("messages_t", pa.table({"mi": np.arange(n_messages), "seconds": seconds, "text_of": text_of,
                                         "source": rng.integers(0, n_sources, n_messages)}))
    copy("messages", f"""SELECT 'message' AS type, 'm' || lpad(mi::VARCHAR, 8, '0') AS id,
                                'src' || lpad(source::VARCHAR, 5, '0') AS source,
                                strftime(TIMESTAMP '{START:%Y-%m-%d}' + to_seconds(seconds), '%Y-%m-%dT%H:%M:%S')
                                    AS sent_at,
                                CASE WHEN text_of = mi THEN '' ELSE 'Fwd: ' END
                                    || 'message number ' || text_of || ' says something about a question'
                                    AS text
                         FROM messages_t""")

    # readings: every message once (reader-1), the first n_second twice (reader-2, another question)
    reading_message = np.r_[np.arange(n_messages), np.arange(n_second)]
    reading_reader = np.r_[np.zeros(n_messages, np.int64), np.ones(n_second, np.int64)]
    reading_q = rng.integers(0, n_questions, n_readings)
    k = 2 + kinds[reading_q] % 3
    mass = rng.gamma(0.6, size=(n_readings, 6))
    mass = np.where((np.arange(6)[None, :] < k[:, None]) | (np.arange(6)[None, :] >= 4), mass, 0.0)
    mass[:, 4:] *= 0.3  # readers mostly read something
    mass /= mass.sum(axis=1, keepdims=True)
    # whole units of 1e-4, floored, so the remainder left for `unrelated` is never negative
    units = np.floor(mass[:, :5] * 10_000).astype(np.int64)
    probs = units[:, :4] / 10_000
    unclear = units[:, 4] / 10_000
    unrelated = (10_000 - units.sum(axis=1)) / 10_000
    one_off = np.round(rng.beta(0.5, 4.0, n_readings), 3)
    keep = np.arange(4)[None, :] < k[:, None]
    offsets = np.r_[0, np.cumsum(k)].astype(np.int32)
    con.register("readings_t", pa.table({
        "mi": reading_message, "qi": reading_q, "reader": reading_reader,
        "probs": pa.ListArray.from_arrays(pa.array(offsets), pa.array(probs[keep])),
        "unclear": unclear, "unrelated": unrelated, "one_off": one_off,
    }))
    copy("readings", """SELECT 'reading' AS type, 'm' || lpad(r.mi::VARCHAR, 8, '0') AS message, q.id AS question,
                               'reader-' || (r.reader + 1) AS reader, map(q.options, r.probs) AS probs,
                               r.unclear, r.unrelated, r.one_off
                        FROM readings_t r JOIN q USING (qi)""")

    n_settled = max(1, n_questions // 100)
    settled_q = rng.choice(n_questions, n_settled, replace=False)
    con.register("settle_t", pa.table({"qi": settled_q, "pick": rng.random(n_settled),
                                       "seconds": rng.integers(0, SPAN_DAYS * 86400, n_settled)}))
    copy("settlements", f"""SELECT 'settlement' AS type, q.id AS question,
                                   q.options[1 + floor(pick * len(q.options))::INTEGER] AS answer,
                                   strftime(TIMESTAMP '{START:%Y-%m-%d}' + to_seconds(seconds), '%Y-%m-%dT%H:%M:%S')
                                       AS at, 'correction' AS how
                            FROM settle_t JOIN q USING (qi)""")
    copy("rejections", f"""SELECT 'rejection' AS type, q.id AS question, q.options[1] AS answer,
                                  strftime(TIMESTAMP '{START:%Y-%m-%d}' + to_seconds(seconds), '%Y-%m-%dT%H:%M:%S')
                                      AS at
                           FROM settle_t JOIN q USING (qi) WHERE pick < 0.5""")
    con.close()

    counts: dict[str, int] = {}
    with open(path, "wb") as out:
        for part in parts:
            with open(part, "rb") as handle:
                shutil.copyfileobj(handle, out, 1 << 22)
            with open(part, "rb") as handle:
                kind = part.suffixes[-2].lstrip(".")
                counts[kind] = sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 22), b""))
            part.unlink()
    counts["sources"] += counts.pop("sources_untrusted")
    return counts


# ---------------------------------------------------------------------------- measuring
def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


class Clock:
    def __init__(self):
        self.marks: dict[str, float] = {}

    def time(self, name: str, fn, *args, **kwargs):
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        self.marks[name] = time.perf_counter() - start
        return out


def ingest_file(db: str, jsonl: Path, chunk_lines: int) -> tuple[float, int, dict[str, int]]:
    from doxa.data.store import Store

    added: dict[str, int] = {}
    lines = 0
    if not chunk_lines:  # the whole file through Store.ingest_file: what `doxa ingest FILE` does
        with Store.open(db) as store:
            start = time.perf_counter()
            added = store.ingest_file(jsonl)
            seconds = time.perf_counter() - start
            assert store.last_ingest_path == "fast", "the generated file went the per-line way"
        with open(jsonl, "rb") as handle:
            lines = sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 22), b""))
        return seconds, lines, added
    with Store.open(db) as store, open(jsonl, encoding="utf-8") as handle:
        start = time.perf_counter()
        while True:
            block = list(itertools.islice(handle, chunk_lines)) if chunk_lines else handle.readlines()
            if not block:
                break
            lines += len(block)
            for table, n in store.ingest_lines(block).items():
                added[table] = added.get(table, 0) + n
            if not chunk_lines:
                break
        seconds = time.perf_counter() - start
    return seconds, lines, added


def small_batch(db: str, n_questions: int, n_sources: int, size: int, seed: int) -> list[str]:
    """An everyday ingest: new messages with one reading each, on existing questions and sources."""
    from doxa.data.store import Store

    rng = np.random.default_rng(seed)
    question_index = rng.integers(0, n_questions, size // 2)
    wanted = [f"q{qi:07d}" for qi in question_index]
    with Store.open(db) as store:
        options = dict(store.execute("SELECT id, options FROM questions WHERE list_contains(?, id)",
                                     [sorted(set(wanted))]).fetchall())
    lines = []
    for i, qid in enumerate(wanted):
        mid = f"new-{seed}-{i}"
        opts = options[qid]
        lines.append(json.dumps({"type": "message", "id": mid, "source": f"src{rng.integers(0, n_sources):05d}",
                                 "sent_at": (AT - timedelta(hours=int(rng.integers(1, 500)))).isoformat(),
                                 "text": f"a new message {seed}-{i} about question {qid}"}))
        lines.append(json.dumps({"type": "reading", "message": mid, "question": qid, "reader": "reader-1",
                                 "probs": {o: (0.8 if j == 0 else 0.2 / (len(opts) - 1)) for j, o in enumerate(opts)}}))
    return lines


def bench_beliefs(db: str, repeats: int) -> dict[str, tuple[float, float]]:
    """Median (wall, CPU) seconds of each step; CPU time (all threads) is what a busy machine distorts least."""
    from doxa.data.store import Store
    from doxa.data.times import to_days
    from doxa.inference.read import scorer
    from doxa.inference.read.memory import Memory
    from doxa.inference.read.results import BeliefList

    out: dict[str, list[tuple[float, float]]] = {}

    def timed(name, fn, *args, **kwargs):
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn(*args, **kwargs)
        out.setdefault(name, []).append((time.perf_counter() - wall, time.process_time() - cpu))
        return result

    with Memory(Store.open(db)) as mem:
        for _ in range(repeats):
            found = timed("beliefs() total, with read log", mem.beliefs, at=AT)
        n_beliefs = len(found)
        timed("  then every Belief object (list(found))", list, found)
        timed("  or every belief as a dict (found.to_dicts())", found.to_dicts)
        mem.log_reads = False
        for _ in range(repeats):
            timed("beliefs() total, no read log", mem.beliefs, at=AT)
        for _ in range(repeats):
            evidence = timed("  load evidence (SQL → arrays)", mem.store.load_evidence, AT)
            params = timed("  params", mem.params)
            inputs = timed("  model inputs (likelihoods)", scorer.model_inputs, evidence, params)
            beliefs = timed("  forward filter", scorer.score, evidence, params, to_days(AT), inputs=inputs)
            found = timed("  result (BeliefList)", BeliefList, AT, beliefs, mem.act_at)
            mem.log_reads = True
            timed("  log reads", mem._log, AT, found)
            mem.log_reads = False
            timed("pure scorer over loaded evidence", scorer.score, evidence, params, to_days(AT))
        evidence_rows = evidence.n_readings
        longest = int(np.bincount(evidence.q).max()) if evidence.n_readings else 0
    summary = {name: (statistics.median(w for w, _ in values), statistics.median(c for _, c in values))
               for name, values in out.items()}
    summary["_beliefs"] = n_beliefs
    summary["_evidence_rows"] = evidence_rows
    summary["_longest_question"] = longest
    return summary


def doxa_command() -> list[str]:
    script = Path(sys.executable).with_name("doxa")
    return [str(script)] if script.exists() else [sys.executable, "-c", "from doxa.cli import main; main()"]


def _process_times(command: list[str], runs: int, env: dict) -> tuple[list[float], list[float]]:
    """Wall and CPU (user + sys) seconds of ``runs`` fresh processes."""
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed: {done.stderr}")
    return walls, cpus


def bench_cold_start(db: str, question: str, runs: int) -> dict[str, tuple[float, float]]:
    """Median (wall, cpu) of `doxa belief` and of the floors under it: bare Python, Python importing duckdb + numpy."""
    env = {k: v for k, v in os.environ.items() if k != "DOXA_DB"}
    commands = {
        "doxa belief": [*doxa_command(), "belief", question, "--db", db, "--json"],
        "python -c pass": [sys.executable, "-c", "pass"],
        "python -c 'import duckdb, numpy'": [sys.executable, "-c", "import duckdb, numpy"],
    }
    out = {}
    for name, command in commands.items():
        walls, cpus = _process_times(command, runs, env)
        out[name] = (statistics.median(walls), statistics.median(cpus), min(walls), max(walls))
    return out


PHASES_CODE = """
import time; t0 = time.perf_counter()
import json, sys
from doxa.data.store import Store
from doxa.inference.read.memory import Memory
t1 = time.perf_counter(); store = Store.open(sys.argv[1], create=False)
t2 = time.perf_counter(); belief = Memory(store).belief(sys.argv[2])
t3 = time.perf_counter(); store.close()
t4 = time.perf_counter()
print(json.dumps({"imports": t1 - t0, "open store": t2 - t1, "belief (query + score + log read)": t3 - t2,
                  "close (checkpoint; doxa belief skips it)": t4 - t3}))
"""


def cold_phases(db: str, question: str, runs: int) -> dict[str, float]:
    """Where a fresh process's time goes, median per phase (what `doxa belief` does, minus argument parsing)."""
    samples: dict[str, list[float]] = {}
    for _ in range(runs):
        done = subprocess.run([sys.executable, "-c", PHASES_CODE, db, question], capture_output=True, text=True,
                              check=True)
        for name, seconds in json.loads(done.stdout).items():
            samples.setdefault(name, []).append(seconds)
    return {name: statistics.median(values) for name, values in samples.items()}


def import_offenders(db: str, question: str, top: int) -> tuple[list[tuple[str, float]], float]:
    """Import time of one `doxa belief` run per top-level package (the sum of its modules' own time)."""
    code = ("import sys; from doxa.cli import main; "
            f"sys.argv = ['doxa', 'belief', {question!r}, '--db', {db!r}, '--json']; main()")
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True)
    per_package: dict[str, float] = {}
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        own_us, _cumulative_us, name = line[len("import time:"):].split("|")
        package = name.strip().split(".")[0]
        per_package[package] = per_package.get(package, 0.0) + int(own_us) / 1e6
    total = sum(per_package.values())
    return sorted(per_package.items(), key=lambda kv: -kv[1])[:top], total


# ---------------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=100_000)
    parser.add_argument("--readings", type=int, default=1_000_000)
    parser.add_argument("--sources", type=int, default=2_000)
    parser.add_argument("--chunk-lines", type=int, default=0,
                        help="ingest the file in blocks of this many lines (0: the whole file in one call)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats of the all-beliefs read")
    parser.add_argument("--runs", type=int, default=7, help="cold starts of `doxa belief`")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dir", default=None, help="work folder (default: a fresh temporary one, removed after)")
    parser.add_argument("--reuse", action="store_true", help="reuse the store already in --dir (skip generate/ingest)")
    args = parser.parse_args()

    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="doxa-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    db = str(work / "scale.duckdb")
    jsonl = work / "scale.jsonl"
    print(f"doxa store scale benchmark: {args.questions:,} questions, {args.readings:,} readings "
          f"({os.cpu_count()} CPUs; {work})")

    if not args.reuse:
        for stale in (Path(db), Path(db + ".wal")):
            stale.unlink(missing_ok=True)
        start = time.perf_counter()
        counts = generate(jsonl, args.questions, args.readings, args.sources, args.seed)
        print(f"generated {sum(counts.values()):,} records in {time.perf_counter() - start:.1f} s "
              f"({jsonl.stat().st_size / 2**20:.0f} MiB): " + ", ".join(f"{n:,} {t}" for t, n in counts.items()))
        seconds, lines, added = ingest_file(db, jsonl, args.chunk_lines)
        print(f"ingest (Store.ingest_lines{', chunks of %d lines' % args.chunk_lines if args.chunk_lines else ''}): "
              f"{lines:,} records in {seconds:.1f} s = {lines / seconds:,.0f} records/s; "
              f"peak memory {peak_rss_gib():.1f} GiB")
        print("  added: " + ", ".join(f"{n:,} {t}" for t, n in added.items()))

    # a new batch every run, also when --reuse runs again on the same store
    batch = small_batch(db, args.questions, args.sources, 1000, int(time.time()))
    from doxa.data.store import Store

    with Store.open(db) as store:
        start = time.perf_counter()
        added = store.ingest_lines(batch)
        first = time.perf_counter() - start
        start = time.perf_counter()
        again = store.ingest_lines(batch)
        second = time.perf_counter() - start
    print(f"small ingest into the full store: {len(batch):,} records in {first:.2f} s "
          f"({len(batch) / first:,.0f} records/s); the same batch again {second:.2f} s (added {again or 'nothing'})")
    assert added.get("readings") == len(batch) // 2 and not again

    print(f"\nall beliefs at {AT:%Y-%m-%d}, in-process, median of {args.repeats} (load average now "
          f"{os.getloadavg()[0]:.1f}):")
    summary = bench_beliefs(db, args.repeats)
    print(f"  {summary.pop('_beliefs'):,} beliefs over {summary.pop('_evidence_rows'):,} counted readings "
          f"(longest question: {summary.pop('_longest_question')} events)")
    print(f"  {'':<46} {'wall':>8} {'CPU':>8}")
    for name, (wall, cpu) in summary.items():
        print(f"  {name:<46} {wall:7.3f} s {cpu:7.3f} s")

    question = "q0000042" if args.questions > 42 else "q0000000"
    cold = bench_cold_start(db, question, args.runs)
    print(f"\ncold start as a process, median of {args.runs} runs (wall; CPU user+sys; wall min-max):")
    for name, (wall, cpu, lo, hi) in cold.items():
        print(f"  {name:<36} {wall:6.3f} s wall  {cpu:6.3f} s CPU   ({lo:.3f}-{hi:.3f})")
    print("  phases inside a fresh process (median):")
    for name, seconds in cold_phases(db, question, args.runs).items():
        print(f"    {name:<34} {seconds:6.3f} s")
    offenders, total = import_offenders(db, question, 12)
    print(f"imports of that run (python -X importtime, own time summed per top-level package; total {total:.3f} s):")
    for name, seconds in offenders:
        print(f"  {name:<24} {seconds:6.3f} s")

    if not args.dir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
