"""Which subjects a text names (ids, names, aliases), their labels, and their neighbours one relation out."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .connection import in_read_session
from .text import words

if TYPE_CHECKING:
    from .session import Session


#: A name or alias is looked at only when it contains a word of the task of at least two
#: letters, or is this short and contains a one-letter word of the task (initials such as
#: "J.R."): a substring test, so a task is matched against thousands of subjects without
#: tokenising every name. (An alias made only of one-letter words and longer than this is
#: never matched.)
SHORT_LABEL_CHARS = 6


@in_read_session
def match_subjects(store: "Session", text: str) -> list[dict[str, Any]]:
    """Subjects whose name, id, an alias or the first word of a name of several words appears in
    ``text``, as whole words in order ("Ava" names Ava Lopez, and Ava Zhou too: the organizer decides).

    Case and punctuation do not matter ("Maya's", "MAYA", "maya," all name Maya); a
    multi-word alias must appear as those words next to each other. Returns
    ``{"id", "name", "label"}`` per subject (``label``: the longest name that matched).
    """
    task = words(text)
    padded = " " + " ".join(task) + " "
    if not task:
        return []
    long_probes = sorted({t for t in task if len(t) >= 2}) or [" "]
    short_probes = sorted({t for t in task if len(t) == 1}) or [" "]
    rows = store.execute(
        f"""SELECT id, name, label FROM (
                SELECT id, name, unnest(list_concat([name, id], aliases,
                    -- people are named by their first name far more often than in full
                    CASE WHEN contains(trim(name), ' ') THEN [split_part(trim(name), ' ', 1)] ELSE [] END)) AS label
                FROM subjects)
            WHERE len(list_filter(?, w -> contains(lower(label), w))) > 0
               OR (length(label) <= {SHORT_LABEL_CHARS}
                   AND len(list_filter(?, w -> contains(lower(label), w))) > 0)""",
        [long_probes, short_probes],
    ).fetchall()
    found: dict[str, dict[str, Any]] = {}
    for sid, name, label in rows:
        key = " ".join(words(label))
        if key and f" {key} " in padded:
            best = found.get(sid)
            if best is None or len(key) > len(" ".join(words(best["label"]))):
                found[sid] = {"id": sid, "name": name, "label": label}
    return [found[k] for k in sorted(found)]


@in_read_session
def subject_labels(store: "Session", subject_ids: list[str]) -> dict[str, list[str]]:
    """Name, id and aliases of each of these subjects."""
    if not subject_ids:
        return {}
    rows = store.execute(
        "SELECT id, list_concat([name, id], aliases) FROM subjects WHERE list_contains(?, id)", [list(subject_ids)]
    ).fetchall()
    return {sid: list(labels) for sid, labels in rows}


def subject_label_terms(store: "Session", subject_ids: list[str]) -> set[str]:
    """Every term of the names, ids and aliases of these subjects."""
    return {w for labels in subject_labels(store, subject_ids).values() for label in labels for w in words(label)}


@in_read_session
def neighbours(store: "Session", subject_ids: list[str]) -> list[dict[str, Any]]:
    """Subjects one relation away from any of ``subject_ids`` (either direction), not among them.

    Each row: ``id``, ``name``, ``via`` (the named subject it hangs off), ``via_name``,
    ``kind`` (the relation) and ``forward`` (True when stored as via → id, i.e. "id is
    via's <kind>").
    """
    if not subject_ids:
        return []
    named = set(subject_ids)
    # two plain queries: a join with subjects on both ends plans and runs 3x slower
    edges = store.execute(
        "SELECT from_id, to_id, kind FROM relations WHERE list_contains(?, from_id) OR list_contains(?, to_id)",
        [sorted(named), sorted(named)],
    ).fetchall()
    rows = []
    for a, b, kind in edges:
        if a in named and b not in named:
            rows.append((b, a, kind, True))
        if b in named and a not in named:
            rows.append((a, b, kind, False))
    if not rows:
        return []
    names = dict(store.execute("SELECT id, name FROM subjects WHERE list_contains(?, id)",
                               [sorted({r[0] for r in rows} | {r[1] for r in rows})]).fetchall())
    return [{"id": i, "name": names.get(i, i), "via": v, "via_name": names.get(v, v), "kind": k, "forward": f}
            for i, v, k, f in sorted(set(rows))]
