"""The command line of issue 2 (init, ingest, belief, beliefs, explain): --json keys, --db, $DOXA_DB, errors.

Most tests run the typer app in-process (CliRunner); the last ones run the real entry
point as a process, which takes `doxa belief`'s start-up fast path (cli/fast.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import doxa
import records as R
from doxa.cli.main import app

#: `doxa belief maya.diet --json` answers at least these (docs/formats.md).
BELIEF_KEYS = {"question", "at", "answers", "top", "act", "params_version"}
EXPLAIN_KEYS = {"belief", "prior", "change_rate_per_day", "half_life_days", "terms", "settlements", "rejections",
                "calibration"}


def run(*args: str, env: dict | None = None, input: str | None = None, code: int = 0):
    result = CliRunner().invoke(app, list(args), env=env, input=input)
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    return result


def run_json(*args: str, **kwargs):
    return json.loads(run(*args, "--json", **kwargs).stdout)


@pytest.fixture
def db(tmp_path, small_records) -> str:
    """A store file holding the small hand-written records, ingested through the CLI."""
    path = str(tmp_path / "doxa.duckdb")
    data = R.write_jsonl(tmp_path / "small.jsonl", small_records)
    run("ingest", data, "--db", path)
    return path


def test_init_creates_an_empty_store(tmp_path):
    path = tmp_path / "new.duckdb"
    out = run_json("init", "--db", str(path))
    assert set(out) >= {"db", "created", "counts"}
    assert out["db"] == str(path) and path.exists()
    assert set(out["counts"].values()) == {0}


def test_ingest_reports_what_was_added(tmp_path, small_records):
    path = str(tmp_path / "s.duckdb")
    data = R.write_jsonl(tmp_path / "small.jsonl", small_records)
    out = run_json("ingest", data, "--db", path)
    assert out["file"] == data and out["added"]["readings"] == 6
    assert "Nothing new" in run("ingest", data, "--db", path).stdout


def test_ingest_reads_standard_input(tmp_path, small_records):
    path = str(tmp_path / "s.duckdb")
    out = run_json("ingest", "-", "--db", path, input="\n".join(R.to_lines(small_records)) + "\n")
    assert out["added"]["questions"] == 3


def test_belief_json_has_the_documented_keys(db):
    out = run_json("belief", "maya.diet", "--db", db)
    assert set(out) >= BELIEF_KEYS
    assert out["question"] == "maya.diet"
    assert set(out["answers"]) == {"vegetarian", "eats fish", "eats meat"}
    assert out["top"] == max(out["answers"], key=out["answers"].get)
    assert isinstance(out["act"], bool) and out["params_version"] is None
    assert abs(sum(out["answers"].values()) - 1) < 1e-5


def test_belief_text_output_lists_every_answer(db):
    text = run("belief", "maya.flower", "--db", db, "--at", "2026-06-01").stdout
    assert "tulips" in text and "lilies" in text
    top_p = max(run_json("belief", "maya.flower", "--db", db, "--at", "2026-06-01")["answers"].values())
    # the verdict follows the top probability against --act-at, on either side of it
    for act_at, acts in ((0.8, top_p >= 0.8), (max(top_p - 0.05, 0.0), True), (min(top_p + 0.05, 1.0), False)):
        text = run("belief", "maya.flower", "--db", db, "--at", "2026-06-01", "--act-at", f"{act_at:.4f}").stdout
        if acts:
            assert "act on it" in text and "too uncertain" not in text
        else:
            assert f"too uncertain to act on (below {act_at:.2f}): ask" in text and "act on it" not in text


def test_beliefs_json_is_a_list_of_belief_objects(db):
    out = run_json("beliefs", "--db", db, "--at", "2026-06-01")
    assert sorted(b["question"] for b in out) == ["maya.diet", "maya.flower", "sam.diet"]
    assert all(set(b) >= BELIEF_KEYS for b in out)
    single = run_json("belief", "sam.diet", "--db", db, "--at", "2026-06-01")
    assert next(b for b in out if b["question"] == "sam.diet") == single
    assert [b["question"] for b in run_json("beliefs", "--subject", "sam", "--db", db)] == ["sam.diet"]
    assert len(run_json("beliefs", "--limit", "1", "--db", db)) == 1
    assert "maya.flower" in run("beliefs", "--db", db).stdout


def test_explain_json_has_the_terms(db):
    out = run_json("explain", "maya.diet", "--db", db, "--at", "2026-06-01")
    assert set(out) >= EXPLAIN_KEYS
    assert set(out["belief"]) >= BELIEF_KEYS
    assert {t["message"] for t in out["terms"]} == {"m1", "m2", "n1"}
    text = run("explain", "maya.diet", "--db", db, "--at", "2026-06-01").stdout
    assert "ignored: assistant note" in text and "LLR" in text


def test_db_option_chooses_the_store(tmp_path, db):
    other = str(tmp_path / "other.duckdb")
    run("ingest", "-", "--db", other, input="\n".join(R.to_lines([R.question("other.q", ["a", "b"])])))
    assert [b["question"] for b in run_json("beliefs", "--db", other)] == ["other.q"]
    assert len(run_json("beliefs", "--db", db)) == 3


def test_doxa_db_environment_variable_is_the_default_store(tmp_path, db):
    env_db = str(tmp_path / "env.duckdb")
    run("init", env={"DOXA_DB": env_db})
    assert Path(env_db).exists()
    run("ingest", "-", env={"DOXA_DB": env_db}, input=json.dumps(R.question("env.q", ["a", "b"])))
    assert run_json("belief", "env.q", env={"DOXA_DB": env_db})["question"] == "env.q"
    # --db wins over the environment
    assert run_json("belief", "maya.diet", "--db", db, env={"DOXA_DB": env_db})["question"] == "maya.diet"


def test_unknown_question_is_a_clear_error(db):
    result = run("belief", "maya.dit", "--db", db, code=1)
    assert "no question 'maya.dit'" in result.stderr and "did you mean 'maya.diet'" in result.stderr
    assert "Traceback" not in result.output
    run("explain", "nope", "--db", db, code=1)
    assert "no subject 'nobody'" in run("beliefs", "--subject", "nobody", "--db", db, code=1).stderr


def test_a_missing_store_is_not_created_by_a_read(tmp_path):
    path = tmp_path / "missing.duckdb"
    result = run("belief", "maya.diet", "--db", str(path), code=1)
    assert "no doxa store" in result.stderr and "doxa init" in result.stderr
    assert not path.exists()


def test_at_parses_iso_dates_and_times(db):
    before = run_json("belief", "maya.diet", "--db", db, "--at", "2026-02-01")
    after = run_json("belief", "maya.diet", "--db", db, "--at", "2026-06-01T12:00:00Z")
    assert before["at"].startswith("2026-02-01T00:00:00") and after["at"].startswith("2026-06-01T12:00:00")
    assert before["top"] == "vegetarian" and after["top"] == "eats fish"  # m2 (March) moved it
    shifted = run_json("belief", "maya.diet", "--db", db, "--at", "2026-06-01T14:00:00+02:00")
    assert shifted["at"] == after["at"]  # times are UTC


def test_bad_at_is_refused_with_the_accepted_form(db):
    result = run("belief", "maya.diet", "--db", db, "--at", "last tuesday", code=2)
    assert "--at" in result.stderr and "ISO 8601" in result.stderr


# ---------------------------------------------------------------------------- the real entry point
def doxa_process(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`doxa ARGS` as its own process, started as the console script starts it (doxa.cli:main)."""
    full_env = {k: v for k, v in os.environ.items() if k != "DOXA_DB"}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", "from doxa.cli import main; main()", *args],
                          capture_output=True, text=True, env=full_env, timeout=120)


