"""bench/organizer.py: the organizer's scores held to values worked out by hand, and one run end to end.

B-cubed (Bagga & Baldwin 1998) and the per-step scores on small hand-made groupings and decisions,
whose values are computed in the comments; maintenance's merges and splits followed message by
message; then the benchmark itself on a few messages of the tiny world and on the tiny LongMemEval
fixture, against the scripted loopback model of tests/llm_server.py, with ``--maintain``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from bench_scripts import loaded

import doxa
import records as R
from llm_server import FakeChatServer

TINY_LME = Path(__file__).resolve().parent / "data" / "longmemeval_tiny"
FOOD = ["fish", "meat", "vegetables"]
EMPTY = {"links": [], "new_values": [], "new_questions": [], "new_subjects": [], "new_relations": []}


@pytest.fixture(scope="module")
def bench():
    yield from loaded("organizer.py", "organizer_bench")


# ----------------------------------------------------------------------------- B-cubed by hand
def test_a_perfect_grouping_scores_one(bench):
    gold = {"a": "g", "b": "g", "c": "h", "x": None}
    assert bench.bcubed({"a": "q1", "b": "q1", "c": "q2", "x": None}, gold) == pytest.approx(
        {"precision": 1.0, "recall": 1.0, "f1": 1.0, "n": 4})


def test_a_duplicate_halves_recall_and_keeps_precision(bench):
    # a gold cluster of 4 split 2 + 2: each message's predicted cluster holds 2 of its 4 → recall 2/4
    gold = {m: "g" for m in "abcd"}
    scores = bench.bcubed({"a": "q1", "b": "q1", "c": "q2", "d": "q2"}, gold)
    assert scores["precision"] == pytest.approx(1.0)
    assert scores["recall"] == pytest.approx(0.5)
    assert scores["f1"] == pytest.approx(2 * 1.0 * 0.5 / 1.5)


def test_an_over_merge_halves_precision_and_keeps_recall(bench):
    # two gold clusters of 2 in one predicted cluster of 4: precision 2/4 for each message
    gold = {"a": "g", "b": "g", "c": "h", "d": "h"}
    scores = bench.bcubed({m: "q" for m in "abcd"}, gold)
    assert (scores["precision"], scores["recall"]) == pytest.approx((0.5, 1.0))


def test_messages_in_no_cluster_are_singletons(bench):
    # predicted: {a, x}, b alone, y alone; gold: {a, b}, x alone, y alone
    # a: P 1/2 R 1/2; b: P 1 R 1/2; x: P 1/2 R 1; y: P 1 R 1 → P = R = 3/4
    gold = {"a": "g", "b": "g", "x": None, "y": None}
    predicted = {"a": "q", "b": None, "x": "q", "y": None}
    assert bench.bcubed(predicted, gold) == pytest.approx({"precision": 0.75, "recall": 0.75, "f1": 0.75, "n": 4})
    # averaged over the gold messages only (a, b): P (1/2 + 1)/2, R (1/2 + 1/2)/2
    only = bench.bcubed(predicted, gold, over=["a", "b"])
    assert (only["precision"], only["recall"]) == pytest.approx((0.75, 0.5))
    assert bench.bcubed(predicted, gold, over=[])["f1"] is None


# ----------------------------------------------------------------------------- per step, by hand
def hand_steps(bench):
    """Six decisions about two gold questions: g1 (Maya's diet) and g2 (Sam's job), and one message about
    nothing the gold knows."""
    S = bench.Step
    return [
        # creates the right question, proposes the stated option (other case): all right
        S("m1", "g1", "maya", "fish", ["maya.diet"], ["maya.diet"], ["Fish", "meat"]),
        # links it: right; no option proposed, so the option score does not apply
        S("m2", "g1", "maya", "meat", ["maya.diet"]),
        # a duplicate: creates where it should link; maps to g1 (its only message is about g1); wrong option
        S("m3", "g1", "maya", "meat", ["maya.food"], ["maya.food"], ["vegetarian"]),
        # Sam's job created under Maya: right action and question, wrong subject
        S("m4", "g2", "sam", None, ["maya.job"], ["maya.job"], ["nurse"]),
        # invalid output: 0 on action, question, subject, and option (the world states one)
        S("m5", "g2", "sam", "nurse", failed=True),
        # bears on nothing the gold knows, tied to nothing
        S("m6"),
    ]


SUBJECTS = {"maya.diet": "maya", "maya.food": "maya", "maya.job": "maya"}


def test_step_scores_by_hand(bench):
    steps = hand_steps(bench)
    assert bench.match_questions(steps) == {"maya.diet": "g1", "maya.food": "g1", "maya.job": "g2"}
    assert bench.gold_actions(steps, bench.match_questions(steps)) == ["create", "link", "link", "create", "link",
                                                                       "nothing"]
    scores = bench.step_scores(steps, SUBJECTS)
    assert scores["steps"] == 6 and scores["failures"] == 1
    assert (scores["action"]["right"], scores["action"]["n"]) == (3, 5)  # m1, m2, m4
    assert (scores["question"]["right"], scores["question"]["n"]) == (4, 5)  # all but the failure
    assert (scores["subject"]["right"], scores["subject"]["n"]) == (3, 5)  # m1, m2, m3
    assert (scores["option"]["right"], scores["option"]["n"]) == (1, 3)  # m1 of m1, m3, m5
    assert scores["confusion"] == {"create": {"create": 2}, "link": {"link": 1, "create": 1, "failed": 1},
                                   "nothing": {"nothing": 1}}


def test_a_link_to_a_cross_question_first_misses_the_question(bench):
    steps = [bench.Step("m1", "g1", "maya", None, ["maya.diet"], ["maya.diet"]),
             bench.Step("m2", "g2", "maya", None, ["maya.job"], ["maya.job"]),
             bench.Step("m3", "g2", "maya", None, ["maya.diet", "maya.job"])]  # its own question second
    scores = bench.step_scores(steps, {"maya.diet": "maya", "maya.job": "maya"})
    assert (scores["question"]["right"], scores["question_any"]["right"]) == (2, 3)


def test_grouping_scores_by_hand_and_after_a_merge(bench):
    steps = hand_steps(bench)
    before = bench.grouping_scores(steps, SUBJECTS)
    # gold g1 = {m1, m2, m3}, g2 = {m4, m5}, m6 alone; predicted diet = {m1, m2}, food = {m3}, job = {m4}
    # recall: m1, m2 2/3; m3 1/3; m4, m5 1/2; m6 1 → 11/18; precision 1 everywhere
    assert before["bcubed"]["precision"] == pytest.approx(1.0)
    assert before["bcubed"]["recall"] == pytest.approx(11 / 18)
    assert {k: before[k] for k in ("merges_needed", "splits_needed", "duplicates", "wrong_subject_questions",
                                   "gold_questions", "gold_questions_found", "spurious_questions", "unlinked",
                                   "linked_without_gold", "questions")} == {
        "merges_needed": 1, "splits_needed": 0, "duplicates": 1, "wrong_subject_questions": 1, "gold_questions": 2,
        "gold_questions_found": 2, "spurious_questions": 0, "unlinked": 1, "linked_without_gold": 0, "questions": 3}
    assert before["subject_accuracy"] == pytest.approx(3 / 5)
    merged = bench.maintenance_resolver([{"type": "question_merge", "from": "maya.food", "into": "maya.diet"}])
    after = bench.grouping_scores(steps, SUBJECTS, merged)
    # g1 whole: m1..m3 recall 1; m4, m5 1/2; m6 1 → 5/6
    assert after["bcubed"]["recall"] == pytest.approx(5 / 6)
    assert (after["duplicates"], after["merges_needed"], after["questions"]) == (0, 0, 2)


def test_an_over_merge_needs_a_split_and_a_question_about_nothing_is_spurious(bench):
    S = bench.Step
    steps = [S("a", "g", questions=["q"], created=["q"]), S("b", "h", questions=["q"]),
             S("c", None, questions=["r"], created=["r"])]
    scores = bench.grouping_scores(steps, {"q": None, "r": None})
    assert (scores["splits_needed"], scores["spurious_questions"], scores["linked_without_gold"]) == (1, 1, 1)
    assert scores["gold_questions_found"] == 1  # q maps to g (a draw: the gold question reached first)


def test_the_resolver_follows_merge_chains_and_split_assignments(bench):
    resolve = bench.maintenance_resolver([
        {"type": "question_merge", "from": "a", "into": "b"},
        {"type": "question_merge", "from": "b", "into": "c"},
        {"type": "question_split", "question": "s", "assign": {"m1": "s.x", "m2": ["s.y", "s.x"]}},
    ])
    assert resolve("m", "a") == "c" and resolve("m", "c") == "c"
    assert (resolve("m1", "s"), resolve("m2", "s"), resolve("m3", "s")) == ("s.x", "s.y", None)


def test_maintenance_on_a_store_removes_a_same_kind_duplicate(bench):
    """The deterministic helper merges two questions of one subject and kind saying the same: the grouping
    after it has no duplicate left."""
    memory = doxa.open(":memory:", log_reads=False)
    try:
        memory.ingest([R.subject("maya", "Maya"), R.source("chat", ["person", "self", "chat"]),
                       R.question("maya.diet", FOOD, kind="diet", subject="maya", text="What does Maya eat?"),
                       R.question("maya.usual_diet", FOOD, kind="diet", subject="maya",
                                  text="What does Maya usually eat?")])
        found = bench.run_maintenance(memory, 0.5)
    finally:
        memory.close()
    assert found["applied"] == 1 and found["applied_records"][0]["type"] == "question_merge"
    S = bench.Step
    steps = [S("m1", "g", "maya", None, ["maya.diet"], ["maya.diet"]),
             S("m2", "g", "maya", None, ["maya.usual_diet"], ["maya.usual_diet"])]
    subjects, kinds = found.pop("subjects"), found.pop("kinds")
    before = bench.grouping_scores(steps, subjects, kinds=kinds)
    assert (before["duplicates"], before["duplicates_same_kind"], before["bcubed"]["recall"]) == (1, 1, 0.5)
    after = bench.grouping_scores(steps, subjects, bench.maintenance_resolver(found["applied_records"]), kinds=kinds)
    assert (after["duplicates"], after["duplicates_same_kind"], after["bcubed"]["f1"]) == (0, 0, pytest.approx(1.0))


# ----------------------------------------------------------------------------- end to end, scripted model
N_MESSAGES = 6
SEED = 5


def world_gold(bench):
    """The slice main() organizes (same world, size and seed): message text → its gold question record."""
    from doxa.inference.evaluation.world import generate_world
    from doxa.inference.evaluation.world_config import WorldConfig

    sliced = bench.world_slice(generate_world(WorldConfig.preset("tiny")), N_MESSAGES, seed=SEED)
    pairs = [p[0] for p in sliced.messages[:N_MESSAGES]]
    return {p.message["text"]: p.question for p in pairs}, pairs


def scripted_world_organizer(gold: dict, duplicate_of: str):
    """Links the message's world question when shown, else proposes it; the second message about
    ``duplicate_of`` proposes it again under another kind and in other words (a duplicate)."""
    seen: dict[str, int] = {}

    def organize(message: str, prompt: str) -> dict:
        q = gold.get(message)
        if q is None:
            return dict(EMPTY)
        kind = q["kind"]
        n = seen[q["id"]] = seen.get(q["id"], 0) + 1
        qid = f"{q['subject']}.{kind}"
        if q["id"] == duplicate_of and n == 2:
            return {**EMPTY, "new_questions": [{"subject": q["subject"], "kind": f"usual_{kind}",
                                                "text": "Usually, " + q["text"][0].lower() + q["text"][1:],
                                                "shape": "choice", "options": list(q["options"])}]}
        if re.search(rf"^- {re.escape(qid)} \(about ", prompt, re.MULTILINE):
            return {**EMPTY, "links": [qid]}
        return {**EMPTY, "new_questions": [{"subject": q["subject"], "kind": kind, "text": q["text"],
                                            "shape": "choice", "options": list(q["options"])}]}

    return organize


def test_the_benchmark_end_to_end_counts_a_scripted_duplicate(bench, capsys, tmp_path):
    gold, pairs = world_gold(bench)
    assert len(gold) == N_MESSAGES  # each text names one message: the script can tell them apart
    counts: dict[str, int] = {}
    for p in pairs:
        counts[p.question["id"]] = counts.get(p.question["id"], 0) + 1
    twice = next(q for q, n in counts.items() if n >= 2)
    with FakeChatServer({}, organizer=scripted_world_organizer(gold, twice)) as server:
        assert bench.main(["--world", "tiny", "--messages", str(N_MESSAGES), "--seed", str(SEED), "--url", server.url,
                           "--model", "fake", "--maintain", "--json", "--out", str(tmp_path / "out")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (tmp_path / "out" / "results.json").exists() and (tmp_path / "out" / "report.md").exists()
    assert "| episode |" in (tmp_path / "out" / "report.md").read_text()
    (world,) = report["episodes"]
    steps, grouping = world["steps"], world["grouping"]
    n_gold = len(counts)
    assert steps["steps"] == N_MESSAGES and steps["failures"] == 0
    # every step right but the duplicate's action (link wanted, create done)
    assert (steps["action"]["right"], steps["action"]["n"]) == (N_MESSAGES - 1, N_MESSAGES)
    assert steps["action"]["rate"] == pytest.approx((N_MESSAGES - 1) / N_MESSAGES, abs=1e-4)
    assert steps["question"]["right"] == steps["subject"]["right"] == N_MESSAGES
    wanted = {"link": N_MESSAGES - n_gold - 1, "create": 1}
    assert steps["confusion"]["link"] == {k: n for k, n in wanted.items() if n}
    assert grouping["duplicates"] == grouping["merges_needed"] == 1
    assert grouping["duplicates_same_kind"] == 0  # made under another kind
    assert grouping["questions"] == n_gold + 1 and grouping["gold_questions_found"] == n_gold
    assert grouping["bcubed"]["precision"] == 1.0 and grouping["bcubed"]["recall"] < 1.0
    assert world["cost"]["calls"] == N_MESSAGES and world["cost"]["prompt_tokens"] == N_MESSAGES
    maintenance = world["maintenance"]
    # maintenance ran and the grouping was scored again: the duplicate, made under another kind but saying
    # the same in other words ("usually"), clears the merge rule's bar for different kinds and is merged
    assert maintenance["apply_above"] == 0.5 and maintenance["applied"] == 1
    assert maintenance["after"]["duplicates"] == maintenance["after"]["merges_needed"] == 0
    assert maintenance["after"]["bcubed"]["recall"] == pytest.approx(1.0)
    assert set(maintenance["after"]) == set(grouping)
    # the world's truth as gold cases: each gold question's first message should create it, every later one
    # link it; the kept decisions got all right but the duplicate
    assert world["gold_cases"] == {"cases": N_MESSAGES, "by_expected": {"create": n_gold, "link": N_MESSAGES - n_gold},
                                   "right_when_kept": N_MESSAGES - 1, "rate": pytest.approx((N_MESSAGES - 1) / N_MESSAGES, abs=1e-4)}
    from doxa.inference.agent.instruction_search import judge, read_cases, search_cases

    cases = read_cases(tmp_path / "out" / "gold_cases.jsonl")
    memory = doxa.open(str(tmp_path / "out" / "organized.duckdb"), log_reads=False)
    try:
        usable, skipped = search_cases(memory.store, cases)
    finally:
        memory.close()
    gold_usable = [c for c in usable if c.case.kind == "gold"]
    assert len(gold_usable) == N_MESSAGES and not skipped
    assert [c.case.kind for c in usable if c not in gold_usable] == ["duplicate"]  # maintenance's merge, a case too
    wrong = [c for c in gold_usable if not judge(c.case, c.decision, c.decision["output"])]
    second = [p.message["id"] for p in pairs if p.question["id"] == twice][1]
    assert [c.case.messages for c in wrong] == [[second]]
    made = next(p.question for p in pairs if p.question["id"] == twice)
    assert wrong[0].case.expected == {"links_one_of": [f"{made['subject']}.{made['kind']}"], "not_links": []}


def window_organizer(message: str, prompt: str) -> dict:
    """Windows of turns: a turn about the gym proposes ``me.gym_time`` (proposed again by a later turn: one
    question), one about the lower back ``me.back`` (about nothing the gold asks)."""
    turns = re.findall(r"^<turn (\d+)>\n(.*?)\n</turn \1>$", prompt, re.MULTILINE | re.DOTALL)
    out = []
    for n, text in turns:
        if "gym" in text:
            q = {"subject": "me", "kind": "gym_time", "text": "When do I go to the gym?", "shape": "value",
                 "options": ["6 pm" if "6 pm" in text else "7 am"]}
        elif "lower back" in text:
            q = {"subject": "me", "kind": "back", "text": "Do I have back pain?", "shape": "yes_no",
                 "options": ["yes", "no"]}
        else:
            continue
        out.append({"turn": int(n), "links": [], "new_values": [], "new_questions": [q]})
    return {"turns": out, "new_subjects": [], "new_relations": []}


def test_the_benchmark_on_conversations(bench, capsys, tmp_path):
    with FakeChatServer({}, organizer=window_organizer) as server:
        assert bench.main(["--messages", "0", "--data", str(TINY_LME / "2_tiny_gym.json"), "--url", server.url,
                           "--model", "fake", "--maintain", "--json", "--out", str(tmp_path)]) == 0
    report = json.loads(capsys.readouterr().out)
    # each record's store and the gold cases of its answer turns (other turns give none: they may tell
    # something worth tracking that the one question asked does not cover)
    from doxa.inference.agent.instruction_search import read_cases, search_cases

    for record in ("tiny_gym", "tiny_gym_prev"):
        cases = read_cases(tmp_path / f"conversation-{record}.gold_cases.jsonl")
        assert len(cases) == 2 and all(c.id.startswith(f"gold:longmemeval:{record}:") for c in cases)
        memory = doxa.open(str(tmp_path / f"conversation-{record}.duckdb"), log_reads=False)
        try:
            usable, skipped = search_cases(memory.store, cases)
        finally:
            memory.close()
        assert len([c for c in usable if c.case.kind == "gold"]) == 2 and not skipped
    assert report["episodes"][0]["gold_cases"]["right_when_kept"] == 2
    assert [e["episode"] for e in report["episodes"]] == ["longmemeval:tiny_gym", "longmemeval:tiny_gym_prev"]
    episode = report["episodes"][0]
    grouping = episode["grouping"]
    assert episode["answer_turns"] == 2
    # the two answer turns share one question; the back question is about nothing the gold asks
    assert grouping["bcubed_gold"]["recall"] == 1.0 and grouping["bcubed"]["f1"] == 1.0
    assert (grouping["spurious_questions"], grouping["linked_without_gold"]) == (1, 1)
    assert grouping["gold_questions_found"] == 1
    assert episode["steps"]["question"]["rate"] == 1.0
    pooled = report["conversations"]
    assert pooled["records"] == 2 and pooled["steps"]["steps"] == 2 * episode["steps"]["steps"]
    assert pooled["maintenance"]["after"]["bcubed"]["f1"] == 1.0
