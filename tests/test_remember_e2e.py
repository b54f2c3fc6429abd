"""End to end through the command line: twenty raw messages about three people from four kinds of source →
`doxa remember` → questions without duplicates, beliefs with probabilities → corrections → `doxa train`
→ the sources the corrections bore out end up trusted above the ones they contradicted (and, with the
opposite corrections, below them)."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

import doxa
from doxa.cli.main import app
from doxa.inference.read import params as parameters
from llm_server import FakeChatServer

PEOPLE = ("maya", "sam", "priya")
#: topic → (kind, question text, options, the words that say it is about this topic)
TOPICS = {
    "diet": ("What does {name} eat?", ["vegetarian", "eats fish", "eats meat"], ("vegetarian", "fish", "meat")),
    "flower": ("Which flowers does {name} like best?", ["lilies", "tulips", "roses"], ("lilies", "tulips", "roses")),
    "city": ("In which city does {name} live?", ["Leeds", "York", "Bath"], ("leeds", "york", "bath")),
}
SOURCES = {  # four kinds of source
    "maya-chat": "person/self/chat/maya-chat", "sam-chat": "person/self/chat/sam-chat",
    "priya-chat": "person/self/chat/priya-chat", "my-notes": "user/notes/my-notes",
    "mum-chat": "family/about-other/chat/mum-chat", "bloom": "business/about-other/email/marketing/bloom",
}
#: (source, sent_at, text). The people themselves and the user's notes say what the corrections
#: will settle; mum is wrong on three of them, the florist's marketing on all three flowers.
MESSAGES = [
    ("maya-chat", "2026-01-05", "I'm vegetarian these days, no meat please."),
    ("maya-chat", "2026-02-11", "Tulips are my favourite, they make the flat so bright."),
    ("sam-chat", "2026-01-20", "I eat fish most weeks now."),
    ("sam-chat", "2026-03-02", "Finally settled in Leeds, come visit!"),
    ("priya-chat", "2026-02-01", "Still vegetarian, twelve years now."),
    ("priya-chat", "2026-04-09", "Moved to York last month, loving the walls."),
    ("priya-chat", "2026-05-15", "Roses are the only flowers I ever buy."),
    ("my-notes", "2026-01-09", "Maya is vegetarian, remember for dinners."),
    ("my-notes", "2026-03-10", "Sam lives in Leeds now."),
    ("my-notes", "2026-04-20", "Priya lives in York."),
    ("my-notes", "2026-05-01", "Sam said tulips are nice but roses are his favourite."),
    ("mum-chat", "2026-02-14", "Maya eats meat again, I saw her with a burger."),
    ("mum-chat", "2026-03-15", "Sam lives in York, near the station."),
    ("mum-chat", "2026-04-22", "Priya eats fish, she had salmon at ours."),
    ("mum-chat", "2026-06-01", "Maya lives in Bath these days."),
    ("bloom", "2026-03-01", "Maya loves lilies! Order a lily bouquet for her today."),
    ("bloom", "2026-03-08", "Sam adores lilies - surprise him with our lily box."),
    ("bloom", "2026-04-01", "Priya's favourite: lilies. 20% off lilies this week."),
    ("maya-chat", "2026-06-20", "Living in Leeds now, loving the north."),
    ("sam-chat", "2026-06-25", "Thanks for the birthday wishes!"),
]
#: The corrections (settled facts): what the people and the notes said, against mum and the florist.
TRUTH = {"maya.diet": "vegetarian", "maya.flower": "tulips", "sam.city": "Leeds", "priya.city": "York",
         "priya.diet": "vegetarian", "sam.flower": "roses", "priya.flower": "roses", "maya.city": "Leeds"}
READER_RULES = {"lil": "lilies", "tulip": "tulips", "roses": "roses", "vegetarian": "vegetarian", "fish": "eats fish",
                "salmon": "eats fish", "meat": "eats meat", "burger": "eats meat", "leeds": "Leeds", "york": "York",
                "bath": "Bath"}


def _people_in(message: str, prompt: str) -> list[str]:
    named = [p for p in PEOPLE if re.search(rf"\b{p}\b", message.lower())]
    sender = re.search(r"source id (\w+)-chat", prompt)
    if sender and sender.group(1) in PEOPLE and not named:
        named = [sender.group(1)]  # "I", "my": the sender speaks for themself
    return named


def scripted_organizer(message: str, prompt: str) -> dict:
    """Links the questions it is shown; proposes the others. For the florist's messages it never looks
    at what it was shown, so doxa itself must catch the duplicates."""
    out = {"links": [], "new_questions": [], "new_subjects": [], "new_relations": []}
    low = message.lower()
    blind = "marketing" in prompt
    for person in _people_in(message, prompt):
        for kind, (text, options, words) in TOPICS.items():
            if not any(w in low for w in words):
                continue
            qid = f"{person}.{kind}"
            if qid in prompt and not blind:
                out["links"].append(qid)
            else:
                out["new_questions"].append({"subject": person, "kind": kind, "shape": "choice", "options": options,
                                             "text": text.format(name=person.title())})
    return out


def _trust(mem, source: str) -> float:
    return parameters.trust_for_source(mem.params(), SOURCES[source], None)[0]


#: What mum and the florist said, for the control: corrections that bear them out instead.
THEIR_WORD = {"maya.diet": "eats meat", "sam.city": "York", "priya.diet": "eats fish", "maya.city": "Bath",
              "maya.flower": "lilies", "sam.flower": "lilies", "priya.flower": "lilies", "priya.city": "York"}
GOOD, BAD = ("maya-chat", "sam-chat", "priya-chat", "my-notes"), ("mum-chat", "bloom")


@pytest.fixture(scope="module")
def remembered(tmp_path_factory):
    """The twenty messages remembered through `doxa remember --file` (db path, the --json output)."""
    folder = tmp_path_factory.mktemp("e2e")
    db = str(folder / "e2e.duckdb")
    with FakeChatServer(READER_RULES, organizer=scripted_organizer) as server, pytest.MonkeyPatch.context() as env:
        env.setenv("DOXA_READER_URL", server.url)
        env.delenv("DOXA_ORGANIZER_URL", raising=False)
        with doxa.open(db) as mem:
            mem.ingest([{"type": "subject", "id": p, "name": p.title()} for p in PEOPLE])
        lines = folder / "messages.jsonl"
        lines.write_text("".join(json.dumps({"text": t, "source": SOURCES[s], "sent_at": at}) + "\n"
                                 for s, at, t in MESSAGES))
        out = CliRunner().invoke(app, ["remember", "--file", str(lines), "--db", db, "--json"])
    assert out.exit_code == 0, out.output
    return db, json.loads(out.output)


def test_twenty_messages_make_questions_without_duplicates_and_beliefs_with_probabilities(remembered):
    db, batch = remembered
    results = batch["results"]
    assert batch["messages"] == 20 and all(r["status"] == "done" for r in results)
    # one organizer call per message, one reader call per (message, question)
    assert batch["calls"]["organizer"] == 20
    pairs = sum(len(r["linked"]) + len(r["created"]) for r in results)
    assert batch["calls"]["reader"] == pairs == sum(r["readings"] for r in results) == 19
    assert results[-1]["linked"] == [] and results[-1]["created"] == []  # "thanks for the wishes": nothing to track
    with doxa.open(db) as mem:
        rows = mem.store.execute("SELECT id, subject, kind, instructions_version FROM questions ORDER BY id").fetchall()
        ids = [r[0] for r in rows]
        assert ids == sorted([*TRUTH, "sam.diet"])  # every (person, topic) mentioned, once
        assert len({(r[1], r[2]) for r in rows}) == len(rows) and {r[3] for r in rows} == {1}
        # the florist's blind re-proposals were linked to the existing questions, not duplicated
        dedup = {q for r in results for q in r["deduplicated"].values()}
        assert dedup == {"maya.flower", "sam.flower", "priya.flower"}
        beliefs = {b.question: b for b in mem.beliefs(at=doxa.data.times.utc_now())}
        assert set(beliefs) == set(ids)
        for b in beliefs.values():
            assert abs(sum(b.answers.values()) - 1) < 1e-5 and b.n_evidence >= 1
        assert beliefs["sam.city"].top == "Leeds" and beliefs["priya.diet"].top == "vegetarian"


@pytest.mark.slow
@pytest.mark.parametrize("settled", ["truth", "their word"])
def test_after_corrections_and_train_trust_moves_the_way_the_settled_facts_say(remembered, tmp_path, settled):
    import shutil

    db = str(tmp_path / "trained.duckdb")
    shutil.copy(remembered[0], db)
    answers = TRUTH if settled == "truth" else THEIR_WORD
    corrections = tmp_path / "corrections.jsonl"
    corrections.write_text("".join(json.dumps({"type": "settlement", "question": q, "answer": a, "at": "2026-11-01",
                                               "how": "correction"}) + "\n" for q, a in answers.items()))
    runner = CliRunner()
    out = runner.invoke(app, ["ingest", str(corrections), "--db", db])
    assert out.exit_code == 0, out.output
    out = runner.invoke(app, ["train", "--db", db, "--max-steps", "300", "--folds", "0", "--confusion", "off",
                              "--no-progress", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["version"] == 1
    with doxa.open(db) as mem:
        trust = {s: _trust(mem, s) for s in SOURCES}
    # before any fit, mum (a family source) is trusted more than the user's own notes; the fit follows the
    # corrections: they bore out the people and the notes and contradicted mum and the florist, or the reverse
    assert parameters.DEFAULT_TRUST_BY_TOP_LAYER["family"] > parameters.DEFAULT_TRUST_BY_TOP_LAYER["user"]
    trusted, doubted = (GOOD, BAD) if settled == "truth" else (BAD, GOOD)
    assert min(trust[s] for s in trusted) > max(trust[s] for s in doubted), trust