@pytest.fixture
def closed_db(tmp_path, small_records) -> str:
    """A store file no connection of this process holds (another process must be able to open it)."""
    path = str(tmp_path / "closed.duckdb")
    with doxa.open(path) as memory:
        memory.ingest(small_records)
    return path


def test_belief_as_a_process_matches_the_in_process_command(closed_db):
    args = ["belief", "maya.flower", "--at", "2026-06-01", "--act-at", "0.9", "--json"]
    done = doxa_process(*args, "--db", closed_db)
    assert done.returncode == 0, done.stderr
    as_process = json.loads(done.stdout)
    assert set(as_process) >= BELIEF_KEYS
    in_process = run_json(*args[:-1], "--db", closed_db)
    assert as_process == in_process


def test_belief_as_a_process_reads_doxa_db_and_fails_clearly(closed_db):
    done = doxa_process("belief", "sam.diet", "--json", env={"DOXA_DB": closed_db})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["question"] == "sam.diet"
    missing = doxa_process("belief", "sam.dit", "--db", closed_db)
    assert missing.returncode == 1
    assert "no question 'sam.dit'" in missing.stderr and "Traceback" not in missing.stderr
    bad_at = doxa_process("belief", "sam.diet", "--db", closed_db, "--at", "soon")
    assert bad_at.returncode == 2 and "ISO 8601" in bad_at.stderr


def test_bad_ingest_as_a_process_exits_nonzero(closed_db, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type":"subject","id":"x","name":"X"}\n{"type":"subject","id":\n', encoding="utf-8")
    done = doxa_process("ingest", str(bad), "--db", closed_db)
    assert done.returncode == 1
    assert "line 2: not valid JSON" in done.stderr
    with doxa.open(closed_db) as memory:
        assert memory.store.counts()["subjects"] == 2


@pytest.mark.parametrize(("argv", "parsed"), [
    (["maya.diet"], {"question": "maya.diet", "at": None, "act_at": 0.8, "db": None, "as_json": False}),
    (["maya.diet", "--json", "--db", "s.duckdb"],
     {"question": "maya.diet", "at": None, "act_at": 0.8, "db": "s.duckdb", "as_json": True}),
    (["--at=2026-03-01", "maya.diet", "--act-at", "0.9"],
     {"question": "maya.diet", "at": "2026-03-01", "act_at": 0.9, "db": None, "as_json": False}),
    (["maya.diet", "--db=a=b.duckdb"], {"question": "maya.diet", "at": None, "act_at": 0.8, "db": "a=b.duckdb",
                                        "as_json": False}),
])
def test_the_fast_path_reads_the_plain_forms_of_belief(argv, parsed):
    from doxa.cli.fast import parse_belief_args

    assert parse_belief_args(argv) == parsed


@pytest.mark.parametrize("argv", [
    [], ["--help"], ["maya.diet", "-h"], ["a", "b"], ["maya.diet", "--db"], ["maya.diet", "--jsn"],
    ["maya.diet", "--js"], ["maya.diet", "--json", "--json"], ["maya.diet", "--db", "a", "--db", "b"],
    ["maya.diet", "--act-at", "high"], ["maya.diet", "--act-at", "1.5"], ["--", "maya.diet"],
])
def test_the_fast_path_hands_everything_else_to_typer(argv):
    from doxa.cli.fast import parse_belief_args, try_fast_path

    assert parse_belief_args(argv) is None
    assert try_fast_path(["belief", *argv]) is False  # typer then explains, or takes it
