"""Kept filter states: each question's filtered belief state, written after a fit or an ingest
and read back instead of filtering the question's whole history again (inference/read/states.py).

A state is usable for a read under parameter version ``v`` when it was computed under ``v``,
after the last change of its question's evidence (``evidence_epochs``) and after the last
merge, split or undo (the ``structure_epoch`` in ``meta``); every write that changes evidence
moves the epochs (:func:`doxa.data.bookkeeping.mark_evidence_changed`). A state is stored as the
bytes of its float64 vector, so it reads back bit for bit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .connection import in_read_session
from .evidence import QuestionTable
from .evidence_sql import _index_of
from .sql import member_of

if TYPE_CHECKING:
    from .session import Session


def _doubles_in_place(blobs) -> tuple[np.ndarray, np.ndarray]:
    """(every float64 of an Arrow binary column, read from its data buffer; where each blob starts in it)."""
    array = blobs.combine_chunks()
    if len(array) == 0:
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    _, offsets, data = array.buffers()
    offset_type = np.int64 if str(array.type) == "large_binary" else np.int32
    bounds = np.frombuffer(offsets, dtype=offset_type)[array.offset:array.offset + len(array) + 1]
    flat = np.frombuffer(data, dtype=np.uint8)[bounds[0]:bounds[-1]].view(np.float64)
    return flat, (bounds[:-1] - bounds[0]) // 8


@in_read_session
def evidence_epoch(store: "Session") -> int:
    """How many writes have changed evidence so far (see :func:`doxa.data.bookkeeping.mark_evidence_changed`)."""
    return int(store.con.execute("SELECT value FROM meta WHERE key = 'evidence_epoch'").fetchone()[0])


@in_read_session
def questions_changed_since(store: "Session", epoch: int) -> list[str] | None:
    """Active questions whose evidence changed after evidence epoch ``epoch``, in id order;
    None when a merge, split or undo came after it (then every question changed)."""
    structure = int(store.con.execute("SELECT value FROM meta WHERE key = 'structure_epoch'").fetchone()[0])
    if structure > epoch:
        return None
    return [q for (q,) in store.con.execute(
        """SELECT e.question FROM evidence_epochs e JOIN questions q ON q.id = e.question
           WHERE e.epoch > ? AND q.status = 'active' ORDER BY e.question""", [int(epoch)]).fetchall()]


# ``{scope}`` filters both tables before the join: filtered after it, a join over every
# question's epoch costs ten times as much in a one-question read (docs/measurements/2026-12-code-choices.md)
_VALID_STATES = """
    SELECT hash(b.question) AS h, b.state, octet_length(b.state) // 8 AS width,
           coalesce(b.last_t, 'NaN'::DOUBLE) AS last_t, b.n_evidence, b.n_settled
    FROM (SELECT * FROM belief_states {scope}) b
    LEFT JOIN (SELECT * FROM evidence_epochs {scope}) e ON e.question = b.question
    WHERE b.params_version = {version} AND b.epoch >= coalesce(e.epoch, 0)
      AND b.epoch >= (SELECT value::BIGINT FROM meta WHERE key = 'structure_epoch')"""


@in_read_session
def read(store: "Session", questions: QuestionTable, version: int) -> dict[str, np.ndarray]:
    """The usable kept states of ``questions`` under parameter version ``version``, in their order.

    ``found`` (Q,) says which have one; ``state`` (Q, K_max) is float64, bit for bit as written.
    """
    n_q, k_max = len(questions.ids), questions.k_max
    few = 0 < n_q <= 2000
    scope, ids = "", None
    if few:
        member, ids = member_of("question", questions.ids.tolist())
        scope = f"WHERE {member}"
    sql = _VALID_STATES.format(version=int(version), scope=scope)
    found = np.zeros(n_q, dtype=bool)
    out = {"found": found, "state": np.zeros((n_q, k_max)), "last_t": np.full(n_q, np.nan),
           "n_evidence": np.zeros(n_q, dtype=np.int64), "n_settled": np.zeros(n_q, dtype=np.int64),
           "base": np.full((n_q, k_max), np.nan)}
    if not n_q:
        return out
    if few:  # no pyarrow on `doxa belief`'s path
        cols = store.execute(sql, [ids] * 2).fetchnumpy()
        flat = np.frombuffer(b"".join(np.asarray(cols["state"], dtype=object).tolist()), dtype=np.float64)
        first = np.r_[0, np.cumsum(np.asarray(cols["width"], dtype=np.int64))[:-1]]
    else:  # every blob's bytes in one Arrow buffer, read in place: no Python object per state
        table = store.execute(sql).to_arrow_table()
        cols = {name: table[name].to_numpy() for name in table.column_names if name != "state"}
        flat, first = _doubles_in_place(table["state"])
    if not len(cols["h"]):
        return out
    row = _index_of(np.asarray(cols["h"], dtype=np.uint64), questions.id_hash)
    have = np.flatnonzero(row >= 0)
    rows = row[have]
    widths = np.asarray(cols["width"], dtype=np.int64)[rows]
    starts = first[rows].astype(np.int64)
    # a state of another shape is not this question's; twice its options: the state, then its base rates
    with_base = widths == 2 * questions.n_options[have]
    right = (widths == questions.n_options[have]) | with_base
    have, rows, starts, with_base = have[right], rows[right], starts[right], with_base[right]
    k = questions.n_options[have]
    inside = np.arange(k_max)[None, :] < k[:, None]
    cell = np.where(inside, starts[:, None] + np.arange(k_max)[None, :], 0)
    out["state"][have] = np.where(inside, flat[cell], 0.0) if len(flat) else 0.0
    if with_base.any():
        based = have[with_base]
        cell = np.where(inside[with_base], cell[with_base] + k[with_base][:, None], 0)
        out["base"][based] = np.where(inside[with_base], flat[cell], 0.0)
    found[have] = True
    out["last_t"][have] = np.asarray(cols["last_t"], dtype=np.float64)[rows]
    out["n_evidence"][have] = np.asarray(cols["n_evidence"], dtype=np.int64)[rows]
    out["n_settled"][have] = np.asarray(cols["n_settled"], dtype=np.int64)[rows]
    return out


def write(store: "Session", ids: np.ndarray, n_options: np.ndarray, state: np.ndarray, last_t: np.ndarray,
          n_evidence: np.ndarray, n_settled: np.ndarray, version: int, epoch: int, *,
          replace_all: bool = False, base: np.ndarray | None = None) -> None:
    """Keep filter states (one row per question; ``replace_all`` drops every other row). ``base``
    (Q, K_max): the base rates a state decays toward where they are its own (an open question's,
    which its evidence grows; NaN rows: the question's from the parameters), kept after the state
    in the same blob, which is then twice the options long."""
    import pyarrow as pa

    k = np.asarray(n_options, dtype=np.int64)
    rows = np.ascontiguousarray(state, dtype=np.float64)
    if base is None:
        blobs = [row[:n].tobytes() for row, n in zip(rows, k.tolist())]
    else:
        own = ~np.isnan(base[:, 0]) if len(base) else np.zeros(0, dtype=bool)
        blobs = [row[:n].tobytes() + (b[:n].astype(np.float64).tobytes() if mine else b"")
                 for row, b, n, mine in zip(rows, np.asarray(base, dtype=np.float64), k.tolist(), own.tolist())]
    last_t = np.asarray(last_t, dtype=np.float64)
    table = pa.table({
        "question": pa.array(np.asarray(ids, dtype=object).tolist(), pa.string()),
        "params_version": pa.array(np.full(len(k), int(version), dtype=np.int32)),
        "epoch": pa.array(np.full(len(k), int(epoch), dtype=np.int64)),
        "last_t": pa.array(last_t, pa.float64(), mask=np.isnan(last_t)),
        "state": pa.array(blobs, pa.binary()),
        "n_evidence": pa.array(np.asarray(n_evidence, dtype=np.int32)),
        "n_settled": pa.array(np.asarray(n_settled, dtype=np.int32)),
    })
    with store.writing():
        con = store.con
        con.register("_doxa_states", table)
        try:
            if replace_all:
                con.execute("DELETE FROM belief_states").fetchall()
                con.execute("INSERT INTO belief_states SELECT * FROM _doxa_states").fetchall()
            else:
                con.execute("""INSERT INTO belief_states SELECT * FROM _doxa_states
                               ON CONFLICT (question) DO UPDATE SET params_version = excluded.params_version,
                                   epoch = excluded.epoch, last_t = excluded.last_t, state = excluded.state,
                                   n_evidence = excluded.n_evidence, n_settled = excluded.n_settled""").fetchall()
        finally:
            con.unregister("_doxa_states")


__all__ = ["evidence_epoch", "questions_changed_since", "read", "write"]
