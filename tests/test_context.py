"""`doxa context`: subjects named in a task, one hop out, ranked beliefs, instructions beside them."""

from __future__ import annotations

import json
import math
from datetime import datetime

import pytest
from typer.testing import CliRunner

import doxa
import records as R
from doxa.data import search
from doxa.data import question_ranking
from doxa.data.demo import DEMO_NOW, demo_records
from doxa.data.times import parse_time
from doxa.inference.agent.context import context

NOW = parse_time(DEMO_NOW)
TASK = "book Maya's birthday dinner"


@pytest.fixture(scope="module")
def demo():
    mem = doxa.open(":memory:", log_reads=False)
    mem.ingest(demo_records())
    yield mem
    mem.close()


def test_one_hop_out_surfaces_that_sam_is_vegetarian(demo):
    ctx = context(demo, TASK, at=NOW)
    subjects = {s["id"]: s for s in ctx.subjects}
    assert subjects["maya"]["hop"] == 0 and subjects["sam"]["hop"] == 1
    assert "partner" in subjects["sam"]["via"]
    sam = next(q for q in ctx.questions if q.question == "sam.diet")
    assert sam.hop == 1 and sam.top == "vegetarian" and not sam.ask
    assert sam.answers == demo.belief("sam.diet", NOW).answers
    # …which no search on "Maya" finds: none of the messages about Sam's diet is a hit
    hits = {h.message for h in search.search_messages(demo.store, search.tokenize(demo.store, "Maya"), limit=1000)}
    sam_messages = {m for (m,) in demo.store.execute("SELECT message FROM readings WHERE question = 'sam.diet'").fetchall()}
    assert sam_messages and not hits & sam_messages


def test_every_answer_comes_with_its_probability_and_an_ask_flag(demo):
    ctx = context(demo, TASK, at=NOW, act_at=0.8)
    assert {q.question for q in ctx.questions} == {b.question for b in demo.beliefs(at=NOW)}
    for q in ctx.questions:
        options = demo.store.question(q.question)["options"]
        assert list(q.answers) == list(options)
        assert math.isclose(sum(q.answers.values()), 1.0, abs_tol=1e-5)
        assert q.ask == (q.p_top < 0.8)
        assert q.reason and "\n" not in q.reason
    assert context(demo, TASK, at=NOW, act_at=0.5).questions != ctx.questions  # the flag follows the threshold


def test_the_question_matching_the_task_comes_first(demo):
    ctx = context(demo, TASK, at=NOW)
    assert ctx.questions[0].question == "maya.birthday"
    assert set(ctx.questions[0].matched) == {"birthday", "dinner"}
    assert "maya" not in ctx.terms  # the subject's own name does not rank
    # a named subject's question before a related subject's, all else equal
    hops = [q.hop for q in ctx.questions if not (q.matched or q.evidence or q.lexicon)]
    assert hops == sorted(hops)


def test_dinner_reaches_the_diet_question_through_its_evidence(demo):
    diet = next(q for q in context(demo, TASK, at=NOW).questions if q.question == "maya.diet")
    assert diet.evidence["dinner"]["message"] == "m1"  # "Maya is vegetarian, remember for dinners."
    assert "dinner in its evidence (“Maya is vegetarian, remember for dinners.”)" in diet.reason


@pytest.fixture
def people():
    mem = doxa.open(":memory:", log_reads=False)
    mem.ingest([
        R.subject("ada", "Ada"), R.subject("bo", "Bo"), R.subject("cy", "Cy"),
        R.relation("ada", "bo", "partner"), R.relation("cy", "ada", "sister"),
        R.question("ada.home", ["north", "south"], kind="home_address", subject="ada", text="Where does Ada live?"),
        R.question("ada.wine", ["red", "white"], kind="wine", subject="ada", text="Which wine does Ada prefer?"),
        R.question("ada.gift", ["book", "game"], kind="gift", subject="ada", text="What gift would Ada like?"),
        R.question("bo.restaurant", ["thai", "italian"], kind="restaurant", subject="bo",
                   text="Which restaurant does Bo like?"),
        R.question("bo.home", ["north", "south"], kind="home_address", subject="bo", text="Where does Bo live?"),
        R.question("cy.wine", ["red", "white"], kind="wine", subject="cy", text="Which wine does Cy prefer?"),
    ])
    return mem


def test_ranking_puts_what_the_task_is_about_first(people):
    order = [q.question for q in context(people, "pick a wine for dinner with Ada").questions]
    assert order[0] == "ada.wine"
    assert order.index("cy.wine") < order.index("ada.home")  # a related subject's match beats a miss
    assert order.index("ada.home") < order.index("bo.home")  # the same miss: named before related
    order = [q.question for q in context(people, "book a restaurant for Ada's birthday").questions]
    assert order[0] == "bo.restaurant"  # her partner's restaurant matters more than her address


