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
so its fingerprint includes its source.
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


__all__ = ["TOKEN_SPLIT", "MIN_SHARED_FINGERPRINT_CHARS", "tokens_sql", "words", "normalise_text", "fingerprint"]
