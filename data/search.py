"""Full-text search over kept messages, and the lookups `doxa context` makes: BM25 in SQL.

DuckDB's ``fts`` extension is downloaded at first use, which fails on a machine with
no internet, and the packaged ``duckdb-ext-fts`` wheel would pin DuckDB to 1.4.x. doxa
needs only ranked keyword search, so it keeps its own term table (``message_terms``:
one row per message and term, filled at ingest) and computes Okapi BM25 in SQL at
query time (Robertson & Zaragoza, "The Probabilistic Relevance Framework: BM25 and
Beyond", 2009)::

    score(d, Q) = Σ_{q ∈ Q} idf(q) · tf(q, d) (k1 + 1) / (tf(q, d) + k1 (1 - b + b |d| / avgdl))
    idf(q)      = ln(1 + (N - df(q) + 0.5) / (df(q) + 0.5))

with ``k1 = 1.2``, ``b = 0.75`` (Lucene's defaults; this idf never goes negative).
Nothing extra to install, no index to rebuild: the statistics are always current.

Tokens are what ingest stores: ``lower(text)`` split on ``[^\\p{L}\\p{N}]+`` (letters and
digits of any script), done by the same SQL expression for documents and queries. The
few candidate questions of a task (`doxa context`) and the task's own words are handled
in Python by twins of the same rules (:func:`words`, :func:`bm25`, :func:`is_variant`):
a query plan costs more than scoring a hundred short texts. tests/test_search.py checks
that the twins agree.

**Word variants.** With no stemmer, "allergies" would never find "allergic". A query
term also matches index terms of the same stem, by truncation (a cheap stemmer that
works for English and most European languages): two terms are variants when they share
their first :data:`STEM_CHARS` letters, or one is a prefix of the other and the shorter
has at least :data:`MIN_PREFIX_CHARS`. A variant counts :data:`VARIANT_WEIGHT` of an
exact occurrence in ``tf``; ``df`` counts documents with any variant.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from datetime import datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Iterable

from .store import in_read_session

if TYPE_CHECKING:
    from .evidence import Evidence
    from .store import Store

K1 = 1.2
B = 0.75
#: The tokeniser of ingest (data/writer.py `_index_terms`): keep letters and digits of any script.
TOKEN_SPLIT = r"[^\p{L}\p{N}]+"
STEM_CHARS = 5
MIN_PREFIX_CHARS = 4
VARIANT_WEIGHT = 0.5

#: Function words dropped from questions and tasks before ranking (a query made only of
#: them keeps them). Short on purpose: BM25's idf already discounts common words; this
#: only stops "does" and "have" from pulling every message into `doxa ask`'s reading.
STOPWORDS = frozenset(
    """a about after all also am an and any are as at be been before being but by can could
    did do does doing for from had has have having he her hers him his how i if in into is it
    its just me my no nor not of on or our ours please she should so some such than that the
    their them then there these they this those to too very was we were what when where which
    while who whom why will with would you your yours s t""".split()
)


def _tokens_sql(text_sql: str) -> str:
    """SQL for the token list of a text expression (empty tokens removed)."""
    return (f"list_filter(regexp_split_to_array(lower({text_sql}), '{TOKEN_SPLIT}'), "
            "x -> length(x) > 0)")


def _variant_sql(index_term: str, query_term: str) -> str:
    """SQL predicate: ``index_term`` is ``query_term`` or one of its word variants."""
    s, m = STEM_CHARS, MIN_PREFIX_CHARS
    return f"""({index_term} = {query_term}
        OR (length({index_term}) >= {s} AND length({query_term}) >= {s}
            AND left({index_term}, {s}) = left({query_term}, {s}))
        OR (length({query_term}) >= {m} AND starts_with({index_term}, {query_term}))
        OR (length({index_term}) >= {m} AND starts_with({query_term}, {index_term})))"""


def _variant_weight_sql(index_term: str, query_term: str) -> str:
    return f"CASE WHEN {index_term} = {query_term} THEN 1.0 ELSE {VARIANT_WEIGHT} END"


def _join_key(term: str) -> str:
    # Every variant pair shares its first MIN_PREFIX_CHARS letters (or is shorter and
    # equal), so this key lets the join hash instead of comparing every pair.
    return f"left({term}, {MIN_PREFIX_CHARS})"


@in_read_session
def tokenize(store: "Store", text: str) -> list[str]:
    """The terms of ``text`` exactly as ingest indexes them (in order, with repeats)."""
    # NUL is no letter (it splits words either way) and cannot sit in an inlined SQL literal
    row = store.execute(f"SELECT {_tokens_sql('?')}", [text.replace(chr(0), " ")]).fetchone()
    return list(row[0]) if row and row[0] is not None else []


def content_terms(terms: Iterable[str], *, drop: Iterable[str] = ()) -> list[str]:
    """Distinct terms without stop words and ``drop`` (in first-seen order).

    When nothing would be left, stop words are kept: a query of only "who is it" still
    searches for something.
    """
    dropped = set(drop)
    distinct = list(dict.fromkeys(t for t in terms if t not in dropped))
    content = [t for t in distinct if t not in STOPWORDS]
    return content or distinct


# ---------------------------------------------------------------------------- messages
@dataclass
class SearchHit:
    """One message found by :func:`search_messages`, best first."""

    message: str
    score: float
    text: str
    source: str
    source_path: str
    sent_at: datetime
    is_assistant: bool
    matched: list[str]  # index terms that matched a query term

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["sent_at"] = self.sent_at.isoformat()
        return out


def _subject_mentions_sql(subject: str) -> str:
    """SQL selecting ids of messages that bear on ``subject``.

    A message bears on a subject when it contains every term of the subject's name, id
    or one of its aliases ("Maya's" contains "maya"; the alias "my sister" needs both
    words), or when it already has a reading for one of the subject's questions.
    """
    from .store import sql_literal

    subj = sql_literal(subject)
    return f"""
        SELECT message FROM (
            SELECT lt.label, lt.n, mt.message
            FROM (SELECT label, unnest(terms) AS term, len(terms) AS n
                  FROM (SELECT label, list_distinct({_tokens_sql('label')}) AS terms
                        FROM (SELECT unnest(list_concat([name, id], aliases)) AS label
                              FROM subjects WHERE id = {subj}))
                  WHERE len(terms) > 0) lt
            JOIN message_terms mt ON mt.term = lt.term
            GROUP BY lt.label, lt.n, mt.message HAVING count(*) = lt.n)
        UNION
        SELECT r.message FROM readings r JOIN questions q ON q.id = r.question
        WHERE q.subject = {subj}"""


@in_read_session
def search_messages(
    store: "Store",
    terms: list[str],
    *,
    subject: str | None = None,
    limit: int = 20,
    include_assistant: bool = True,
    exclude_read_for: str | None = None,
) -> list[SearchHit]:
    """Messages ranked by BM25 for ``terms`` (use :func:`tokenize` on the user's words).

    ``subject``: only messages bearing on that subject (see :func:`_subject_mentions_sql`).
    ``include_assistant``: the assistant's own notes are kept and searchable, but never
    evidence; `doxa ask` leaves them out. ``exclude_read_for``: skip messages that
    already have a reading for that question. Only messages with a positive score (at
    least one query term or variant) are returned.
    """
    terms = list(dict.fromkeys(t for t in terms if t))
    if not terms or limit <= 0:
        return []
    store.use_one_thread(False)  # a scan of the whole term index: every core helps
    filters = []
    if subject is not None:
        filters.append(f"mt.message IN ({_subject_mentions_sql(subject)})")
    where_hits = ("WHERE " + " AND ".join(filters)) if filters else ""
    outer = []
    if not include_assistant:
        outer.append("NOT s.is_assistant")
    if exclude_read_for is not None:
        outer.append("m.id NOT IN (SELECT message FROM readings WHERE question = ?)")
    where_outer = ("WHERE " + " AND ".join(outer)) if outer else ""
    sql = f"""
        WITH qt AS (SELECT DISTINCT unnest(?) AS term),
        stats AS (SELECT count(DISTINCT message)::DOUBLE AS n,
                         sum(tf)::DOUBLE / greatest(count(DISTINCT message), 1) AS avgdl
                  FROM message_terms),
        hits AS (
            SELECT qt.term AS qterm, mt.message, mt.term,
                   {_variant_weight_sql('mt.term', 'qt.term')} * mt.tf AS wtf
            FROM message_terms mt JOIN qt ON {_join_key('mt.term')} = {_join_key('qt.term')}
            {where_hits} {'AND' if where_hits else 'WHERE'} {_variant_sql('mt.term', 'qt.term')}),
        per_term AS (SELECT qterm, message, sum(wtf) AS tf, list(DISTINCT term) AS matched
                     FROM hits GROUP BY qterm, message),
        df AS (SELECT qterm, count(*)::DOUBLE AS df FROM per_term GROUP BY qterm),
        dl AS (SELECT message, sum(tf)::DOUBLE AS dl FROM message_terms
               WHERE message IN (SELECT message FROM per_term) GROUP BY message),
        scored AS (
            SELECT p.message,
                   sum(ln(1 + (stats.n - df.df + 0.5) / (df.df + 0.5))
                       * p.tf * ({K1} + 1)
                       / (p.tf + {K1} * (1 - {B} + {B} * dl.dl / stats.avgdl))) AS score,
                   flatten(list(p.matched)) AS matched
            FROM per_term p JOIN df USING (qterm) JOIN dl USING (message), stats
            GROUP BY p.message)
        SELECT m.id, sc.score, m.text, m.source, s.path, m.sent_at, s.is_assistant, list_distinct(sc.matched)
        FROM scored sc JOIN messages m ON m.id = sc.message JOIN sources s ON s.id = m.source
        {where_outer}
        ORDER BY sc.score DESC, m.sent_at DESC, m.id
        LIMIT {int(limit)}"""
    params: list[Any] = [terms]
    if exclude_read_for is not None:
        params.append(exclude_read_for)
    rows = store.execute(sql, params).fetchall()
    return [SearchHit(message=r[0], score=float(r[1]), text=r[2], source=r[3], source_path=r[4],
                      sent_at=r[5], is_assistant=bool(r[6]), matched=sorted(r[7])) for r in rows]


# ---------------------------------------------------------------------------- in Python
#: The same split as ingest's SQL: Python's ``\W`` is "not a letter, digit or _" in any
#: script, so ``[\W_]+`` is ``[^\p{L}\p{N}]+`` (tests/test_search.py checks they agree).
_WORD_SPLIT = re.compile(r"[\W_]+")


def _lower(text: str) -> str:
    """Simple (one-to-one) lower-casing, as DuckDB's ``lower()`` does.

    ``str.lower`` applies Unicode's full mappings: "İ" becomes "i" plus a combining dot
    (which would split the word) and a word-final "Σ" becomes "ς".
    """
    if text.isascii():
        return text.lower()
    return "".join(c.lower()[0] for c in text)


def words(text: str) -> list[str]:
    """The terms of ``text`` as ingest makes them, without a round trip to the database."""
    return [w for w in _WORD_SPLIT.split(_lower(text)) if w]


def is_variant(term: str, query_term: str) -> bool:
    """Python twin of the SQL variant rule (see the module docstring)."""
    if term == query_term:
        return True
    s, m = STEM_CHARS, MIN_PREFIX_CHARS
    if len(term) >= s and len(query_term) >= s and term[:s] == query_term[:s]:
        return True
    return (len(query_term) >= m and term.startswith(query_term)) or (len(term) >= m and query_term.startswith(term))


def _saturate(tf: float) -> float:
    """BM25's term-frequency saturation of an already length-normalised ``tf``: 0 → 0, 1 → 1, ∞ → k1 + 1."""
    return tf * (K1 + 1) / (tf + K1)


def _normalised_tfs(
    query_terms: list[str], documents: list[list[str]], lengths: list[int] | None = None
) -> tuple[dict[str, dict[int, float]], dict[str, dict[int, set[str]]]]:
    """Per distinct query term: each matching document's ``tf / (1 - b + b |d| / avgdl)``, and the terms that matched.

    ``tf`` counts word variants at :data:`VARIANT_WEIGHT`; the documents given are the corpus.
    ``lengths``: the documents' lengths, when ``documents`` hold only some of their terms.
    """
    tfs: dict[str, dict[int, float]] = {}
    matched: dict[str, dict[int, set[str]]] = {}
    n_docs = len(documents)
    if not n_docs or not query_terms:
        return tfs, matched
    postings: dict[str, list[tuple[int, int]]] = {}
    for i, doc in enumerate(documents):
        counts: dict[str, int] = {}
        for t in doc:
            counts[t] = counts.get(t, 0) + 1
        for t, c in counts.items():
            postings.setdefault(t, []).append((i, c))
    by_prefix: dict[str, list[str]] = {}
    for t in postings:
        by_prefix.setdefault(t[:MIN_PREFIX_CHARS], []).append(t)
    lengths = [len(doc) for doc in documents] if lengths is None else lengths
    avgdl = max(sum(lengths) / n_docs, 1.0)
    for q in dict.fromkeys(query_terms):
        # every variant of q shares its first MIN_PREFIX_CHARS letters (or is q itself)
        candidates = by_prefix.get(q[:MIN_PREFIX_CHARS], []) if len(q) >= MIN_PREFIX_CHARS else [q]
        tf: dict[int, float] = {}
        hit: dict[int, set[str]] = {}
        for t in candidates:
            if t in postings and is_variant(t, q):
                w = 1.0 if t == q else VARIANT_WEIGHT
                for i, c in postings[t]:
                    tf[i] = tf.get(i, 0.0) + w * c
                    hit.setdefault(i, set()).add(t)
        if tf:
            tfs[q] = {i: x / (1 - B + B * lengths[i] / avgdl) for i, x in tf.items()}
            matched[q] = hit
    return tfs, matched


def _idf(n_docs: int, df: int) -> float:
    return math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))


