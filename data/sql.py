"""SQL text helpers: values inlined as literals, and ``?`` templates bound with them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import numpy as np


def sql_literal(value: Any) -> str:
    """A SQL literal for ``value``.

    The read path inlines its few parameters instead of binding them: DuckDB's Python
    parameter binding imports pandas (0.5 s), which would triple `doxa belief`'s start-up.
    """
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, np.integer, np.floating)):
        return repr(float(value)) if isinstance(value, (float, np.floating)) else str(int(value))
    if isinstance(value, datetime):
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(sql_literal(v) for v in value) + "]::VARCHAR[]" if value and all(
            isinstance(v, str) for v in value) else "[" + ", ".join(sql_literal(v) for v in value) + "]"
    raise TypeError(f"cannot inline {type(value).__name__} into SQL")


def bind(sql: str, params: list[Any] | None) -> str:
    """Replace each ``?`` of ``sql`` by the literal of the next parameter (no ``?`` in doxa's string literals)."""
    if not params:
        return sql
    pieces = sql.split("?")
    if len(pieces) - 1 != len(params):
        raise ValueError(f"{len(pieces) - 1} placeholders but {len(params)} parameters")
    out = [pieces[0]]
    for value, piece in zip(params, pieces[1:]):
        out.append(sql_literal(value))
        out.append(piece)
    return "".join(out)
