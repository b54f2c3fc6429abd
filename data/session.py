"""What the data layer's queries and writes need from an open store, and its one transaction.

:class:`Session` is a :class:`typing.Protocol`: the modules that work on a store (search,
evidence loading, question operations, ingest, …) annotate with it instead of with
:class:`doxa.data.store.Store`, so none of them imports the store module, not even for
type checking; the store sits above them and passes itself in. The import graph of
``data/`` is then layered with no cycle (tests/test_architecture.py counts
``TYPE_CHECKING`` imports too).

:func:`transaction` is the one place that writes ``BEGIN``/``COMMIT``/``ROLLBACK``: every
all-or-nothing write in ``data/`` runs its statements inside it.
"""

from __future__ import annotations

import contextlib
from datetime import datetime
from typing import TYPE_CHECKING, Any, ContextManager, Iterator, Protocol

import duckdb

if TYPE_CHECKING:
    from .evidence import Evidence, QuestionTable


class Session(Protocol):
    """An open doxa store as the data layer's functions use it (``Store`` is the one implementation)."""

    @property
    def con(self) -> duckdb.DuckDBPyConnection: ...

    def execute(self, sql: str, params: list[Any] | None = None) -> duckdb.DuckDBPyConnection: ...

    def reading(self) -> ContextManager[Any]: ...

    def writing(self) -> ContextManager[Any]: ...

    def use_one_thread(self, one: bool) -> None: ...

    def question_table(self, ids: list[str] | None = None, *, subjects: list[str] | None = None,
                       include_inactive: bool = False) -> QuestionTable: ...

    def load_evidence(self, at: datetime | None = None, question_ids: list[str] | None = None, *,
                      with_messages: bool = False, subjects: list[str] | None = None) -> Evidence: ...


@contextlib.contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """One DuckDB transaction on ``con``: committed when the block ends, rolled back (and the
    error raised again) when anything in it raises — an interrupt included, so a half-written
    batch never stays open on a connection that lives on."""
    con.execute("BEGIN")
    try:
        yield con
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


__all__ = ["Session", "transaction"]
