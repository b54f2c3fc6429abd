"""Conversations in (issue 37): chat sessions kept turn by turn, organized a window at a time.

The fixture (tests/data/conversations/job_change.*) is two sessions: the user works as a nurse,
then, months later, has just started as a teacher; between them small talk and a pure question
to the assistant. The same turns come in LongMemEval's record form and in the neutral JSON Lines.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

import doxa
from doxa.cli.main import app
from doxa.data import search
from doxa.data.errors import StoreError
from doxa.inference.agent.conversation import (ASSISTANT_SOURCE, USER_SOURCE, ConversationError, Session,
                                               load_sessions, turn_message_id, worth_organizing)
from doxa.inference.agent.organizer_client import OpenAIChatOrganizer
from doxa.inference.agent.organizer_schema import WINDOW_RULES, WindowOutput
from doxa.inference.agent.readers import OpenAIChatReader
from llm_server import FakeChatServer, window_organizer

DATA = Path(__file__).parent / "data" / "conversations"
RECORD = DATA / "job_change.json"
LINES = DATA / "job_change.jsonl"
READER_RULES = {"nurse": "nurse", "teacher": "teacher"}
ASKED_AT = "2023-09-01T10:00:00"


@pytest.fixture
def mem():
    memory = doxa.open(":memory:", log_reads=False)
    yield memory
    memory.close()


def models(server, **organizer_kwargs):
    return {"organizer": OpenAIChatOrganizer(server.url, model="fake", retries=1, backoff_s=0.01, timeout_s=5.0,
                                             **organizer_kwargs),
            "reader": OpenAIChatReader(server.url, model="fake", retries=1, backoff_s=0.01, timeout_s=5.0)}


def messages(mem) -> list[tuple]:
    return mem.store.execute("SELECT m.id, m.text, m.sent_at, s.path FROM messages m JOIN sources s ON s.id = m.source "
                             "ORDER BY m.sent_at").fetchall()


def record_turns() -> list[tuple[str, str, str]]:
    record = json.loads(RECORD.read_text(encoding="utf-8"))
    return [(sid, t["role"], t["content"]) for sid, session in zip(record["haystack_session_ids"],
                                                                   record["haystack_sessions"]) for t in session]


# ---------------------------------------------------------------------------- reading the forms
def test_both_forms_give_the_same_sessions_and_a_list_of_records_takes_each_session_once(tmp_path):
    from_record, from_lines = load_sessions(RECORD), load_sessions(LINES)
    assert from_record == from_lines
    assert [s.id for s in from_record] == ["conv_a", "conv_b"]
    assert from_record[0].date == datetime(2023, 5, 21, 19, 50)  # LongMemEval's "2023/05/21 (Sun) 19:50"
    assert [(s.id, r, c) for s in from_record for r, c in s.turns] == record_turns()
    record = json.loads(RECORD.read_text(encoding="utf-8"))
    listed = tmp_path / "release.json"
    listed.write_text(json.dumps([record, dict(record, question_id="another")]), encoding="utf-8")
    assert load_sessions(listed) == from_record


@pytest.mark.parametrize("line, where, says", [
    ('{"session": "a", "date": "2023-05-01", "role": "user", "content": "hi"', "line 2", "not JSON"),
    ('{"session": "a", "role": "user", "content": "I am a nurse"}', "line 2", "'date'"),
    ('{"session": "a", "date": "2023-05-01", "role": "system", "content": "be nice"}', "line 2", "unknown role 'system'"),
    ('{"session": "a", "date": "May 1st", "role": "user", "content": "I am a nurse"}', "line 2", "cannot read time"),
    ('{"session": "a", "date": "2023-05-01", "role": "user", "content": "x", "mood": 3}', "line 2", "unknown field"),
])
def test_a_bad_line_is_named_and_nothing_is_written(tmp_path, mem, line, where, says):
    path = tmp_path / "conv.jsonl"
    path.write_text('{"session": "a", "date": "2023-05-01", "role": "user", "content": "I work as a nurse."}\n'
                    + line + "\n", encoding="utf-8")
    with pytest.raises(ConversationError) as err:
        mem.remember_conversation(path, keep_only=True)
    assert where in str(err.value) and says in str(err.value) and "nothing was remembered" in str(err.value)
    assert messages(mem) == []


def test_a_bad_record_field_is_named(tmp_path, mem):
    record = json.loads(RECORD.read_text(encoding="utf-8"))
    record["haystack_sessions"][1][2]["role"] = "narrator"
    del record["haystack_sessions"][0][0]["content"]
    path = tmp_path / "record.json"
    path.write_text(json.dumps(record), encoding="utf-8")
    with pytest.raises(ConversationError) as err:
        mem.remember_conversation(path)
    text = str(err.value)
    assert "haystack_sessions[0][0].content: missing or empty" in text
    assert "haystack_sessions[1][2].role: unknown role 'narrator'" in text
    assert messages(mem) == []


def test_the_cheap_check_skips_thanks_and_pure_questions_only():
    assert not worth_organizing("Thanks, will do!")
    assert not worth_organizing("Can you explain how vaccines work?")
    assert worth_organizing("What should I pack for my first field trip with the kids?")
    assert worth_organizing("Big news: I just started as a teacher at Lincoln Elementary.")
    assert worth_organizing("We’ve adopted a second cat last week")  # a curly apostrophe is still "we've"


# ---------------------------------------------------------------------------- kept, no model
def test_keep_only_keeps_every_turn_verbatim_dated_by_its_session_and_calls_no_model(mem, monkeypatch):
    with FakeChatServer(READER_RULES, organizer=window_organizer()) as server:
        monkeypatch.setenv("DOXA_READER_URL", server.url)  # a model is configured: keep_only calls it anyway not
        result = mem.remember_conversation(RECORD, keep_only=True)
        assert server.requests == []
    assert (result.sessions, result.turns, result.user_turns, result.messages_added) == (2, 10, 5, 10)
    assert result.organizer.calls == result.reader.calls == 0
    kept = messages(mem)
    assert [(text, path.split("/")[0]) for _, text, _, path in kept] == [
        (c, "assistant" if r == "assistant" else "person") for _, r, c in record_turns()]
    assert {path for *_, path in kept} == {USER_SOURCE, ASSISTANT_SOURCE}
    # turn i of a session at the session's date + i seconds; ids from (session, turn)
    assert [(mid, sent) for mid, _, sent, _ in kept[:3]] == [
        (turn_message_id("conv_a", i), datetime(2023, 5, 21, 19, 50) + timedelta(seconds=i)) for i in range(3)]
    assert kept[6][2] == datetime(2023, 8, 2, 9, 15)
    # the user is the subject "me", made as `doxa answer` makes it; nothing is pending
    assert mem.store.execute("SELECT id, aliases FROM subjects").fetchall() == [
        ("me", ["I", "my", "myself", "the user"])]
    assert mem.store.execute("SELECT count(*) FROM remembered").fetchone()[0] == 0
    # the assistant's turns are searchable notes, never evidence
    found = search.search_messages(mem.store, search.tokenize(mem.store, "blackout curtains"))
    assert found and all(hit.is_assistant for hit in found)
    assert search.search_messages(mem.store, search.tokenize(mem.store, "blackout curtains"), include_assistant=False) == []
    # the same conversation again, in the other form: nothing new
    again = mem.remember_conversation(LINES, keep_only=True)
    assert again.messages_added == 0 and len(messages(mem)) == 10


def test_sessions_given_as_objects_and_a_changed_turn_is_refused(mem):
    sessions = [Session("s1", "2024-01-02T08:00:00", [("user", "I live in Leeds now."), ("assistant", "Nice!")])]
    assert mem.remember_conversation(sessions, keep_only=True).messages_added == 2
    changed = [Session("s1", "2024-01-02T08:00:00", [("user", "I live in York now."), ("assistant", "Nice!")])]
    with pytest.raises(StoreError, match="stored with other content"):
        mem.remember_conversation(changed, keep_only=True)
    with pytest.raises(ConversationError, match="unknown role 'bot'"):
        mem.remember_conversation([Session("s2", "2024-01-03", [("bot", "hello")])], keep_only=True)
    assert len(messages(mem)) == 2


def test_two_sessions_given_under_one_id_are_both_kept_and_remembering_them_again_adds_nothing(mem):
    """LongMemEval's haystacks repeat a session id now and then, with other turns or another date: the
    second session of an id is kept under ids of its own (not refused as an edit of the first), and the
    same sessions given again add nothing."""
    sessions = [Session("s1", "2024-01-02T08:00:00", [("user", "I live in Leeds now."), ("assistant", "Nice!")]),
                Session("s2", "2024-01-03T08:00:00", [("user", "Work is busy."), ("assistant", "Hang in there.")]),
                Session("s1", "2024-02-05T08:00:00", [("user", "We moved to York."), ("assistant", "Good luck!")])]
    assert mem.remember_conversation(sessions, keep_only=True).messages_added == 6
    kept = {mid: text for mid, text, _, _ in messages(mem)}
    assert kept[turn_message_id("s1", 0)] == "I live in Leeds now."
    assert kept[turn_message_id("s1", 0, 1)] == "We moved to York."
    assert mem.remember_conversation(sessions, keep_only=True).messages_added == 0
    assert len(messages(mem)) == 6


# ---------------------------------------------------------------------------- organized, a window per call
def test_end_to_end_one_organizer_call_per_window_finds_both_jobs_and_answers_the_current_one(mem):
    organize = window_organizer()
    with FakeChatServer(READER_RULES, organizer=organize) as server:
        result = mem.remember_conversation(LINES, **models(server))
        organizer_requests = server.requests_of("organizer")
        again = mem.remember_conversation(RECORD, **models(server))
        assert len(server.requests_of("organizer")) == len(organizer_requests)  # the second run calls nothing
    # one call per session (each under the window bound), the small talk and the pure question left out
    assert result.windows == 2 and result.organizer.calls == 2 and organize.windows == [[1], [1, 2]]
    assert result.skipped_turns == 2 and result.organized_turns == 3
    assert result.organizer.calls / result.user_turns <= 0.5
    # one open question about the job, with both values; each job turn read against it, nothing else
    assert result.questions_created == ["me.job"]
    assert mem.store.execute("SELECT id, subject, options, is_open FROM questions").fetchall() == [
        ("me.job", "me", ["nurse", "teacher"], True)]
    read = mem.store.execute("SELECT message, question FROM readings ORDER BY message").fetchall()
    assert sorted(read) == sorted([(turn_message_id("conv_a", 0), "me.job"), (turn_message_id("conv_b", 0), "me.job")])
    assert result.readings == 2 and result.reader.calls == 2
    # tokens as the server reported them (the scripted server says 1 and 1 per call)
    assert (result.organizer.prompt_tokens, result.organizer.completion_tokens) == (2, 2)
    assert result.to_dict()["per_user_turn"]["organizer_calls"] == pytest.approx(2 / 5)
    # every user turn is done; running it again adds nothing
    assert mem.store.execute("SELECT status, count(*) FROM remembered GROUP BY 1").fetchall() == [("done", 5)]
    assert (again.messages_added, again.windows, again.readings) == (0, 0, 0)
    # the instructions first, the fixed window rules next: the prompt's head is byte-identical between calls
    first, second = (r["body"]["messages"] for r in organizer_requests)
    assert first[0] == second[0] and first[1]["content"].startswith(WINDOW_RULES)
    assert second[1]["content"].startswith(WINDOW_RULES)
    assert "- me.job (about me, open): What is my job? [nurse]" in second[1]["content"]
    schema = organizer_requests[1]["body"]["response_format"]["json_schema"]["schema"]
    assert schema["$defs"]["TurnOutput"]["properties"]["turn"] == {"type": "integer", "enum": [1, 2]}
    # the answer: the current job is the teacher's; before it, the nurse's
    now = mem.answer("What is my current job?", at=ASKED_AT, use_env=False)
    assert (now.question, now.answer) == ("me.job", "teacher")
    before = mem.answer("What was my previous job?", at=ASKED_AT, use_env=False)
    assert before.answer == "nurse"
    # a question the conversation never answers: "I don't know"
    dog = mem.answer("What is the name of my dog?", at=ASKED_AT, use_env=False)
    assert dog.abstain and dog.answer is None


#: One session of three user turns: a job twice, then a new one (a window of two ends after the second).
NURSE_THEN_TEACHER = [Session("s1", "2024-03-01T09:00:00", [
    ("user", "I work as a nurse these days."), ("assistant", "Hard work!"),
    ("user", "Honestly, I am a nurse mostly for the people."), ("assistant", "Nice."),
    ("user", "Update: I just started as a teacher, I quit the hospital."), ("assistant", "Congratulations!")])]


def test_windows_are_bounded_and_a_later_turn_extends_a_question_an_earlier_turn_created(mem):
    sessions = NURSE_THEN_TEACHER
    organize = window_organizer()
    with FakeChatServer(READER_RULES, organizer=organize) as server:
        result = mem.remember_conversation(sessions, window=2, **models(server))
    assert organize.windows == [[1, 2], [1]] and result.windows == 2
    assert result.organizer.calls / result.user_turns <= 2 / 2
    assert mem.store.execute("SELECT options FROM questions WHERE id = 'me.job'").fetchone()[0] == [
        "nurse", "teacher"]
    assert result.readings == 3


def test_a_window_reply_linking_an_unknown_turn_is_sent_back_once(mem):
    calls = []

    def organize(message, prompt):
        calls.append(prompt)
        turn = 7 if len(calls) == 1 else 1
        return {"turns": [{"turn": turn, "links": [], "new_values": [], "new_questions": [
            {"subject": "me", "kind": "job", "text": "What is my job?", "shape": "value", "options": ["nurse"]}]}],
            "new_subjects": [], "new_relations": []}

    sessions = [Session("s1", "2024-03-01", [("user", "I work as a nurse at the clinic.")])]
    with FakeChatServer(READER_RULES, organizer=organize) as server:
        server_models = models(server, structured="none")
        result = mem.remember_conversation(sessions, **server_models)
        repair = server.requests_of("organizer")[-1]["body"]["messages"][-1]["content"]
    assert result.organizer.calls == 2 and "turn 7 is not one of the turns shown" in repair
    assert result.questions_created == ["me.job"]


def test_a_window_too_long_for_the_servers_context_is_split_and_the_schema_form_kept(mem):
    sessions = NURSE_THEN_TEACHER
    organize = window_organizer()
    with FakeChatServer(READER_RULES, organizer=organize) as server:
        server.fail("context_400", to="organizer")
        given = models(server)
        result = mem.remember_conversation(sessions, **given)
        forms = [r["body"].get("response_format", {}).get("type") for r in server.requests_of("organizer")]
    # refused whole, then asked in halves: the later windows are cut as small
    assert result.windows_split == 1 and organize.windows == [[1], [1], [1]] and result.windows == 3
    assert forms == ["json_schema"] * 4 and given["organizer"].response_format == "json_schema"
    assert mem.store.execute("SELECT options FROM questions WHERE id = 'me.job'").fetchone()[0] == [
        "nurse", "teacher"]


def test_with_no_reader_the_organized_turns_wait_and_a_later_run_reads_them(mem):
    organize = window_organizer()
    with FakeChatServer(READER_RULES, organizer=organize) as server:
        given = models(server)
        first = mem.remember_conversation(RECORD, organizer=given["organizer"], use_env=False)
        assert first.status == "pending" and first.readings == 0 and "DOXA_READER_URL" in first.hint
        assert mem.store.execute("SELECT count(*) FROM remembered WHERE waiting_for = 'reader'").fetchone()[0] == 2
        second = mem.remember_conversation(RECORD, **given)
    assert second.windows == 0 and second.readings == 2 and second.status == "done"
    assert len(organize.windows) == 2


def test_a_failing_organizer_keeps_every_turn_and_a_second_run_goes_on(mem):
    organize = window_organizer()
    with FakeChatServer(READER_RULES, organizer=organize) as server:
        server.fail("500", times=2, to="organizer")
        with pytest.raises(StoreError, match="window 1 of 2 .*run it again to go on"):
            mem.remember_conversation(RECORD, **models(server))
        assert len(messages(mem)) == 10  # kept, the user's turns pending
        assert mem.store.execute("SELECT count(*) FROM remembered WHERE status = 'pending'").fetchone()[0] == 3
        result = mem.remember_conversation(RECORD, **models(server))
    assert result.windows == 2 and result.questions_created == ["me.job"]


def test_the_window_output_has_no_number_but_the_turns(mem):
    schema = json.dumps(WindowOutput.response_schema())
    for word in ("probab", "confiden", "score", "weight"):
        assert word not in schema


# ---------------------------------------------------------------------------- the command
def test_cli_keep_only_json_and_a_bad_file(tmp_path):
    db = str(tmp_path / "m.duckdb")
    runner = CliRunner()
    out = runner.invoke(app, ["remember", "--conversation", str(LINES), "--keep-only", "--json", "--db", db])
    assert out.exit_code == 0, out.output
    result = json.loads(out.stdout)
    assert (result["turns"], result["user_turns"], result["messages_added"]) == (10, 5, 10)
    assert result["organizer"]["calls"] == 0 and result["keep_only"] is True
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"session": "a", "date": "2023-05-01", "role": "robot", "content": "beep"}\n', encoding="utf-8")
    other = str(tmp_path / "other.duckdb")
    out = runner.invoke(app, ["remember", "--conversation", str(bad), "--keep-only", "--db", other])
    assert out.exit_code == 1 and "line 1" in out.output and "unknown role 'robot'" in out.output
    assert not Path(other).exists()
    out = runner.invoke(app, ["remember", "--keep-only", "--file", str(LINES), "--db", db])
    assert out.exit_code == 2
