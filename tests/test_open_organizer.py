"""The organizer and the reader for open (value) questions (issue 36, item 3), over real loopback HTTP:
a new value extends the open question (an ``option_added`` record) instead of starting a second
question, and a reading of an open question puts mass on ``unlisted`` ("states a value not listed")."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

import doxa
import records as R
from doxa.data import organizer_instructions, question_ops
from doxa.inference.agent.organizer_client import OpenAIChatOrganizer
from doxa.inference.agent.organizer_schema import OrganizerOutput, OrganizerRequest, check_output
from doxa.inference.agent.reader_prompts import SYSTEM_PROMPT
from doxa.inference.agent.reading import ReaderError
from doxa.inference.agent.readers import OpenAIChatReader, Reader, Reading
from doxa.inference.agent.remember import RememberError
from llm_server import FakeChatServer, value_organizer

READER_RULES = {"oak lane": "5 Oak Lane", "elm street": "12 Elm Street", "no address yet": "unlisted",
                "vegetarian": "vegetarian"}
DIET = ["vegetarian", "eats fish", "eats meat"]


@pytest.fixture
def mem():
    memory = doxa.open(":memory:", log_reads=False)
    memory.ingest([R.subject("maya", "Maya"), R.source("maya-chat", ["person", "self", "chat"])])
    yield memory
    memory.close()


def models(server, **reader_kwargs):
    return {"organizer": OpenAIChatOrganizer(server.url, model="fake", retries=1, backoff_s=0.01, timeout_s=5.0),
            "reader": OpenAIChatReader(server.url, **{"model": "fake", "retries": 1, "backoff_s": 0.01,
                                                      "timeout_s": 5.0, **reader_kwargs})}


def reader_for(server, **kwargs) -> OpenAIChatReader:
    return OpenAIChatReader(server.url, **{"model": "fake", "retries": 1, "backoff_s": 0.01, "timeout_s": 5.0,
                                           **kwargs})


def question_rows(mem):
    return mem.store.execute("SELECT id, options, is_open, shape, created_by FROM questions ORDER BY id").fetchall()


def option_ops(mem):
    return [op for op in question_ops.operations(mem.store) if op["op"] == "option_added"]


# ---------------------------------------------------------------------------- the organizer
def test_a_new_address_extends_the_open_question_instead_of_starting_a_second_one(mem):
    with FakeChatServer(READER_RULES, organizer=value_organizer()) as server:
        first = mem.remember("I live at 12 Elm Street", source="maya-chat", sent_at="2026-05-01", **models(server))
        second = mem.remember("We moved to 5 Oak Lane", source="maya-chat", sent_at="2026-06-01", **models(server))
        organizer_requests = server.requests_of("organizer")
    # the value question is created open, its options the value the message names
    assert first.created == ["maya.home"] and first.values_added == {}
    assert first.changed[0].top == "12 Elm Street"
    # the next address joins it: one question, both values, an option_added by the organizer
    assert second.created == [] and second.linked == ["maya.home"]
    assert second.values_added == {"maya.home": ["5 Oak Lane"]}
    assert question_rows(mem) == [("maya.home", ["12 Elm Street", "5 Oak Lane"], True, "choice", "llm:fake")]
    [op] = option_ops(mem)
    assert (op["record"]["question"], op["record"]["option"], op["by"]) == ("maya.home", "5 Oak Lane", "llm:fake")
    # the message was read against both values, and the belief moved to the new one
    [change] = second.changed
    assert change.question == "maya.home" and change.top == "5 Oak Lane"
    assert change.before is not None and "5 Oak Lane" not in change.before
    assert change.after["5 Oak Lane"] > change.after["12 Elm Street"]
    probs, unlisted, version = mem.store.execute(
        "SELECT probs, unlisted, reader_version FROM readings WHERE message = ?", [second.message]).fetchone()
    assert len(probs) == 2 and probs[1] > 0.5 > unlisted and version.endswith("-open-2")
    # the organizer was shown the question as open, and the schema let it name only that one for a value
    prompt = organizer_requests[1]["body"]["messages"][1]["content"]
    assert "- maya.home (about maya, open): Where does Maya live? [12 Elm Street]" in prompt
    schema = organizer_requests[1]["body"]["response_format"]["json_schema"]["schema"]
    assert schema["$defs"]["NewValue"]["properties"]["question"] == {"type": "string", "enum": ["maya.home"]}


def test_a_value_already_listed_up_to_case_and_spacing_adds_nothing(mem):
    with FakeChatServer(READER_RULES, organizer=value_organizer()) as server:
        for i, text in enumerate(["I live at 12 Elm Street", "We moved to 5 Oak Lane"]):
            mem.remember(text, source="maya-chat", sent_at=f"2026-0{i + 5}-01", **models(server))
        again = mem.remember("Still living at 5 oak  lane.", source="maya-chat", sent_at="2026-07-01",
                             **models(server))
    assert again.values_added == {} and again.linked == ["maya.home"] and again.created == []
    assert question_rows(mem)[0][1] == ["12 Elm Street", "5 Oak Lane"]
    assert len(option_ops(mem)) == 1


def test_a_model_that_proposes_the_question_again_still_extends_it(mem):
    """A small model's slip: it proposes maya.home again, with the new address as its option. doxa
    links the existing open question and adds the value, instead of creating maya.home_2."""
    with FakeChatServer(READER_RULES, organizer=value_organizer(style="propose_again")) as server:
        mem.remember("I live at 12 Elm Street", source="maya-chat", sent_at="2026-05-01", **models(server))
        second = mem.remember("We moved to 5 Oak Lane", source="maya-chat", sent_at="2026-06-01", **models(server))
    assert second.created == [] and second.linked == ["maya.home"]
    assert second.deduplicated == {"maya: Where does Maya live?": "maya.home"}
    assert second.values_added == {"maya.home": ["5 Oak Lane"]}
    assert [row[0] for row in question_rows(mem)] == ["maya.home"]


def test_a_value_added_again_after_an_undo_gets_an_operation_of_its_own(mem):
    with FakeChatServer(READER_RULES, organizer=value_organizer()) as server:
        mem.remember("I live at 12 Elm Street", source="maya-chat", sent_at="2026-05-01", **models(server))
        mem.ingest([{"type": "option_added", "question": "maya.home", "option": "5 Oak Lane", "by": "me"}])
        mem.ingest([{"type": "undo", "op": "option:maya.home:5 Oak Lane", "by": "me"}])
        again = mem.remember("We moved to 5 Oak Lane", source="maya-chat", sent_at="2026-06-01", **models(server))
    assert again.values_added == {"maya.home": ["5 Oak Lane"]}
    assert question_rows(mem)[0][1] == ["12 Elm Street", "5 Oak Lane"]
    assert [(op["id"], op["by"], op["undone"]) for op in option_ops(mem)] == [
        ("option:maya.home:5 Oak Lane", "me", True), ("option:maya.home:5 Oak Lane-2", "llm:fake", False)]


def test_a_value_added_while_no_reader_is_configured_is_read_by_doxa_organize_later(mem):
    with FakeChatServer(READER_RULES, organizer=value_organizer()) as server:
        mem.remember("I live at 12 Elm Street", source="maya-chat", sent_at="2026-05-01", **models(server))
        pending = mem.remember("We moved to 5 Oak Lane", source="maya-chat", sent_at="2026-06-01",
                               organizer=models(server)["organizer"], use_env=False)
        assert pending.status == "pending" and pending.skipped == ["reader"]
        assert question_rows(mem)[0][1] == ["12 Elm Street", "5 Oak Lane"]  # the value is kept with the message
        [done] = mem.organize(reader=models(server)["reader"], use_env=False)
    assert done.status == "done" and done.linked == ["maya.home"]
    probs, version = mem.store.execute("SELECT probs, reader_version FROM readings WHERE message = ?",
                                       [pending.message]).fetchone()
    assert len(probs) == 2 and probs[1] > 0.5 and version.endswith("-open-2")


def test_a_move_with_no_address_moves_the_belief_to_unlisted(mem):
    with FakeChatServer(READER_RULES, organizer=value_organizer()) as server:
        mem.remember("I live at 12 Elm Street", source="maya-chat", sent_at="2026-05-01", **models(server))
        moved = mem.remember("We moved out last week, no address yet", source="maya-chat", sent_at="2026-05-02",
                             **models(server))
    assert moved.linked == ["maya.home"] and moved.values_added == {}
    probs, unlisted, unclear, unrelated = mem.store.execute(
        "SELECT probs, unlisted, unclear, unrelated FROM readings WHERE message = ?", [moved.message]).fetchone()
    assert unlisted > 0.5 and unlisted > max(probs)
    assert abs(sum(probs) + unlisted + unclear + unrelated - 1) < 1e-9
    [change] = moved.changed
    assert change.after["unlisted"] > change.before["unlisted"]
    assert change.after["12 Elm Street"] < change.before["12 Elm Street"]


def test_closed_questions_are_created_and_read_as_before(mem):
    organizer = lambda message, prompt: {"links": [], "new_questions": [  # noqa: E731
        {"subject": "maya", "kind": "diet", "text": "What does Maya eat?", "shape": "choice", "options": DIET}]}
    with FakeChatServer(READER_RULES, organizer=organizer) as server:
        result = mem.remember("Maya is vegetarian.", source="maya-chat", sent_at="2026-05-01", **models(server))
        [reader_request] = server.requests_of("reader")
    assert question_rows(mem) == [("maya.diet", DIET, False, "choice", "llm:fake")]
    assert result.changed[0].top == "vegetarian" and "unlisted" not in result.changed[0].after
    version, unlisted = mem.store.execute("SELECT reader_version, unlisted FROM readings").fetchone()
    assert version == "prompt-2" and unlisted == 0
    assert not any("different answer" in label for label in reader_request["labels"].values())


def test_a_reader_without_the_unlisted_choice_reads_listed_values_or_says_what_to_change(mem):
    class ClosedOnly(Reader):
        name, version = "closed-only", "1"

        def read(self, message_text, question_text, options, *, subject=None):
            return Reading(probs={o: 0.9 / len(options) for o in options}, unclear=0.05, unrelated=0.05,
                           reader=self.name)

    with FakeChatServer(READER_RULES, organizer=value_organizer()) as server:
        organizer = models(server)["organizer"]
        with pytest.raises(RememberError, match="has no 'unlisted' choice.*open=True"):
            mem.remember("I live at 12 Elm Street", source="maya-chat", sent_at="2026-05-01", organizer=organizer,
                         reader=ClosedOnly())
        assert mem.store.counts()["questions"] == 0  # nothing was written
        mem.remember("I live at 12 Elm Street", source="maya-chat", sent_at="2026-05-01", **models(server))
        result = mem.remember("We moved to 5 Oak Lane", source="maya-chat", sent_at="2026-06-01",
                              organizer=organizer, reader=ClosedOnly())
    assert result.values_added == {"maya.home": ["5 Oak Lane"]}
    unlisted = mem.store.execute("SELECT unlisted FROM readings WHERE message = ?", [result.message]).fetchone()[0]
    assert unlisted == 0


# ---------------------------------------------------------------------------- what code settles in a reply
def _request(questions, text: str = "We moved to 5 Oak Lane") -> OrganizerRequest:
    return OrganizerRequest(text=text, source="maya-chat", source_path="person/self/chat/maya-chat",
                            sent_at=datetime(2026, 6, 1), subjects=[{"id": "maya", "name": "Maya", "aliases": []}],
                            questions=questions, known_subject_ids=frozenset({"maya"}))


HOME = {"id": "maya.home", "subject": "maya", "text": "Where does Maya live?", "options": ["12 Elm Street"],
        "open": True}
DIET_Q = {"id": "maya.diet", "subject": "maya", "text": "What does Maya eat?", "options": DIET}


def test_a_value_the_message_does_not_state_is_dropped_by_code():
    # a small model fills a value question with a made-up value: what the text does not hold is no value
    reply = OrganizerOutput.model_validate({
        "new_values": [{"question": "maya.home", "value": "Neighborhood 1"}],
        "new_questions": [{"subject": "maya", "kind": "wake_time", "text": "When does Maya wake up?",
                           "shape": "value", "options": ["7 am", "Neighborhood 2"]}]})
    clean, problems = check_output(reply, _request([HOME], "We moved again, and I get up at 7am now"))
    assert problems == []
    assert clean.new_values == [] and clean.links == ["maya.home"]  # linked: the reader reads it as unlisted
    [wake] = clean.new_questions
    assert wake.options == ["7 am"]  # "7am" states "7 am" (run together); the made-up value is gone


def test_check_output_settles_values_by_code():
    reply = OrganizerOutput.model_validate({
        "new_values": [{"question": "maya.home", "value": " 5 oak lane. "},
                       {"question": "maya.home", "value": "5 Oak Lane"},       # the same value again
                       {"question": "maya.home", "value": "12 ELM  street"},   # listed already
                       {"question": "maya.home", "value": "unknown"},          # no value: unlisted covers it
                       {"question": "maya.diet", "value": "pescatarian"},      # closed: linked, not extended
                       {"question": "maya.job", "value": "nurse"}],            # created by this reply
        "new_questions": [{"subject": "maya", "kind": "job", "text": "What is Maya's job?", "shape": "value",
                           "options": ["teacher", "Teacher", "other"]}]})
    text = "We moved to 5 Oak Lane. I teach now (a teacher!), Sam is a nurse, and I eat fish: pescatarian."
    clean, problems = check_output(reply, _request([HOME, DIET_Q], text))
    assert problems == []
    assert [(v.question, v.value) for v in clean.new_values] == [("maya.home", "5 oak lane")]
    assert clean.links == ["maya.home", "maya.diet"]
    [job] = clean.new_questions
    assert (job.shape, job.options) == ("value", ["teacher", "nurse"])
    # an id it was not shown is sent back, as a link's is
    bad = OrganizerOutput.model_validate({"new_values": [{"question": "maya.house", "value": "5 Oak Lane"}]})
    assert check_output(bad, _request([HOME]))[1] == [
        "new_values ('5 Oak Lane'): 'maya.house' is not one of the existing open question ids listed; name only those"]


def test_the_schema_names_only_shown_open_questions_for_a_value():
    schema = OrganizerOutput.response_schema(_request([HOME, DIET_Q]))
    assert schema["$defs"]["NewValue"]["properties"]["question"]["enum"] == ["maya.home"]
    assert OrganizerOutput.response_schema(_request([DIET_Q]))["properties"]["new_values"]["maxItems"] == 0
    value_q = schema["$defs"]["NewValueQuestion"]["properties"]
    assert value_q["shape"] == {"type": "string", "enum": ["value"]} and "minItems" not in value_q["options"]
    assert schema["$defs"]["NewQuestion"]["properties"]["options"]["minItems"] == 2  # a closed choice: still 2
    assert "description" not in schema["$defs"]["NewValue"]  # nothing but the fields goes to a small model
    prompt = _request([HOME, DIET_Q]).prompt()
    assert "- maya.home (about maya, open): Where does Maya live? [12 Elm Street]" in prompt
    assert "- maya.diet (about maya): What does Maya eat?" in prompt


def test_the_built_in_instructions_teach_the_new_value_decision():
    text = organizer_instructions.built_in_text("organizer")
    assert '"new_values"' in text and '"shape" is "value"' in text
    example = text[text.index('Message from person/self/chat/maya-chat: "We moved'):]
    reply = json.loads(example[example.index("Reply:") + len("Reply:"):].split("\n\n")[0])
    assert reply["new_values"] == [{"question": "maya.home", "value": "5 Oak Lane"}]
    OrganizerOutput.model_validate(reply)  # the example is a reply the schema takes


# ---------------------------------------------------------------------------- the reader
def test_a_reading_of_an_open_question_puts_a_move_with_no_address_on_unlisted():
    with FakeChatServer(READER_RULES) as server:
        reader = reader_for(server)
        reading = reader.read("We moved, no address yet", "Where does Maya live?", ["12 Elm Street", "5 Oak Lane"],
                              subject="Maya", open=True)
        [request] = server.requests_of("reader")  # the change question is off by default
    labels = request["labels"]
    assert reading.changed == 0.0
    assert labels["C"] == "A different answer for Maya, not listed above"
    assert labels["D"].startswith("The message talks about this for Maya")
    assert reading.unlisted > 0.5 and reading.unlisted > max(reading.probs.values())
    assert set(reading.probs) == {"12 Elm Street", "5 Oak Lane"} and reading.top == "unlisted"
    assert abs(sum(reading.probs.values()) + reading.unlisted + reading.unclear + reading.unrelated - 1) < 1e-9
    assert reading.reader_version == reader.version + "-open-2"
    record = reading.to_record("m1", "maya.home")
    assert record["unlisted"] == reading.unlisted
    # the closed prompt's system message comes first, then the open examples: a fixed prefix
    body = request["body"]["messages"]
    assert body[0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert "Omar moved out of 12 Elm Street last week, no new address yet." in body[3]["content"]


def test_a_reading_that_says_the_answer_changed_carries_it_and_one_that_states_nothing_is_not_asked():
    with FakeChatServer({**READER_RULES, "we moved": "changed", "she stays": "unchanged"}) as server:
        reader = reader_for(server, ask_changes=True)
        moved = reader.read("We moved, no address yet", "Where does Maya live?", ["12 Elm Street"],
                            subject="Maya", open=True)
        asked = len(server.requests_of("reader"))
        nothing = reader.read("Lovely weather today", "Where does Maya live?", ["12 Elm Street"],
                              subject="Maya", open=True)
        calls = len(server.requests_of("reader")) - asked
    assert asked == 2 and moved.changed > 0.8 and moved.to_record("m1", "maya.home")["changed"] == moved.changed
    assert calls == 1 and nothing.changed == 0.0 and "changed" not in nothing.to_record("m2", "maya.home")
    change = server.requests_of("reader")[1]
    assert change["labels"] == {"A": "Yes: it says that for Maya this changed or is new",
                                "B": "No: it does not say that it changed"}
    with FakeChatServer(READER_RULES) as server:  # a value stated with no word of a change: a low number
        stays = reader_for(server, ask_changes=True).read("Maya is at 12 Elm Street", "Where does Maya live?",
                                                          ["12 Elm Street"], subject="Maya", open=True)
    assert 0.0 < stays.changed < 0.2


def test_the_change_question_is_turned_on_from_the_environment_and_a_bad_value_is_refused():
    assert OpenAIChatReader.settings_from_env({"DOXA_READER_CHANGES": "1"}) == {"ask_changes": True}
    assert OpenAIChatReader.settings_from_env({"DOXA_READER_CHANGES": "0", "DOXA_READER_BATCH": "3"}) == {
        "ask_changes": False, "batch": 3}
    with pytest.raises(ReaderError, match="DOXA_READER_CHANGES must be 1"):
        OpenAIChatReader.settings_from_env({"DOXA_READER_CHANGES": "yes"})


def test_an_open_question_with_no_value_yet_is_read_on_unlisted_alone():
    with FakeChatServer(READER_RULES) as server:
        reading = reader_for(server).read("She moved to Porto", "Where does Maya live?", [], subject="Maya", open=True)
    assert reading.probs == {} and reading.unlisted is not None
    assert abs(reading.unlisted + reading.unclear + reading.unrelated - 1) < 1e-9


def test_a_batch_reads_closed_questions_together_and_open_ones_with_their_unlisted_answer():
    with FakeChatServer(READER_RULES) as server:
        reader = reader_for(server, batch=4)
        readings = reader.read_many("Maya is vegetarian and we moved, no address yet", [
            ("What does Maya eat?", DIET, "Maya"),
            ("Where does Maya live?", ["12 Elm Street"], "Maya", True),
            ("Is Maya allergic to peanuts?", ["yes", "no"], "Maya", False)])
        kinds = [r["kind"] for r in server.requests]
    assert kinds.count("reader-batch") == 1 and kinds.count("reader") == 1
    diet, home, allergy = readings
    assert diet.top == "vegetarian" and diet.unlisted is None and diet.reader_version.endswith("-batch-1")
    assert allergy.unlisted is None and set(allergy.probs) == {"yes", "no"}
    assert home.top == "unlisted" and home.reader_version.endswith("-open-2")


def test_a_closed_reading_is_unchanged():
    with FakeChatServer(READER_RULES) as server:
        reader = reader_for(server)
        reading = reader.read("Maya is vegetarian.", "What does Maya eat?", DIET, subject="Maya")
        [request] = server.requests_of("reader")
    assert reading.unlisted is None and "unlisted" not in reading.to_record("m1", "maya.diet")
    assert reading.reader_version == reader.version == "prompt-2"
    assert sorted(request["labels"]) == list("ABCDE")


def test_a_windows_values_are_checked_against_their_own_turn():
    from doxa.inference.agent.organizer_schema import WindowOutput, WindowRequest, check_window_output

    turns = [(1, "I work as a nurse these days."), (2, "Thanks, that helps!")]
    request = WindowRequest(text="\n".join(t for _, t in turns), source="me-chat",
                            source_path="person/self/chat/me-chat", sent_at=datetime(2026, 6, 1),
                            subjects=[{"id": "me", "name": "Me", "aliases": []}], questions=[],
                            known_subject_ids=frozenset({"me"}), turns=turns)
    job = {"subject": "me", "kind": "job", "text": "What is my job?", "shape": "value", "options": ["nurse"]}
    reply = WindowOutput.model_validate({"turns": [{"turn": 1, "new_questions": [job]},
                                                   {"turn": 2, "new_questions": [{**job, "options": ["nurse"]}]}]})
    clean, problems = check_window_output(reply, request)
    assert problems == []
    by_turn = {t.turn: t for t in clean.turns}
    assert by_turn[1].new_questions[0].options == ["nurse"]
    # turn 2 does not say "nurse": the question it proposes again gets no value from it
    assert [q.options for q in by_turn[2].new_questions] == [[]]