def bm25(query_terms: list[str], documents: list[list[str]]) -> tuple[list[float], list[list[str]]]:
    """BM25 of each tokenised document for ``query_terms``, with word variants; also the terms that matched.

    The documents given are the corpus (``N``, ``df`` and the average length come from them).
    """
    scores = [0.0] * len(documents)
    matched: list[set[str]] = [set() for _ in documents]
    tfs, hits = _normalised_tfs(query_terms, documents)
    for q, tf in tfs.items():
        idf = _idf(len(documents), len(tf))
        for i, x in tf.items():
            scores[i] += idf * _saturate(x)
            matched[i] |= hits[q][i]
    return scores, [sorted(m) for m in matched]


# ---------------------------------------------------------------------------- subjects
#: A name or alias is looked at only when it contains a word of the task of at least two
#: letters, or is this short and contains a one-letter word of the task (initials such as
#: "J.R."): a substring test, so a task is matched against thousands of subjects without
#: tokenising every name. (An alias made only of one-letter words and longer than this is
#: never matched.)
SHORT_LABEL_CHARS = 6


@in_read_session
def match_subjects(store: "Store", text: str) -> list[dict[str, Any]]:
    """Subjects whose name, id or an alias appears in ``text``, as whole words in order.

    Case and punctuation do not matter ("Maya's", "MAYA", "maya," all name Maya); a
    multi-word alias must appear as those words next to each other. Returns
    ``{"id", "name", "label"}`` per subject (``label``: the longest name that matched).
    """
    task = words(text)
    padded = " " + " ".join(task) + " "
    if not task:
        return []
    long_probes = sorted({t for t in task if len(t) >= 2}) or [" "]
    short_probes = sorted({t for t in task if len(t) == 1}) or [" "]
    rows = store.execute(
        f"""SELECT id, name, label FROM (
                SELECT id, name, unnest(list_concat([name, id], aliases)) AS label FROM subjects)
            WHERE len(list_filter(?, w -> contains(lower(label), w))) > 0
               OR (length(label) <= {SHORT_LABEL_CHARS}
                   AND len(list_filter(?, w -> contains(lower(label), w))) > 0)""",
        [long_probes, short_probes],
    ).fetchall()
    found: dict[str, dict[str, Any]] = {}
    for sid, name, label in rows:
        key = " ".join(words(label))
        if key and f" {key} " in padded:
            best = found.get(sid)
            if best is None or len(key) > len(" ".join(words(best["label"]))):
                found[sid] = {"id": sid, "name": name, "label": label}
    return [found[k] for k in sorted(found)]


