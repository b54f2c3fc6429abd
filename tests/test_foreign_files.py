"""Files doxa did not make, stores it may only read, and stores reached through symlinks.

A DuckDB file without doxa's mark is refused by every command and left exactly as it was;
a store the user may read but not write still answers reads; a ``--db`` through a symlink
keeps its side files beside the real file; two stores never overwrite each other's
posterior draws in a shared ``--posterior-dir``.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

import doxa
from doxa.cli.main import app
from doxa.data import belief_cache, read_log
from doxa.data.errors import StoreError
from doxa.data.store import Store
from training_data import crowd_records

import records as R


def _analytics_file(path: Path) -> None:
    """A user's own DuckDB file, which happens to have a `messages` table of its own."""
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE sales (day DATE, amount DOUBLE); INSERT INTO sales VALUES ('2026-01-02', 12.5)")
    con.execute("CREATE TABLE messages (x INTEGER); INSERT INTO messages VALUES (1)")
    con.close()


def _tables(path: Path) -> list[str]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return sorted(t for (t,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall())
    finally:
        con.close()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _run(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture
def foreign(tmp_path) -> Path:
    path = tmp_path / "analytics.duckdb"
    _analytics_file(path)
    return path


@pytest.mark.parametrize("command", [
    ["beliefs"], ["belief", "maya.diet"], ["search", "peanut"], ["explain", "maya.diet"], ["init"],
    ["calibration"], ["train"], ["ingest", "RECORDS"],
])
def test_every_command_refuses_a_duckdb_file_doxa_did_not_make_and_changes_nothing(foreign, tmp_path, command):
    records = tmp_path / "records.jsonl"
    records.write_text('{"type": "subject", "id": "maya", "name": "Maya"}\n')
    before = _digest(foreign)
    args = [str(records) if a == "RECORDS" else a for a in command]
    result = _run(*args, "--db", str(foreign))
    assert result.exit_code == 1, result.output
    assert "is not a doxa store: it holds tables messages, sales" in result.output
    assert "use another --db" in result.output and "internal error" not in result.output
    assert _tables(foreign) == ["messages", "sales"] and _digest(foreign) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["analytics.duckdb", "records.jsonl"]  # no side files


@pytest.mark.parametrize("read_only", [False, True])
def test_the_python_api_refuses_a_foreign_file_read_only_or_not(foreign, read_only):
    before = _digest(foreign)
    with pytest.raises(StoreError, match="not a doxa store: it holds tables messages, sales"):
        Store.open(foreign, read_only=read_only)
    store = Store.open(foreign, check=False)  # checked at its first use instead: the same refusal
    with pytest.raises(StoreError, match="doxa never changes a file it did not make"):
        store.counts()
    assert _tables(foreign) == ["messages", "sales"] and _digest(foreign) == before


def test_a_duckdb_file_with_a_meta_table_of_its_own_is_not_a_store(tmp_path):
    path = tmp_path / "meta.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE meta (key VARCHAR, value VARCHAR); INSERT INTO meta VALUES ('owner', 'me')")
    con.close()
    with pytest.raises(StoreError, match="holds tables meta"):
        Store.open(path)
    assert _tables(path) == ["meta"]


def test_an_empty_duckdb_file_and_a_new_path_become_stores_with_an_id(tmp_path):
    empty = tmp_path / "empty.duckdb"
    duckdb.connect(str(empty)).close()
    ids = {}
    for path in (empty, tmp_path / "new.duckdb"):
        with Store.open(path) as store:
            assert "messages" in _tables_of(store)
            ids[path] = store.store_id()
            assert len(ids[path]) == 16 and store.store_id() == ids[path]
    assert len(set(ids.values())) == 2
    for path, made in ids.items():
        with Store.open(path) as again:
            assert again.store_id() == made  # kept in the store: stable


def _tables_of(store: Store) -> list[str]:
    return [t for (t,) in store.execute("SELECT table_name FROM duckdb_tables()").fetchall()]


def test_a_store_made_before_store_ids_still_opens_and_gets_one(tmp_path, small_records):
    path = tmp_path / "old.duckdb"
    with doxa.open(str(path)) as memory:
        memory.ingest(small_records)
        memory.store.con.execute("DELETE FROM meta WHERE key = 'store_id'")
    with Store.open(path) as store:
        counts = store.counts()
        assert counts["messages"] == sum(r["type"] == "message" for r in small_records)
        assert len(store.store_id()) == 16
        assert store.con.execute("SELECT count(*) FROM meta WHERE key = 'store_id'").fetchone()[0] == 1


# ---------------------------------------------------------------- paths that are no store file

def _symlink_loop(tmp_path: Path) -> Path:
    (tmp_path / "loop-a").symlink_to(tmp_path / "loop-b")
    (tmp_path / "loop-b").symlink_to(tmp_path / "loop-a")
    return tmp_path / "loop-a"


@pytest.mark.parametrize("command", [["ops"], ["calibration"], ["train"], ["beliefs"], ["init"]])
def test_a_directory_a_non_duckdb_file_and_a_symlink_loop_get_clear_errors(tmp_path, command):
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database\n")
    cases = {tmp_path: "is a directory", notes: "not a DuckDB file", _symlink_loop(tmp_path): "symlink loop"}
    for path, said in cases.items():
        result = _run(*command, "--db", str(path))
        assert result.exit_code == 1, (path, result.output)
        assert said in result.output and "internal error" not in result.output, result.output
    assert notes.read_text() == "not a database\n"


# ---------------------------------------------------------------- a store the user may only read

@pytest.fixture
def demo_store(tmp_path) -> str:
    path = str(tmp_path / "d.duckdb")
    result = _run("demo", "--db", path, "--json")
    assert result.exit_code == 0, result.output
    return path


def _unwritable_read_log(db: str) -> None:
    """The read log's folder cannot be made (a file stands at its path): as for a store in a folder
    the user may not write, and unlike chmod this holds for root too."""
    folder = read_log.log_dir(db)
    if folder.exists():
        for f in folder.iterdir():
            f.unlink()
        folder.rmdir()
    folder.write_text("")


@pytest.mark.parametrize("command", [["beliefs"], ["belief", "maya.diet"], ["context", "maya"],
                                     ["beliefs", "--json"]])
def test_reads_work_where_the_read_log_cannot_be_written(demo_store, monkeypatch, command):
    monkeypatch.setattr(read_log, "_warned_unlogged", False)
    _unwritable_read_log(demo_store)
    result = _run(*command, "--db", demo_store)
    assert result.exit_code == 0, result.output
    assert "internal error" not in result.output
    assert result.stderr.count("reads are not logged") == 1


def test_the_unlogged_read_warning_comes_once_per_process(demo_store, monkeypatch, capsys):
    monkeypatch.setattr(read_log, "_warned_unlogged", False)
    _unwritable_read_log(demo_store)
    with doxa.open(demo_store) as memory:
        memory.beliefs()
        memory.belief("maya.diet")
        memory.beliefs()
    err = capsys.readouterr().err
    assert err.count("reads are not logged") == 1 and "d.duckdb.reads" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through any file mode")
def test_a_store_in_a_folder_the_user_may_not_write_answers_reads(tmp_path, monkeypatch):
    monkeypatch.setattr(read_log, "_warned_unlogged", False)
    folder = tmp_path / "shared"
    folder.mkdir()
    db = str(folder / "s.duckdb")
    with doxa.open(db) as memory:
        memory.ingest(R.small_store_records())
    os.chmod(db, 0o444)
    os.chmod(folder, 0o555)
    try:
        for command in (["beliefs"], ["context", "maya"]):
            result = _run(*command, "--db", db)
            assert result.exit_code == 0, result.output
    finally:
        os.chmod(folder, 0o755)
        os.chmod(db, 0o644)


# ---------------------------------------------------------------- a --db through a symlink

def test_reads_through_a_symlink_are_logged_beside_the_real_file_and_folded_by_writers(demo_store, tmp_path):
    link = tmp_path / "link.duckdb"
    link.symlink_to(demo_store)
    with Store.open(demo_store) as store:
        store.fold_reads()
        before = store.execute("SELECT count(*) FROM reads").fetchone()[0]
    result = _run("belief", "maya.diet", "--db", str(link))
    assert result.exit_code == 0, result.output
    assert not Path(str(link) + ".reads").exists() and not Path(str(link) + ".beliefs").exists()
    assert read_log.log_dir(link) == read_log.log_dir(demo_store) == Path(demo_store + ".reads")
    assert belief_cache.cache_dir(link) == Path(demo_store + ".beliefs")
    with Store.open(demo_store) as store:  # a writer given the real path
        store.fold_reads()
        assert store.execute("SELECT count(*) FROM reads").fetchone()[0] == before + 1
    assert read_log.complete_files(demo_store) == []


# ---------------------------------------------------------------- posterior draws of several stores

def test_two_stores_sharing_a_posterior_dir_keep_their_own_draws(tmp_path):
    from doxa.inference.learn.train import train

    shared = tmp_path / "posteriors"
    written = {}
    for name, seed in (("a", 1), ("b", 2)):
        folder = tmp_path / name
        folder.mkdir()
        records, _ = crowd_records(n_items=10, n_workers=3, gold_share=0.5, seed=seed)
        with Store.open(folder / "store.duckdb") as store:  # the same file name in two folders
            store.ingest_records(records)
            result = train(store, fit_options={"max_steps": 20, "confusion": "off"}, folds=0,
                           posterior_dir=shared, progress=False)
            assert result.version == 1
            path = Path(result.posterior_path)
            assert path.name == "v1.nc" and path.parent.parent == shared
            assert path.parent.name == f"store-{store.store_id()[:8]}"
            written[name] = (path, path.read_bytes())
    assert written["a"][0] != written["b"][0]
    for path, content in written.values():
        assert path.read_bytes() == content  # the second train overwrote nothing of the first
