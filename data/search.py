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
digits of any script), done by the same SQL expression for documents and queries.

**Word variants.** With no stemmer, "allergies" would never find "allergic". A query
term also matches index terms of the same stem, by truncation (a cheap stemmer that
works for English and most European languages): two terms are variants when they share
their first :data:`STEM_CHARS` letters, or one is a prefix of the other and the shorter
has at least :data:`MIN_PREFIX_CHARS`. A variant counts :data:`VARIANT_WEIGHT` of an
exact occurrence in ``tf``; ``df`` counts documents with any variant.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:
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


def tokenize(store: "Store", text: str) -> list[str]:
    """The terms of ``text`` exactly as ingest indexes them (in order, with repeats)."""
    row = store.execute(f"SELECT {_tokens_sql('?')}", [text]).fetchone()
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


# ---------------------------------------------------------------------------- subjects
def match_subjects(store: "Store", text: str) -> list[dict[str, Any]]:
    """Subjects whose name, id or an alias appears in ``text``, as whole words in order.

    Case and punctuation do not matter ("Maya's", "MAYA", "maya," all name Maya); a
    multi-word alias must appear as those words next to each other. Returns
    ``{"id", "name", "label"}`` per subject (``label``: the longest name that matched).
    """
    rows = store.execute(
        f"""WITH task AS (SELECT ' ' || array_to_string({_tokens_sql('?')}, ' ') || ' ' AS words),
            labels AS (SELECT id, name, unnest(list_concat([name, id], aliases)) AS label FROM subjects),
            keyed AS (SELECT id, name, label, array_to_string({_tokens_sql('label')}, ' ') AS key FROM labels)
            SELECT id, name, arg_max(label, length(key)) FROM keyed, task
            WHERE length(key) > 0 AND contains(task.words, ' ' || key || ' ')
            GROUP BY id, name ORDER BY id""",
        [text],
    ).fetchall()
    return [{"id": i, "name": n, "label": label} for i, n, label in rows]


def subject_label_terms(store: "Store", subject_ids: list[str]) -> set[str]:
    """Every term of the names, ids and aliases of these subjects."""
    if not subject_ids:
        return set()
    rows = store.execute(
        f"""SELECT DISTINCT unnest({_tokens_sql('label')}) FROM
            (SELECT unnest(list_concat([name, id], aliases)) AS label FROM subjects WHERE list_contains(?, id))""",
        [list(subject_ids)],
    ).fetchall()
    return {r[0] for r in rows}


def neighbours(store: "Store", subject_ids: list[str]) -> list[dict[str, Any]]:
    """Subjects one relation away from any of ``subject_ids`` (either direction), not among them.

    Each row: ``id``, ``name``, ``via`` (the named subject it hangs off), ``via_name``,
    ``kind`` (the relation) and ``forward`` (True when stored as via → id, i.e. "id is
    via's <kind>").
    """
    if not subject_ids:
        return []
    rows = store.execute(
        """WITH named AS (SELECT unnest(?) AS id),
           edges AS (
               SELECT r.to_id AS id, r.from_id AS via, r.kind, true AS forward FROM relations r
               WHERE r.from_id IN (SELECT id FROM named)
               UNION ALL
               SELECT r.from_id AS id, r.to_id AS via, r.kind, false AS forward FROM relations r
               WHERE r.to_id IN (SELECT id FROM named))
           SELECT e.id, s.name, e.via, v.name, e.kind, e.forward
           FROM edges e JOIN subjects s ON s.id = e.id JOIN subjects v ON v.id = e.via
           WHERE e.id NOT IN (SELECT id FROM named)
           ORDER BY e.id, e.via, e.kind""",
        [list(subject_ids)],
    ).fetchall()
    return [{"id": i, "name": n, "via": v, "via_name": vn, "kind": k, "forward": bool(f)}
            for i, n, v, vn, k, f in rows]


# ---------------------------------------------------------------------------- questions
def rank_questions(
    store: "Store",
    terms: list[str],
    *,
    subject_ids: list[str] | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """Active questions scored by BM25 of ``terms`` against their text and kind.

    With ``subject_ids``, only those subjects' questions are scored, and they are the
    corpus the idf and average length come from (what distinguishes questions *within*
    the task's reach); without, every active question is. A question's document is its
    text plus its kind (``likes_loud_places`` → likes, loud, places). Every candidate is
    returned, matched or not (score 0), with the index terms that matched.
    """
    scope = "AND list_contains(?, subject)" if subject_ids is not None else ""
    params: list[Any] = [list(subject_ids)] if subject_ids is not None else []
    params.append(list(dict.fromkeys(terms)))
    top = "" if limit is None else f"LIMIT {int(limit)}"
    rows = store.execute(
        f"""WITH docs AS (
                SELECT id, subject, kind, text,
                       {_tokens_sql("text || ' ' || kind")} AS toks
                FROM questions WHERE status = 'active' {scope}),
            stats AS (SELECT greatest(count(*), 1)::DOUBLE AS n,
                             greatest(avg(len(toks)), 1)::DOUBLE AS avgdl FROM docs),
            qt AS (SELECT DISTINCT unnest(?) AS term),
            occ AS (SELECT id, unnest(toks) AS term FROM docs),
            hits AS (SELECT qt.term AS qterm, occ.id, occ.term,
                            {_variant_weight_sql('occ.term', 'qt.term')} AS w
                     FROM occ JOIN qt ON {_join_key('occ.term')} = {_join_key('qt.term')}
                     WHERE {_variant_sql('occ.term', 'qt.term')}),
            per_term AS (SELECT qterm, id, sum(w) AS tf, list(DISTINCT term) AS matched
                         FROM hits GROUP BY qterm, id),
            df AS (SELECT qterm, count(*)::DOUBLE AS df FROM per_term GROUP BY qterm),
            scored AS (
                SELECT p.id,
                       sum(ln(1 + (stats.n - df.df + 0.5) / (df.df + 0.5))
                           * p.tf * ({K1} + 1)
                           / (p.tf + {K1} * (1 - {B} + {B} * len(d.toks) / stats.avgdl))) AS score,
                       list_distinct(flatten(list(p.matched))) AS matched
                FROM per_term p JOIN df USING (qterm) JOIN docs d ON d.id = p.id, stats
                GROUP BY p.id)
            SELECT d.id, d.subject, d.kind, d.text, coalesce(sc.score, 0.0), coalesce(sc.matched, [])
            FROM docs d LEFT JOIN scored sc ON sc.id = d.id
            ORDER BY 5 DESC, d.id {top}""",
        params,
    ).fetchall()
    return [{"id": i, "subject": s, "kind": k, "text": t, "score": float(sc), "matched": sorted(m)}
            for i, s, k, t, sc, m in rows]


__all__ = ["K1", "B", "STOPWORDS", "SearchHit", "tokenize", "content_terms", "search_messages",
           "match_subjects", "subject_label_terms", "neighbours", "rank_questions"]
