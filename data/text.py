"""Text as doxa stores and searches it: the tokeniser (in SQL and its Python twin) and the
fingerprint that tells copies of one message apart from new ones.

Both ingest (:mod:`.writer`, :mod:`.fast_ingest`) and search (:mod:`.search`,
:mod:`.subject_match`, :mod:`.question_ranking`) use these rules, so they live below both:
a term indexed at ingest is the term a query looks for, because one definition makes both.

**Tokens.** ``lower(text)`` split on ``[^\\p{L}\\p{N}]+`` (letters and digits of any script),
empty pieces dropped: :func:`tokens_sql` in DuckDB, :func:`words` in Python. Python's ``\\W``
is "not a letter, digit or _" in any script, so ``[\\W_]+`` is the same split; the lower-casing
is the simple one-to-one mapping DuckDB uses (tests/test_search.py checks the twins agree).

**Fingerprints.** A forwarded or quoted message ("Fwd: …", "> …") is the same statement again,
which adds nothing to its source's history (:func:`doxa.data.evidence.mark_copies_sql`). Texts
equal after :func:`normalise_text` share a fingerprint (the first 80 bits of SHA-1); a text
shorter than :data:`MIN_SHARED_FINGERPRINT_CHARS` ("ok", "yes") is too generic to be a copy,
so its fingerprint includes its source. :func:`fingerprint_sql` is its twin in DuckDB, for the texts
of :data:`PLAIN_TEXT` (tests/test_fast_ingest.py checks the twins agree on them).
"""

from __future__ import annotations

import hashlib
import re

#: The tokeniser of ingest (data/bookkeeping.py ``terms_sql``) and of queries: keep letters and digits of any script.
TOKEN_SPLIT = r"[^\p{L}\p{N}]+"
#: The same split as :data:`TOKEN_SPLIT`, in Python's ``re`` (see the module docstring).
_WORD_SPLIT = re.compile(r"[\W_]+")

_FORWARD_PREFIX = re.compile(r"^\s*((fwd?|re|aw|wg)\s*:\s*)+", re.IGNORECASE)
_QUOTE_MARKS = re.compile(r"(?m)^\s*(>\s*)+")
_SPACE = re.compile(r"\s+")
#: Texts shorter than this ("ok", "yes") are too generic to be copies of each other:
#: their fingerprint includes the source.
MIN_SHARED_FINGERPRINT_CHARS = 12


def tokens_sql(text_sql: str) -> str:
    """SQL for the token list of a text expression (empty tokens removed)."""
    return (f"list_filter(regexp_split_to_array(lower({text_sql}), '{TOKEN_SPLIT}'), "
            "x -> length(x) > 0)")


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


def normalise_text(text: str) -> str:
    """Text with forwarding prefixes, quote marks, case and spacing removed."""
    text = _FORWARD_PREFIX.sub("", text)
    text = _QUOTE_MARKS.sub("", text)
    return _SPACE.sub(" ", text).strip().lower()


def fingerprint(text: str, source: str) -> str:
    """Content fingerprint: copies of one message (forwarded, quoted) share it."""
    normal = normalise_text(text)
    if len(normal) < MIN_SHARED_FINGERPRINT_CHARS:
        normal = f"{source}\x1f{normal}"
    return hashlib.sha1(normal.encode("utf-8")).hexdigest()[:20]


#: The texts (an RE2 pattern) whose fingerprint :func:`fingerprint_sql` computes exactly as
#: :func:`fingerprint` does: in printable ASCII plus tab, newline and carriage return, Python's ``\s``,
#: ``lower`` and ``strip`` agree with the classes spelled out there. Other texts are fingerprinted in Python.
PLAIN_TEXT = r"^[\x{20}-\x{7e}\t\n\r]*$"
#: White space of a :data:`PLAIN_TEXT` text: Python's ``\s`` there.
_PLAIN_SPACE = r"[ \t\n\r]"


def normalise_sql(text_sql: str) -> str:
    """SQL of :func:`normalise_text` of a text expression of :data:`PLAIN_TEXT`: its steps, each a
    regular expression of the same meaning on such texts."""
    ws = _PLAIN_SPACE
    normal = f"regexp_replace({text_sql}, '^{ws}*((fwd?|re|aw|wg){ws}*:{ws}*)+', '', 'i')"
    normal = f"regexp_replace({normal}, '(?m)^{ws}*(>{ws}*)+', '', 'g')"
    # every run of white space becomes one space: runs of two or more, and single tabs and line
    # breaks, are what changes (replacing each single space by itself cost twice as much)
    normal = f"lower(trim(regexp_replace({normal}, '{ws}{{2,}}|[\t\n\r]', ' ', 'g'), ' \t\n\r'))"
    return normal


def fingerprint_sql(normal_sql: str, source_sql: str) -> str:
    """SQL of :func:`fingerprint` of a text whose :func:`normalise_sql` is ``normal_sql`` (a column:
    computed once, it is read three times here), from a source expression."""
    return (f"CASE WHEN length({normal_sql}) < {MIN_SHARED_FINGERPRINT_CHARS} "
            f"THEN left(sha1({source_sql} || chr(31) || {normal_sql}), 20) ELSE left(sha1({normal_sql}), 20) END")


__all__ = ["TOKEN_SPLIT", "MIN_SHARED_FINGERPRINT_CHARS", "PLAIN_TEXT", "tokens_sql", "words", "normalise_text",
           "fingerprint", "normalise_sql", "fingerprint_sql"]
