"""bench/conversations.py (LongMemEval questions, issue 37) end to end on a tiny hand-written fixture.

tests/data/longmemeval_tiny holds four questions in LongMemEval's form: a gym time that changed
(6 pm, then 7 am) asked now and "previously", a question the sessions never answer (`_abs`), and a
single-session fact. With ``--reader oracle`` no model runs; the model systems run through the
scripted loopback server (tests/llm_server.py), whose "model" answers from what each system put in
its prompt, so a system's score follows from what it kept. The scoring rules are checked against
values worked out by hand.
"""

from __future__ import annotations

import json
import re
import shutil
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from bench_scripts import loaded

from llm_server import FakeChatServer

TINY = Path(__file__).resolve().parent / "data" / "longmemeval_tiny"


@pytest.fixture(scope="module")
def bench():
    yield from loaded("conversations.py", "conversations_bench")


def run_json(bench, capsys, *args) -> dict:
    assert bench.main(["--data", str(TINY), "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def by_id(report: dict, system: str) -> dict:
    return {r["id"]: r for r in report["results"] if r["system"] == system}


def row(report: dict, system: str, category: str) -> dict:
    return next(r for r in report["rows"] if r["system"] == system and r["category"] == category)


# ----------------------------------------------------------------------------- scoring by hand
def test_normalise_follows_locomo(bench):
    assert bench.normalise("The 7 A.M. class, and the gym!") == "7 am class gym"  # punctuation deleted, not spaced
    assert bench.normalise("  Kansas  City’s BBQ ") == "kansas citys bbq"


def test_containment_is_word_for_word(bench):
    assert bench.contains("I go at 7 am, before work", "7 am")
    assert not bench.contains("I go at 17 am", "7 am")  # "17" is not "7"
    assert bench.contains("Yes, I have", "Yes. (You have a road bike too.)")  # the gold without its remark
    assert bench.gold_forms("Yes. (You have a road bike too.)") == ["yes you have road bike too", "yes"]


def test_token_f1_by_hand(bench):
    # prediction "7 am before work" against "7 am": precision 2/4, recall 2/2, F1 = 2·0.5·1 / 1.5
    assert bench.token_f1("7 am before work", "7 am") == pytest.approx(2 / 3)
    assert bench.token_f1("Denver", "Denver") == 1.0
    assert bench.token_f1("Boulder", "Denver") == 0.0


def test_abstention_is_right_only_where_the_answer_is_absent(bench):
    records = {r.id: r for r in bench.load_records(TINY)}
    absent, answerable = records["tiny_gym_abs"], records["tiny_gym"]
    assert bench.is_abstention("I don't know.") and bench.is_abstention(None) and not bench.is_abstention("7 am")
    assert bench.judge(absent, "I don't know", True) == {"correct": True, "value_right": False, "f1": None}
    assert bench.judge(absent, "6 pm", False)["correct"] is False
    assert bench.judge(answerable, "I don't know", True) == {"correct": False, "value_right": False, "f1": 0.0}
    assert bench.judge(answerable, "at 7 am", False) == {"correct": True, "value_right": True, "f1": pytest.approx(0.8)}


def test_confidence_scores_by_hand(bench):
    confidence, right = np.array([0.9, 0.8, 0.3, 0.1]), np.array([1.0, 1.0, 0.0, 1.0])
    scores = bench.confidence_scores(confidence, right)
    assert scores["acc_at_50"] == 1.0 and scores["acc_at_100"] == 0.75
    assert scores["brier"] == pytest.approx((0.01 + 0.04 + 0.09 + 0.81) / 4)
    assert scores["aurc"] == pytest.approx((0 + 0 + 1 / 3 + 1 / 4) / 4)  # error rate of the k most confident


def test_records_load_from_a_folder_a_list_file_and_spread_over_categories(bench):
    records = bench.load_records(TINY)
    assert sorted(r.id for r in records) == ["tiny_gym", "tiny_gym_abs", "tiny_gym_prev", "tiny_sister"]
    assert [r.id for r in bench.load_records(TINY / "2_tiny_gym.json")] == ["tiny_gym", "tiny_gym_prev"]
    assert {r.category for r in bench.spread(records, 2)} == {"knowledge-update", "single-session-user"}
    # the whole run goes in that order too, so one stopped part-way has every category
    whole = bench.spread(records, None)
    assert sorted(r.id for r in whole) == sorted(r.id for r in records)
    assert {whole[0].category, whole[1].category} == {"knowledge-update", "single-session-user"}
    assert bench.spread(records, 0) == []
    gym = next(r for r in records if r.id == "tiny_gym")
    # a turn is dated by its session, plus its index in seconds (the order within a session)
    assert [t.at.isoformat() for t in gym.user_turns[:2]] == ["2023-03-02T18:40:00+00:00", "2023-03-02T18:40:02+00:00"]


def test_a_question_dated_before_its_last_turn_is_asked_after_it(bench):
    raw = json.loads((TINY / "1_tiny_sister.json").read_text())
    assert bench.to_record(raw).asked_at == bench.parse_date("2023/04/20 (Thu) 12:00")  # after the haystack: as is
    raw["question_date"] = "2023/04/18 (Tue) 08:00"  # the same day as the session, hours before it
    moved = bench.to_record(raw)
    assert moved.asked_at > max(t.at for t in moved.turns) and moved.asked_at.date() == moved.date.date()


# ----------------------------------------------------------------------------- no model: the oracle reader
def test_oracle_reader_mode_needs_no_model(bench, capsys, tmp_path, monkeypatch):
    for name in ("DOXA_READER_URL", "DOXA_ORGANIZER_URL"):
        monkeypatch.delenv(name, raising=False)
    report = run_json(bench, capsys, "--reader", "oracle", "--systems", "doxa-oracle-reader,latest-oracle",
                      "--out", str(tmp_path))
    results = json.loads((tmp_path / "results.json").read_text())
    assert (tmp_path / "report.md").exists() and (tmp_path / "risk_coverage.png").exists()
    assert {r["system"] for r in report["rows"]} == {"doxa-oracle-reader", "latest-oracle"}
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 8  # each answer as it came

    latest = by_id(results, "latest-oracle")
    # the newest evidence wins: right now, wrong about the earlier value, abstains where nothing is said
    assert latest["tiny_gym"]["correct"] and not latest["tiny_gym_prev"]["correct"]
    assert latest["tiny_gym_abs"]["correct"] and latest["tiny_sister"]["correct"]
    assert row(report, "latest-oracle", "knowledge-update")["accuracy"] == pytest.approx(2 / 3)
    assert row(report, "latest-oracle", "single-session-user")["accuracy"] == 1.0

    doxa = by_id(results, "doxa-oracle-reader")
    assert doxa["tiny_gym"]["value_right"] and 0.5 < doxa["tiny_gym"]["confidence"] < 1.0  # the newer value on top
    assert doxa["tiny_gym_prev"]["when"] == "previous" and doxa["tiny_gym_prev"]["correct"]  # from history
    assert doxa["tiny_gym_abs"]["abstained"] and doxa["tiny_gym_abs"]["correct"]
    assert doxa["tiny_sister"]["correct"]
    ku = row(report, "doxa-oracle-reader", "knowledge-update")
    assert ku["abstain_correct"] == 1.0 and ku["calls"] == 0 and ku["unscorable"] == 0
    assert ku["acc_at_50"] == 1.0 and ku["aurc"] is not None


def test_the_learned_oracle_settles_the_other_questions_and_never_its_own(bench, capsys, tmp_path, monkeypatch):
    records = {r.id: r for r in bench.load_records(TINY)}
    # a settlement is the value holding the gold, true when asked; none for an earlier value or `_abs`
    kept, option, qid = bench.oracle_records(records["tiny_gym"], tag="-1")
    settled = bench.oracle_settlement(records["tiny_gym"], option, qid)
    assert settled["question"] == qid == "me-1.asked" and settled["how"] == "outcome"
    assert "7 am" in option[settled["answer"]].content.lower()
    assert settled["at"] == records["tiny_gym"].asked_at.isoformat()
    for other in ("tiny_gym_prev", "tiny_gym_abs"):
        assert bench.oracle_settlement(records[other], *bench.oracle_records(records[other])[1:]) is None

    trained: dict[int, set[str]] = {}
    real_fit = bench.OracleLearned.fit

    def spy(self, training):
        fold = {self.fold(r) for r in self.records} - {self.fold(r) for r in training}
        trained[fold.pop()] = {r.id for r in training}
        return real_fit(self, training)

    monkeypatch.setattr(bench.OracleLearned, "fit", spy)
    monkeypatch.setattr(bench.OracleLearned, "FIT", {"max_steps": 20, "min_steps": 10, "n_draws": 8})
    report = run_json(bench, capsys, "--reader", "oracle", "--systems", "doxa-oracle-learned", "--out", str(tmp_path))
    results = by_id(json.loads((tmp_path / "results.json").read_text()), "doxa-oracle-learned")
    learned = bench.OracleLearned(list(records.values()))
    for rid, result in results.items():
        assert rid not in trained[learned.fold(records[rid])]  # fitted without its own answer
        settles = {r for r in trained[learned.fold(records[rid])] if r in ("tiny_gym", "tiny_sister")}
        assert result["params"] == (f"fitted without fold {learned.fold(records[rid])}" if settles else "defaults")
    assert results["tiny_gym_abs"]["abstained"]  # no value holds an answer: learning does not invent one
    assert row(report, "doxa-oracle-learned", "knowledge-update")["calls"] == 0


def test_model_systems_are_refused_in_oracle_mode(bench, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--data", str(TINY), "--reader", "oracle", "--systems", "rag"])
    assert "runs no model" in capsys.readouterr().err


# ----------------------------------------------------------------------------- the scripted model
TIME = re.compile(r"\b\d{1,2} ?[ap]m\b")


def scripted(system: str, prompt: str):
    """A "model" that answers from its prompt: the fact memory's extractions, and answers that take
    the newest time in the context (the first for "previously"); None for any other request."""
    if "keep a memory of facts" in system:
        message = prompt.split("New message", 1)[1]
        times = TIME.findall(message)
        if "gym" in message and times:
            stored = re.search(r"^(\d+)\. .*gym", prompt, re.MULTILINE)
            fact = f"The user goes to the gym at {times[-1]}."
            return f"UPDATE {stored.group(1)}: {fact}" if stored else f"ADD: {fact}"
        return "ADD: The user's sister Emily lives in Denver." if "Denver" in message else "NONE"
    if "answer a question about the user" in system:
        context, _, question = prompt.rpartition("Question:")
        if "gym" in question:
            times = TIME.findall(context)
            return (times[0] if "previously" in question else times[-1], 0.8) if times else "I don't know"
        if "sister" in question:
            return ("Denver", 0.95) if "Denver" in context else "I don't know"
        return "I don't know", 0.9
    return None


def test_baselines_through_the_scripted_model(bench, capsys, tmp_path):
    with FakeChatServer(answerer=scripted) as server:
        report = run_json(bench, capsys, "--url", server.url, "--systems", "full-context,full-user,rag,latest-fact",
                          "--out", str(tmp_path))
        answers = server.requests_of("answer")
    results = json.loads((tmp_path / "results.json").read_text())
    for system in ("full-context", "full-user", "rag"):  # everything said is in their prompt
        assert row(report, system, "knowledge-update")["accuracy"] == 1.0, system
        assert row(report, system, "single-session-user")["accuracy"] == 1.0, system
        assert row(report, system, "knowledge-update")["calls"] == 1.0
    facts = by_id(results, "latest-fact")
    # newest wins: the 6 pm fact was replaced by 7 am, so the earlier value is lost
    assert facts["tiny_gym"]["correct"] and not facts["tiny_gym_prev"]["correct"]
    assert facts["tiny_gym_prev"]["answer"] == "7 am" and facts["tiny_gym"]["facts"] == 1
    assert facts["tiny_gym_abs"]["abstained"] and facts["tiny_gym_abs"]["correct"]
    assert facts["tiny_gym"]["ingest"]["calls"] == 4 and facts["tiny_gym"]["at_question"]["calls"] == 1  # 4 user turns
    assert by_id(results, "rag")["tiny_gym"]["retrieved_has_answer"] == 2 and row(report, "rag", "knowledge-update")["k"] == 5
    # the answer's probability is the confidence; "I don't know" names no value (0)
    full = by_id(results, "full-user")
    assert full["tiny_gym"]["confidence"] == pytest.approx(0.8) and full["tiny_gym_abs"]["confidence"] == 0.0
    assert row(report, "full-user", "knowledge-update")["acc_at_100"] == pytest.approx(2 / 3)
    assert row(report, "full-user", "knowledge-update")["prompt_tokens"] > 0
    assert all(r["body"]["temperature"] == 0 for r in answers)


def test_full_context_is_cut_from_the_oldest_end_and_says_so(bench, capsys, tmp_path):
    with FakeChatServer(answerer=scripted) as server:
        report = run_json(bench, capsys, "--url", server.url, "--systems", "full-context", "--context-tokens", "420",
                          "--out", str(tmp_path))
    results = by_id(json.loads((tmp_path / "results.json").read_text()), "full-context")
    assert results["tiny_gym"]["truncated"] and row(report, "full-context", "knowledge-update")["truncated"] == 3
    assert results["tiny_gym"]["correct"]  # the newest session is kept
    assert not results["tiny_gym_prev"]["correct"]  # the older one, with 6 pm, was cut


# ----------------------------------------------------------------------------- doxa through the scripted model
_TURN = re.compile(r"^<turn (\d+)>\n(.*?)\n</turn \1>$", re.MULTILINE | re.DOTALL)
NOTHING = {"links": [], "new_values": [], "new_questions": [], "new_subjects": [], "new_relations": []}


def value_of(text: str) -> tuple[str, str, str] | None:
    """(kind, question text, value) of a turn that states the gym time or the sister's city."""
    times = TIME.findall(text)
    if "gym" in text and times:
        return "gym_time", "What time do I go to the gym?", times[-1]
    if "Denver" in text:
        return "sister_city", "Which city does my sister live in?", "Denver"
    return None


def window_script(message: str, prompt: str) -> dict:
    """The organizer over a window of turns: a turn stating a value proposes its question, or adds its
    value to the question when that is shown."""
    turns = _TURN.findall(prompt)
    if not turns:
        return NOTHING
    out = []
    for n, text in turns:
        found = value_of(text)
        if found is None:
            continue
        kind, question, value = found
        entry = {"turn": int(n), "links": [], "new_values": [], "new_questions": []}
        if re.search(rf"^- me\.{kind} \(about me, open\)", prompt, re.MULTILINE):
            entry["new_values"].append({"question": f"me.{kind}", "value": value})
        else:
            entry["new_questions"].append({"subject": "me", "kind": kind, "text": question, "shape": "value",
                                           "options": [value]})
        out.append(entry)
    return {"turns": out, "new_subjects": [], "new_relations": []}


def propose_script(prompt: str) -> dict:
    """The options of a question made at question time: the values the kept messages shown name, newest first."""
    question = prompt.split("\n", 1)[0]
    kept = prompt.split("Kept messages", 1)[1]
    if "gym" in question:
        return {"kind": "gym_time", "text": "What time does the user go to the gym?",
                "options": list(dict.fromkeys(TIME.findall(kept)))}
    if "sister" in question:
        return {"kind": "sister_city", "text": "Which city does the user's sister live in?",
                "options": ["Denver"] if "Denver" in kept else []}
    # a small model's slip: the gym's times offered for the pool
    return {"kind": "pool_time", "text": "What time does the user go to the swimming pool?",
            "options": list(dict.fromkeys(TIME.findall(kept))) or ["6 am"]}


def test_doxa_eager_and_lazy_through_the_scripted_model(bench, capsys, tmp_path):
    from llm_server import answer_model

    rules = {"7 am": "7 am", "6 pm": "6 pm", "denver": "Denver"}
    with FakeChatServer(rules, organizer=answer_model(propose=propose_script, otherwise=window_script),
                        answerer=scripted) as server:
        report = run_json(bench, capsys, "--url", server.url, "--systems", "doxa,doxa-lazy", "--out", str(tmp_path))
    results = json.loads((tmp_path / "results.json").read_text())
    for system in ("doxa", "doxa-lazy"):
        answers = by_id(results, system)
        assert not any(r["error"] for r in answers.values()), system
        gym = answers["tiny_gym"]
        assert gym["value_right"] and gym["confidence"] > max(a["p"] for a in gym["alternatives"]), system
        assert answers["tiny_gym_prev"]["when"] == "previous" and answers["tiny_gym_prev"]["value_right"], system
        assert answers["tiny_sister"]["value_right"], system
        # each answer says why its top value was wrong, and a right one has no reason
        assert all("miss" in r and (r["miss"] is None) == (r["value_right"] or r["abs"]) for r in answers.values())
        assert "misses" in row(report, system, "knowledge-update")
    eager, lazy = by_id(results, "doxa"), by_id(results, "doxa-lazy")
    # eager organizes and reads at ingest; lazy keeps every turn with no call, and works at question time
    assert eager["tiny_gym"]["ingest"]["calls"] > 0 and eager["tiny_gym"]["conversation"]["readings"] > 0
    assert all(r["ingest"]["calls"] == 0 for r in lazy.values())
    assert lazy["tiny_gym"]["at_question"]["calls"] > 0 and lazy["tiny_gym"]["created"]
    assert row(report, "doxa-lazy", "knowledge-update")["ingest_calls"] == 0


def test_a_run_goes_on_with_resume_and_never_overwrites_answers(bench, capsys, tmp_path):
    first = run_json(bench, capsys, "--reader", "oracle", "--systems", "latest-oracle", "--limit", "2",
                     "--out", str(tmp_path))
    assert first["questions"] == 2 and first["resumed"] == 0
    kept = (tmp_path / "results.jsonl").read_text()
    # the same folder again without --resume: refused, and the answers are untouched
    with pytest.raises(SystemExit):
        bench.main(["--data", str(TINY), "--reader", "oracle", "--out", str(tmp_path)])
    assert "--resume" in capsys.readouterr().err and (tmp_path / "results.jsonl").read_text() == kept
    # other settings: refused, naming the setting
    with pytest.raises(SystemExit):
        bench.main(["--data", str(TINY), "--reader", "oracle", "--k", "3", "--resume", "--out", str(tmp_path)])
    assert "k: 5 then, 3 now" in capsys.readouterr().err
    # a run killed mid-line: the broken last line is asked again, a failed answer too
    rows = [json.loads(line) for line in kept.splitlines()]
    rows[0]["error"] = "ReadTimeout: the server did not answer"
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"system": "lat')
    both = ("--systems", "doxa-oracle-reader,latest-oracle")
    whole = run_json(bench, capsys, "--reader", "oracle", *both, "--resume", "--out", str(tmp_path))
    again = run_json(bench, capsys, "--reader", "oracle", *both, "--out", str(tmp_path / "fresh"))
    assert whole["resumed"] == 1 and whole["questions"] == again["questions"]
    assert whole["rows"] == again["rows"] and whole["totals"] == again["totals"]
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert len(lines) == len((tmp_path / "fresh" / "results.jsonl").read_text().splitlines())
    assert all(json.loads(line).get("commit") for line in lines[1:])  # each new answer says what code ran
    # --limit 0 asks nothing: the report of what the folder holds, mid-run or after
    report_only = run_json(bench, capsys, "--reader", "oracle", *both, "--resume", "--limit", "0",
                           "--out", str(tmp_path))
    assert report_only["rows"] == whole["rows"] and (tmp_path / "results.jsonl").read_text().splitlines() == lines
    # --redo: one system's kept answers asked again (its code changed), the other's kept as they are
    kept_oracle = [line for line in lines if json.loads(line)["system"] == "latest-oracle"]
    redone = run_json(bench, capsys, "--reader", "oracle", *both, "--resume", "--redo", "doxa-oracle-reader",
                      "--out", str(tmp_path))
    after = (tmp_path / "results.jsonl").read_text().splitlines()
    assert redone["resumed"] == len(kept_oracle) and redone["rows"] == whole["rows"]
    assert after[:len(kept_oracle)] == kept_oracle and len(after) == len(lines)
    with pytest.raises(SystemExit):
        bench.main(["--data", str(TINY), "--reader", "oracle", "--redo", "rag", "--out", str(tmp_path)])
    assert "--redo goes with --resume" in capsys.readouterr().err


def test_an_exported_run_holds_no_data_text_and_resumes_on_another_machine(bench, capsys, tmp_path):
    both = ("--systems", "doxa-oracle-reader,latest-oracle")
    first = run_json(bench, capsys, "--reader", "oracle", *both, "--limit", "2", "--out", str(tmp_path / "run"))
    whole = run_json(bench, capsys, "--reader", "oracle", *both, "--out", str(tmp_path / "whole"))
    stated = tmp_path / "run" / "settings.json"  # as runs before the data was named wrote it: its whole path
    stated.write_text(json.dumps({**json.loads(stated.read_text()), "data": str(TINY.resolve())}))
    assert bench.main(["--out", str(tmp_path / "run"), "--export", str(tmp_path / "kept")]) == 0
    assert "written to" in capsys.readouterr().err
    texts = {str(r[k]) for r in json.loads((tmp_path / "run" / "results.json").read_text())["results"]
             for k in ("question", "gold") if r.get(k)}
    kept = (tmp_path / "kept" / "results.jsonl").read_text()
    assert texts and not any(text in kept for text in texts)  # the data's words stay out of what is kept
    assert json.loads((tmp_path / "kept" / "settings.json").read_text())["data"] == TINY.name  # not its path
    assert len(kept.splitlines()) == 2 * first["questions"]
    # the data lies elsewhere on the next machine: its name, not its path, must match
    moved = tmp_path / "elsewhere" / TINY.name
    shutil.copytree(TINY, moved)
    resumed = run_json(bench, capsys, "--data", str(moved), "--reader", "oracle", *both, "--resume",
                       "--out", str(tmp_path / "kept"))
    assert resumed["resumed"] == 2 * first["questions"] and resumed["rows"] == whole["rows"]
    with pytest.raises(SystemExit):  # nothing to export
        bench.main(["--out", str(tmp_path / "empty"), "--export", str(tmp_path / "x")])
    assert "holds no answers" in capsys.readouterr().err


@pytest.mark.parametrize("readings, answer, gold, when, reason", [
    ([], "red", "red", "now", None),  # right
    ([], None, "red", "previous", "earlier value unknown"),
    ([("red", 0.9)], "red", "green", "now", "not an option"),
    ([("red", 0.9), ("blue", 0.6)], "red", "blue", "now", "never read clearly"),
    ([("red", 0.9), ("blue", 0.9)], "red", "blue", "now", "lost to a clear rival"),
    ([("red", 0.5), ("blue", 0.9)], "red", "blue", "now", "lost"),
])
def test_why_doxas_top_value_was_wrong(bench, readings, answer, gold, when, reason):
    from types import SimpleNamespace

    import doxa

    records = [{"type": "subject", "id": "me", "name": "Me"},
               {"type": "source", "id": "me-chat", "layers": ["person", "self", "chat"]},
               {"type": "question", "id": "me.q", "subject": "me", "kind": "k", "text": "Which?", "shape": "choice",
                "options": ["red", "blue"]}]
    for n, (value, p) in enumerate(readings):
        other = "blue" if value == "red" else "red"
        records += [{"type": "message", "id": f"m{n}", "source": "me-chat", "sent_at": f"2024-01-0{n + 1}T12:00:00Z",
                     "text": f"message {n}"},
                    {"type": "reading", "message": f"m{n}", "question": "me.q", "reader": "r",
                     "probs": {value: p, other: 1 - p}, "unclear": 0.0, "unrelated": 0.0, "one_off": 0.0}]
    memory = doxa.open(":memory:", log_reads=False)
    try:
        memory.store.ingest_records(records)
        result = SimpleNamespace(answer=answer, question="me.q", when=when)
        record = SimpleNamespace(abstain=False, answer=gold, asked_at=datetime(2024, 2, 1))
        assert bench.miss_reason(memory, result, record) == reason
        assert bench.miss_reason(memory, result, SimpleNamespace(abstain=True, answer=gold, asked_at=None)) is None
    finally:
        memory.close()


def test_goals_are_judged_from_the_rows_by_hand(bench):
    def row(system, category, **values):
        base = {"system": system, "category": category, "accuracy": None, "acc_at_50": None, "acc_at_100": None,
                "aurc": None, "n_abs": 0, "abstain_correct": None, "ingest_calls": 0.0}
        return {**base, **values}

    ku, ssu = bench.KNOWLEDGE_UPDATE, bench.SINGLE_SESSION
    rows = [row("doxa", ku, accuracy=0.50, acc_at_50=0.90, acc_at_100=0.70, aurc=0.10, n_abs=3, abstain_correct=2 / 3),
            row("full-user", ku, accuracy=0.55, aurc=0.20), row("rag", ku, accuracy=0.40, aurc=0.08),
            row("doxa-oracle-reader", ku, accuracy=0.99, aurc=0.01),  # an oracle row is nobody's rival
            row("doxa", ssu, accuracy=0.80), row("full-context", ssu, accuracy=0.82),
            row("doxa-lazy", ku, accuracy=0.45, ingest_calls=0.0),
            row("doxa-lazy", ssu, accuracy=0.90, ingest_calls=0.5), row("rag", ssu, accuracy=0.70),
            row("doxa-lazy-learned", ku, accuracy=0.35, ingest_calls=0.0)]  # a variant of doxa: nobody's rival
    judged = [(g["goal"], g["met"], g["against"]) for g in bench.goals(rows)]
    assert judged == [
        ("knowledge-update: doxa's accuracy at least the best other system's", False, "full-user 0.55"),
        ("knowledge-update: doxa's accuracy at 50% coverage at least 15 points above its accuracy at 100%", True,
         "acc@100% 0.70"),
        ("knowledge-update: doxa's AURC the lowest of all systems", False, "rag 0.080"),
        ("knowledge-update: at least 2 of 3 `_abs` questions abstained on", True, "2 of 3"),
        ("single-session-user: doxa within 3 points of the best", True, "full-context 0.82"),
        ("knowledge-update: doxa-lazy at least as accurate as rag, with no model call at ingest", True,
         "rag 0.40; ingest calls 0.0"),
        ("single-session-user: doxa-lazy at least as accurate as rag, with no model call at ingest", False,
         "rag 0.70; ingest calls 0.5"),
        ("knowledge-update: doxa-lazy-learned at least as accurate as rag, with no model call at ingest", False,
         "rag 0.40; ingest calls 0.0"),
    ]
    assert bench.goals([row("rag", ku, accuracy=0.4)]) == []  # no doxa row: nothing to judge


def test_the_fit_diagnosis_compares_the_fitted_half_life_with_others(capsys):
    """bench/conversation_fit.py: one fit on the settled oracle stores, then the settled answers'
    log-likelihood under the fitted half-life and the ones asked for (the tiny fixture, few steps)."""
    for conversation_fit in loaded("conversation_fit.py", "conversation_fit_bench"):
        assert conversation_fit.main(["--data", str(TINY), "--steps", "20", "--half-lives", "2,200", "--grid", "0.5,5",
                                      "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    # the fit's objective at each (half-life, θ): the fitted half-life, then the asked ones, per θ
    assert [(g["new_value_weight"], g["half_life_days"]) for g in result["grid"]] == [
        (0.5, result["half_life_days"]), (0.5, 2.0), (0.5, 200.0), (5.0, result["half_life_days"]), (5.0, 2.0),
        (5.0, 200.0)]
    assert all(g["log_probability"] < 0 for g in result["grid"])
    assert [r["fitted"] for r in result["rows"]] == [True, False, False]
    assert [r["half_life_days"] for r in result["rows"][1:]] == [2.0, 200.0]
    for r in result["rows"]:  # two questions settle: the current gym time and the sister's city
        assert set(r["log_likelihood"]) == {"knowledge-update", "single-session-user", "all"}
        assert all(v <= 0 for v in r["log_likelihood"].values())
    assert 0 < result["trust_person_self_chat"] < 1 and result["half_life_days"] > 0


def test_the_change_question_study_scores_later_update_turns_against_the_rest(capsys):
    """bench/change_reports.py over the tiny fixture and a scripted model that hears "switched" as a
    change: the gym's later turn (twice: the current and the earlier-value question) against its
    first turn and the sister's one statement."""
    with FakeChatServer({"switched": "changed"}) as server:
        for change_reports in loaded("change_reports.py", "change_reports_bench"):
            assert change_reports.main(["--data", str(TINY), "--url", server.url, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["turns"] == 5 and result["calls"] == 5
    assert [r["later"] for r in result["rows"] if r["id"].startswith("tiny_gym")] == [False, True, False, True]
    assert result["mean_later"] > 0.8 > 0.2 > result["mean_first_update"]
    assert result["auc_later_vs_others"] == 1.0 and result["auc_later_vs_first"] == 1.0
    # the second wording, updates only (its answers are worded otherwise: a rule for each)
    with FakeChatServer({"switched": "yes, it says", "6 pm most weekdays": "no, it just says"}) as server:
        for change_reports in loaded("change_reports.py", "change_reports_bench"):
            assert change_reports.main(["--data", str(TINY), "--url", server.url, "--wording", "cues",
                                        "--category", "knowledge-update", "--json"]) == 0
    cues = json.loads(capsys.readouterr().out)
    assert cues["wording"] == "cues" and cues["turns"] == 4 and cues["auc_later_vs_first"] == 1.0


def test_a_learned_twin_that_fails_leaves_its_systems_answer_standing(bench, capsys, tmp_path, monkeypatch):
    """The twin reads the same store after the plain system has answered: its failure (here, its
    parameters) is its own error row, and the plain system's answer is kept, not lost with it."""
    from llm_server import answer_model

    def broken(document, memory, question):
        raise RuntimeError("no parameters today")

    monkeypatch.setattr(bench, "learned_for", broken)
    rules = {"7 am": "7 am", "6 pm": "6 pm", "denver": "Denver"}
    with FakeChatServer(rules, organizer=answer_model(propose=propose_script, otherwise=window_script),
                        answerer=scripted) as server:
        run_json(bench, capsys, "--url", server.url, "--systems", "doxa-lazy,doxa-lazy-learned", "--limit", "2",
                 "--out", str(tmp_path))
    results = json.loads((tmp_path / "results.json").read_text())
    lazy, twin = by_id(results, "doxa-lazy"), by_id(results, "doxa-lazy-learned")
    assert lazy and set(lazy) == set(twin)
    assert not any(r["error"] for r in lazy.values())
    assert all("no parameters today" in r["error"] for r in twin.values())


def test_keep_stores_writes_each_questions_store_as_an_export_that_ingests_again(bench, capsys, tmp_path):
    """``--keep-stores``: doxa-lazy's store of each question, every turn and the question it made
    with its readings, as a `doxa export` under OUT/stores/, which an empty store ingests whole."""
    import doxa
    from llm_server import answer_model

    rules = {"7 am": "7 am", "6 pm": "6 pm", "denver": "Denver"}
    with FakeChatServer(rules, organizer=answer_model(propose=propose_script, otherwise=window_script),
                        answerer=scripted) as server:
        run_json(bench, capsys, "--url", server.url, "--systems", "doxa-lazy", "--limit", "2", "--keep-stores",
                 "--out", str(tmp_path))
    results = json.loads((tmp_path / "results.json").read_text())
    assert len(by_id(results, "doxa-lazy")) == 2
    assert any(r["tracked"] and r["readings"] for r in by_id(results, "doxa-lazy").values())
    for r in by_id(results, "doxa-lazy").values():
        kept = tmp_path / "stores" / f"doxa-lazy-{r['id']}.jsonl"
        lines = kept.read_text().splitlines()
        assert sum('"type": "message"' in line or '"type":"message"' in line for line in lines) >= r["user_turns"]
        with doxa.open(":memory:") as copy:
            copy.ingest_lines(lines)
            if r["tracked"]:
                assert copy.store.question(r["tracked"]) is not None
                assert copy.store.execute("SELECT count(*) FROM readings WHERE question = ?",
                                          [r["tracked"]]).fetchone()[0] == r["readings"]


@pytest.mark.parametrize("plain, twin", [("doxa", "doxa-learned"), ("doxa-lazy", "doxa-lazy-learned")])
def test_a_learned_twin_reads_its_systems_store_again_under_the_fit_on_the_other_questions(bench, capsys, tmp_path,
                                                                                           plain, twin):
    """Beside doxa (doxa-lazy), doxa-learned (doxa-lazy-learned) costs no model call of its own: the
    same store, read under the parameters fitted on the other questions' settled oracle stores (their
    kind's dynamics given to the question doxa tracks); alone, it runs the pipeline for itself and
    says the same."""
    from llm_server import answer_model

    rules = {"7 am": "7 am", "6 pm": "6 pm", "denver": "Denver"}
    with FakeChatServer(rules, organizer=answer_model(propose=propose_script, otherwise=window_script),
                        answerer=scripted) as server:
        run_json(bench, capsys, "--url", server.url, "--systems", f"{plain},{twin}", "--out", str(tmp_path / "a"))
        alone = run_json(bench, capsys, "--url", server.url, "--systems", twin, "--out", str(tmp_path / "b"))
    results = json.loads((tmp_path / "a" / "results.json").read_text())
    first, learned = by_id(results, plain), by_id(results, twin)
    assert set(first) == set(learned) and not any(r["error"] for r in learned.values())
    for qid, r in learned.items():
        assert r["params"].startswith("fitted on the other questions") and r["tracked"] == first[qid]["tracked"]
        assert r["ingest"] == first[qid]["ingest"]  # the same store: no ingest of its own
        assert r["at_question"]["calls"] >= first[qid]["at_question"]["calls"]
    # read under other parameters: the same question's probability moves
    assert any(r["confidence"] != first[q]["confidence"] for q, r in learned.items() if r["confidence"] is not None)
    alone_rows = {(r["system"], r["category"]): r["accuracy"] for r in alone["rows"]}
    assert alone_rows and all(system == twin for system, _ in alone_rows)
