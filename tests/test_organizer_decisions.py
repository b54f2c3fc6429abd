"""The organizer's decisions kept, replayed and cached; its mistakes collected (issue 38, items 1 and 2).

Over real loopback HTTP with the scripted models of tests/llm_server.py: every applied organizer call
(one message, or a window of turns) leaves a row keyed by the SHA-256 of its exact inputs; identical
inputs are answered from it with zero model calls; a refused output leaves nothing; and the cases list
finds what people, the world and the checkers said after the organizer, on hand-made stores.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import doxa
import records as R
from doxa.cli.main import app
from doxa.data import organizer_decisions as kept
from doxa.data import organizer_instructions
from doxa.data.question_ops import operations
from doxa.inference.agent import maintenance
from doxa.inference.agent.organizer_client import OpenAIChatOrganizer, Organized, Organizer
from doxa.inference.agent.organizer_schema import OrganizerOutput
from doxa.inference.agent.organizer_memory import (CASE_KINDS, CachedOrganizer, cases, decision_key,
                                                   decoding_settings, rebuild_request, replay)
from doxa.inference.agent.readers import OpenAIChatReader
from doxa.inference.agent.remember import RememberError
from llm_server import FakeChatServer, value_organizer, window_organizer
from llm_server import diet_organizer as scripted

DIET = ["vegetarian", "eats fish", "eats meat"]
EMPTY = {"links": [], "new_questions": [], "new_subjects": [], "new_relations": []}
READER_RULES = {"fish": "eats fish", "vegetarian": "vegetarian", "peanut": "yes", "nurse": "nurse",
                "teacher": "teacher"}
MESSAGES = [("Maya is vegetarian.", "notes", "2026-05-01"),
            ("I have started eating fish again!", "maya-chat", "2026-06-01"),
            ("Maya eats fish now, and no peanut for her please.", "maya-chat", "2026-06-02")]
CONVERSATION = Path(__file__).parent / "data" / "conversations" / "job_change.jsonl"


@pytest.fixture(scope="module")
def server():
    with FakeChatServer(READER_RULES, organizer=scripted) as fake:
        yield fake


def question(qid: str, kind: str, text: str, options: list[str]) -> dict:
    return R.question(qid, options, kind=kind, subject="maya", text=text)


def fresh():
    memory = doxa.open(":memory:", log_reads=False)
    memory.ingest([R.subject("maya", "Maya", ["my sister"]), R.subject("sam", "Sam"),
                   R.source("maya-chat", ["person", "self", "chat"]), R.source("notes", ["user", "notes"])])
    return memory


@pytest.fixture
def mem():
    memory = fresh()
    yield memory
    memory.close()


def organizer(server, **kwargs):
    return OpenAIChatOrganizer(server.url, model="fake", retries=1, backoff_s=0.01, timeout_s=5.0, **kwargs)


def models(server, **kwargs):
    return {"organizer": organizer(server, **kwargs),
            "reader": OpenAIChatReader(server.url, model="fake", retries=1, backoff_s=0.01, timeout_s=5.0)}


def organizer_calls(server) -> int:
    return len(server.requests_of("organizer"))


def remember_all(mem, server, messages=MESSAGES, **kwargs):
    return [mem.remember(text, source=source, sent_at=at, **{**models(server), **kwargs})
            for text, source, at in messages]


# ---------------------------------------------------------------------------- kept
def test_every_message_call_is_kept_with_its_inputs_reply_and_output(mem, server):
    results = remember_all(mem, server)
    rows = kept.decisions(mem.store)
    assert [r["messages"] for r in rows] == [[r.message] for r in results]
    first = rows[0]
    assert first["kind"] == "message" and first["instructions_version"] == 1
    assert (first["organizer"], first["model"]) == ("llm:fake", "fake")
    assert first["settings"] == {"temperature": 0, "max_tokens": 768, "structured": "auto", "extra_body": {}}
    sent = server.requests_of("organizer")[-3]["body"]["messages"]
    instructions = organizer_instructions.current(mem.store).text
    assert first["prompt"] == sent[1]["content"] and sent[0]["content"] == instructions
    assert first["key"] == decision_key("message", first["prompt"], instructions, "fake", first["settings"])
    assert first["request"]["text"] == "Maya is vegetarian." and first["shown"] == {"subjects": ["maya", "sam"],
                                                                                    "questions": []}
    assert json.loads(first["reply"])["new_questions"][0]["text"] == "What does Maya eat?"  # the raw reply
    assert first["output"]["new_questions"][0]["kind"] == "diet" and first["created"] == ["maya.diet"]
    assert (first["calls"], first["prompt_tokens"], first["completion_tokens"]) == (1, 1, 1)
    assert first["seconds"] > 0 and first["created_at"] is not None
    second, third = rows[1], rows[2]
    assert second["shown"]["questions"] == ["maya.diet"] and second["linked"] == ["maya.diet"]
    assert second["created"] == [] and third["created"] == ["maya.allergies"] and third["linked"] == ["maya.diet"]
    # the request rebuilds exactly: the same prompt, so the same key
    assert all(rebuild_request(r).prompt() == r["prompt"] for r in rows)


def test_a_window_call_is_kept_with_the_turns_it_decided(mem):
    with FakeChatServer(READER_RULES, organizer=window_organizer()) as fake:
        mem.remember_conversation(CONVERSATION, **models(fake))
    rows = kept.decisions(mem.store)
    assert [r["kind"] for r in rows] == ["window", "window"]
    turns = mem.store.execute("SELECT id FROM messages WHERE source = 'me-chat' ORDER BY sent_at").fetchall()
    decided = [m for r in rows for m in r["messages"]]
    assert set(decided) <= {t for (t,) in turns} and len(decided) == 3  # the small talk was not shown
    assert rows[0]["created"] == ["me.job"] and rows[1]["linked"] == ["me.job"]
    assert rows[0]["output"]["turns"][0]["new_questions"][0]["options"] == ["nurse"]
    assert rows[0]["settings"]["max_tokens"] == 128 + 96 * 1 and rows[1]["request"]["turns"][0][0] == 1
    assert rebuild_request(rows[1]).prompt() == rows[1]["prompt"]


# ---------------------------------------------------------------------------- cached
def test_a_replay_that_changed_nothing_costs_zero_organizer_calls(mem, server):
    remember_all(mem, server)
    before = organizer_calls(server)
    again = fresh()
    results = remember_all(again, server, organizer=CachedOrganizer(organizer(server), mem.store))
    assert organizer_calls(server) == before  # every decision came from the kept ones
    assert [r.calls["organizer"] for r in results] == [0, 0, 0]
    assert [(r.created, r.linked) for r in results] == [(["maya.diet"], []), ([], ["maya.diet"]),
                                                        (["maya.allergies"], ["maya.diet"])]
    # the fresh store keeps the decisions it reused: it can be replayed from in turn
    assert [r["key"] for r in kept.decisions(again.store)] == [r["key"] for r in kept.decisions(mem.store)]
    again.close()


def test_identical_inputs_in_one_store_are_answered_from_the_kept_decision(mem, server):
    first = mem.remember("Sam went to a jazz concert.", source="notes", sent_at="2026-05-01T09:00", **models(server))
    before = organizer_calls(server)
    second = mem.remember("Sam went to a jazz concert.", source="notes", sent_at="2026-05-01T18:00", **models(server))
    assert second.message != first.message and second.calls["organizer"] == 0 and organizer_calls(server) == before
    [row] = kept.decisions(mem.store)
    assert row["messages"] == [first.message, second.message]  # one decision, both messages it decided
    third = mem.remember("Sam went to a jazz concert.", source="notes", sent_at="2026-05-01T20:00",
                         reuse_decisions=False, **models(server))
    assert third.calls["organizer"] == 1 and organizer_calls(server) == before + 1  # opted out: asked


def test_other_instructions_another_setting_or_another_message_ask_the_model(mem, server):
    remember_all(mem, server, MESSAGES[:1])
    before = organizer_calls(server)
    changed_message = fresh()
    changed_message.remember("Maya is vegetarian!", source="notes", sent_at="2026-05-01",
                             organizer=CachedOrganizer(organizer(server), mem.store), reader=models(server)["reader"])
    assert organizer_calls(server) == before + 1
    new_instructions = fresh()
    organizer_instructions.set_text(new_instructions.store, "Organize carefully.\n", note="test")
    new_instructions.remember(*MESSAGES[0][:1], source="notes", sent_at="2026-05-01",
                              organizer=CachedOrganizer(organizer(server), mem.store), reader=models(server)["reader"])
    assert organizer_calls(server) == before + 2
    assert kept.decisions(new_instructions.store)[0]["instructions_version"] == 2
    other_setting = fresh()
    other_setting.remember(*MESSAGES[0][:1], source="notes", sent_at="2026-05-01",
                           organizer=CachedOrganizer(organizer(server, max_tokens=500), mem.store),
                           reader=models(server)["reader"])
    assert organizer_calls(server) == before + 3
    for m in (changed_message, new_instructions, other_setting):
        m.close()


def test_a_conversation_replayed_into_a_fresh_store_calls_no_organizer(mem):
    with FakeChatServer(READER_RULES, organizer=window_organizer()) as fake:
        mem.remember_conversation(CONVERSATION, **models(fake))
        before = organizer_calls(fake)
        again = fresh()  # the same subjects: the same prompts
        result = again.remember_conversation(CONVERSATION, organizer=CachedOrganizer(organizer(fake), mem.store),
                                             reader=models(fake)["reader"])
        assert organizer_calls(fake) == before and result.organizer.calls == 0
    assert result.questions_created == ["me.job"] and result.values_added == {"me.job": ["nurse", "teacher"]}
    again.close()


# ---------------------------------------------------------------------------- refused: nothing kept
def test_a_refused_output_leaves_no_decision(mem, server):
    server.fail("bad_link", times=2, to="organizer")
    with pytest.raises(RememberError):
        mem.remember(*MESSAGES[0][:1], source="notes", sent_at="2026-05-01", **models(server))
    assert kept.decisions(mem.store) == []


def test_a_decision_whose_message_was_not_written_is_not_kept(mem, server):
    server.fail("500", times=2, to="reader")  # the organizer answers, the reader fails: nothing is written
    with pytest.raises(RememberError):
        mem.remember(*MESSAGES[0][:1], source="notes", sent_at="2026-05-01", **models(server))
    assert kept.decisions(mem.store) == [] and mem.store.counts()["messages"] == 0


# ---------------------------------------------------------------------------- replay and erasure
def test_replay_runs_a_kept_request_under_other_instructions_and_another_model(mem, server):
    remember_all(mem, server, MESSAGES[:2])
    row = kept.decisions(mem.store)[1]
    same = replay(row, organizer(server), "Other instructions.")
    assert same.same and same.calls == 1 and same.kept == row["output"]
    sent = server.requests_of("organizer")[-1]["body"]["messages"]
    assert sent[0]["content"] == "Other instructions." and sent[1]["content"] == row["prompt"]
    with FakeChatServer(READER_RULES, organizer=lambda m, p: EMPTY) as other:
        changed = replay(row, organizer(other), "Other instructions.")
    assert not changed.same and changed.output["links"] == [] and changed.kept["links"] == ["maya.diet"]
    assert kept.decisions(mem.store)[1] == row  # nothing written


def test_decisions_naming_finds_the_rows_that_hold_a_message(mem, server):
    results = remember_all(mem, server, MESSAGES[:2])
    rows = kept.decisions(mem.store)
    assert kept.decisions_naming(mem.store.con, [results[0].message]) == [rows[0]["key"]]
    assert sorted(kept.decisions_naming(mem.store.con, [r.message for r in results])) == sorted(r["key"] for r in rows)
    assert kept.decisions_naming(mem.store.con, ["msg-none"]) == []


def test_the_key_is_the_exact_inputs():
    base = decision_key("message", "prompt", "instructions", "m", {"temperature": 0})
    assert len(base) == 64 and base == decision_key("message", "prompt", "instructions", "m", {"temperature": 0})
    assert len({base, decision_key("window", "prompt", "instructions", "m", {"temperature": 0}),
                decision_key("message", "prompt.", "instructions", "m", {"temperature": 0}),
                decision_key("message", "prompt", "instructions.", "m", {"temperature": 0}),
                decision_key("message", "prompt", "instructions", "m2", {"temperature": 0}),
                decision_key("message", "prompt", "instructions", "m", {"temperature": 0.2})}) == 6


def test_settings_are_the_clients_and_a_python_organizer_is_keyed_by_its_class(server):
    class Fixed(Organizer):
        def organize(self, request, instructions):
            return Organized(output=OrganizerOutput())

    settings = decoding_settings(OpenAIChatOrganizer(server.url, model="x", extra_body={"temperature": 0.3}),
                                 "message", None)
    assert settings["temperature"] == 0.3 and settings["extra_body"] == {}
    assert decoding_settings(Fixed(), "message", None) == {"organizer": f"{__name__}.{Fixed.__qualname__}"}
    assert decoding_settings(CachedOrganizer(Fixed(), None), "message", None) == decoding_settings(
        Fixed(), "message", None)


# ---------------------------------------------------------------------------- cases
def kinds(store) -> dict[str, list]:
    out: dict[str, list] = {}
    for c in cases(store):
        out.setdefault(c.kind, []).append(c)
    return out


def test_a_merged_duplicate_is_a_case_and_its_undo_another(mem, server):
    mem.ingest([question("maya.food", "food", "What is Maya's food?", DIET)])
    [result] = remember_all(mem, server, MESSAGES[:1])
    assert result.created == ["maya.diet"]
    creating = kept.decisions(mem.store)[0]["key"]
    mem.ingest([{"type": "question_merge", "id": "op-1", "from": "maya.diet", "into": "maya.food", "by": "me"}])
    [case] = kinds(mem.store)["duplicate"]
    assert case.to_dict() == {"id": "duplicate:op-1", "kind": "duplicate", "decision": creating,
                              "messages": [result.message], "questions": ["maya.diet", "maya.food"],
                              "observed": "created maya.diet; me merged it into maya.food",
                              "expected": {"links": ["maya.food"], "new_questions": []}, "source": "person"}
    mem.ingest([{"type": "undo", "op": "op-1", "by": "me"}])
    found = kinds(mem.store)
    assert "duplicate" not in found
    [undone] = found["undone"]
    assert undone.expected == {"kept_apart": ["maya.diet", "maya.food"]} and undone.source == "person"


def test_a_split_is_a_case_per_decision_with_the_questions_by_assignment(mem, server):
    results = remember_all(mem, server, MESSAGES[:2])
    a1, a2 = (r.message for r in results)
    into = [question("maya.diet_home", "diet_home", "What does Maya eat at home?", DIET),
            question("maya.diet_out", "diet_out", "What does Maya eat out?", DIET)]
    for q in into:
        q.pop("type")
    mem.ingest([{"type": "question_split", "id": "split-1", "question": "maya.diet", "into": into,
                 "assign": {a1: "maya.diet_home", a2: ["maya.diet_out"]}, "by": "me"}])
    split = kinds(mem.store)["split"]
    keys = [r["key"] for r in kept.decisions(mem.store)]
    by_decision = {c.decision: c for c in split}
    assert set(by_decision) == set(keys) and all(c.source == "person" for c in split)
    assert by_decision[keys[0]].expected == {"links": {a1: ["maya.diet_home"]}}
    assert by_decision[keys[1]].expected == {"links": {a2: ["maya.diet_out"]}}
    assert by_decision[keys[1]].questions == ["maya.diet", "maya.diet_home", "maya.diet_out"]


def test_an_undone_value_the_organizer_added_is_a_case_about_the_decision_that_added_it(mem):
    with FakeChatServer(READER_RULES, organizer=value_organizer()) as fake:
        for text, at in [("I live at 12 Elm Street.", "2026-03-01"), ("We moved to 5 Oak Lane.", "2026-04-01")]:
            # no reader: nothing reads the value yet, so its addition can be undone
            mem.remember(text, source="maya-chat", sent_at=at, organizer=organizer(fake), reader=None, use_env=False)
    [op] = [o for o in operations(mem.store) if o["op"] == "option_added"]
    mem.ingest([{"type": "undo", "op": op["id"], "by": "me"}])
    [case] = kinds(mem.store)["undone"]
    adding = kept.decisions(mem.store)[1]
    assert (case.decision, case.questions, case.source) == (adding["key"], ["maya.home"], "person")
    assert case.expected == {"not_values": {"maya.home": ["5 Oak Lane"]}} and case.messages == adding["messages"]


def test_a_withdrawn_question_the_organizer_created_is_a_case(mem, server):
    remember_all(mem, server, MESSAGES[:1])
    with mem.store.writing():  # no operation withdraws a question the organizer made yet: a hand-made store
        mem.store.execute("UPDATE questions SET status = 'withdrawn' WHERE id = 'maya.diet'").fetchall()
    [case] = kinds(mem.store)["withdrawn"]
    assert case.decision == kept.decisions(mem.store)[0]["key"] and case.expected == {"not_created": ["maya.diet"]}


def test_a_dismissed_proposal_is_a_case(mem, server):
    remember_all(mem, server, MESSAGES[:1])
    mem.ingest([question("maya.usual_diet", "diet", "What does Maya usually eat?", DIET)])
    found = maintenance.maintain(mem)
    [proposal] = [p for p in found.proposed if p.op == "question_merge"]
    maintenance.dismiss(mem, proposal.id)
    [case] = kinds(mem.store)["dismissed"]
    assert case.id == f"dismissed:{proposal.id}" and case.source == "person"
    assert case.decision == kept.decisions(mem.store)[0]["key"]
    assert set(case.expected["kept_apart"]) == {"maya.diet", "maya.usual_diet"}


def test_the_checkers_find_a_duplicate_a_subject_not_named_and_too_few_options(mem):
    mem.ingest([question("maya.food", "food", "What does Maya eat?", DIET)])

    def sloppy(message: str, prompt: str) -> dict:
        if "jazz" in message:  # filed under Maya, though the message names Sam only
            return {**EMPTY, "new_questions": [{"subject": "maya", "kind": "music", "text": "Does Maya like jazz?",
                                                "shape": "yes_no", "options": ["yes", "no"]}]}
        if "fish" in message and "I " in message:  # the author's own subject, named by "I": no case
            return {**EMPTY, "new_questions": [{"subject": "maya", "kind": "fish", "text": "Does Maya like fish on Fridays?",
                                                "shape": "yes_no", "options": ["yes", "no"]}]}
        return {**EMPTY, "new_questions": [{"subject": "maya", "kind": "diet", "text": "What does Maya usually eat?",
                                            "shape": "choice", "options": DIET}]}

    with FakeChatServer(READER_RULES, organizer=sloppy) as fake:
        for text, source in [("Maya is vegetarian.", "notes"), ("Sam loves jazz.", "notes"),
                             ("I eat fish on Fridays.", "maya-chat")]:
            mem.remember(text, source=source, sent_at="2026-05-01", **models(fake))
    # ingest refuses a closed question with one option: a store made otherwise (an older doxa, by hand) has one
    mem.ingest([{**question("maya.pet", "pet", "Which pet does Maya have?", ["cat", "dog"]),
                 "instructions_version": 1}])
    with mem.store.writing():
        mem.store.execute("UPDATE questions SET options = ['cat'] WHERE id = 'maya.pet'").fetchall()
    found = kinds(mem.store)
    rows = {r["created"][0]: r["key"] for r in kept.decisions(mem.store)}
    [duplicate] = found["duplicate_created"]
    assert (duplicate.questions, duplicate.decision, duplicate.source) == (["maya.diet", "maya.food"],
                                                                         rows["maya.diet"], "checker")
    assert duplicate.expected == {"links": ["maya.food"], "new_questions": []}
    [unnamed] = found["subject_not_named"]
    assert unnamed.questions == ["maya.music"] and unnamed.decision == rows["maya.music"]
    assert unnamed.expected == {"subject_one_of": ["sam"]}
    [few] = found["too_few_options"]
    assert few.questions == ["maya.pet"] and few.decision is None and few.source == "checker"


def test_a_reading_that_says_unrelated_is_a_world_case(mem):
    with FakeChatServer({"vegetarian": "unrelated"}, organizer=scripted) as fake:
        [result] = remember_all(mem, fake, MESSAGES[:1])
    [case] = kinds(mem.store)["unrelated"]
    assert case.source == "world" and case.messages == [result.message] and case.questions == ["maya.diet"]
    assert case.decision == kept.decisions(mem.store)[0]["key"] and case.expected == {"not_links": ["maya.diet"]}


def test_cases_cli_json_shapes(tmp_path, server):
    path = str(tmp_path / "store.duckdb")
    memory = doxa.open(path, log_reads=False)
    memory.ingest([R.subject("maya", "Maya"), R.source("notes", ["user", "notes"]),
                   question("maya.food", "food", "What does Maya usually eat?", DIET)])
    memory.remember("Maya is vegetarian.", source="notes", sent_at="2026-05-01", **models(server))
    memory.close()
    runner = CliRunner()
    out = runner.invoke(app, ["organizer-instructions", "cases", "--db", path, "--json"])
    assert out.exit_code == 0, out.output
    found = json.loads(out.output)
    assert [c["kind"] for c in found] == ["duplicate_created"]
    assert set(found[0]) == {"id", "kind", "decision", "messages", "questions", "observed", "expected", "source"}
    assert len(found[0]["decision"]) == 64 and found[0]["source"] == "checker"
    text = runner.invoke(app, ["organizer-instructions", "cases", "--db", path])
    assert text.exit_code == 0 and "duplicate_created:maya.diet" in text.output and "expected" in text.output
    assert set(CASE_KINDS) >= {c["kind"] for c in found}