@pytest.fixture
def rue():
    """One person, four questions; only the evidence read for one of them says "dinner"."""
    mem = doxa.open(":memory:", log_reads=False)
    mem.ingest([
        R.subject("rue", "Rue"), R.source("notes", ["user", "notes"]), R.source("bot", ["assistant", "notes"]),
        # kinds the task lexicon knows nothing of: only the evidence can tie "dinner" to them
        R.question("rue.eating", ["vegan", "anything"], kind="eating", subject="rue", text="What does Rue eat?"),
        R.question("rue.pet", ["dog", "cat"], kind="pet", subject="rue", text="Does Rue have a pet?"),
        R.question("rue.car", ["yes", "no"], kind="car", subject="rue", text="Does Rue drive?"),
        R.question("rue.job", ["office", "home"], kind="job", subject="rue", text="Where does Rue work?"),
        R.message("e1", "notes", "2026-03-01", "Rue is vegan, keep that in mind for dinners."),
        R.reading("e1", "rue.eating", {"vegan": 0.9, "anything": 0.05}, unclear=0.05),
        # read for the car, but its reader found it all but unrelated
        R.message("c1", "notes", "2026-03-02", "Rue's dinner guest parked on the lawn."),
        R.reading("c1", "rue.car", {"yes": 0.025, "no": 0.025}, unrelated=0.95),
        # the assistant's own note is never evidence, for ranking neither
        R.message("b1", "bot", "2026-03-03", "Assistant note: Rue's dog comes to every dinner."),
        R.reading("b1", "rue.pet", {"dog": 0.9, "cat": 0.05}, unclear=0.05),
    ])
    yield mem
    mem.close()


def test_a_task_word_in_a_questions_evidence_ranks_it_above_the_rest(rue):
    ctx = context(rue, "book a dinner for Rue", at=datetime(2026, 4, 1))
    order = [q.question for q in ctx.questions]
    assert order[0] == "rue.eating"
    eating = ctx.questions[0]
    assert eating.matched == [] and list(eating.evidence) == ["dinner"]
    assert "dinner in its evidence (“Rue is vegan, keep that in mind for dinners.”)" in eating.reason
    # the car's dinner message counts by how related its reader found it: a little, below the diet
    car = next(q for q in ctx.questions if q.question == "rue.car")
    assert 0 < car.bm25 < eating.bm25 and "dinner in its evidence" in car.reason
    pet = next(q for q in ctx.questions if q.question == "rue.pet")
    assert pet.bm25 == 0 and pet.evidence == {} and "no word of the task matches" in pet.reason
    # word matching alone cannot tell them apart
    plain = question_ranking.rank_questions(rue.store, ctx.terms, subject_ids=["rue"], evidence=False)
    assert {r["id"]: r["score"] for r in plain}["rue.eating"] == 0


def test_evidence_counts_only_up_to_the_time_asked(rue):
    before = context(rue, "book a dinner for Rue", at=datetime(2026, 2, 1))
    assert all(q.bm25 == 0 and not q.evidence for q in before.questions)


def test_the_word_in_the_question_itself_outweighs_any_amount_of_evidence(rue):
    rue.ingest([R.question("rue.venue", ["home", "out"], kind="venue", subject="rue",
                           text="Where does Rue like to have dinner?")]
               + [R.message(f"d{i}", "notes", "2026-03-10", f"Dinner {i}: Rue ate the vegan dinner again, dinner")
                  for i in range(6)]
               + [R.reading(f"d{i}", "rue.eating", {"vegan": 0.9, "anything": 0.05}, unclear=0.05) for i in range(6)])
    order = [q.question for q in context(rue, "book a dinner for Rue", at=datetime(2026, 4, 1)).questions]
    assert order[:2] == ["rue.venue", "rue.eating"]


def test_the_task_lexicon_links_words_no_evidence_links(people):
    people.ingest([R.question("bo.diet", ["vegan", "anything"], kind="diet", subject="bo", text="What does Bo eat?")])
    ctx = context(people, "dinner with Ada")
    diet = next(q for q in ctx.questions if q.question == "bo.diet")
    assert diet.lexicon == ["dinner → diet"] and "dinner → diet by the task lexicon" in diet.reason
    home = next(q for q in ctx.questions if q.question == "bo.home")
    assert diet.relevance > home.relevance
    # a lexicon word counts less than the same word in the task
    direct = next(q for q in context(people, "diet of Ada").questions if q.question == "bo.diet")
    assert direct.lexicon == [] and direct.matched == ["diet"]


def test_relations_are_followed_in_both_directions_once(people):
    ctx = context(people, "call Cy")
    assert {s["id"]: s["hop"] for s in ctx.subjects} == {"cy": 0, "ada": 1}
    assert {q.subject for q in ctx.questions} == {"cy", "ada"}


def test_a_task_naming_nobody_falls_back_to_its_words(people):
    ctx = context(people, "which restaurant is good tonight")
    assert ctx.note and "no subject" in ctx.note
    assert [q.question for q in ctx.questions] == ["bo.restaurant"]
    assert context(people, "hello there").questions == []


