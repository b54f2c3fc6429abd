"""Maintenance (`doxa organize --maintain`): merges and splits proposed by rule, reviewed, applied, undone.

The rules are in doxa/inference/agent/maintenance.py's docstring; these tests hold them to their word on
hand-written stores: paraphrased duplicates are proposed and different questions are not, answers that
keep being true together are proposed for a split and an honest change is not, a proposal applied is an
ordinary operation (the same beliefs as the same merge written by hand, undone exactly), a dismissed one
never comes back, and a rerun proposes nothing new.
"""

from __future__ import annotations

import json
from datetime import datetime

import numpy as np
import pytest
from typer.testing import CliRunner

import doxa
import records as R
from doxa.data.errors import StoreError
from doxa.data.question_ops import operations
from doxa.inference.agent import maintenance as M

NOW = datetime(2026, 6, 1)
FOOD = ["fish", "meat", "vegetables"]
FLOWERS = ["tulips", "roses", "lilies", "daisies"]
MERGE_ID = "merge:maya.diet+maya.usual_diet"
SPLIT_ID = "split:maya.flowers"


def food(fish: float, meat: float = 0.05) -> dict[str, float]:
    return {"fish": fish, "meat": meat, "vegetables": round(0.95 - fish - meat, 6)}


def flowers(tulips: float, roses: float, lilies: float = 0.0) -> dict[str, float]:
    return {"tulips": tulips, "roses": roses, "lilies": lilies, "daisies": 0.0}


def store_records() -> list[dict]:
    """Maya's diet asked twice in other words (and once about something else: what she cooks), her
    flowers (tulips and roses, both true), her employer (Acme, then Globex: a change)."""
    recs = [
        R.subject("maya"), R.source("chat", ["person", "self", "chat"]),
        R.question("maya.diet", FOOD, kind="diet", subject="maya", text="What does Maya eat?"),
        R.question("maya.usual_diet", FOOD, kind="diet", subject="maya", text="What does Maya usually eat?"),
        R.question("maya.cooks", FOOD, kind="diet", subject="maya", text="What does Maya cook for guests?"),
        R.question("maya.flowers", FLOWERS, kind="flowers", subject="maya", text="What flowers does Maya like?"),
        R.question("maya.work", ["Acme", "Globex"], kind="employer", subject="maya", text="Where does Maya work?"),
    ]
    # diet: two messages read against both questions (agreeing), two only against maya.diet, one only
    # against the duplicate (so a merge moves maya.diet's belief)
    for mid, day, both in (("d1", "2026-01-05", True), ("d2", "2026-01-20", True), ("d3", "2026-02-01", False),
                           ("d4", "2026-02-10", False)):
        recs += [R.message(mid, "chat", day, f"Maya had fish ({mid})."),
                 R.reading(mid, "maya.diet", food(0.8), unclear=0.05)]
        if both:
            recs.append(R.reading(mid, "maya.usual_diet", food(0.7), unclear=0.05))
    recs += [R.message("u1", "chat", "2026-03-01", "Maya ordered steak."),
             R.reading("u1", "maya.usual_diet", food(0.05, 0.85), unclear=0.05),
             R.message("c1", "chat", "2026-01-07", "Maya cooked meat for us."),
             R.reading("c1", "maya.cooks", food(0.05, 0.85), unclear=0.05),
             R.reading("c1", "maya.diet", food(0.3, 0.3), unclear=0.05)]
    # flowers: both liked, said on three days; one message about tulips alone
    for mid, day in (("f1", "2026-01-03"), ("f2", "2026-02-14"), ("f3", "2026-04-01")):
        recs += [R.message(mid, "chat", day, f"Maya loves tulips and roses ({mid})."),
                 R.reading(mid, "maya.flowers", flowers(0.45, 0.45), unclear=0.1)]
    recs += [R.message("f4", "chat", "2026-04-20", "Tulips for Maya."),
             R.reading("f4", "maya.flowers", flowers(0.85, 0.05), unclear=0.1),
             R.message("f5", "chat", "2026-04-21", "She also likes lilies."),
             R.reading("f5", "maya.flowers", flowers(0.05, 0.05, 0.8), unclear=0.1)]
    # work: Acme three times, then Globex three times: she changed jobs
    for k, day in enumerate(("2026-01-02", "2026-01-12", "2026-01-22", "2026-02-02", "2026-02-12", "2026-02-22")):
        acme = 0.9 if k < 3 else 0.05
        recs += [R.message(f"w{k}", "chat", day, f"work {k}"),
                 R.reading(f"w{k}", "maya.work", {"Acme": acme, "Globex": round(0.95 - acme, 6)}, unclear=0.05)]
    return recs


