"""Text from the store made safe for a terminal: the one output sanitiser every human printer uses.

Messages come from third parties (an email, a chat), question texts from the organizer model:
either can hold characters a terminal obeys instead of showing. ``\\x1b[2J`` clears the screen,
``\\x1b[32m`` paints a forged verdict green, ``\\r`` or a line break starts a fake line of output,
U+202E (right-to-left override) reverses what follows. :func:`printable` shows each such
character as an escape a person can read, ``\\x1b``, ``\\u202e``, ``\\n``, and leaves
every other character as it is; :func:`json_safe` does the same inside JSON text with JSON's own
escapes, so a parsed ``--json`` value is exactly the stored text.

The characters escaped: the control characters (C0, DEL and C1: category Cc), the format
characters (Cf: bidi marks and overrides U+200E/F, U+202A–E, U+2066–9, U+061C, zero-width
characters, the byte-order mark, tag characters), the line and paragraph separators U+2028/9,
and lone surrogates (bytes that were not UTF-8). A line break and a tab are escaped too, so
every text keeps to the one line its layout gives it; a whole document (the organizer's
instructions, a diff) keeps its line breaks and tabs (``multiline=True``). A backslash is left
as it is: a text holding the four characters ``\\x1b`` prints like an escaped ESC, and
``--json`` tells the two apart.

No import beyond ``re`` here: `doxa belief` prints through it on its fast path.
"""

from __future__ import annotations

import re

#: Every character a terminal may act on or hide, C0 (U+0000–U+001F) apart: Unicode 14's categories
#: Cc, Cf, Zl, Zp, Cs and the format characters Unicode 15 added at U+13439–U+1343F.
#: tests/test_terminal_safety.py checks the list against the running Python's Unicode data.
_REST = ("\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f"
         "\u2028-\u202e\u2060-\u2064\u2066-\u206f\ud800-\udfff\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
         "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f")
_PATTERNS = {"line": f"[\x00-\x1f{_REST}]",
             "document": f"[\x00-\x08\x0b-\x1f{_REST}]",  # keeps \t (0x09) and \n (0x0a)
             "json": f"[{_REST}]"}  # json.dumps escapes C0 itself
_compiled: dict[str, re.Pattern] = {}


def _pattern(kind: str) -> re.Pattern:
    # compiled on first need (half a millisecond), which most runs never have: see printable
    if kind not in _compiled:
        _compiled[kind] = re.compile(_PATTERNS[kind])
    return _compiled[kind]


_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match) -> str:
    char = match.group()
    code = ord(char)
    if char in _NAMED:
        return _NAMED[char]
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(value: object, *, multiline: bool = False) -> str:
    """``value`` as text a terminal shows as written: every unsafe character escaped (see the module)."""
    text = str(value)
    if text.isprintable():  # no control, format, separator or surrogate character: nothing to escape
        return text
    return _pattern("document" if multiline else "line").sub(_escape, text)


def _json_escape(match: re.Match) -> str:
    code = ord(match.group())
    if code < 0x10000:
        return f"\\u{code:04x}"
    high, low = divmod(code - 0x10000, 0x400)  # JSON spells a character past U+FFFF as a surrogate pair
    return f"\\u{0xd800 + high:04x}\\u{0xdc00 + low:04x}"


def json_safe(text: str) -> str:
    """Serialised JSON with every unsafe character JSON leaves raw written as a ``\\uXXXX`` escape.

    Such a character can only stand inside a JSON string, where the escape means the same
    character: ``json.loads`` gives back exactly what was serialised."""
    if text.isascii() and "\x7f" not in text:  # the usual case, at no cost to `doxa belief --json`
        return text
    return _pattern("json").sub(_json_escape, text)