# ---------------------------------------------------------------------------- instructions
def test_instruction_stands_and_a_conflict_becomes_a_question_to_the_user(demo):
    ctx = context(demo, TASK, at=NOW)
    (instruction,) = ctx.instructions
    assert instruction.id == "i1" and instruction.stands
    conflict = instruction.conflict
    assert conflict["rests_on_answer"] == "no" and conflict["top"] == "yes"
    assert conflict["ask_user"].endswith("?") and "Avoid loud restaurants for Maya" in conflict["ask_user"]
    assert conflict["evidence"]["message"] == "l2"  # the loud taco night
    # beside the beliefs, never merged into them: the belief is exactly what the evidence says
    loud = next(q for q in ctx.questions if q.question == "maya.likes_loud_places")
    assert loud.answers == demo.belief("maya.likes_loud_places", NOW).answers
    assert demo.store.instructions(["maya"])[0]["text"] == "Avoid loud restaurants for Maya"


def test_no_conflict_while_the_evidence_agrees(demo):
    before_taco_night = datetime(2026, 11, 1)
    (instruction,) = context(demo, TASK, at=before_taco_night).instructions
    assert instruction.conflict is None and instruction.stands


def test_instructions_of_the_related_subject_come_too(people):
    people.ingest([R.instruction("i9", "Never book anything spicy for Bo", "2026-01-01", subject="bo")])
    ctx = context(people, "dinner with Ada")
    assert [i.id for i in ctx.instructions] == ["i9"]


# ---------------------------------------------------------------------------- command line
def test_cli_context_json(tmp_path):
    from doxa.cli.main import app

    db = str(tmp_path / "demo.duckdb")
    mem = doxa.open(db)
    mem.ingest(demo_records())
    mem.close()
    runner = CliRunner()
    result = runner.invoke(app, ["context", TASK, "--db", db, "--at", DEMO_NOW, "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["questions"][0]["question"] == "maya.birthday"
    assert any(q["question"] == "sam.diet" for q in out["questions"])
    assert out["instructions"][0]["conflict"]["ask_user"].endswith("?")
    text = runner.invoke(app, ["context", TASK, "--db", db, "--at", DEMO_NOW])
    assert text.exit_code == 0 and "Keep following" in text.output and "sam.diet" in text.output


def test_a_related_subjects_question_that_matches_at_all_ranks_above_a_named_one_that_matches_nothing(demo):
    ctx = context(demo, "book Maya's birthday dinner", at=NOW)
    order = [q.question for q in ctx.questions]
    sam = ctx.questions[order.index("sam.diet")]
    assert sam.hop == 1 and sam.bm25 > 0 and sam.matched == [] and sam.lexicon == ["dinner → diet"]
    unmatched = [q for q in ctx.questions if q.hop == 0 and q.bm25 == 0]
    assert unmatched and all(order.index("sam.diet") < order.index(q.question) for q in unmatched)


def test_a_named_subjects_question_matching_the_task_outranks_a_one_hop_lexicon_guess():
    """Issue 10, point 8: "text my flatmate about the lease" is about Tom's lease, not Priya's phone."""
    mem = doxa.open(":memory:", log_reads=False)
    mem.ingest([
        R.subject("tom", "Tom", ["my flatmate"]), R.subject("priya", "Priya"), R.relation("tom", "priya", "partner"),
        R.source("landlord", ["business", "email"]), R.source("priya-chat", ["person", "self", "chat"]),
        R.question("tom.moving_out", ["yes", "no"], kind="moving_out", subject="tom", text="Is Tom moving out?",
                   shape="yes_no"),
        R.question("tom.diet", ["vegetarian", "eats meat"], kind="diet", subject="tom", text="What does Tom eat?"),
        R.question("priya.phone", ["+44 7700 900123", "+44 7700 900456"], kind="phone_number", subject="priya",
                   text="What is Priya's phone number?"),
        R.question("priya.diet", ["vegetarian", "eats meat"], kind="diet", subject="priya",
                   text="What does Priya eat?"),
        R.message("e1", "landlord", "2026-05-01", "Tom's lease ends in March and he is leaving the flat."),
        R.reading("e1", "tom.moving_out", {"yes": 0.9, "no": 0.1}),
        R.message("p1", "priya-chat", "2026-05-02", "New number: text me on +44 7700 900456"),
        R.reading("p1", "priya.phone", {"+44 7700 900123": 0.05, "+44 7700 900456": 0.95}),
    ])
    ctx = context(mem, "text my flatmate about the lease", at=datetime(2026, 6, 1))
    order = [q.question for q in ctx.questions]
    assert order[:2] == ["tom.moving_out", "priya.phone"]
    assert "lease in its evidence" in ctx.questions[0].reason
    # the lift is for a match of the task's own words: one hop out still beats a named question matching nothing
    assert order.index("priya.phone") < order.index("tom.diet")