@pytest.fixture
def mem():
    memory = doxa.open(":memory:", log_reads=False)
    memory.ingest(store_records())
    yield memory
    memory.close()


def beliefs(memory) -> dict[str, dict[str, float]]:
    return {b.question: b.answers for b in memory.beliefs(at=NOW)}


# ---------------------------------------------------------------------------- the rules
def test_the_text_rule_drops_stop_words_hedges_and_the_subjects_name():
    same, shared = M.text_similarity("What does Maya eat?", "What does Maya usually eat?", {"maya"})
    assert same == 1.0 and shared == {"eat"}
    assert M.text_similarity("What does Maya eat?", "What does Maya cook for guests?", {"maya"})[0] == 0.0
    assert M.content_words("Which dishes does Maya eat?", {"maya"}) == {"dishe", "eat"}  # the final-s rule
    assert M.option_map(["Fish", "red meat", "tofu"], ["fish", "Red-meat", "vegetables"]) == {
        "Fish": "fish", "red meat": "Red-meat"}


def test_it_proposes_the_merge_of_paraphrased_duplicates_and_not_of_different_questions(mem):
    found = {p.id: p for p in M.find(mem.store)}
    merges = [p for p in found.values() if p.op == "question_merge"]
    assert [p.id for p in merges] == [MERGE_ID]  # not maya.cooks: same kind and options, another question
    (merge,) = merges
    # from the question with fewer readings into the other, with the option map by name
    assert merge.record == {"type": "question_merge", "id": "merge-maya.usual_diet-into-maya.diet",
                            "into": "maya.diet", "from": "maya.usual_diet", "by": M.PROPOSED_BY,
                            "option_map": {o: o for o in FOOD}}
    assert merge.score == pytest.approx(0.5 * 1.0 + 0.25 * 1.0 + 0.25 * 1.0)
    assert any("agree on 2 of 2" in r for r in merge.reasons)


def test_readings_that_disagree_keep_two_paraphrases_apart(mem):
    mem.ingest([R.reading("d3", "maya.usual_diet", food(0.05, 0.85), unclear=0.05),
                R.reading("d4", "maya.usual_diet", food(0.05, 0.85), unclear=0.05),
                R.reading("d1", "maya.usual_diet", food(0.05, 0.85), reader="reader-2", unclear=0.05)])
    # d1, d2 agree and d3, d4 disagree (reader-1; reader-2's reading of d1 has no reading by reader-2 of
    # maya.diet to be compared with): 2 of 4 is AGREEMENT_MIN, still proposed, with a lower score
    (merge,) = [p for p in M.find(mem.store) if p.op == "question_merge"]
    assert merge.score == pytest.approx(0.5 + 0.25 + 0.25 * 0.5)
    mem.ingest([R.message("d5", "chat", "2026-02-20", "fish again"),
                R.reading("d5", "maya.diet", food(0.8), unclear=0.05),
                R.reading("d5", "maya.usual_diet", food(0.05, 0.85), unclear=0.05)])
    assert not [p for p in M.find(mem.store) if p.op == "question_merge"]  # 2 of 5 agree: not one question


