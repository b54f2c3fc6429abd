"""`remember` and `doxa organize` over real loopback HTTP: a raw message in, the beliefs it moved out;
one transaction per message, so no failure of either model leaves anything half-written."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

import doxa
import records as R
from doxa.cli.main import app
from doxa.data import organizer_instructions, remembered
from doxa.data.schema import SCHEMA_VERSION
from doxa.inference.agent.organizer_client import OpenAIChatOrganizer
from doxa.inference.agent.readers import OpenAIChatReader
from doxa.inference.agent.remember import RememberError, message_id_for
from llm_server import FakeChatServer
from llm_server import diet_organizer as scripted_organizer

DIET = ["vegetarian", "eats fish", "eats meat"]
EMPTY = {"links": [], "new_questions": [], "new_subjects": [], "new_relations": []}


READER_RULES = {"fish": "eats fish", "vegetarian": "vegetarian", "peanut": "yes"}


@pytest.fixture(scope="module")
def server():
    with FakeChatServer(READER_RULES, organizer=scripted_organizer) as fake:
        yield fake


@pytest.fixture
def mem():
    memory = doxa.open(":memory:", log_reads=False)
    memory.ingest([R.subject("maya", "Maya", ["my sister"]), R.subject("sam", "Sam"),
                   R.source("maya-chat", ["person", "self", "chat"]), R.source("notes", ["user", "notes"])])
    yield memory
    memory.close()


def models(server, **reader_kwargs):
    organizer = OpenAIChatOrganizer(server.url, model="fake", retries=1, backoff_s=0.01, timeout_s=5.0)
    reader = OpenAIChatReader(server.url, **{"model": "fake", "retries": 1, "backoff_s": 0.01, "timeout_s": 5.0,
                                             **reader_kwargs})
    return {"organizer": organizer, "reader": reader}


# ---------------------------------------------------------------------------- the loop
def test_a_message_creates_its_question_reads_it_and_returns_the_belief(mem, server):
    result = mem.remember("Maya is vegetarian, remember for dinners.", source="notes", sent_at="2026-05-01",
                          **models(server))
    assert result.status == "done" and result.created == ["maya.diet"] and result.linked == []
    assert result.calls["organizer"] == 1 and result.calls["reader"] >= 1 and result.readings == 1
    [change] = result.changed
    assert change.question == "maya.diet" and change.before is None
    assert change.top == "vegetarian" and change.p_top > 0.5 and abs(sum(change.after.values()) - 1) < 1e-5
    q = mem.store.execute("SELECT created_by, instructions_version, options FROM questions WHERE id = 'maya.diet'"
                          ).fetchone()
    assert q == ("llm:fake", 1, DIET)
    text, source = mem.store.execute(f"SELECT text, source FROM messages WHERE id = '{result.message}'").fetchone()
    assert (text, source) == ("Maya is vegetarian, remember for dinners.", "notes")  # kept exactly
    reader, version = mem.store.execute("SELECT reader, reader_version FROM readings").fetchone()
    assert reader == "llm:fake" and version.startswith("prompt-")
    assert remembered.remembered_state(mem.store, result.message)["status"] == "done"


def test_the_next_message_links_instead_of_duplicating_and_moves_the_belief(mem, server):
    first = mem.remember("Maya is vegetarian.", source="notes", sent_at="2026-05-01", **models(server))
    second = mem.remember("I have started eating fish again!", source="maya-chat", sent_at="2026-06-01",
                          **models(server))
    assert second.linked == ["maya.diet"] and second.created == []
    [change] = second.changed
    assert change.before == first.changed[0].after
    assert change.after["eats fish"] > change.before["eats fish"]
    assert mem.store.counts()["questions"] == 1
    # the organizer was shown the existing question, found by the project's own search
    organizer_prompts = [r["body"]["messages"][1]["content"] for r in server.requests_of("organizer")]
    assert "maya.diet (about maya): What does Maya eat?" in organizer_prompts[-1]


def test_a_batch_reader_reads_every_question_of_a_message_in_one_call(mem, server):
    mem.remember("Maya is vegetarian.", source="notes", sent_at="2026-05-01", **models(server))
    before = len(server.requests_of("reader-batch"))
    result = mem.remember("Maya eats fish now, and no peanut for her please.", source="maya-chat",
                          sent_at="2026-06-01", **models(server, batch=4))
    assert sorted(result.linked + result.created) == ["maya.allergies", "maya.diet"]
    assert result.calls["reader"] == 1 and result.readings == 2  # two questions, one call
    assert len(server.requests_of("reader-batch")) == before + 1
    rows = dict(mem.store.execute("SELECT question, reader_version FROM readings WHERE message = ?",
                                  [result.message]).fetchall())
    assert set(rows) == {"maya.allergies", "maya.diet"} and all(v.endswith("-batch-1") for v in rows.values())
    tops = {c.question: c.top for c in result.changed}
    assert tops == {"maya.diet": "eats fish", "maya.allergies": "yes"}


def test_a_question_proposed_again_is_linked_not_duplicated(mem, server):
    mem.remember("Maya is vegetarian.", source="notes", sent_at="2026-05-01", **models(server))
    blind = FakeChatServer(READER_RULES, organizer=lambda m, p: {**EMPTY, "new_questions": [
        {"subject": "maya", "kind": "diet", "text": "What does Maya usually eat?", "shape": "choice",
         "options": DIET}]})
    with blind:
        result = mem.remember("Maya had fish on Friday.", source="notes", sent_at="2026-05-03", **models(blind))
    assert result.created == [] and result.linked == ["maya.diet"]
    assert result.deduplicated == {"maya: What does Maya usually eat?": "maya.diet"}
    assert mem.store.counts()["questions"] == 1


def test_new_subjects_and_relations_are_stored_with_the_message(mem, server):
    result = mem.remember("My brother Leo is visiting; Maya is allergic to peanuts.", source="maya-chat",
                          sent_at="2026-05-02", **models(server))
    assert result.new_subjects == ["leo"] and result.created == ["maya.allergies"]
    assert result.new_relations == [{"from": "maya", "to": "leo", "kind": "sibling"}]
    assert {"from": "maya", "to": "leo", "kind": "sibling"} in mem.store.relations()
    assert mem.store.question("maya.allergies")["options"] == ["yes", "no"]
    assert result.changed[0].top == "yes"


def test_the_instructions_come_from_the_store_and_each_question_names_its_version(mem, server):
    mem.remember("Maya is vegetarian.", source="notes", sent_at="2026-05-01", **models(server))
    version, added = organizer_instructions.set_text(mem.store, "Organise carefully.\nReply with JSON.", note="shorter")
    assert added and version.version == 2
    mem.remember("Remember Maya is allergic to peanuts.", source="notes", sent_at="2026-05-02", **models(server))
    assert server.requests_of("organizer")[-1]["body"]["messages"][0]["content"] == "Organise carefully.\nReply with JSON."
    made = dict(mem.store.execute("SELECT id, instructions_version FROM questions").fetchall())
    assert made == {"maya.diet": 1, "maya.allergies": 2}
    assert organizer_instructions.questions_by_version(mem.store) == {1: 1, 2: 1}
    back, _ = organizer_instructions.roll_back(mem.store, 1)
    assert back.version == 3 and back.text == organizer_instructions.get(mem.store, 1).text
    assert [v.version for v in organizer_instructions.history(mem.store)] == [1, 2, 3]
    assert "+Organise carefully." in organizer_instructions.diff(mem.store, 1, 2)


def test_remembering_the_same_message_again_changes_nothing(mem, server):
    first = mem.remember("Maya is vegetarian.", source="notes", sent_at="2026-05-01", **models(server))
    before = R.snapshot(mem.store)
    calls = len(server.requests)
    again = mem.remember("Maya is vegetarian.", source="notes", sent_at="2026-05-01", **models(server))
    assert again.status == "already" and again.message == first.message
    assert R.snapshot(mem.store) == before and len(server.requests) == calls


def test_a_new_source_is_given_as_its_path_and_an_unknown_bare_id_is_refused(mem, server):
    result = mem.remember("Maya is vegetarian.", source="family/about-other/chat/mum-chat", sent_at="2026-05-01",
                          **models(server))
    assert mem.store.execute("SELECT path FROM sources WHERE id = 'mum-chat'").fetchone() == (
        "family/about-other/chat/mum-chat",)
    assert result.source == "mum-chat"
    before = R.snapshot(mem.store)
    with pytest.raises(RememberError, match="unknown source 'florist'.*person/self/chat/maya-chat"):
        mem.remember("Maya loves lilies", source="florist", **models(server))
    with pytest.raises(RememberError, match="empty"):
        mem.remember("   ", source="notes", **models(server))
    assert R.snapshot(mem.store) == before


# ---------------------------------------------------------------------------- failures
ORGANIZER_FAULTS = [("truncated", 2), ("prose", 2), ("bad_link", 2), ("refusal", 1), ("500", 2), ("slow", 2),
                    ("malformed", 1), ("drop", 2), ("401", 1)]
READER_FAULTS = [("500", 2), ("no_logprobs", 1), ("no_letter", 1), ("malformed", 1), ("slow", 2), ("400", 1)]


@pytest.mark.parametrize("fault,times", ORGANIZER_FAULTS)
def test_an_organizer_failure_leaves_the_store_unchanged(mem, fault, times):
    with FakeChatServer(READER_RULES, organizer=scripted_organizer, slow_s=0.4) as fake:
        mem.remember("Maya is vegetarian.", source="notes", sent_at="2026-05-01", **models(fake))
        before = R.snapshot(mem.store)
        reader_calls = len(fake.requests_of("reader"))
        fake.fail(fault, times=times, to="organizer")
        chosen = models(fake)
        chosen["organizer"].timeout_s = chosen["organizer"].endpoint.timeout_s = 0.2
        with pytest.raises(RememberError, match="the organizer failed, so nothing was stored"):
            mem.remember("Maya eats fish now, and is allergic to peanuts.", source="maya-chat", sent_at="2026-06-01",
                         **chosen)
        assert R.snapshot(mem.store) == before
        assert len(fake.requests_of("reader")) == reader_calls  # no organizer answer: nothing was read


@pytest.mark.parametrize("fault,times", READER_FAULTS)
def test_a_reader_failure_on_any_question_leaves_the_store_unchanged(mem, fault, times):
    with FakeChatServer(READER_RULES, organizer=scripted_organizer, slow_s=0.4) as fake:
        mem.remember("Maya is vegetarian.", source="notes", sent_at="2026-05-01", **models(fake))
        before = R.snapshot(mem.store)
        chosen = models(fake, timeout_s=0.2)
        # the message bears on two questions: a retried hiccup first (not a failure), the first question
        # read (one call), then the fault on the second question
        fake.fail("429", to="reader")
        fake.fail("pass", to="reader")
        fake.fail(fault, times=times, to="reader")
        with pytest.raises(RememberError, match="the reader failed, so nothing was stored"):
            mem.remember("Maya eats fish now, and is allergic to peanuts.", source="maya-chat", sent_at="2026-06-01",
                         **chosen)
        assert R.snapshot(mem.store) == before


def test_with_keep_a_failed_message_is_kept_pending_and_organize_finishes_it(mem, server):
    server.fail("prose", times=2, to="organizer")
    with pytest.raises(RememberError, match="kept as pending"):
        mem.remember("Maya is vegetarian.", source="notes", sent_at="2026-05-01", keep_on_failure=True,
                     **models(server))
    assert mem.store.counts()["messages"] == 1 and mem.store.counts()["questions"] == 0
    [row] = remembered.pending_messages(mem.store)
    assert row["waiting_for"] == "organizer" and "no usable answer" in row["reason"]
    [done] = mem.organize(**models(server))
    assert done.status == "done" and done.created == ["maya.diet"]
    assert remembered.count_pending(mem.store) == 0


# ---------------------------------------------------------------------------- no model configured
def test_without_a_model_the_message_is_kept_pending_and_organize_finishes_it(mem, server, monkeypatch):
    for name in ("DOXA_READER_URL", "DOXA_ORGANIZER_URL"):
        monkeypatch.delenv(name, raising=False)
    result = mem.remember("Maya is vegetarian.", source="notes", sent_at="2026-05-01")
    assert result.status == "pending" and result.skipped == ["organizer", "reader"]
    assert "DOXA_READER_URL" in result.hint and "doxa organize" in result.hint
    assert mem.store.counts()["messages"] == 1 and mem.store.counts()["questions"] == 0
    before = R.snapshot(mem.store)
    [still] = mem.organize()  # still no model: nothing is written
    assert still.status == "pending" and R.snapshot(mem.store) == before
    monkeypatch.setenv("DOXA_READER_URL", server.url)
    [done] = mem.organize()
    assert done.status == "done" and done.created == ["maya.diet"] and done.changed[0].top == "vegetarian"
    assert remembered.count_pending(mem.store) == 0


def test_with_an_organizer_but_no_reader_the_questions_wait_for_the_reader(mem, server):
    only = models(server)
    result = mem.remember("Maya is vegetarian.", source="notes", sent_at="2026-05-01",
                          organizer=only["organizer"], use_env=False)
    assert result.status == "pending" and result.skipped == ["reader"] and result.created == ["maya.diet"]
    assert mem.store.counts()["readings"] == 0
    [row] = remembered.pending_messages(mem.store)
    assert row["waiting_for"] == "reader" and row["questions"] == ["maya.diet"]
    calls = len(server.requests_of("organizer"))
    [done] = mem.organize(reader=only["reader"], use_env=False)
    assert done.status == "done" and done.linked == ["maya.diet"] and done.readings == 1
    assert len(server.requests_of("organizer")) == calls  # organized once, not again


# ---------------------------------------------------------------------------- the command line
def test_cli_remember_organize_and_the_instructions_commands(tmp_path, server, monkeypatch):
    db = str(tmp_path / "cli.duckdb")
    runner = CliRunner()
    monkeypatch.delenv("DOXA_READER_URL", raising=False)
    monkeypatch.delenv("DOXA_ORGANIZER_URL", raising=False)
    out = runner.invoke(app, ["remember", "Maya is vegetarian.", "--source", "user/notes/notes", "--at",
                              "2026-05-01", "--db", db, "--json"])
    assert out.exit_code == 0, out.output
    pending = json.loads(out.output)
    assert pending["status"] == "pending" and pending["message"] == message_id_for(
        "Maya is vegetarian.", "notes", __import__("datetime").datetime(2026, 5, 1))
    with doxa.open(db) as m:  # a subject for the organizer to hang the question on
        m.ingest([R.subject("maya", "Maya")])
    monkeypatch.setenv("DOXA_READER_URL", server.url)
    out = runner.invoke(app, ["organize", "--db", db, "--json"])
    assert out.exit_code == 0, out.output
    done = json.loads(out.output)
    assert done["pending_before"] == 1 and done["pending_after"] == 0
    assert done["results"][0]["created"] == ["maya.diet"] and done["calls"]["organizer"] == 1

    lines = tmp_path / "messages.jsonl"
    lines.write_text("\n".join(json.dumps(m) for m in [
        {"text": "I eat fish again.", "source": "person/self/chat/maya-chat", "sent_at": "2026-06-01"},
        {"text": "Maya is allergic to peanuts.", "sent_at": "2026-06-02"}]) + "\n")
    out = runner.invoke(app, ["remember", "--file", str(lines), "--source", "notes", "--db", db, "--json"])
    assert out.exit_code == 0, out.output
    batch = json.loads(out.output)
    assert batch["messages"] == 2 and batch["calls"]["organizer"] == 2
    assert [r["linked"] + r["created"] for r in batch["results"]] == [["maya.diet"], ["maya.allergies"]]
    out = runner.invoke(app, ["remember", "--file", str(lines), "--source", "notes", "--db", db])
    assert out.exit_code == 0 and out.output.count("already remembered") == 2

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok", "source": "notes"}\nnot json\n{"source": "notes"}\n')
    out = runner.invoke(app, ["remember", "--file", str(bad), "--db", db])
    assert out.exit_code == 1
    assert "line 2: not valid JSON" in out.output and "line 3: missing or empty 'text'" in out.output
    assert "nothing was remembered" in out.output

    text = tmp_path / "v2.txt"
    text.write_text("Only link existing questions.\n")
    out = runner.invoke(app, ["organizer-instructions", "set", str(text), "--note", "no new questions", "--db", db,
                              "--json"])
    assert json.loads(out.output)["current"]["version"] == 2
    history = json.loads(runner.invoke(app, ["organizer-instructions", "history", "--db", db, "--json"]).output)
    assert [(h["version"], h["questions_created"]) for h in history] == [(1, 2), (2, 0)]
    diff = runner.invoke(app, ["organizer-instructions", "diff", "1", "2", "--db", db]).output
    assert "+Only link existing questions." in diff
    out = runner.invoke(app, ["organizer-instructions", "rollback", "1", "--db", db, "--json"])
    assert json.loads(out.output)["current"]["version"] == 3
    shown = json.loads(runner.invoke(app, ["organizer-instructions", "show", "--db", db, "--json"]).output)
    assert shown["text"] == organizer_instructions.built_in_text("organizer") and shown["note"] == "roll back to version 1"
    out = runner.invoke(app, ["organizer-instructions", "show", "--version", "9", "--db", db])
    assert out.exit_code == 1 and "versions are [1, 2, 3]" in out.output


def test_cli_remember_failure_says_nothing_was_stored(tmp_path, server, monkeypatch):
    db = str(tmp_path / "fail.duckdb")
    monkeypatch.setenv("DOXA_READER_URL", server.url)
    server.fail("refusal", to="organizer")
    out = CliRunner().invoke(app, ["remember", "Maya is vegetarian.", "--source", "user/notes/notes", "--db", db])
    assert out.exit_code == 1 and "nothing was stored" in out.output and "--keep" in out.output
    with doxa.open(db) as m:
        assert m.store.counts()["messages"] == 0


# ---------------------------------------------------------------------------- schema migration
def test_a_version_2_store_gains_the_new_tables_and_keeps_its_questions(tmp_path):
    path = str(tmp_path / "v2.duckdb")
    with doxa.open(path) as m:
        m.ingest([R.subject("maya"), R.question("maya.diet", DIET, subject="maya")])
        m.store.con.execute("DROP TABLE prompts; DROP TABLE remembered; "
                            "ALTER TABLE questions DROP COLUMN instructions_version; "
                            "UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    with doxa.open(path) as m:
        assert m.store.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == SCHEMA_VERSION
        assert m.store.execute("SELECT id, instructions_version FROM questions").fetchall() == [("maya.diet", None)]
        assert organizer_instructions.current(m.store).version == 1 and remembered.count_pending(m.store) == 0


def test_the_organizer_is_shown_only_the_questions_of_the_people_a_message_names(mem):
    """A related person's question is not shown for a message that names someone (a small model
    links what it is shown); a message naming no one is shown every question of a small store."""
    from datetime import datetime

    from doxa.inference.agent.remember import organizer_request

    mem.ingest([R.relation("maya", "sam", "partner"),
                R.question("maya.diet", DIET, subject="maya", text="What does Maya eat?"),
                R.question("sam.diet", DIET, subject="sam", text="What does Sam eat?")])

    def shown(text: str) -> tuple[list[str], list[str]]:
        request = organizer_request(mem, text, "notes", "user/notes", datetime(2026, 5, 1))
        return sorted(q["id"] for q in request.questions), sorted(s["id"] for s in request.subjects)

    assert shown("Sam eats fish these days") == (["sam.diet"], ["maya", "sam"])
    assert shown("my sister is vegetarian") == (["maya.diet"], ["maya", "sam"])  # an alias names her
    assert shown("everyone ate fish at the party") == (["maya.diet", "sam.diet"], ["maya", "sam"])


def test_the_organizer_is_shown_a_handful_of_one_subjects_questions_the_best_ranked_first():
    """A person with many questions: the organizer sees the few the message's words rank first (a small model
    links what it is shown), and another person's questions still have their own handful."""
    from datetime import datetime

    from doxa.inference.agent.organizer_schema import MAX_QUESTIONS_PER_SUBJECT
    from doxa.inference.agent.remember import best_per_subject, organizer_request

    mem = doxa.open(":memory:", log_reads=False)
    try:
        topics = ["tennis", "opera", "sushi", "gardening", "chess", "sailing", "poetry", "jazz", "pottery"]
        mem.ingest([R.subject("maya", "Maya"), R.subject("sam", "Sam"), R.source("notes", ["user", "notes"])]
                   + [R.question(f"maya.{t}", ["yes", "no"], subject="maya", text=f"Does Maya like {t}?")
                      for t in topics]
                   + [R.question("maya.cello", ["yes", "no"], subject="maya", text="Does Maya play the cello?"),
                      R.question("sam.cello", ["yes", "no"], subject="sam", text="Does Sam play the cello?")])
        request = organizer_request(mem, "Maya and Sam played the cello all evening", "notes", "user/notes/notes",
                                    datetime(2026, 5, 1))
    finally:
        mem.close()
    shown = [q["id"] for q in request.questions]
    mayas = [q for q in shown if q.startswith("maya.")]
    assert len(mayas) == MAX_QUESTIONS_PER_SUBJECT < len(topics) + 1 and mayas[0] == "maya.cello"
    assert "sam.cello" in shown
    ranked = [{"id": f"{s}{i}", "subject": s} for i in range(4) for s in "ab"]
    assert best_per_subject(ranked, 2, 3) == ["a0", "b0", "a1"]
    assert best_per_subject(ranked, 3, 10) == ["a0", "b0", "a1", "b1", "a2", "b2"]