@in_read_session
def subject_labels(store: "Store", subject_ids: list[str]) -> dict[str, list[str]]:
    """Name, id and aliases of each of these subjects."""
    if not subject_ids:
        return {}
    rows = store.execute(
        "SELECT id, list_concat([name, id], aliases) FROM subjects WHERE list_contains(?, id)", [list(subject_ids)]
    ).fetchall()
    return {sid: list(labels) for sid, labels in rows}


def subject_label_terms(store: "Store", subject_ids: list[str]) -> set[str]:
    """Every term of the names, ids and aliases of these subjects."""
    return {w for labels in subject_labels(store, subject_ids).values() for label in labels for w in words(label)}


@in_read_session
def neighbours(store: "Store", subject_ids: list[str]) -> list[dict[str, Any]]:
    """Subjects one relation away from any of ``subject_ids`` (either direction), not among them.

    Each row: ``id``, ``name``, ``via`` (the named subject it hangs off), ``via_name``,
    ``kind`` (the relation) and ``forward`` (True when stored as via → id, i.e. "id is
    via's <kind>").
    """
    if not subject_ids:
        return []
    named = set(subject_ids)
    # two plain queries: a join with subjects on both ends plans and runs 3x slower
    edges = store.execute(
        "SELECT from_id, to_id, kind FROM relations WHERE list_contains(?, from_id) OR list_contains(?, to_id)",
        [sorted(named), sorted(named)],
    ).fetchall()
    rows = []
    for a, b, kind in edges:
        if a in named and b not in named:
            rows.append((b, a, kind, True))
        if b in named and a not in named:
            rows.append((a, b, kind, False))
    if not rows:
        return []
    names = dict(store.execute("SELECT id, name FROM subjects WHERE list_contains(?, id)",
                               [sorted({r[0] for r in rows} | {r[1] for r in rows})]).fetchall())
    return [{"id": i, "name": names.get(i, i), "via": v, "via_name": names.get(v, v), "kind": k, "forward": f}
            for i, v, k, f in sorted(set(rows))]