def test_two_open_questions_in_other_words_are_proposed_whatever_their_values(mem):
    mem.ingest([{"type": "question", "id": "maya.home", "subject": "maya", "kind": "home", "shape": "choice",
                 "open": True, "options": ["Elm Street"], "text": "Where does Maya live?"},
                {"type": "question", "id": "maya.home_now", "subject": "maya", "kind": "home", "shape": "choice",
                 "open": True, "options": ["Harbour Road"], "text": "Where does Maya currently live?"}])
    (merge,) = [p for p in M.find(mem.store) if p.id == "merge:maya.home+maya.home_now"]
    assert "option_map" not in merge.record  # nothing shared: the merge lists the values of both
    mem.ingest([merge.record])
    assert mem.store.question("maya.home")["options"] == ["Elm Street", "Harbour Road"]


def test_questions_of_different_kinds_must_say_more_alike_and_open_ones_share_a_value(mem):
    def question(qid, kind, text, options, open_=False):
        return {"type": "question", "id": qid, "subject": "maya", "kind": kind, "shape": "choice", "open": open_,
                "options": options, "text": text}

    mem.ingest([question("maya.food", "food", "What does Maya usually eat?", FOOD),  # {eat} with maya.diet: 1.0
                question("maya.job", "job", "What is Maya's job?", ["nurse"], True),
                question("maya.first_job", "first_job", "What was Maya's first job?", ["nurse"], True),
                question("maya.job_now", "current_job", "What is Maya's job now?", ["teacher"], True)])
    merges = {p.id: p for p in M.find(mem.store) if p.op == "question_merge"}
    # another kind saying the same: proposed, the merge keeps the kind of the question it joins
    assert "merge:maya.diet+maya.food" in merges
    assert any("kinds 'food' and 'diet'" in r for r in merges["merge:maya.diet+maya.food"].reasons)
    # "job" and "first job" share half their words: another question, as their kinds say
    assert "merge:maya.first_job+maya.job" not in merges
    # the same words ("now" is a hedge) but two open questions of different kinds with no value in common
    assert "merge:maya.job+maya.job_now" not in merges


def test_the_split_rule_counts_co_support_not_an_honest_change():
    days = np.arange(6)
    change = np.array([[0.9, 0.05]] * 3 + [[0.05, 0.9]] * 3)
    assert M._co_supported(change, days, 0, 1).co_support == 0  # one switch: she changed jobs
    back_and_forth = np.array([[0.9, 0.05], [0.05, 0.9]] * 3)
    pair = M._co_supported(back_and_forth, days, 0, 1)
    assert (pair.switches, pair.co_support, pair.n) == (5, 4, 6)  # every switch after the first
    together = np.array([[0.45, 0.45]] * 3)
    assert M._co_supported(together, np.array([1, 1, 1]), 0, 1).days == 1  # three messages, one day


def test_it_proposes_the_split_of_answers_true_together_and_not_of_a_change(mem):
    splits = [p for p in M.find(mem.store) if p.op == "question_split"]
    assert [p.id for p in splits] == [SPLIT_ID]  # not maya.work: Acme, then Globex
    (split,) = splits
    record = split.record
    assert record["question"] == "maya.flowers" and record["id"] == "split-maya.flowers"
    into = {q["id"]: q for q in record["into"]}
    assert set(into) == {"maya.flowers.tulips", "maya.flowers.roses", "maya.flowers.other"}
    assert into["maya.flowers.tulips"]["shape"] == "yes_no" and into["maya.flowers.other"]["options"] == [
        "lilies", "daisies"]
    assert record["option_map"] == {"maya.flowers.tulips": {"tulips": "yes"}, "maya.flowers.roses": {"roses": "yes"}}
    assert record["assign"] == {"f1": ["maya.flowers.tulips", "maya.flowers.roses"],
                                "f2": ["maya.flowers.tulips", "maya.flowers.roses"],
                                "f3": ["maya.flowers.tulips", "maya.flowers.roses"],
                                "f4": "maya.flowers.tulips", "f5": "maya.flowers.other"}
    assert split.score == pytest.approx(3 / 4)  # three messages support both of the four about either
    mem.ingest([record])  # the record passes the split's own checks
    after = beliefs(mem)
    assert after["maya.flowers.tulips"]["yes"] > 0.5 and after["maya.flowers.roses"]["yes"] > 0.5
    assert mem.store.question("maya.flowers")["status"] == "split"


