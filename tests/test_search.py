"""Full-text search: the tokeniser matches ingest's, BM25 matches its formula, word variants,
restriction to a subject, and finding subjects named in a text."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import doxa
import records as R
from doxa.data import search
from doxa.data import question_ranking
from doxa.data import subject_match
from doxa.data.demo import demo_records
from doxa.data.store import Store
from doxa.data.text import words

SOURCES = [R.source("chat", ["person", "self", "chat"]), R.source("bot", ["assistant", "notes"])]


def _store_with(texts: dict[str, str], source: str = "chat"):
    mem = doxa.open(":memory:", log_reads=False)
    mem.ingest(SOURCES + [R.message(mid, source, "2026-01-01", text) for mid, text in texts.items()])
    return mem


def _bm25_by_hand(tf: float, df: int, n: int, dl: int, avgdl: float) -> float:
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    return idf * tf * (search.K1 + 1) / (tf + search.K1 * (1 - search.B + search.B * dl / avgdl))


# ---------------------------------------------------------------------------- tokeniser
# Unassigned code points (Cn) are left out: Python 3.11 and DuckDB may know different Unicode versions.
TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cn")), max_size=40)


def test_python_sql_and_ingest_tokenisers_agree():
    store = Store.memory()

    @settings(max_examples=120, deadline=None)
    @given(TEXT)
    def same_terms(text):
        assert words(text) == search.tokenize(store, text)

    same_terms()


def test_ingest_indexes_exactly_the_terms_search_looks_for():
    mem = doxa.open(":memory:", log_reads=False)
    mem.ingest(SOURCES)
    counter = iter(range(10**6))

    @settings(max_examples=15, deadline=None)
    @given(TEXT)
    def indexed(text):
        mid = f"m{next(counter)}"
        mem.ingest([R.message(mid, "chat", "2026-01-01", text)])
        rows = mem.store.execute("SELECT term, tf FROM message_terms WHERE message = ?", [mid]).fetchall()
        assert dict(rows) == dict(Counter(words(text)))

    indexed()


def test_possessives_case_and_punctuation_split_into_plain_words():
    assert words("Book MAYA’s birthday-dinner, 2x!") == ["book", "maya", "s", "birthday", "dinner", "2x"]


# ---------------------------------------------------------------------------- BM25
def test_scores_follow_the_bm25_formula():
    mem = _store_with({"a": "peanut peanut butter", "b": "butter toast", "c": "jam"})
    hits = {h.message: h.score for h in search.search_messages(mem.store, ["peanut", "toast"])}
    avgdl = (3 + 2 + 1) / 3
    assert hits["a"] == pytest.approx(_bm25_by_hand(2, 1, 3, 3, avgdl))
    assert hits["b"] == pytest.approx(_bm25_by_hand(1, 1, 3, 2, avgdl))
    assert "c" not in hits  # no query word: not a hit


def test_more_occurrences_and_shorter_messages_rank_first():
    mem = _store_with({"long": "peanut and a very long message about many other things entirely",
                       "short": "peanut allergy", "twice": "peanut peanut allergy"})
    order = [h.message for h in search.search_messages(mem.store, ["peanut"])]
    assert order == ["twice", "short", "long"]


def test_word_variants_match_at_half_weight():
    mem = _store_with({"a": "she is allergic to nuts", "b": "nothing to see"})
    exact = search.search_messages(mem.store, ["allergic"])[0].score
    (variant,) = search.search_messages(mem.store, ["allergies"])
    assert variant.message == "a" and variant.matched == ["allergic"]
    # one occurrence at weight 1/2 against one at weight 1, same idf and length
    assert variant.score == pytest.approx(exact * (0.5 * (search.K1 + 1) / (0.5 + search.K1 * (1 - search.B + search.B * 5 / 4.0)))
                                          / ((search.K1 + 1) / (1 + search.K1 * (1 - search.B + search.B * 5 / 4.0))))
    assert not search.search_messages(mem.store, ["allegro"])  # shares only 4 letters: not a variant


WORD = st.text(st.sampled_from("abcdeé"), min_size=1, max_size=8)


def test_sql_and_python_variant_rules_agree():
    store = Store.memory()

    @settings(max_examples=120, deadline=None)
    @given(WORD, WORD)
    def same(a, b):
        row = store.execute(f"SELECT {search._variant_sql('x.term', 'x.query')} FROM (SELECT ? AS term, ? AS query) x",
                            [a, b]).fetchone()
        assert bool(row[0]) == search.is_variant(a, b)

    same()


def test_python_bm25_equals_sql_bm25():
    texts = {"m1": "Maya is allergic to peanuts", "m2": "peanut butter for Sam", "m3": "Maya loves lilies",
             "m4": "lily bouquet today", "m5": "no nuts at the party please"}
    mem = _store_with(texts)
    query = ["peanut", "maya", "lilies"]
    sql = {h.message: h.score for h in search.search_messages(mem.store, query)}
    scores, _ = search.bm25(query, [words(t) for t in texts.values()])
    python = {mid: s for mid, s in zip(texts, scores) if s > 0}
    assert sql.keys() == python.keys()
    for mid in sql:
        assert sql[mid] == pytest.approx(python[mid])


# ---------------------------------------------------------------------------- restrictions
def test_subject_restriction_needs_a_name_alias_or_reading():
    mem = doxa.open(":memory:", log_reads=False)
    mem.ingest(SOURCES + [
        R.subject("maya", "Maya", ["my sister"]),
        R.question("maya.diet", R.DIET, subject="maya"),
        R.message("named", "chat", "2026-01-01", "Maya's peanut allergy"),
        R.message("alias", "chat", "2026-01-01", "my sister has a peanut allergy"),
        R.message("half-alias", "chat", "2026-01-01", "my peanut allergy is back"),
        R.message("read", "chat", "2026-01-01", "no peanut in the curry please"),
        R.reading("read", "maya.diet", {"vegetarian": 0.5, "eats fish": 0.2, "eats meat": 0.1}, unclear=0.2),
        R.message("other", "chat", "2026-01-01", "Sam eats peanut butter"),
    ])
    found = {h.message for h in search.search_messages(mem.store, ["peanut"], subject="maya")}
    assert found == {"named", "alias", "read"}
    assert len(search.search_messages(mem.store, ["peanut"])) == 5


def test_assistant_notes_are_searchable_but_can_be_left_out():
    mem = _store_with({"n1": "Assistant note: peanut"}, source="bot")
    assert [h.is_assistant for h in search.search_messages(mem.store, ["peanut"])] == [True]
    assert search.search_messages(mem.store, ["peanut"], include_assistant=False) == []


def test_no_search_on_maya_finds_that_sam_is_vegetarian():
    mem = doxa.open(":memory:", log_reads=False)
    mem.ingest(demo_records())
    sam_evidence = {r[0] for r in mem.store.execute(
        "SELECT message FROM readings WHERE question = 'sam.diet'").fetchall()}
    found = {h.message for h in search.search_messages(mem.store, search.tokenize(mem.store, "Maya"), limit=100)}
    assert sam_evidence and not sam_evidence & found


# ---------------------------------------------------------------------------- subjects named in a text
@pytest.fixture
def people():
    mem = doxa.open(":memory:", log_reads=False)
    mem.ingest([R.subject("maya", "Maya", ["my sister", "Maya Lind"]), R.subject("sam", "Sam", ["Maya's partner"]),
                R.subject("jr", "J.R.", []), R.subject("ann", "Ann-Marie O'Neill", [])])
    return mem


@pytest.mark.parametrize("text, expected", [
    ("book MAYA’s birthday dinner", {"maya"}),
    ("call my sister", {"maya"}),
    ("sister my", set()),  # an alias is its words in order
    ("the Mayan calendar", set()),  # whole words only
    ("dinner with maya, sam and j.r.", {"maya", "sam", "jr"}),
    ("ask ann marie o neill", {"ann"}),
    ("gift for Maya's partner", {"maya", "sam"}),
    ("Ann-Marie said so", {"ann"}),  # a name's first word names the person
    ("ask marie about it", set()),  # ... all of that first word ("Ann-Marie"), not a part of it
    ("Lind was there", set()),  # a surname alone does not
])
def test_subjects_are_found_by_name_or_alias(people, text, expected):
    assert {s["id"] for s in subject_match.match_subjects(people.store, text)} == expected


def test_the_longest_matching_name_is_reported(people):
    (maya,) = subject_match.match_subjects(people.store, "lunch with Maya Lind")
    assert maya["label"] == "Maya Lind"


def test_neighbours_go_both_ways(people):
    people.ingest([R.relation("maya", "sam", "partner")])
    (sam,) = subject_match.neighbours(people.store, ["maya"])
    assert (sam["id"], sam["via"], sam["kind"], sam["forward"]) == ("sam", "maya", "partner", True)
    (maya,) = subject_match.neighbours(people.store, ["sam"])
    assert (maya["id"], maya["forward"]) == ("maya", False)
    assert subject_match.neighbours(people.store, ["maya", "sam"]) == []


# ---------------------------------------------------------------------------- ranking questions
def test_evidence_tf_follows_its_formula():
    mem = _store_with({"x1": "dinner dinner at eight", "x2": "we had dinners", "x3": "dinner is the thing here ok"})
    mem.ingest([R.subject("u"), R.question("u.a", ["y", "n"], subject="u"), R.question("u.b", ["y", "n"], subject="u"),
                R.reading("x1", "u.a", {"y": 0.5, "n": 0.3}, unrelated=0.2),
                R.reading("x2", "u.a", {"y": 0.9, "n": 0.1}),
                R.reading("x3", "u.b", {"y": 0.0, "n": 0.0}, unrelated=1.0)])  # wholly unrelated: adds nothing
    got = question_ranking.evidence_term_frequencies(mem.store, ["dinner"], ["u.a", "u.b"])
    avgdl = (4 + 3 + 6) / 3  # the corpus: the evidence of the questions asked about

    def norm(tf, dl):
        return tf / (1 - search.B + search.B * dl / avgdl)

    expected = 0.8 * norm(2, 4) + 1.0 * norm(search.VARIANT_WEIGHT, 3)  # "dinners" is a variant
    assert set(got) == {"u.a"} and math.isclose(got["u.a"]["dinner"][0], expected)
    assert got["u.a"]["dinner"][1] == "x1"  # the message that adds most


def test_without_evidence_or_lexicon_question_ranking_is_plain_bm25():
    mem = doxa.open(":memory:", log_reads=False)
    mem.ingest(demo_records())
    terms = ["birthday", "dinner", "loud"]
    ranked = question_ranking.rank_questions(mem.store, terms, subject_ids=["maya", "sam"], evidence=False, lexicon=False)
    scores, _ = search.bm25(terms, [words(f"{r['text']} {r['kind']}") for r in ranked])
    assert [r["score"] for r in ranked] == pytest.approx(scores)


def test_the_task_lexicon_parses_and_expands_variants_once():
    lexicon = question_ranking.task_lexicon()
    assert "diet" in lexicon["dinner"]
    added = question_ranking.lexicon_expansions(["dinners", "restaurant"])
    words = [w for _, w in added]
    assert ("dinners", "diet") in added and "restaurant" not in words  # already a task word
    assert len(words) == len(set(words))
