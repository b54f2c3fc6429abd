"""`doxa answer`: a question in words to an answer, end to end over the scripted loopback model.

The model is tests/llm_server.py's server: it reads as the reader (rules: a keyword in a message
picks an option) and answers the organizer's two requests (which tracked question, which options)
as each test scripts them. Every answer is held to an independent read of the same store:
`mem.belief(question, at)` at the time the answer says it is for.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import doxa
import records as R
from doxa.cli.main import app
from doxa.data.demo import DEMO_NOW, demo_records
from doxa.data.errors import StoreError
from doxa.data.times import parse_time
from doxa.inference.agent import ask as asking
from doxa.inference.agent.answer import USER_ID, USER_SUBJECT, time_asked
from doxa.inference.agent.question_model import QuestionModel
from doxa.inference.agent.readers import OpenAIChatReader
from llm_server import FakeChatServer, answer_model

NOW = parse_time(DEMO_NOW)
ASKED = parse_time("2026-12-01")
JOB = {"kind": "job", "text": "What is the user's job?", "options": ["teacher", "nurse"]}


def job_records() -> list[dict]:
    """The user's own messages about their job: a nurse, then a teacher (no user subject yet)."""
    return [
        R.subject("maya"),
        R.source("my-chat", ["user", "chat"]),
        R.message("j1", "my-chat", "2025-01-10", "My job: nurse at St Mary's, night shifts again."),
        R.message("j2", "my-chat", "2026-09-01", "New job! I quit nursing and I am a teacher at Hillside now."),
        R.message("x1", "my-chat", "2026-09-02", "Lovely walk by the river today."),
    ]


