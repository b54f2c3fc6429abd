"""Command-line errors a person (or an agent) can act on (issue 10, points 4 and 7).

`--json` errors are one JSON object; store-open failures name the real cause; nothing
reaches for the network; a closed pipe ends a command quietly; user text never breaks
rich's markup; help and behaviour agree on `--json`; `--version`; a warning for an
`--at` far in the future; the Python API takes the same ISO times as the CLI.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import doxa
import records as R
from doxa.cli.main import app
from doxa.data.errors import StoreError
from doxa.data.store import Store

DOXA = str(Path(sys.executable).with_name("doxa"))


def invoke(*args: str, **kwargs):
    return CliRunner().invoke(app, list(args), **kwargs)


@pytest.fixture
def db(tmp_path, small_records) -> str:
    path = str(tmp_path / "doxa.duckdb")
    with doxa.open(path) as mem:
        mem.ingest(small_records)
    return path


# ---------------------------------------------------------------------------- --json errors
def one_json_error(result) -> dict:
    assert result.exit_code != 0
    assert result.stdout == ""
    error = json.loads(result.stderr)  # the whole of standard error is one object
    assert set(error) >= {"error", "problems"}
    return error


def test_a_refused_file_with_json_is_one_object_with_every_problem(db, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "subject", "id": "x"}\n'
                   '{"type":"reading","message":"m1","question":"nope","reader":"r","probs":{"a":1}}\n',
                   encoding="utf-8")
    error = one_json_error(invoke("ingest", str(bad), "--db", db, "--json"))
    assert "nothing was ingested" in error["error"]
    assert [(p["line"], p["field"]) for p in error["problems"]] == [(1, "name"), (2, "question")]
    assert all(set(p) == {"line", "field", "reason", "fix"} and p["fix"] for p in error["problems"])


@pytest.mark.parametrize("args", [
    ["belief", "maya.nothing"], ["explain", "maya.nothing"], ["beliefs", "--subject", "nobody"],
    ["belief", "maya.diet", "--at", "yesterday"], ["search", "fish", "--subject", "nobody"],
])
def test_json_errors_of_reading_commands_are_one_object(db, args):
    error = one_json_error(invoke(*args, "--db", db, "--json"))
    assert error["error"] and error["problems"] == []


def test_a_missing_store_with_json_is_one_object(tmp_path):
    error = one_json_error(invoke("beliefs", "--db", str(tmp_path / "none.duckdb"), "--json"))
    assert "doxa init" in error["error"]


@pytest.mark.parametrize("args,says", [
    (["beliefs", "--json", "true"], "unexpected extra argument"),
    (["beliefs", "--limit", "many", "--json"], "Invalid value for '--limit'"),
    (["belief", "--json"], "Missing argument"),
    (["nosuch", "--json"], "No such command"),
])
def test_usage_errors_with_json_are_one_object_too(args, says):
    result = invoke(*args)
    assert result.exit_code == 2 and result.stdout == ""
    assert says in json.loads(result.stderr)["error"]


def test_an_unforeseen_error_is_one_line_not_a_traceback(db, monkeypatch):
    from doxa.inference.read.memory import Memory

    def broken(self, *args, **kwargs):
        raise KeyError("a bug")

    monkeypatch.setattr(Memory, "beliefs", broken)
    result = invoke("beliefs", "--db", db)
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert result.stderr.startswith("Error: internal error (KeyError: 'a bug')") and "DOXA_DEBUG" in result.stderr
    assert json.loads(invoke("beliefs", "--db", db, "--json").stderr)["error"].startswith("internal error")
    with pytest.raises(KeyError):
        CliRunner().invoke(app, ["beliefs", "--db", db], env={"DOXA_DEBUG": "1"}, catch_exceptions=False)


def test_human_errors_stay_text(db):
    result = invoke("belief", "maya.nothing", "--db", db)
    assert result.exit_code == 1 and result.stderr.startswith("Error: no question 'maya.nothing'")


# ---------------------------------------------------------------------------- opening a store
def test_a_directory_is_named_as_one(tmp_path):
    with pytest.raises(StoreError) as caught:
        Store.open(tmp_path)
    assert "is a directory, not a doxa store" in str(caught.value)
    assert "another doxa process" not in str(caught.value)


def test_a_sqlite_file_is_named_and_nothing_is_downloaded(tmp_path):
    path = tmp_path / "notes.db"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE t (a)")
    result = invoke("beliefs", "--db", str(path))
    assert result.exit_code == 1
    assert "not a doxa store (a SQLite database)" in result.stderr
    assert "download" not in result.stderr and "extension" not in result.stderr


def test_a_file_that_is_no_duckdb_file_is_named(tmp_path):
    path = tmp_path / "junk.duckdb"
    path.write_text("hello world " * 100)
    with pytest.raises(StoreError, match="not a doxa store \\(not a DuckDB file\\)"):
        Store.open(path)


def test_extensions_never_load_or_install_themselves():
    with Store.memory() as store:
        settings = dict(store.con.execute(
            "SELECT name, value FROM duckdb_settings() WHERE name IN "
            "('autoload_known_extensions', 'autoinstall_known_extensions')").fetchall())
    assert settings == {"autoload_known_extensions": "false", "autoinstall_known_extensions": "false"}


def test_a_held_lock_names_the_process_that_holds_it(db, monkeypatch):
    monkeypatch.setenv("DOXA_LOCK_TIMEOUT", "0.5")  # the bounded wait itself is tests/test_concurrency.py's
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('held', flush=True); "
                               "time.sleep(60)", db], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StoreError) as caught:
            Store.open(db)
        message = str(caught.value)
        assert f"process {holder.pid}" in message and "holds its lock" in message
    finally:
        holder.kill()
        holder.wait()


# ---------------------------------------------------------------------------- output
@pytest.mark.skipif(not os.path.exists(DOXA), reason="the doxa entry point is not installed")
@pytest.mark.parametrize("command", ["belief maya.diet", "beliefs", "explain maya.diet"])
def test_a_closed_pipe_ends_the_command_without_a_traceback(db, tmp_path, command):
    err = tmp_path / "err.txt"
    # `true` reads nothing and exits at once: every write of doxa meets a closed pipe
    subprocess.run(f"{DOXA} {command} --db {db} --json 2>{err} | true", shell=True, check=False)
    assert "Traceback" not in err.read_text() and "BrokenPipe" not in err.read_text()


MARKUP = "[/] closes nothing, [bold opens nothing, \\[ and a trailing backslash \\"


def test_user_text_with_markup_prints_as_written(tmp_path):
    path = str(tmp_path / "m.duckdb")
    with doxa.open(path) as mem:
        mem.ingest([R.subject("rex", "Rex [/]"), R.source("chat[x]", ["person", "self"]),
                    R.question("rex.x", ["[/]", "[bold"], kind="x", subject="rex", text=MARKUP),
                    R.message("m1", "chat[x]", "2026-01-01", MARKUP),
                    R.reading("m1", "rex.x", {"[/]": 0.9, "[bold": 0.1}),
                    R.instruction("i1", MARKUP, "2026-01-02", subject="rex")])
    for args in (["explain", "rex.x"], ["beliefs"], ["belief", "rex.x"], ["context", "ask Rex"],
                 ["search", "closes"], ["ops"]):
        result = invoke(*args, "--db", path)
        assert result.exit_code == 0, (args, result.output)
        assert result.exception is None, (args, result.exception)
    assert "[/] closes nothing" in invoke("explain", "rex.x", "--db", path).stdout


def test_json_is_shown_as_the_flag_it_is(db):
    help_text = invoke("belief", "--help").stdout
    (line,) = [ln for ln in help_text.splitlines() if "--json" in ln]
    assert "<bool>" not in line
    import typer.main

    group = typer.main.get_command(app)
    commands = [[name] for name in group.commands]
    commands += [[name, sub] for name, cmd in group.commands.items() for sub in getattr(cmd, "commands", {})]
    for args in [[], *commands]:  # no flag anywhere reads as if it took a value
        assert "<bool>" not in invoke(*args, "--help").stdout, args
    assert invoke("belief", "maya.diet", "--db", db, "--json", "true").exit_code == 2  # a flag takes no value


def test_version():
    result = invoke("--version")
    assert result.exit_code == 0 and result.stdout.strip() == f"doxa {doxa.__version__}"


def test_an_at_far_past_the_evidence_warns(db):
    far = invoke("belief", "maya.diet", "--db", db, "--at", "2099-01-01")
    assert far.exit_code == 0 and "Warning: --at 2099-01-01" in far.stderr and "newest evidence" in far.stderr
    near = invoke("belief", "maya.diet", "--db", db, "--at", "2026-04-02")
    assert near.exit_code == 0 and near.stderr == ""


def test_the_python_api_takes_iso_times_like_the_cli(small_mem):
    from datetime import datetime, timezone

    from doxa.inference.agent.context import context

    moment = datetime(2026, 5, 1)
    expected = small_mem.belief("maya.diet", at=moment).answers
    assert small_mem.belief("maya.diet", at="2026-05-01").answers == expected
    assert small_mem.belief("maya.diet", at="2026-05-01T02:00:00+02:00").answers == expected
    assert small_mem.belief("maya.diet", at=moment.replace(tzinfo=timezone.utc)).answers == expected
    assert small_mem.beliefs(at="2026-05-01")[0].at == moment.isoformat()
    assert small_mem.explain("maya.diet", at="2026-05-01").belief.answers == expected
    assert context(small_mem, "what does Maya eat", at="2026-05-01").at == moment.isoformat()
    with pytest.raises(ValueError, match="ISO 8601"):
        small_mem.belief("maya.diet", at="first of May")