def test_a_settled_answer_is_not_split_off(mem):
    mem.ingest([R.settlement("maya.flowers", "roses", "2026-05-01")])
    assert not [p for p in M.find(mem.store) if p.op == "question_split"]


# ---------------------------------------------------------------------------- proposals
def test_applying_a_proposal_is_the_merge_written_by_hand_and_undo_restores_the_beliefs(mem):
    before = beliefs(mem)
    result = M.maintain(mem)
    assert set(result.new) == {MERGE_ID, SPLIT_ID} and [p.status for p in result.proposed] == ["proposed"] * 2
    done = M.apply(mem, MERGE_ID)
    assert done["op"] == "merge-maya.usual_diet-into-maya.diet"
    assert [o["id"] for o in operations(mem.store)] == [done["op"]]
    merged = beliefs(mem)
    assert merged["maya.diet"] != before["maya.diet"] and "maya.usual_diet" not in merged
    by_hand = doxa.open(":memory:", log_reads=False)
    by_hand.ingest(store_records())
    by_hand.ingest([dict(M.find(by_hand.store)[0].record)])
    assert beliefs(by_hand) == merged
    by_hand.close()
    (stored,) = M.maintenance.proposals(mem.store, [MERGE_ID])
    assert stored.status == "applied" and stored.decided_at is not None and not stored.undone
    mem.ingest([{"type": "undo", "op": done["op"], "by": "me"}])
    assert beliefs(mem) == before
    (stored,) = M.maintenance.proposals(mem.store, [MERGE_ID])
    assert stored.undone  # and it is not proposed again: the undo was a decision too
    assert MERGE_ID in M.maintain(mem).decided


def test_a_dismissed_proposal_is_not_proposed_again_and_a_rerun_adds_nothing(mem):
    first = M.maintain(mem)
    again = M.maintain(mem)
    assert again.new == [] and [p.id for p in again.proposed] == [p.id for p in first.proposed]
    assert mem.store.execute("SELECT count(*) FROM proposed_ops").fetchone()[0] == 2
    M.dismiss(mem, SPLIT_ID)
    third = M.maintain(mem)
    assert [p.id for p in third.proposed] == [MERGE_ID] and third.decided == {SPLIT_ID: "dismissed"}
    with pytest.raises(StoreError, match="already dismissed"):
        M.apply(mem, SPLIT_ID)


def test_a_waiting_proposal_follows_the_evidence(mem):
    M.maintain(mem)
    mem.ingest([R.message("f6", "chat", "2026-05-02", "Tulips and roses, always."),
                R.reading("f6", "maya.flowers", flowers(0.45, 0.45), unclear=0.1)])
    result = M.maintain(mem)
    (split,) = [p for p in result.proposed if p.id == SPLIT_ID]
    assert result.new == [] and "f6" in split.record["assign"] and split.score == pytest.approx(4 / 5)


def test_apply_above_applies_only_the_proposals_scoring_at_least_that(mem):
    result = M.maintain(mem, apply_above=0.9)
    assert [a["proposal"] for a in result.applied] == [MERGE_ID] and result.not_applied == []
    assert [p.id for p in result.proposed] == [SPLIT_ID]
    assert mem.store.question("maya.usual_diet")["status"] == "merged"


def test_apply_above_reports_a_proposal_an_earlier_one_made_impossible(mem):
    mem.ingest([R.question("maya.diet_now", FOOD, kind="diet", subject="maya", text="What does Maya eat now?")])
    result = M.maintain(mem, apply_above=0.8)
    # best first: usual_diet joins diet (1.0), then diet_now (no shared message: 0.875); the third pair's
    # questions are both merged by then
    assert [a["op"] for a in result.applied] == ["merge-maya.usual_diet-into-maya.diet",
                                                 "merge-maya.diet_now-into-maya.diet"]
    (refused,) = result.not_applied
    assert refused["id"] == "merge:maya.diet_now+maya.usual_diet" and "merged, not active" in refused["error"]
    assert [p.id for p in result.proposed] == ["merge:maya.diet_now+maya.usual_diet", SPLIT_ID]  # still waiting


