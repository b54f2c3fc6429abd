"""Full-text search over kept messages: BM25 in SQL, and its Python twins.

Subject lookups are in :mod:`doxa.data.subject_match`, the ranking of a task's questions
in :mod:`doxa.data.question_ranking`.

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
digits of any script), done by the same SQL expression for documents and queries
(:mod:`doxa.data.text`, which ingest uses too). The
few candidate questions of a task (`doxa context`) and the task's own words are handled
in Python by twins of the same rules (:func:`doxa.data.text.words`, :func:`bm25`, :func:`is_variant`):
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
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Iterable

from .connection import in_read_session
from .text import tokens_sql


if TYPE_CHECKING:
    from .session import Session

K1 = 1.2
B = 0.75
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
def tokenize(store: "Session", text: str) -> list[str]:
    """The terms of ``text`` exactly as ingest indexes them (in order, with repeats)."""
    row = store.execute(f"SELECT {tokens_sql('?')}", [text]).fetchone()
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


def _subject_mentions_sql() -> str:
    """SQL selecting ids of messages that bear on a subject: its two ``?`` both take the subject's id.

    A message bears on a subject when it contains every term of the subject's name, id
    or one of its aliases ("Maya's" contains "maya"; the alias "my sister" needs both
    words), or when it already has a reading for one of the subject's questions.
    """
    subj = "?"
    return f"""
        SELECT message FROM (
            SELECT lt.label, lt.n, mt.message
            FROM (SELECT label, unnest(terms) AS term, len(terms) AS n
                  FROM (SELECT label, list_distinct({tokens_sql('label')}) AS terms
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
    store: "Session",
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
        filters.append(f"mt.message IN ({_subject_mentions_sql()})")
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
    if subject is not None:
        params += [subject, subject]
    if exclude_read_for is not None:
        params.append(exclude_read_for)
    rows = store.execute(sql, params).fetchall()
    return [SearchHit(message=r[0], score=float(r[1]), text=r[2], source=r[3], source_path=r[4],
                      sent_at=r[5], is_assistant=bool(r[6]), matched=sorted(r[7])) for r in rows]


# ---------------------------------------------------------------------------- in Python
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


__all__ = ["K1", "B", "STOPWORDS", "SearchHit", "tokenize", "is_variant", "bm25", "content_terms",
           "search_messages"]