# ---------------------------------------------------------------------------- questions
#: Weight of a question's evidence against its own text and kind. Each field's term frequency
#: is saturated on its own, so the evidence adds at most ``EVIDENCE_WEIGHT · (k1 + 1) = 0.66``
#: of a term's idf, however many messages repeat the word: less than the word once in the
#: question itself (1.0 at average length).
EVIDENCE_WEIGHT = 0.3
#: Query weight of a word the task lexicon adds (data/task_lexicon.txt), against the task's own words.
LEXICON_WEIGHT = 0.25
_FAR_FUTURE = datetime(9999, 1, 1)


@lru_cache(maxsize=1)
def task_lexicon() -> dict[str, tuple[str, ...]]:
    """The curated task lexicon (data/task_lexicon.txt): task word → the question words it is about."""
    from importlib.resources import files

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
    store: "Store", terms: list[str], question_ids: list[str], *, at: datetime | None = None,
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
    store: "Store",
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


__all__ = ["K1", "B", "STOPWORDS", "SearchHit", "tokenize", "words", "is_variant", "bm25", "content_terms",
           "search_messages", "match_subjects", "subject_labels", "subject_label_terms", "neighbours",
           "rank_questions", "evidence_term_frequencies", "evidence_units", "lexicon_expansions", "task_lexicon",
           "EVIDENCE_WEIGHT", "LEXICON_WEIGHT"]
