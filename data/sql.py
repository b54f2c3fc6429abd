"""SQL text helpers: values inlined as literals, and ``?`` templates bound with them.

This is the one place doxa turns a value into SQL text; everything else passes values
as parameters of a ``?`` template (tests/test_sql_quoting.py feeds both arbitrary text).
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import numpy as np


def sql_literal(value: Any) -> str:
    """A SQL literal for ``value``: the one place doxa turns a value into SQL text.

    The read path inlines its few parameters instead of binding them: DuckDB's Python
    parameter binding imports pandas, which would triple `doxa belief`'s start-up.
    Any text round-trips exactly (tests/test_sql_quoting.py feeds it arbitrary strings):
    quotes are doubled, and NUL, which ends a string inside DuckDB's parser, is spliced
    in with ``chr(0)``.
    """
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        number = float(value)
        # quoted: a bare 0.00022332116758564942 is a DECIMAL to DuckDB, and its cast to DOUBLE can round
        # to a neighbouring double; a string is parsed straight to the nearest double (the one repr names)
        return f"'{number!r}'::DOUBLE"
    if isinstance(value, datetime):
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    if isinstance(value, str):
        quoted = "'" + value.replace("'", "''") + "'"
        if "\x00" in value:
            quoted = "(" + " || chr(0) || ".join("'" + part.replace("'", "''") + "'"
                                                  for part in value.split("\x00")) + ")"
        return quoted
    if isinstance(value, (list, tuple)):
        items = ", ".join(sql_literal(v) for v in value)
        return f"[{items}]::VARCHAR[]" if value and all(isinstance(v, str) for v in value) else f"[{items}]"
    raise TypeError(f"cannot inline {type(value).__name__} into SQL")


def _placeholders(sql: str) -> list[int]:
    """Positions of the ``?`` placeholders of ``sql``: not those inside '…' strings, "…" names or comments."""
    found, i, n = [], 0, len(sql)
    while i < n:
        c = sql[i]
        if c in "'\"":
            end = sql.find(c, i + 1)
            while end != -1 and end + 1 < n and sql[end + 1] == c:  # a doubled quote stays inside
                end = sql.find(c, end + 2)
            i = n if end == -1 else end + 1
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end == -1 else end + 1
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            i = n if end == -1 else end + 2
        else:
            if c == "?":
                found.append(i)
            i += 1
    return found


def member_of(column: str, ids) -> tuple[str, Any]:
    """(SQL, parameter) that ``column`` is one of ``ids``: ``= ?`` for a single id, which DuckDB
    answers from the primary-key index (half the cold cost of ``doxa belief``'s queries)."""
    ids = list(ids)
    if len(ids) == 1:
        return f"{column} = ?", ids[0]
    return f"{column} IN (SELECT unnest(?))", ids


def bind(sql: str, params: list[Any] | None) -> str:
    """Put the literal of each parameter (:func:`sql_literal`) in place of its ``?`` of ``sql``."""
    if not params:
        return sql
    marks = _placeholders(sql)
    if len(marks) != len(params):
        raise ValueError(f"{len(marks)} placeholders but {len(params)} parameters")
    out, start = [], 0
    for mark, value in zip(marks, params):
        out.append(sql[start:mark])
        out.append(sql_literal(value))
        start = mark + 1
    out.append(sql[start:])
    return "".join(out)
