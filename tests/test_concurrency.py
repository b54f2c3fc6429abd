"""Several processes on one store at once (docs/concurrency.md). Behaviour only: no timing.

A `doxa train` subprocess is frozen (SIGSTOP) right after it says it has loaded the
evidence: whatever the other processes do then happens while it fits. They must all
succeed; the train then publishes. Killed runs must leave nothing the next run does not
clean, and never a published version without its posterior file.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import doxa
from doxa.data import read_log
from doxa.data.store import Store
from training_data import crowd_records

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="signals")

DOXA = [sys.executable, "-c", "from doxa.cli import main; main()"]
ENV = {**{k: v for k, v in os.environ.items() if k != "DOXA_DB"}, "DOXA_LOCK_TIMEOUT": "120"}
FIT = ["--max-steps", "400", "--folds", "0", "--confusion", "off", "--no-progress"]


def doxa_run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*DOXA, *args], capture_output=True, text=True, env=ENV, timeout=300)


@pytest.fixture
def db(tmp_path) -> str:
    path = str(tmp_path / "c.duckdb")
    records, _ = crowd_records(n_items=24, n_workers=5, gold_share=0.5, seed=3)
    with Store.open(path) as store:
        store.ingest_records(records)
    return path


def new_evidence(tmp_path: Path, tag: str, question: str = "birds.0") -> Path:
    """A file with one new message and its reading (what an agent ingests every day)."""
    path = tmp_path / f"{tag}.jsonl"
    lines = [{"type": "message", "id": f"msg-{tag}", "source": "w0", "sent_at": "2026-03-05T10:00:00Z",
              "text": f"new message {tag}"},
             {"type": "reading", "message": f"msg-{tag}", "question": question, "reader": "label",
              "probs": {"yes": 0.9, "no": 0.1}}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def start_train(db: str) -> subprocess.Popen:
    """`doxa train` on ``db``, returned once it reports the evidence loaded (the store released)."""
    train = subprocess.Popen([*DOXA, "train", "--db", db, *FIT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=ENV)
    seen = []
    for line in train.stderr:
        seen.append(line)
        if line.startswith("loaded "):
            return train
    train.wait()
    raise AssertionError(f"train ended before loading the evidence: {''.join(seen)}")


OTHER_PROCESS = """
import json, sys
import doxa
memory = doxa.open(sys.argv[1])
first = memory.belief("birds.1")
memory.ingest_file(sys.argv[2])
second = memory.belief("birds.1")
print(json.dumps({"before": first.n_evidence, "after": second.n_evidence}))
"""


def test_belief_ingest_and_a_long_lived_open_all_succeed_while_train_fits(db, tmp_path):
    train = start_train(db)
    os.kill(train.pid, signal.SIGSTOP)  # frozen inside its fit
    try:
        belief = doxa_run("belief", "birds.0", "--db", db, "--json")
        assert belief.returncode == 0, belief.stderr
        assert json.loads(belief.stdout)["question"] == "birds.0"
        ingest = doxa_run("ingest", str(new_evidence(tmp_path, "during-fit")), "--db", db, "--json")
        assert ingest.returncode == 0, ingest.stderr
        assert json.loads(ingest.stdout)["added"] == {"messages": 1, "readings": 1}
        other = subprocess.run([sys.executable, "-c", OTHER_PROCESS, db, str(new_evidence(tmp_path, "other", "birds.1"))],
                               capture_output=True, text=True, env=ENV, timeout=300)
        assert other.returncode == 0, other.stderr
        counts = json.loads(other.stdout)
        assert counts["after"] == counts["before"] + 1
        assert train.poll() is None  # all of it happened during the fit
    finally:
        os.kill(train.pid, signal.SIGCONT)
    _, err = train.communicate(timeout=300)
    assert train.returncode == 0, err
    with doxa.open(db) as memory:
        assert [v["version"] for v in memory.store.params_versions()] == [1]
        assert memory.store.counts()["messages"] == 24 * 5 + 2
        assert memory.store.counts()["reads"] == 3  # `doxa belief` and the other process's two
    assert (Path(db + ".posterior") / "v1.nc").exists()


def test_two_ingests_started_together_both_land(db, tmp_path):
    files = [new_evidence(tmp_path, f"together-{i}", f"birds.{i}") for i in range(2)]
    runs = [subprocess.Popen([*DOXA, "ingest", str(f), "--db", db], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=ENV) for f in files]
    for run in runs:
        _, err = run.communicate(timeout=300)
        assert run.returncode == 0, err
    with Store.open(db) as store:
        ids = {r[0] for r in store.execute("SELECT id FROM messages WHERE id LIKE 'msg-together-%'").fetchall()}
    assert ids == {"msg-together-0", "msg-together-1"}


def _killed_at(process: subprocess.Popen, deadline: float) -> int:
    """Wait for ``process`` until ``deadline`` (time.monotonic), SIGKILL it if it is still running
    then; its exit code (-9 when killed)."""
    try:
        process.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGKILL)
    process.communicate(timeout=300)
    return process.returncode


def test_processes_killed_at_random_moments_lose_nothing_they_acknowledged(db, tmp_path):
    """kill -9 of an ingest, two reads and a train, each at a moment drawn over its whole run
    (before it opens the store, while it writes, after its commit): whatever a process
    acknowledged (exit 0) is stored, a killed ingest is stored whole or not at all, and a
    published version always has its posterior file. Which process dies where is chance; what
    must hold does not depend on it."""
    rng = random.Random(14)
    acknowledged_reads, acknowledged_files, killed_files, outcomes = [], [], [], []
    for round_ in range(4):
        mids = [f"kill-{round_}-{k}" for k in range(3)]
        path = tmp_path / f"kill-{round_}.jsonl"
        lines = []
        for k, mid in enumerate(mids):
            lines += [{"type": "message", "id": mid, "source": "w1", "sent_at": "2026-03-05T10:00:00Z",
                       "text": f"message {mid}"},
                      {"type": "reading", "message": mid, "question": f"birds.{k}", "reader": "label",
                       "probs": {"yes": 0.8, "no": 0.2}}]
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        asked = [f"2026-06-01T00:{round_:02d}:{k:02d}" for k in range(2)]
        commands = [[*DOXA, "ingest", str(path), "--db", db]]
        commands += [[*DOXA, "belief", f"birds.{k}", "--db", db, "--at", at, "--json"] for k, at in enumerate(asked)]
        commands.append([*DOXA, "train", "--db", db, *FIT])
        started = time.monotonic()
        processes = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
                     for c in commands]
        # the moments are drawn over each kind's whole run: before it opens the store, while it
        # writes, after it commits (a train's fit is the longest)
        deadlines = [started + rng.uniform(0.0, within) for within in (5.0, 1.0, 1.0, 8.0)]
        codes = [0] * len(processes)
        for i in sorted(range(len(processes)), key=deadlines.__getitem__):  # each killed at its own moment
            codes[i] = _killed_at(processes[i], deadlines[i])
        assert all(code in (0, -signal.SIGKILL) for code in codes), codes  # no failure, only deaths
        (acknowledged_files if codes[0] == 0 else killed_files).append(mids)
        acknowledged_reads += [at for at, code in zip(asked, codes[1:3]) if code == 0]
        outcomes.append(codes)
        _published_have_files(db)  # every published version has its file
    with Store.open(db) as store:
        store.fold_reads()
        logged = {t.isoformat() for (t,) in store.execute("SELECT asked_at FROM reads").fetchall()}
        readings = dict(store.execute("SELECT m.id, count(r.message) FROM messages m LEFT JOIN readings r "
                                      "ON r.message = m.id WHERE m.id LIKE 'kill-%' GROUP BY m.id").fetchall())
    assert set(acknowledged_reads) <= logged
    for mids in acknowledged_files:
        assert all(readings.get(mid) == 1 for mid in mids), (mids, readings)
    for mids in killed_files:
        assert [readings.get(mid) for mid in mids] in ([None] * 3, [1] * 3), (mids, readings)
    # and the store works on: the next train publishes with its file, a read answers
    done = doxa_run("train", "--db", db, *FIT, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["version"] in _published_have_files(db)
    assert doxa_run("belief", "birds.0", "--db", db, "--json").returncode == 0
    assert any(-signal.SIGKILL in codes for codes in outcomes)  # the draw killed something


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def _published_have_files(db: str) -> list[int]:
    with Store.open(db) as store:
        versions = [v["version"] for v in store.params_versions()]
    folder = Path(db + ".posterior")
    assert all((folder / f"v{v}.nc").read_bytes()[:4] == b"\x89HDF" for v in versions)
    return versions


def test_a_killed_train_leaves_nothing_after_the_next_run(db):
    folder = Path(db + ".posterior")
    folder.mkdir()
    # what runs killed at other moments leave: a half-written staged file of a process now gone,
    # and a version file put in place by a run killed before its commit
    (folder / f".staged-{_dead_pid()}-0badf00d.nc").write_bytes(b"\x89HDF half written")
    (folder / "v1.nc").write_bytes(b"\x89HDF of a version never committed")
    train = start_train(db)
    os.kill(train.pid, signal.SIGKILL)  # killed in its fit
    train.wait()
    assert _published_have_files(db) == []
    done = doxa_run("train", "--db", db, *FIT, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["version"] == 1
    assert sorted(p.name for p in folder.iterdir()) == ["v1.nc"]
    assert _published_have_files(db) == [1]
    assert len(Path(folder / "v1.nc").read_bytes()) > 1000  # the real draws, not the leftover


def test_a_publish_that_fails_before_its_commit_publishes_neither_version_nor_file(tmp_path, monkeypatch):
    from doxa.inference.learn import train as T

    db = str(tmp_path / "p.duckdb")
    records, _ = crowd_records(n_items=10, n_workers=3, gold_share=0.5, seed=1)
    store = Store.open(db)
    store.ingest_records(records)
    folder = Path(db + ".posterior")
    folder.mkdir()
    staged = folder / f".staged-{os.getpid()}-cafe.nc"
    staged.write_bytes(b"\x89HDF draws")
    real_publish = store.publish_params

    def crash_after_rename(document, *, before_commit):
        def then_fail(version, con):
            before_commit(version, con)
            assert (folder / f"v{version}.nc").exists()
            raise KeyboardInterrupt  # the process dies between the rename and the commit

        return real_publish(document, before_commit=then_fail)

    monkeypatch.setattr(store, "publish_params", crash_after_rename)
    with pytest.raises(KeyboardInterrupt):
        T.publish_with_posterior(store, {"diagnostics": {}}, staged, folder)
    assert store.params_versions() == [] and list(folder.iterdir()) == []
    monkeypatch.undo()
    staged.write_bytes(b"\x89HDF draws")
    version, path = T.publish_with_posterior(store, {"diagnostics": {}}, staged, folder)
    assert (version, Path(path).name) == (1, "v1.nc") and list(folder.iterdir()) == [Path(path)]
    store.close()


def test_every_acknowledged_read_is_folded_once_and_unacknowledged_ones_are_dropped(db):
    with doxa.open(db) as memory:
        for q in ("birds.0", "birds.1", "birds.2"):
            memory.belief(q)
        memory.beliefs()
    folder = read_log.log_dir(db)
    assert len(read_log.complete_files(db)) == 4
    # a read whose process died before its rename was never acknowledged: it is dropped
    (folder / f".tmp-{_dead_pid()}-1-ab.jsonl").write_text('{"question": "birds.0"')
    with Store.open(db) as store:
        assert store.counts()["reads"] == 3 + 24
        store.fold_reads()
        assert store.execute("SELECT count(*) FROM reads").fetchone()[0] == 3 + 24
    assert list(folder.iterdir()) == []


def test_a_fold_that_crashed_after_its_commit_inserts_nothing_twice(db):
    import duckdb

    with doxa.open(db) as memory:
        memory.belief("birds.0")
    kept = read_log.complete_files(db)[0]
    text = kept.read_text()
    with Store.open(db) as store:
        store.fold_reads()
    assert not kept.exists()
    con = duckdb.connect(db, read_only=True)
    assert con.execute("SELECT name FROM read_logs").fetchall() == [(kept.name,)]
    con.close()
    # what a fold killed after its commit leaves: the rows in, the name recorded, the file still there
    kept.write_text(text)
    with Store.open(db) as store:
        store.fold_reads()
        assert store.execute("SELECT count(*) FROM reads").fetchone()[0] == 1
        assert store.execute("SELECT count(*) FROM read_logs").fetchone()[0] == 0
    assert not kept.exists()


def test_a_store_held_by_another_process_is_waited_for_then_named(db):
    from doxa.data.connection import StoreBusy

    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys; c = duckdb.connect(sys.argv[1]); "
                               "print('held', flush=True); sys.stdin.read()", db],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StoreBusy, match=f"process {holder.pid} .*DOXA_LOCK_TIMEOUT") as caught:
            doxa.open(db, lock_timeout=0.2).belief("birds.0")
        assert caught.value.holder_pid == holder.pid
    finally:
        holder.stdin.close()
        holder.wait()
    assert doxa.open(db).belief("birds.0").question == "birds.0"  # and usable once it is let go


def test_only_dead_writers_staged_files_are_removed(tmp_path):
    from doxa.data.connection import remove_dead_writers_files

    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead, alive = int(finished.stdout), os.getppid()
    names = [f".tmp-{dead}-1-ab.jsonl", f".tmp-{alive}-1-ab.jsonl", f".tmp-{os.getpid()}-1-ab.jsonl",
             f".staged-{dead}-ab.nc", ".tmp-notapid-ab.jsonl", f"v{dead}.nc"]
    for name in names:
        (tmp_path / name).write_text("x")
    removed = remove_dead_writers_files(tmp_path, ".tmp-")
    assert {p.name for p in removed} == {f".tmp-{dead}-1-ab.jsonl"}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(set(names) - {f".tmp-{dead}-1-ab.jsonl"})
    assert [p.name for p in remove_dead_writers_files(tmp_path, ".staged-")] == [f".staged-{dead}-ab.nc"]