def test_in_steps_a_link_the_message_does_not_answer_is_dropped_and_a_question_made_instead(mem):
    """A small model links whatever it is shown; in steps each link is checked by a narrow call, and when none
    holds the message is organized again with no question shown."""
    from doxa.inference.agent.organizer_client import CHECK_SYSTEM

    def over_linking(message: str, prompt: str) -> dict:
        if re.search(r"^- maya\.diet \(about", prompt, re.MULTILINE):
            if "cello" in message:  # a small model's way of linking: the shown question proposed again
                return {**EMPTY, "new_questions": [{"subject": "maya", "kind": "diet", "text": "Maya's diet?",
                                                    "shape": "choice", "options": DIET}]}
            return {**EMPTY, "links": ["maya.diet"]}
        kind, options = ("diet", DIET) if "vegetarian" in message else ("instrument", ["cello", "piano"])
        return {**EMPTY, "new_questions": [{"subject": "maya", "kind": kind, "text": f"Maya's {kind}?",
                                            "shape": "choice", "options": options}]}

    def check(system: str, prompt: str):
        if system != CHECK_SYSTEM:
            return None
        check.asked.append(prompt)
        return '{"answers": %s}' % ("true" if "fish" in prompt.split("</message>")[0] else "false")

    check.asked = []
    with FakeChatServer(READER_RULES, organizer=over_linking, answerer=check) as fake:
        stepped = OpenAIChatOrganizer(fake.url, model="fake", retries=1, backoff_s=0.01, timeout_s=5.0, steps=True)
        mem.remember("Maya is vegetarian.", source="notes", sent_at="2026-05-01", organizer=stepped, reader=None,
                     use_env=False)
        fish = mem.remember("Maya eats fish now.", source="notes", sent_at="2026-05-02", organizer=stepped,
                            reader=None, use_env=False)
        cello = mem.remember("Maya started playing the cello.", source="notes", sent_at="2026-05-03",
                             organizer=stepped, reader=None, use_env=False)
        plain = OpenAIChatOrganizer(fake.url, model="fake", retries=1, backoff_s=0.01, timeout_s=5.0)
        piano = mem.remember("Maya started playing the piano.", source="notes", sent_at="2026-05-04",
                             organizer=plain, reader=None, use_env=False)
    assert fish.linked == ["maya.diet"] and fish.calls["organizer"] == 2  # the link holds: the reply and its check
    assert cello.linked == [] and cello.created == ["maya.instrument"] and cello.calls["organizer"] == 3
    assert len(check.asked) == 2 and all("Question about maya: Maya's diet? [vegetarian | eats fish | eats meat]" in p
                                         for p in check.asked)
    assert piano.linked == ["maya.diet"]  # without steps the over-link stands