# ---------------------------------------------------------------------------- command line
def run(*args: str):
    from doxa.cli.main import app

    return CliRunner().invoke(app, list(args))


def flat(result) -> str:
    """A command's output with the terminal's line wrapping undone."""
    return " ".join(result.output.split())


@pytest.fixture
def db(tmp_path) -> str:
    path = str(tmp_path / "s.duckdb")
    with doxa.open(path) as memory:
        memory.ingest(store_records())
    return path


def test_cli_maintain_review_apply_dismiss_undo(db):
    with doxa.open(db) as memory:
        before = beliefs(memory)
    result = run("organize", "--maintain", "--db", db)
    assert result.exit_code == 0, result.output
    assert MERGE_ID in flat(result) and SPLIT_ID in flat(result) and "doxa ops apply" in flat(result)
    listed = run("ops", "--proposed", "--db", db)
    assert listed.exit_code == 0 and "2 waiting" in flat(listed)
    assert run("ops", "--db", db).output.strip() == "No organizer operations yet."  # as before
    applied = run("ops", "apply", MERGE_ID, "--db", db)
    assert applied.exit_code == 0 and "doxa undo merge-maya.usual_diet-into-maya.diet" in flat(applied)
    dismissed = run("ops", "dismiss", SPLIT_ID, "--db", db)
    assert dismissed.exit_code == 0 and "will not propose it again" in flat(dismissed)
    assert "Nothing to propose" in flat(run("organize", "--maintain", "--db", db))
    assert run("undo", "merge-maya.usual_diet-into-maya.diet", "--db", db).exit_code == 0
    with doxa.open(db) as memory:
        assert beliefs(memory) == before
    assert "applied, undone since" in flat(run("ops", "--proposed", "--db", db))


def test_cli_json_shapes(db):
    result = run("organize", "--maintain", "--json", "--db", db)
    assert result.exit_code == 0, result.output
    found = json.loads(result.output)
    assert set(found) == {"proposed", "new", "decided", "applied", "not_applied"}
    assert set(found["proposed"][0]) == {"id", "op", "score", "status", "undone", "reasons", "record",
                                         "proposed_at", "proposed_by", "decided_at"}
    listed = json.loads(run("ops", "--proposed", "--json", "--db", db).output)
    assert [p["id"] for p in listed] == [MERGE_ID, SPLIT_ID]
    applied = json.loads(run("ops", "apply", MERGE_ID, "--json", "--db", db).output)
    assert set(applied) == {"proposal", "op", "record", "added", "beliefs"}
    assert applied["added"] == {"organizer_ops": 1} and applied["beliefs"][0]["question"] == "maya.diet"
    dismissed = json.loads(run("ops", "dismiss", SPLIT_ID, "--json", "--db", db).output)
    assert dismissed["status"] == "dismissed"
    ops = json.loads(run("ops", "--json", "--db", db).output)  # the operations, as before
    assert [o["id"] for o in ops] == [applied["op"]] and set(ops[0]) == {"id", "op", "by", "at", "undone", "seq",
                                                                         "record", "questions"}


def test_cli_apply_above_and_errors(db):
    result = run("organize", "--maintain", "--apply-above", "0.9", "--json", "--db", db)
    assert result.exit_code == 0, result.output
    assert [a["proposal"] for a in json.loads(result.output)["applied"]] == [MERGE_ID]
    assert run("organize", "--apply-above", "0.9", "--db", db).exit_code == 2  # needs --maintain
    assert run("ops", "frobnicate", "x", "--db", db).exit_code == 2
    assert run("ops", "apply", "--db", db).exit_code == 2  # which one?
    unknown = run("ops", "apply", "merge:nope", "--db", db)
    assert unknown.exit_code == 1 and "doxa ops --proposed" in flat(unknown)
    again = run("ops", "apply", MERGE_ID, "--db", db)
    assert again.exit_code == 1 and "already applied" in flat(again)
