"""Ranking a task's candidate questions (`doxa context`): BM25 over each question's words and its evidence, widened by the task lexicon."""

from __future__ import annotations

from datetime import datetime
from functools import lru_cache
from importlib.resources import files
from typing import TYPE_CHECKING, Any

from .connection import in_read_session
from .search import MIN_PREFIX_CHARS, _idf, _normalised_tfs, _saturate, is_variant
from .text import words

if TYPE_CHECKING:
    from .evidence import Evidence
    from .session import Session


#: Weight of a question's evidence against its own text and kind. Each field's term frequency
#: is saturated on its own, so the evidence adds at most ``EVIDENCE_WEIGHT · (k1 + 1) = 0.66``
#: of a term's idf, however many messages repeat the word: less than the word once in the
#: question itself (1.0 at average length).
EVIDENCE_WEIGHT = 0.3
#: Query weight of a word the task lexicon adds (data/task_lexicon.txt), against the task's own words.
LEXICON_WEIGHT = 0.25


@lru_cache(maxsize=1)
def task_lexicon() -> dict[str, tuple[str, ...]]:
    """The curated task lexicon (data/task_lexicon.txt): task word → the question words it is about."""
    out: dict[str, tuple[str, ...]] = {}
    text = files("doxa.data").joinpath("task_lexicon.txt").read_text(encoding="utf-8")
    for n, line in enumerate(text.splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        key, sep, values = line.partition(":")
        related = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not related or any(words(w) != [w] for w in [key.strip(), *related]):
            raise ValueError(f"task_lexicon.txt line {n}: {line!r}: write `word: word, word` "
                             "(single lower-case words, as the tokeniser makes them)")
        out[key.strip()] = tuple(related)
    return out


def lexicon_expansions(terms: list[str]) -> list[tuple[str, str]]:
    """``(task term, question word)`` pairs the task lexicon adds for ``terms``.

    A task term takes the entries of every lexicon word it is a variant of ("dinners" →
    "dinner"). A question word that is a variant of a task term, or of a word already added,
    is left out (it would count the same matches twice); each comes from the first task term
    that brought it.
    """
    lexicon = task_lexicon()
    out: dict[str, str] = {}
    for term in terms:
        for key, related in lexicon.items():
            if is_variant(key, term):
                for word in related:
                    if not any(is_variant(word, t) for t in [*terms, *out]):
                        out[word] = term
    return [(term, word) for word, term in out.items()]


def evidence_units(evidence: "Evidence") -> list[tuple]:
    """``(question, message, 1 − unrelated[, text])`` of every counted reading of evidence loaded
    ``with_messages`` (the text where the loader had it)."""
    if evidence.message is None:
        raise ValueError("evidence_units needs evidence loaded with_messages=True")
    columns = [evidence.questions.ids[evidence.q].tolist(), evidence.message.tolist(),
               (1.0 - evidence.unrelated).tolist()]
    if evidence.message_text is not None:
        columns.append(evidence.message_text.tolist())
    return list(zip(*columns))


def evidence_term_frequencies(
    store: "Session", terms: list[str], question_ids: list[str], *, at: datetime | None = None,
    units: list[tuple] | None = None,
) -> dict[str, dict[str, tuple[float, str, str]]]:
    """How much of each question's evidence uses each query term: ``{question: {term: (tf, message, text)}}``.

    A question's evidence is what its belief counts (data/evidence.py): the kept messages read
    for it up to ``at``, never the assistant's own notes, each evidence unit once (copies of a
    message count once: the earliest). Each message is a passage, its ``tf`` (with word
    variants) length-normalised as in BM25 against the average length of these questions'
    evidence, and weighted by how related its reader found it (``1 − unrelated``)::

        tf_ev(q, d) = Σ_{m read for d} (1 − unrelated(m, d)) · tf(q, m) / (1 − b + b |m| / avgdl)

    ``message`` and ``text`` name the message that adds most for that term. ``units`` are the
    counted readings when the caller has loaded them already (:func:`evidence_units`); else
    they are loaded here. One query fetches the messages' texts; they are tokenised here by
    the twin of ingest's rule (:func:`words`): for a few hundred short texts that is ~15x
    faster than the same regex in SQL (tests/test_search.py checks the twins agree).
    """
    terms = list(dict.fromkeys(t for t in terms if t))
    if not terms or not question_ids:
        return {}
    if units is None:
        units = evidence_units(store.load_evidence(at, list(question_ids), with_messages=True))
    wanted = set(question_ids)
    units = [u for u in units if u[0] in wanted]
    if not units:
        return {}
    if len(units[0]) == 4:
        rows = units
    else:
        found = dict(store.execute("SELECT id, text FROM messages WHERE id IN (SELECT unnest(?))",
                                   [sorted({u[1] for u in units})]).fetchall())
        rows = [(question, message, rel, found[message]) for question, message, rel in units]
    if not rows:
        return {}
    texts = {message: text for _, message, _, text in rows}
    messages = list(texts)
    tokens = [words(texts[m]) for m in messages]
    # every variant of a term shares its first MIN_PREFIX_CHARS letters: count only those
    prefixes = {t[:MIN_PREFIX_CHARS] for t in terms}
    tfs, _ = _normalised_tfs(terms, [[t for t in doc if t[:MIN_PREFIX_CHARS] in prefixes] for doc in tokens],
                             [len(doc) for doc in tokens])
    by_message: dict[str, dict[str, float]] = {}
    for term, tf in tfs.items():
        for i, x in tf.items():
            by_message.setdefault(messages[i], {})[term] = x
    total: dict[tuple[str, str], float] = {}
    best: dict[tuple[str, str], tuple[float, str]] = {}
    for question, message, rel, _ in rows:
        for term, x in by_message.get(message, {}).items():
            key, add = (question, term), rel * x
            if add > 0:
                total[key] = total.get(key, 0.0) + add
                best[key] = max(best.get(key, (add, message)), (add, message))
    out: dict[str, dict[str, tuple[float, str, str]]] = {}
    for (question, term), x in total.items():
        example = best[(question, term)][1]
        out.setdefault(question, {})[term] = (x, example, texts[example])
    return out


@in_read_session
def rank_questions(
    store: "Session",
    terms: list[str],
    *,
    subject_ids: list[str] | None = None,
    at: datetime | None = None,
    evidence: bool = True,
    lexicon: bool = True,
    loaded: "Evidence | None" = None,
) -> list[dict[str, Any]]:
    """Active questions scored for the task's ``terms``, best first.

    A question has two fields: its own text and kind (``likes_loud_places`` → likes, loud,
    places) and, with ``evidence`` and ``subject_ids``, its evidence
    (:func:`evidence_term_frequencies`). Each field's length-normalised term frequency is
    saturated on its own (BM25's ``S(x) = x (k1 + 1) / (x + k1)``) and the evidence is
    down-weighted::

        score(d) = Σ_q  w_q · idf(q) · (S(tf_own(q, d)) + EVIDENCE_WEIGHT · S(tf_ev(q, d)))

    over the task's terms (``w_q = 1``) and, with ``lexicon``, the question words the task
    lexicon adds (``w_q = LEXICON_WEIGHT``, own field only). ``idf`` counts the questions
    matching ``q`` in either field. With ``subject_ids``, only those subjects' questions are
    scored, and they are the corpus (what tells questions apart *within* the task's reach);
    without, every active question is, on its own field only (the whole store's evidence is
    `doxa search`'s job). With neither evidence nor lexicon this is plain BM25 (:func:`bm25`).

    Every candidate is returned, matched or not (score 0), with ``matched`` (index terms of
    its own text the task's terms matched), ``evidence`` (task term → ``{"message", "text"}``
    of the message that adds most) and ``lexicon`` (``(task term, question word)`` pairs).
    """
    if loaded is not None and subject_ids is not None:
        qt, wanted = loaded.questions, set(subject_ids)
        rows = [row for row in zip(qt.ids.tolist(), qt.subjects.tolist(), qt.kinds.tolist(), qt.texts.tolist())
                if row[1] in wanted]
    else:
        scope = "AND subject IN (SELECT unnest(?))" if subject_ids is not None else ""
        params: list[Any] = [list(subject_ids)] if subject_ids is not None else []
        rows = store.execute(
            f"SELECT id, subject, kind, text FROM questions WHERE status = 'active' {scope}", params
        ).fetchall()
    terms = list(dict.fromkeys(terms))
    expansions = lexicon_expansions(terms) if lexicon else []
    added = {word: term for term, word in expansions}
    own_tf, own_hits = _normalised_tfs(terms + list(added), [words(f"{text} {kind}") for _, _, kind, text in rows])
    ev: dict[str, dict[str, tuple[float, str, str]]] = {}
    if evidence and subject_ids is not None and rows and terms:
        units = evidence_units(loaded) if loaded is not None else None
        ev = evidence_term_frequencies(store, terms, [r[0] for r in rows], at=at, units=units)
    ev_tf: dict[str, dict[int, float]] = {}
    for i, (qid, *_rest) in enumerate(rows):
        for term, (tf, _, _) in ev.get(qid, {}).items():
            ev_tf.setdefault(term, {})[i] = tf

    scores = [0.0] * len(rows)
    for q in list(terms) + list(added):
        own, ev_q = own_tf.get(q, {}), ev_tf.get(q, {})
        df = len(own.keys() | ev_q.keys())
        if not df:
            continue
        weight = 1.0 if q in terms else LEXICON_WEIGHT
        idf = _idf(len(rows), df)
        for i in own.keys() | ev_q.keys():
            scores[i] += weight * idf * (_saturate(own.get(i, 0.0)) + EVIDENCE_WEIGHT * _saturate(ev_q.get(i, 0.0)))

    out = []
    for i, (qid, subject, kind, text) in enumerate(rows):
        matched = sorted({t for q in terms for t in own_hits.get(q, {}).get(i, ())})
        lex = [(added[w], w) for w in added if i in own_tf.get(w, {})]
        found = {t: {"message": m, "text": x} for t, (_, m, x) in ev.get(qid, {}).items()}
        out.append({"id": qid, "subject": subject, "kind": kind, "text": text, "score": scores[i],
                    "matched": matched, "evidence": {t: found[t] for t in terms if t in found}, "lexicon": lex})
    out.sort(key=lambda r: (-r["score"], r["id"]))
    return out
