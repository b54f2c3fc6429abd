"""`doxa ask`: a question nobody prepared, answered from kept evidence by a reader over loopback."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import doxa
from doxa.data.demo import DEMO_NOW, demo_records
from doxa.data.errors import StoreError
from doxa.data.times import parse_time
from doxa.inference.agent.ask import AskError, ask
from doxa.inference.agent.readers import OpenAIChatReader, Reader, ReaderError, Reading
from llm_server import FakeChatServer

NOW = parse_time(DEMO_NOW)
QUESTION = "Does Maya have allergies?"


@pytest.fixture
def demo():
    mem = doxa.open(":memory:", log_reads=False)
    mem.ingest(demo_records())
    yield mem
    mem.close()


@pytest.fixture(scope="module")
def server():
    with FakeChatServer({"peanut": "yes"}) as fake:
        yield fake


def reader_for(server) -> OpenAIChatReader:
    return OpenAIChatReader(server.url, model="fake", retries=0, timeout_s=5.0)


def test_ask_finds_the_peanut_message_and_returns_a_belief(demo, server):
    result = ask(demo, QUESTION, "maya", ["yes", "no"], reader=reader_for(server), at=NOW)
    assert result.created and result.question["id"] == "maya.allergies"
    assert "p1" in [h.message for h in result.hits]
    peanut = next(r for r in result.readings if r["message"] == "p1")
    assert max(peanut["probs"], key=peanut["probs"].get) == "yes"
    b = result.belief
    assert b.top == "yes" and b.p_top > 0.5 and b.n_evidence >= 1
    assert b.answers == demo.belief("maya.allergies", NOW).answers  # stored: the next read agrees
    # the organizer wrote the question, never a probability; readings came from the reader
    assert demo.store.question("maya.allergies")["options"] == ["yes", "no"]
    readers = {r for (r,) in demo.store.execute("SELECT DISTINCT reader FROM readings WHERE question = "
                                                  "'maya.allergies'").fetchall()}
    assert readers == {"llm:fake"}


def test_the_search_is_restricted_to_the_subject_and_leaves_out_assistant_notes(demo, server):
    result = ask(demo, "Is Maya vegetarian?", "maya", ["yes", "no"], reader=reader_for(server), at=NOW)
    hit_ids = {h.message for h in result.hits}
    assert "m1" in hit_ids  # "Maya is vegetarian, remember for dinners."
    assert "n1" not in hit_ids  # the assistant's own note is never evidence
    assert "s1" not in hit_ids  # Sam's veggie life is about Sam


def test_asking_again_reuses_the_question_and_reads_nothing_twice(demo, server):
    first = ask(demo, QUESTION, "maya", ["yes", "no"], reader=reader_for(server), at=NOW)
    again = ask(demo, QUESTION, "maya", ["yes", "no"], reader=reader_for(server), at=NOW)
    assert not again.created and again.readings == [] and again.already_read == len(first.readings)
    assert again.belief.answers == first.belief.answers


def test_without_a_reader_the_evidence_is_listed_with_how_to_configure_one(demo, monkeypatch):
    monkeypatch.delenv("DOXA_READER_URL", raising=False)
    result = ask(demo, QUESTION, "maya", ["yes", "no"], at=NOW)
    assert [h.message for h in result.hits] == ["p1"]
    assert "DOXA_READER_URL" in result.hint and "docs/readers.md" in result.hint
    assert result.readings == [] and result.belief.n_evidence == 0
    assert result.belief.answers == {"yes": 0.5, "no": 0.5}


def test_the_reader_comes_from_the_environment(demo, server, monkeypatch):
    monkeypatch.setenv("DOXA_READER_URL", server.url)
    result = ask(demo, QUESTION, "maya", ["yes", "no"], at=NOW)
    assert result.hint is None and result.belief.top == "yes"


class _FailsSecond(Reader):
    name = "flaky"

    def __init__(self):
        self.calls = 0

    def read(self, message_text, question_text, options, *, subject=None):
        self.calls += 1
        if self.calls == 2:
            raise ReaderError("server went away")
        return Reading(probs={o: 1.0 / len(options) for o in options}, unclear=0.0, unrelated=0.0, reader=self.name)


def test_a_failing_reader_keeps_what_was_read_and_says_so(demo):
    with pytest.raises(AskError, match="after 1 of"):
        ask(demo, "Does Maya love lilies?", "maya", ["yes", "no"], reader=_FailsSecond(), at=NOW)
    assert demo.store.execute("SELECT count(*) FROM readings WHERE reader = 'flaky'").fetchone()[0] == 1


@pytest.mark.parametrize("subject, options, message", [
    ("nobody", ["yes", "no"], "no subject 'nobody'"),
    ("maya", ["yes"], "at least two distinct answers"),
    ("maya", ["yes", "yes"], "at least two distinct answers"),
])
def test_bad_asks_say_how_to_fix_them(demo, subject, options, message):
    with pytest.raises(StoreError, match=message):
        ask(demo, QUESTION, subject, options, use_env=False)


def test_same_id_with_other_options_is_refused(demo):
    ask(demo, QUESTION, "maya", ["yes", "no"], use_env=False)
    with pytest.raises(StoreError, match="--id"):
        ask(demo, QUESTION, "maya", ["peanuts", "none"], use_env=False)


def test_cli_ask(tmp_path, server):
    from doxa.cli.main import app

    db = str(tmp_path / "demo.duckdb")
    with doxa.open(db) as mem:
        mem.ingest(demo_records())
    runner = CliRunner()
    args = ["ask", QUESTION, "--subject", "maya", "--options", "yes,no", "--db", db, "--at", DEMO_NOW]
    plain = runner.invoke(app, args, env={"DOXA_READER_URL": ""})
    assert plain.exit_code == 0, plain.output
    assert "DOXA_READER_URL" in plain.output and "peanuts" in plain.output
    read = runner.invoke(app, args + ["--json"], env={"DOXA_READER_URL": server.url})
    assert read.exit_code == 0, read.output
    out = json.loads(read.output)
    assert out["belief"]["top"] == "yes" and any(r["message"] == "p1" for r in out["readings"])
