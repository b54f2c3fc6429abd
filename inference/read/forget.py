"""`doxa forget` / ``mem.forget``: erase a message, a source or a subject, then read again without it.

What goes and how its bytes leave the disk is :mod:`doxa.data.erasure`'s; this verb runs it in
one write session that ends with the rewrite of the store file (nothing may be written through
the connection after it), removes the belief-cache entries kept beside the store, and reports
the beliefs that changed — read before the erasure and again after it, from the evidence that
remains, and removes what killed ingests staged in the temporary folder. Parameters learned from the
forgotten evidence stay until the next `doxa train`
(docs/design.md, "Erasure"), and the report says so.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from doxa.data import erasure
from doxa.data.belief_cache import clear_entries
from doxa.data.times import utc_now

if TYPE_CHECKING:
    from typing import Protocol

    from doxa.data.store import Store

    class Memory(Protocol):
        """What the verb needs of :class:`doxa.inference.read.memory.Memory` (which imports this module)."""

        store: Store

        def scored(self, question_ids: list[str] | None = None, at: datetime | str | None = None, *,
                   subjects: list[str] | None = None, act_at: float | None = None,
                   with_messages: bool = False) -> tuple[Any, Any]: ...

#: What the report says of the parameters (docs/design.md, "Erasure").
PARAMETERS_NOTE = ("learned parameters (source trust, base rates, change rates) still include what was forgotten "
                   "until the next `doxa train`, which learns without it")


@dataclass
class Forgotten:
    """What a forget removed (or, with ``dry_run``, would remove) and the beliefs it changed; the fields
    of :class:`doxa.data.erasure.ErasurePlan` as its ``to_dict`` names them, and what the verb adds."""

    kind: str
    id: str
    dry_run: bool
    #: the erasure record's id (None on a dry run)
    erasure: str | None
    #: the store file was rewritten: the removed bytes are no longer in it (False for ``:memory:``)
    rewritten: bool
    messages: list[str]
    questions: list[str]
    sources: list[str]
    emptied_sources: list[str]
    changed_questions: list[str]
    values: list[dict[str, str]]
    copies_kept: list[str]
    removed: dict[str, int]
    #: per question whose belief changed or that was removed: before and after ({top, p_top}; after None: removed)
    beliefs: list[dict[str, Any]] = field(default_factory=list)
    #: files and folders that killed ingests had staged in the temporary folder, removed
    staged_removed: int = 0
    note: str = PARAMETERS_NOTE

    @classmethod
    def of(cls, found: erasure.ErasurePlan, *, dry_run: bool, record: str | None = None, rewritten: bool = False,
           beliefs: list[dict[str, Any]] | None = None, staged_removed: int = 0) -> "Forgotten":
        return cls(dry_run=dry_run, erasure=record, rewritten=rewritten, beliefs=beliefs or [],
                   staged_removed=staged_removed, **found.to_dict())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _tops(memory: "Memory", question_ids: list[str], at: datetime) -> dict[str, dict[str, Any]]:
    if not question_ids:
        return {}
    found, _ = memory.scored(question_ids, at)
    return {b.question: {"top": b.top, "p_top": b.p_top} for b in found}


def forget(memory: "Memory", kind: str, target: str, *, reason: str | None = None, by: str = "user",
           dry_run: bool = False) -> Forgotten:
    """Forget ``kind`` (message, source or subject) ``target``; see the module docstring."""
    store = memory.store
    store.release()
    if store.is_open and not store.in_memory:
        raise erasure.ErasureError("forget rewrites the store file, so it runs in no open session: call it "
                                   "outside `with store.reading()/writing()`")
    at = utc_now()
    if dry_run:
        with store.reading():
            found = erasure.plan(store.con, kind, target)
            erasure.drop_plan_tables(store.con)
        return Forgotten.of(found, dry_run=True)
    with store.writing():
        preview = erasure.plan(store.con, kind, target)
        before = _tops(memory, preview.changed + preview.questions, at)
        found, record = erasure.erase(store.con, kind, target, by=by, reason=reason, at=at, planned=preview)
        rewritten = False
        if not store.in_memory:
            try:
                erasure.rewrite(store.con, store.file)  # the last use of this connection (see rewrite)
            except OSError as err:
                raise erasure.ErasureError(
                    f"{kind} {target} was removed from the store (erasure {record}), but rewriting the file "
                    f"failed ({err.strerror or err}): its bytes may stay on disk until `doxa forget --rewrite` "
                    "succeeds — free disk space or fix the folder's permissions, then run it") from err
            rewritten = True
    staged = 0
    if not store.in_memory:
        clear_entries(store.path)
    try:
        staged = erasure.remove_dead_staging()
    except OSError:
        pass  # a temporary folder it cannot list: nothing of this store's is known to be there
    after = _tops(memory, found.changed, utc_now())
    beliefs = [{"question": q, "before": before.get(q), "after": after.get(q) if q not in found.questions else None,
                "removed": q in found.questions} for q in sorted(set(found.changed) | set(found.questions))]
    return Forgotten.of(found, dry_run=False, record=record, rewritten=rewritten, beliefs=beliefs,
                        staged_removed=staged)


def rewrite_pending(memory: "Memory") -> dict[str, Any]:
    """Rewrite the store file now (`doxa forget --rewrite`): finishes erasures whose rewrite failed (a full
    disk), so that their bytes leave the file. Returns how many erasures it finished and the file's size."""
    store = memory.store
    store.release()
    if store.in_memory:
        return {"rewritten": 0, "bytes": 0}
    with store.writing():
        pending = erasure.pending_rewrite(store.con)
        try:
            size = erasure.rewrite(store.con, store.file)
        except OSError as err:
            raise erasure.ErasureError(f"rewriting the store file failed ({err.strerror or err}): free disk space "
                                       "(the rewrite needs room for a copy of the store) or fix the folder's "
                                       "permissions, then run `doxa forget --rewrite` again") from err
    clear_entries(store.path)
    return {"rewritten": pending, "bytes": size}


def erasures(memory: "Memory") -> list[dict[str, Any]]:
    """Every erasure record, oldest first (`doxa forget --list`)."""
    with memory.store.reading():
        return erasure.erasures(memory.store.con)


__all__ = ["Forgotten", "forget", "rewrite_pending", "erasures", "PARAMETERS_NOTE"]