@pytest.fixture
def env(monkeypatch):
    for name in ("DOXA_READER_URL", "DOXA_ORGANIZER_URL"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture
def demo(env):
    mem = doxa.open(":memory:", log_reads=False)
    mem.ingest(demo_records())
    yield mem
    mem.close()


@pytest.fixture
def jobs(env):
    mem = doxa.open(":memory:", log_reads=False)
    mem.ingest(job_records())
    yield mem
    mem.close()


@pytest.fixture
def server():
    organizer = answer_model(propose=lambda prompt: dict(JOB))
    with FakeChatServer({"teacher": "teacher", "nurse": "nurse", "moved": "7 Harbour Road"},
                        organizer=organizer) as fake:
        fake.script = organizer
        yield fake


def clients(server) -> dict:
    return {"reader": OpenAIChatReader(server.url, model="fake", retries=0, timeout_s=5.0),
            "model": QuestionModel(server.url, model="fake", retries=0, timeout_s=5.0)}


# ---------------------------------------------------------------------------- end to end
def test_a_question_found_by_search_is_answered_without_asking_the_model(demo, server):
    result = demo.answer("Where does Maya live?", at=NOW, **clients(server))
    assert (result.question, result.found_by, result.created) == ("maya.home", "search", False)
    assert server.script.calls == []  # one clear match: the model was not asked which
    truth = demo.belief("maya.home", NOW)
    assert (result.answer, result.p, result.act) == (truth.top, truth.p_top, truth.act)
    assert result.alternatives == [{"answer": "12 Elm Street", "p": truth.answers["12 Elm Street"]}]
    assert [e["message"] for e in result.evidence] == ["a1", "a2"]
    assert result.evidence[1]["source"] == "maya-chat" and "7 Harbour Road" in result.evidence[1]["text"]


def test_a_new_question_is_made_with_the_options_the_model_proposes_and_read(jobs, server):
    result = jobs.answer("What is my current job?", at=ASKED, **clients(server))
    assert result.created and result.found_by == "created" and result.question == "me.job"
    # the user's subject was made, and the model saw the kept messages that name the values
    assert USER_ID in {s["id"] for s in jobs.store.subjects()}
    (request, prompt), = server.script.calls
    assert request == "propose" and "nurse at St Mary's" in prompt and "teacher at Hillside" in prompt
    assert "river" not in prompt
    question = jobs.store.question("me.job")
    assert question["subject"] == USER_ID and question["text"] == "What is the user's job?"
    assert question["options"][:2] == ["teacher", "nurse"]
    assert result.readings == 2
    truth = jobs.belief("me.job", ASKED)
    assert result.answer == truth.top == "teacher" and result.p == truth.p_top
    # asking again finds it by search: nothing new is made, nothing is read twice
    again = jobs.answer("What's my job?", at=ASKED, **clients(server))
    assert (again.question, again.found_by, again.created, again.readings) == ("me.job", "search", False, 0)


def test_below_the_act_threshold_the_answer_is_i_dont_know_with_what_would_settle_it(demo, server):
    result = demo.answer("Where does Maya live?", at=NOW, **clients(server))
    truth = demo.belief("maya.home", NOW)
    assert truth.p_top < demo.act_at
    assert result.abstain and not result.act and result.message.startswith("I don't know")
    assert "doxa correct maya.home" in result.settle
    sure = demo.answer("Where does Maya live?", at=NOW, act_at=truth.p_top - 0.01, **clients(server))
    assert sure.act and not sure.abstain and sure.settle is None and sure.message.startswith("7 Harbour Road")


def test_an_earlier_value_is_answered_from_the_history(jobs, server):
    jobs.answer("What is my current job?", at=ASKED, **clients(server))
    result = jobs.answer("What was my previous job?", at=ASKED, **clients(server))
    assert result.when == "previous" and result.question == "me.job" and result.found_by == "search"
    assert result.changes and result.changes[-1]["to"] == "teacher" and result.changes[-1]["at"].startswith("2026-09-01")
    # the answer is for the last point before the change: the nurse message's time
    assert result.at == "2025-01-10T00:00:00" and result.answer == "nurse"
    truth = jobs.belief("me.job", result.at)
    assert (result.answer, result.p) == (truth.top, truth.p_top)
    assert [e["message"] for e in result.evidence] == ["j1"]
    first = jobs.answer("What job did I have initially?", at=ASKED, **clients(server))
    assert (first.when, first.answer, first.at) == ("first", "nurse", "2025-01-10T00:00:00")


def test_close_matches_are_told_apart_by_the_model(demo, server):
    demo.ingest([R.question("maya.summer_home", ["lake house", "her flat"], subject="maya",
                            text="Where does Maya live in summer?")])
    server.script.calls.clear()
    picked = answer_model(choose=lambda prompt: "maya.summer_home")
    server.organizer = picked
    # "live" matches both about as well: the model decides (here, scripted to pick the second)
    result = demo.answer("Where does Maya live?", at=NOW, **clients(server))
    assert (result.question, result.found_by) == ("maya.summer_home", "model")
    (request, prompt), = picked.calls
    assert request == "choose" and "maya.home" in prompt and "maya.summer_home" in prompt
    unsure = demo.answer("Where does Maya live?", at=NOW, use_env=False)
    assert (unsure.question, unsure.found_by) == ("maya.home", "search")
    assert any("telling apart" in s for s in unsure.skipped)
    # a word only one of them has leaves no doubt: the model is not asked
    clear = demo.answer("Where does Maya live in the summer?", at=NOW, **clients(server))
    assert (clear.question, clear.found_by, len(picked.calls)) == ("maya.summer_home", "search", 1)


def test_with_no_model_configured_tracked_questions_still_answer_and_the_rest_says_what_was_skipped(jobs, demo):
    found = demo.answer("Where does Maya live?", at=NOW)
    assert found.question == "maya.home" and found.answer == demo.belief("maya.home", NOW).top
    before = jobs.store.counts()
    missing = jobs.answer("What is my current job?", at=ASKED)
    assert missing.question is None and missing.answer is None and missing.abstain
    assert missing.message.startswith("I don't know")
    assert any("DOXA_ORGANIZER_URL" in s for s in missing.skipped)
    assert jobs.store.counts()["questions"] == before["questions"]  # nothing was made
    assert jobs.store.counts()["subjects"] == before["subjects"]


def test_the_words_decide_which_time_is_asked():
    assert time_asked("What was my previous job?") == "previous"
    assert time_asked("Where did I live before?") == "previous"
    assert time_asked("Where did Maya use to work? she used to be a nurse") == "previous"
    assert time_asked("What did I do initially?") == "first"
    assert time_asked("What is my current job?") == "now"
    assert time_asked("What is my first name?") == "now"  # a thing named "first", not a time
    assert time_asked("What was the first car I owned?") == "first"


def test_a_question_naming_nobody_is_refused_with_the_fix_when_one_must_be_made(demo, server):
    with pytest.raises(StoreError, match="--subject"):
        demo.answer("Which train line is fastest?", at=NOW, **clients(server))
    with pytest.raises(StoreError, match="no subject 'nobody'"):
        demo.answer("Where does Maya live?", subject="nobody", at=NOW, use_env=False)


# ---------------------------------------------------------------------------- ask without --options
def test_ask_without_options_takes_the_proposed_ones_and_without_a_model_says_how_to_fix_it(jobs, server):
    jobs.ingest([USER_SUBJECT])
    made = asking.ask(jobs, "What is my job?", "me", None, at=ASKED, **clients(server))
    assert made.created and made.question["id"] == "me.job" and made.question["options"][:2] == ["teacher", "nurse"]
    assert made.belief.top == "teacher"
    with pytest.raises(StoreError, match="no --options given and no model"):
        asking.ask(jobs, "Where do I live?", "me", None, use_env=False)


def test_proposed_options_make_an_open_question_unless_it_is_yes_or_no():
    # open: the values as named; "unlisted" stands for the rest, so it is never an option
    assert asking.proposed_options(["nurse", "unlisted"]) == (["nurse"], {"open": True})
    assert asking.proposed_options(["nurse", "teacher", "nurse"]) == (["nurse", "teacher"], {"open": True})
    assert asking.proposed_options([]) == ([], {"open": True})
    assert asking.proposed_options(["yes", "no"]) == (["yes", "no"], {})


def test_a_question_made_from_words_is_open_where_the_store_has_open_questions(jobs, server):
    result = jobs.answer("What is my current job?", at=ASKED, **clients(server))
    record = jobs.store.question(result.question)
    assert record["open"] and list(record["options"]) == ["teacher", "nurse"]
    assert "unlisted" in jobs.belief(result.question, ASKED).answers  # the remainder a value question keeps


# ---------------------------------------------------------------------------- the command line
def test_cli_answer_json_and_help(tmp_path, server, env):
    db = str(tmp_path / "demo.duckdb")
    with doxa.open(db) as mem:
        mem.ingest(demo_records())
    runner = CliRunner()
    out = runner.invoke(app, ["answer", "Where did Maya live before?", "--at", DEMO_NOW, "--db", db, "--json"])
    assert out.exit_code == 0, out.output
    found = json.loads(out.stdout)
    assert {"question", "answer", "p", "act", "abstain", "alternatives", "evidence", "created", "at"} <= set(found)
    assert (found["question"], found["when"], found["answer"]) == ("maya.home", "previous", "12 Elm Street")
    with doxa.open(db) as mem:
        assert found["p"] == mem.belief("maya.home", found["at"]).p_top
    text = runner.invoke(app, ["answer", "What is my current job?", "--at", DEMO_NOW, "--db", db])
    assert text.exit_code == 0 and "I don't know" in text.stdout and "DOXA_ORGANIZER_URL" in text.stdout
    helped = runner.invoke(app, ["answer", "--help"])
    assert helped.exit_code == 0 and "--subject" in helped.stdout and "question in words" in helped.stdout
    refused = runner.invoke(app, ["ask", "What is Maya's job?", "--subject", "maya", "--db", db])
    assert refused.exit_code == 1 and "--options" in refused.stderr


def test_a_lone_weak_match_is_confirmed_by_the_model_before_it_answers(jobs, env):
    walk = {"kind": "job", "text": "Where did the user walk after the job interview?", "options": ["river"]}
    script = answer_model(propose=lambda prompt: dict(walk if "walk" in prompt else JOB))
    with FakeChatServer({"teacher": "teacher", "nurse": "nurse"}, organizer=script) as server:
        jobs.answer("What is my current job?", at=ASKED, **clients(server))  # the user's only question: me.job
        # a lone match that shares the question's words is taken by search alone, the model not asked
        script.calls.clear()
        again = jobs.answer("What is my job now?", at=ASKED, **clients(server))
        assert (again.question, again.found_by) == ("me.job", "search") and script.calls == []
        # of "walk", "river", "job", "interview" only "job" is in me.job's text or kind: the model is asked,
        # says none, and the question goes the way of one no tracked question asks (options proposed)
        result = jobs.answer("Where did I walk by the river after the job interview?", at=ASKED,
                             **clients(server))
        assert [request for request, _ in script.calls] == ["choose", "propose"]
        assert result.found_by == "created" and result.created
        # the model named it "job" (a small model copies its prompt's example): that is me.job's id, and
        # the model had just said it is not that question, so the id from the question's words stands
        assert result.question != "me.job" and result.question.startswith("me.")
        assert jobs.store.question(result.question)["text"] == walk["text"]
        assert jobs.store.question("me.job")["options"][:2] == ["teacher", "nurse"]


def test_proposed_options_no_shown_message_states_are_dropped(jobs, env):
    """A value is what a message says: "7 Harbour Road" from the prompt's own example, or a value made
    up, is no option; yes/no are kept (no message need say "yes")."""
    made_up = {"kind": "job", "text": "What is the user's job?", "options": ["teacher", "7 Harbour Road", "pilot",
                                                                             "Nurse"]}
    script = answer_model(propose=lambda prompt: dict(made_up))
    with FakeChatServer({"teacher": "teacher", "nurse": "nurse"}, organizer=script) as server:
        model = clients(server)["model"]
        kept = ["My job: nurse at St Mary's.", "I am a teacher at Hillside now."]
        mine = model.propose("What is my job?", "me", kept)
        assert mine.options == ["teacher", "Nurse"] and mine.kind == "job"
        made_up.update(options=["yes", "no"])
        assert model.propose("Do I like my job?", "me", kept).options == ["yes", "no"]
        # "job" is the prompt's own example: for a question that names no job it is a copy, not a kind
        assert model.propose("How long have I used Zillow?", "me", kept).kind == ""
        # and the example's text is no rewrite of a question that shares none of its words: the
        # question is kept as asked (the caller stores its own words when the text is empty)
        assert model.propose("Did I switch to more water per spoon of coffee?", "me", kept).text == ""
        assert mine.text == "What is the user's job?"  # a rewrite of the question asked: kept


def test_a_long_kept_message_is_shown_to_the_proposal_by_the_part_that_bears_on_the_question(jobs, env):
    """A pasted document's first 400 characters rarely hold the value: the proposal is shown the
    sentences that share words with the question, so a value stated deep inside is shown, and a
    value the model names from it is kept (a value no shown text states is dropped)."""
    from doxa.inference.agent.question_model import MESSAGE_CHARS

    filler = " ".join(f"Line {i} of my notes on sourdough starters and flour." for i in range(200))
    document = f"{filler} My job these days: nurse at St Mary's, nights mostly. {filler}"
    script = answer_model(propose=lambda prompt: {"kind": "job", "text": "What is the user's job?",
                                                  "options": ["nurse"]})
    with FakeChatServer({}, organizer=script) as server:
        proposal = clients(server)["model"].propose("What is my job these days?", "me", [document])
    (request,) = [r for r in server.requests if "Kept messages" in r["body"]["messages"][-1]["content"]]
    shown = request["body"]["messages"][-1]["content"].split("<message>", 1)[1]
    assert "nurse at St Mary's" in shown and len(shown) < MESSAGE_CHARS + 100
    assert proposal.options == ["nurse"]
