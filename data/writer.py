"""Second ingest pass: resolve references, refuse edits of stored records, bulk-insert in one transaction.

Per-record work here is plain attribute access on validated models; the writes are
Arrow tables inserted with one ``INSERT … SELECT`` per table.

Why one module of ~530 lines: :func:`write_batch` checks every reference of a file against
the file itself and the store in one pass, so that all problems come back together with
their lines; its checks share the file's maps of ids, and a split would pass them around.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

import duckdb
import pyarrow as pa

from . import ingest_rules, models
from .bookkeeping import complete_readings, insert_terms, mark_evidence_changed, settle_copies
from .errors import Problem, Problems
from .ingest import IngestError, ParsedBatch
from .operation_records import SettlementOption
from .session import transaction
from .sql import sql_literal
from .text import fingerprint
from .times import utc_now

NEVER_EDITED = "records are never edited; use a new id"
#: A probability a reading of an open question does not give: the option is not named (as one past its list's end).
NOT_NAMED = float("nan")
#: An ingest gives at most this many look-alike warnings of one kind; the rest are counted.
MAX_WARNINGS = 20


def look_alike_warnings(con, table: str, new_ids_sql: str, params: list | None = None) -> list[str]:
    """Warnings for new ids of ``table`` (``subjects`` or ``questions``) that look like another one:
    the same skeleton (lower case, Cyrillic, Greek and full-width look-alikes made Latin: ``maya``,
    ``Maya`` and ``m\u0430ya``) as a stored id or an earlier new one. ``new_ids_sql``: a query of
    the new ids (column ``id``, none stored yet). A warning, not a refusal: two subjects may really
    differ only in case. Both ingest paths call it before they write."""
    if not con.execute(f"SELECT EXISTS ({new_ids_sql})", params).fetchone()[0]:
        return []  # nothing new: the stored ids are not read at all
    skeleton = (f"translate(lower(id), {sql_literal(models.LOOK_ALIKES_FROM)}, "
                f"{sql_literal(models.LOOK_ALIKES_TO)})")
    rows = con.execute(f"""
        WITH new AS (SELECT DISTINCT id, {skeleton} AS k FROM ({new_ids_sql})),
             stored AS (SELECT id, {skeleton} AS k FROM {table} WHERE {skeleton} IN (SELECT k FROM new))
        SELECT n.id, list_sort(list(DISTINCT o.id)) FROM new n
        JOIN (SELECT id, k, true AS old FROM stored UNION ALL SELECT id, k, false FROM new) o
          ON o.k = n.k AND o.id <> n.id AND (o.old OR o.id < n.id)
        GROUP BY n.id ORDER BY n.id""", params).fetchall()
    what = table.removesuffix("s")
    warnings = [f"new {what} id {new!r} looks like {', '.join(map(repr, like))} (only case or look-alike letters "
                f"differ): if they are one {what}, use one id" for new, like in rows[:MAX_WARNINGS]]
    if len(rows) > MAX_WARNINGS:
        warnings.append(f"… and {len(rows) - MAX_WARNINGS} more new {what} ids that look like others")
    return warnings


def _existing(con, table: str, ids: set[str], columns: str = "id") -> dict[str, tuple]:
    if not ids:
        return {}
    rows = con.execute(
        # IN (SELECT unnest) is a hash semi-join; list_contains scans the list for every row
        # (docs/measurements/2026-12-code-choices.md: sixty times slower on a large table)
        f"SELECT id, {columns} FROM {table} WHERE id IN (SELECT unnest(?::VARCHAR[]))", [sorted(ids)]
    ).fetchall()
    return {r[0]: tuple(r[1:]) for r in rows}


#: An unknown id is answered with at most this many of the closest known ones.
KNOWN_SHOWN = 5


def _known(con, table: str, name: str, also: set[str]) -> str:
    """' (known: 'a', 'b', … of N)': the ids closest to ``name``, so a typo's fix is in the message."""
    rows = con.execute(
        f"SELECT id, count(*) OVER () FROM {table} ORDER BY jaro_winkler_similarity(id, ?) DESC, id LIMIT ?",
        [name, KNOWN_SHOWN]).fetchall()
    closest = [r[0] for r in rows] or sorted(also)[:KNOWN_SHOWN]
    total = rows[0][1] if rows else len(also)
    if not closest:
        return f" (there are no {table} yet)"
    more = f", … {total} in all" if total > len(closest) else ""
    return f" (known {table}, closest first: {', '.join(repr(c) for c in closest)}{more})"


def _dedupe(items, key, problems: Problems, what: str, same):
    """Keep the first record per key; a later record with the same key must be identical."""
    kept: dict[Any, tuple[int, Any]] = {}
    for line, record in items:
        k = key(record)
        if k in kept:
            first_line, first = kept[k]
            if not same(first, record):
                problems.add(line, f"{what} {k!r} was already given differently on line {first_line}",
                             NEVER_EDITED)
            continue
        kept[k] = (line, record)
    return list(kept.values())


def _subjects(items, stored: dict[str, tuple], problems: Problems):
    """Apply the subject rule (see :func:`write_batch`) to this file's subject records.

    Returns ``(new, updated)``: records of new ids, and ``(id, name, aliases)`` of stored
    (or earlier-in-file) subjects that gain aliases.
    """
    current: dict[str, tuple[int | None, str, list[str]]] = {
        sid: (None, name, list(aliases)) for sid, (name, aliases) in stored.items()}
    new_ids: list[str] = []
    for line, r in items:
        before = current.get(r.id)
        if before is None:
            current[r.id] = (line, r.name, list(r.aliases))
            new_ids.append(r.id)
            continue
        first_line, name, aliases = before
        where = f"on line {first_line}" if first_line is not None else "in the store"
        if r.name != name:
            problems.add(line, f"subject {r.id!r} is named {name!r} {where}, not {r.name!r}",
                         f"a subject keeps its name: give {r.name!r} as one of its aliases", "name")
            continue
        dropped = [a for a in aliases if a not in r.aliases]
        if dropped:
            problems.add(line, f"subject {r.id!r} would lose the aliases {dropped} it has {where}",
                         "aliases are only ever added: list every alias it has, then the new ones", "aliases")
            continue
        added = [a for a in r.aliases if a not in aliases]
        if added:
            current[r.id] = (first_line if first_line is not None else line, name, aliases + added)
    new = [(sid, current[sid][1], current[sid][2]) for sid in new_ids]
    updated = [(sid, name, aliases) for sid, (_, name, aliases) in current.items()
               if sid in stored and list(stored[sid][1]) != aliases]
    return new, updated


def write_batch(con: duckdb.DuckDBPyConnection, batch: ParsedBatch,
                extra_writers: Mapping[str, "ExtraWriter"] | None = None, *, also=None,
                changes: dict | None = None, warnings: list[str] | None = None) -> dict[str, int]:
    """Check every reference and edit rule of a parsed file, then write it in one transaction.

    ``warnings``, when given, receives what a person should hear of an accepted file: new subject
    and question ids that look like others (:func:`look_alike_warnings`).

    ``changes``, when given, receives what the write changed: ``questions`` whose evidence
    changed and ``structure`` (a merge, split or undo), as :func:`mark_evidence_changed` records them.

    ``extra_writers`` writes record types beyond the core ones (the organizer's operations).
    ``also(con)``, when given, runs inside that transaction after the rows are written (the state of
    a remembered message commits or rolls back with its records).

    The problems of both passes (each line on its own, then references) are reported
    together, sorted by line. Records already stored unchanged are skipped. Apart from
    subjects, a record that would change a stored one is refused.

    **The subject rule.** A subject record whose id is already stored (or given earlier
    in the same file) must keep that subject's name and every one of its aliases; it
    may add aliases. The added aliases are written and reported as
    ``subjects_updated``; an identical record is nothing new; a different name or a
    missing alias is refused (to rename, add the new name as an alias).
    """
    problems = Problems(batch.problems)
    by = batch.by_type
    broken = batch.broken_ids
    eq = lambda a, b: a == b  # noqa: E731 - records are frozen pydantic models

    sources = _dedupe(by.get("source", []), lambda r: r.id, problems, "source", eq)
    questions = _dedupe(by.get("question", []), lambda r: r.id, problems, "question", eq)
    messages = _dedupe(by.get("message", []), lambda r: r.id, problems, "message", eq)
    readings = _dedupe(by.get("reading", []), lambda r: (r.message, r.question, r.reader), problems, "reading", eq)
    instructions = _dedupe(by.get("instruction", []), lambda r: r.id, problems, "instruction", eq)
    relations = by.get("relation", [])
    settlements = _dedupe(by.get("settlement", []), lambda r: (r.question, r.at, r.answer), problems,
                          "settlement of", eq)
    rejections = _dedupe(by.get("rejection", []), lambda r: (r.question, r.answer, r.at), problems,
                         "rejection of", eq)
    params = _dedupe(by.get("params", []), lambda r: r.version, problems, "parameter version",
                     lambda a, b: a.stored_body() == b.stored_body())
    others = {t: v for t, v in by.items() if t not in {
        "subject", "source", "question", "message", "reading", "instruction", "relation", "settlement", "rejection",
        "params"}}

    # --- what the store already holds, for the ids this batch touches -------------------
    subject_records = by.get("subject", [])
    stored_subjects = _existing(con, "subjects", {r.id for _, r in subject_records}, "name, aliases")
    new_subjects, updated_subjects = _subjects(subject_records, stored_subjects, problems)
    subject_ids = {r.id for _, r in subject_records} | broken.get("subject", set())
    wanted_subjects = ({r.subject for _, r in questions if r.subject}
                       | {r.from_ for _, r in relations} | {r.to for _, r in relations}
                       | {r.subject for _, r in instructions if r.subject})
    known_subjects = subject_ids | set(_existing(con, "subjects", wanted_subjects - subject_ids, "name"))

    stored_sources = _existing(con, "sources", {r.id for _, r in sources}, "layers, trust")
    for line, r in sources:
        old = stored_sources.get(r.id)
        if old is not None and (list(old[0]) != r.layers or old[1] != r.trust):
            problems.add(line, f"source {r.id!r} is stored with layers {list(old[0])} and trust {old[1]}",
                         "sources are never edited; use a new source id")
    source_ids = {r.id for _, r in sources}
    msg_sources = {r.source for _, r in messages} - source_ids
    known_sources = source_ids | set(_existing(con, "sources", msg_sources))

    stored_questions = _existing(con, "questions", {r.id for _, r in questions},
                                 "options, kind, shape, subject, text, is_open")
    for line, r in questions:
        old = stored_questions.get(r.id)
        if old is None:
            continue
        options, kind, shape, subject, text, is_open = old
        options = list(options)
        # an open question's options grow: the record it was written with (or opened from) lists a prefix
        same_options = options == r.options or (is_open and options[:len(r.options)] == r.options)
        if not same_options or kind != r.kind:
            problems.add(line, f"question {r.id!r} is stored with kind {kind!r} and options {options}",
                         "values join an open question by option_added records (`doxa add-option`); else use "
                         "a new question id, or the organizer's merge/split operations" if is_open else
                         "use a new question id, or the organizer's merge/split operations")
        elif r.open and not is_open:
            problems.add(line, f"question {r.id!r} is stored closed (its options are all its answers)",
                         f"open it with a question_opened record (`doxa open {r.id}`)", "open")
        else:
            stored = {"shape": shape, "subject": subject, "text": text}
            differ = [name for name, value in stored.items() if getattr(r, name) != value]
            if differ:
                problems.add(line, f"question {r.id!r} is stored with another {differ[0]} "
                                   f"({stored[differ[0]]!r})",
                             "questions are never edited: give the new wording its own question id "
                             "(and `doxa merge` the two if they ask the same)", differ[0])
    # each question's options as this file leaves them (a stored one's as stored), and whether it is open
    question_options = {r.id: list(stored_questions[r.id][0]) if r.id in stored_questions else list(r.options)
                        for _, r in questions}
    question_open = {r.id: bool(stored_questions[r.id][5]) if r.id in stored_questions else r.open
                     for _, r in questions}
    # the questions this file's splits create may be named by its other records (as `doxa export` writes a
    # store whose new questions were read after the split); the split, run after them, refuses an id taken
    for _, split in by.get("question_split", []):
        for q in split.into:
            question_options.setdefault(q.id, list(q.options))
            question_open.setdefault(q.id, q.open)
    added_values = by.get("option_added", [])
    opened = by.get("question_opened", [])
    referenced_q = ({r.question for _, r in readings} | {r.question for _, r in settlements}
                    | {r.question for _, r in rejections} | {r.question for _, r in added_values}
                    | {r.question for _, r in opened}
                    | {q for _, r in by.get("question_merge", []) for q in (r.into, r.from_)}
                    | {r.rests_on["question"] for _, r in instructions if r.rests_on}) - set(question_options)
    for qid, (options, _kind, _shape, is_open) in _existing(con, "questions", referenced_q,
                                                            "options, kind, shape, is_open").items():
        question_options[qid] = list(options)
        question_open[qid] = bool(is_open)
    for _, r in opened:  # opened by this file (the operation itself checks that it may be)
        if r.question in question_open:
            question_open[r.question] = True
    implied = _values_added(question_options, question_open, added_values, settlements,
                            by.get("question_merge", []), by.get("undo", []))
    known_q = lambda qid: _known(con, "questions", qid, set(question_options))  # noqa: E731
    known_s = lambda sid: _known(con, "subjects", sid, known_subjects)  # noqa: E731
    broken_questions = broken.get("question", set())

    stored_messages = _existing(con, "messages", {r.id for _, r in messages}, "source, sent_at, text")
    for line, r in messages:
        old = stored_messages.get(r.id)
        if old is not None and (old[0] != r.source or old[1] != r.sent_at or old[2] != r.text):
            problems.add(line, f"message {r.id!r} is stored with other content",
                         "evidence is never edited; give the new message its own id")
    message_ids = {r.id for _, r in messages} | broken.get("message", set())
    missing_msgs = {r.message for _, r in readings} - message_ids
    message_ids |= set(_existing(con, "messages", missing_msgs, "source"))

    stored_instructions = _existing(con, "instructions", {r.id for _, r in instructions},
                                    "subject, text, given_at, rests_on_question, rests_on_answer")
    for line, r in instructions:
        old = stored_instructions.get(r.id)
        rests = (r.rests_on["question"], r.rests_on["answer"]) if r.rests_on else (None, None)
        if old is not None and old != (r.subject, r.text, r.at, *rests):
            problems.add(line, f"instruction {r.id!r} is stored with other content (text {old[1]!r})",
                         "instructions are never edited: give the new instruction its own id")

    stored_readings: dict = {}
    reading_keys = [(r.message, r.question, r.reader) for _, r in readings]
    if reading_keys:
        rows = con.execute(
            """SELECT message, question, reader, probs, unclear, unrelated, one_off, unlisted, changed FROM readings
               WHERE message IN (SELECT unnest(?::VARCHAR[]))""", [sorted({k[0] for k in reading_keys})]
        ).fetchall()
        stored_readings = {(m, q, rd): (list(p), u1, u2, o, ul, ch) for m, q, rd, p, u1, u2, o, ul, ch in rows}

    # --- references, line by line --------------------------------------------------------
    def unknown_subject(line: int, sid: str, where: str = "", field_name: str = "subject") -> None:
        problems.add(line, f"unknown subject {sid!r}{where}", "add a subject record for it first", field_name)

    for line, r in questions:
        if r.subject and r.subject not in known_subjects:
            unknown_subject(line, r.subject, known_s(r.subject))
    for line, r in relations:
        for end, name in ((r.from_, "from"), (r.to, "to")):
            if end not in known_subjects:
                unknown_subject(line, end, " in relation", name)
    for line, r in instructions:
        if r.subject and r.subject not in known_subjects:
            unknown_subject(line, r.subject, known_s(r.subject))
        if r.rests_on:
            opts = question_options.get(r.rests_on["question"])
            if opts is None:
                if r.rests_on["question"] not in broken_questions:
                    problems.add(line, f"rests_on names unknown question {r.rests_on['question']!r}"
                                       f"{known_q(r.rests_on['question'])}",
                                 "add the question record first, or drop rests_on", "rests_on.question")
            elif r.rests_on["answer"] not in opts:
                problems.add(line, f"rests_on answer {r.rests_on['answer']!r} is not an option of "
                                   f"{r.rests_on['question']!r}", f"options are {opts}", "rests_on.answer")
    broken_sources = broken.get("source", set())
    for line, r in messages:
        if r.source not in known_sources and r.source not in broken_sources:
            problems.add(line, f"unknown source {r.source!r}", "add a source record (with its layers) first", "source")

    reading_rows: list[tuple] = []
    for line, r in readings:
        opts = question_options.get(r.question)
        if r.message not in message_ids:
            problems.add(line, f"unknown message {r.message!r}", "ingest the message before its readings", "message")
            continue
        if opts is None:
            if r.question not in broken_questions:
                problems.add(line, f"unknown question {r.question!r}", "add a question record first", "question")
            continue
        keys = set(r.probs)
        if question_open[r.question]:
            extra = [o for o in r.probs if o not in opts]
            if extra:
                problems.add(line, f"probs name {extra}, which are not options of the open question {r.question!r} "
                                   f"(options {opts})",
                             f"add each value first (an option_added record, `doxa add-option {r.question} VALUE`), "
                             "or give its mass to unlisted", "probs")
                continue
        elif r.unlisted:
            problems.add(line, f"unlisted is {r.unlisted!r}, but {r.question!r} is a closed question (its options "
                               "are all its answers)",
                         f"put that mass in unclear, or open the question first (`doxa open {r.question}`)",
                         "unlisted")
            continue
        elif keys != set(opts):
            missing = [o for o in opts if o not in keys]
            extra = sorted(keys - set(opts))
            detail = []
            if missing:
                detail.append(f"missing {missing}")
            if extra:
                detail.append(f"not options of {r.question!r}: {extra}")
            problems.add(line, f"probs must cover exactly the options {opts} ({'; '.join(detail)})",
                         "give one probability per option of the question", "probs")
            continue
        probs = [float(r.probs[o]) if o in r.probs else NOT_NAMED for o in opts]
        old = stored_readings.get((r.message, r.question, r.reader))
        if old is not None:
            # the same reading names the same options with the same numbers: an option added since is past
            # the stored list's end (or NaN), not named either way
            named = {o: p for o, p in zip(opts, old[0]) if not math.isnan(p)}
            if named != {o: float(p) for o, p in r.probs.items()} or old[1:] != (
                    r.unclear, r.unrelated, r.one_off, r.unlisted, r.changed):
                problems.add(line, f"a reading of {r.message!r} for {r.question!r} by {r.reader!r} is stored "
                                   "with other values",
                             "readings are never edited; use a new reader name or version")
            continue
        reading_rows.append((r.message, r.question, r.reader, r.reader_version, probs,
                             r.unclear, r.unrelated, r.one_off, r.unlisted, r.changed))

    for kind, items in (("settlement", settlements), ("rejection", rejections)):
        for line, r in items:
            opts = question_options.get(r.question)
            if opts is None:
                if r.question not in broken_questions:
                    problems.add(line, f"unknown question {r.question!r} in {kind}{known_q(r.question)}",
                                 "add a question record first",
                                 "question")
            elif r.answer not in opts:
                opening = (f" (a value of an open question is added by naming it: open {r.question!r} first, "
                           f"`doxa open {r.question}`)" if kind == "settlement" else "")
                problems.add(line, f"{kind} answer {r.answer!r} is not an option of {r.question!r}",
                             f"options are {opts}{opening}", "answer")
    _check_settlements(con, settlements, problems)
    _check_rejections(con, rejections, question_options, question_open, problems)

    writers = extra_writers or {}
    extra_writers = []
    if implied:  # a settlement naming a new value of an open question adds it, as an option_added of its own
        others = {**others, "option_added": [*others.get("option_added", []), *implied]}
    for type_name, items in others.items():
        handler = writers.get(type_name)
        if handler is None:
            for line, _ in items:
                problems.add(line, f"record type {type_name!r} has no writer")
            continue
        extra_writers.append((handler, items))
        handler.check(con, items, batch, problems)

    new_params = _check_params(con, params, problems)

    if problems:
        raise IngestError(list(problems), total=problems.total)
    if warnings is not None:
        warnings += look_alike_warnings(con, "subjects", "SELECT unnest(?::VARCHAR[]) AS id",
                                        [[sid for sid, _, _ in new_subjects]])
        warnings += look_alike_warnings(con, "questions", "SELECT unnest(?::VARCHAR[]) AS id",
                                        [[r.id for _, r in questions if r.id not in stored_questions]])

    # --- write --------------------------------------------------------------------------
    counts: dict[str, int] = {}
    with transaction(con):
        if new_subjects:
            counts["subjects"] = _insert(con, "subjects", {
                "id": [sid for sid, _, _ in new_subjects], "name": [name for _, name, _ in new_subjects],
                "aliases": pa.array([aliases for _, _, aliases in new_subjects], pa.list_(pa.string())),
            }, conflict="ON CONFLICT DO NOTHING")
        if updated_subjects:
            for sid, _name, aliases in updated_subjects:  # a few per file: aliases are added by hand
                con.execute("UPDATE subjects SET aliases = ?::VARCHAR[] WHERE id = ?", [aliases, sid]).fetchall()
            counts["subjects_updated"] = len(updated_subjects)
        if relations:
            counts["relations"] = _insert(con, "relations", {
                "from_id": [r.from_ for _, r in relations], "to_id": [r.to for _, r in relations],
                "kind": [r.kind for _, r in relations]}, conflict="ON CONFLICT DO NOTHING")
        if sources:
            counts["sources"] = _insert(con, "sources", {
                "id": [r.id for _, r in sources],
                "layers": pa.array([r.layers for _, r in sources], pa.list_(pa.string())),
                "trust": pa.array([r.trust for _, r in sources], pa.float64()),
                "is_assistant": [r.is_assistant for _, r in sources]}, conflict="ON CONFLICT DO NOTHING")
        if questions:
            counts["questions"] = _insert(con, "questions", {
                "id": [r.id for _, r in questions], "subject": [r.subject for _, r in questions],
                "kind": [r.kind for _, r in questions], "text": [r.text for _, r in questions],
                "shape": [r.shape for _, r in questions],
                "options": pa.array([r.options for _, r in questions], pa.list_(pa.string())),
                "created_by": pa.array([r.created_by for _, r in questions], pa.string()),
                "instructions_version": pa.array([r.instructions_version for _, r in questions], pa.int32()),
                "is_open": pa.array([r.open for _, r in questions], pa.bool_())},
                conflict="ON CONFLICT DO NOTHING")
        if messages:
            new_msgs = [(line, r) for line, r in messages if r.id not in stored_messages]
            if new_msgs:
                table = {
                    "id": [r.id for _, r in new_msgs], "source": [r.source for _, r in new_msgs],
                    "sent_at": pa.array([r.sent_at for _, r in new_msgs], pa.timestamp("us")),
                    "received_at": pa.array([r.received_at for _, r in new_msgs], pa.timestamp("us")),
                    "text": [r.text for _, r in new_msgs],
                    "fingerprint": [fingerprint(r.text, r.source) for _, r in new_msgs]}
                counts["messages"] = _insert(con, "messages", table, conflict="ON CONFLICT DO NOTHING")
                _index_terms(con, table["id"], table["text"])
        if reading_rows:
            cols = list(zip(*reading_rows))
            counts["readings"] = _insert(con, "readings", {
                "message": list(cols[0]), "question": list(cols[1]), "reader": list(cols[2]),
                "reader_version": list(cols[3]),
                "probs": pa.array(list(cols[4]), pa.list_(pa.float64())),
                "unclear": list(cols[5]), "unrelated": list(cols[6]), "one_off": list(cols[7]),
                "unlisted": pa.array(list(cols[8]), pa.float64()), "changed": pa.array(list(cols[9]), pa.float64())},
                conflict="ON CONFLICT DO NOTHING")
        if settlements:
            counts["settlements"] = _insert(con, "settlements", {
                "question": [r.question for _, r in settlements], "answer": [r.answer for _, r in settlements],
                "settled_at": pa.array([r.at for _, r in settlements], pa.timestamp("us")),
                "how": [r.how for _, r in settlements], "settled_by": [r.by for _, r in settlements],
                "note": pa.array([r.note for _, r in settlements], pa.string()),
                "p_before": pa.array([r.p_before for _, r in settlements], pa.float64()),
                "params_version": pa.array([r.params_version for _, r in settlements], pa.int32())},
                conflict="ON CONFLICT DO NOTHING")
        if rejections:
            counts["rejections"] = _insert(con, "rejections", {
                "question": [r.question for _, r in rejections], "answer": [r.answer for _, r in rejections],
                "rejected_at": pa.array([r.at for _, r in rejections], pa.timestamp("us")),
                "rejected_by": [r.by for _, r in rejections]}, conflict="ON CONFLICT DO NOTHING")
        if instructions:
            counts["instructions"] = _insert(con, "instructions", {
                "id": [r.id for _, r in instructions], "subject": [r.subject for _, r in instructions],
                "text": [r.text for _, r in instructions],
                "given_at": pa.array([r.at for _, r in instructions], pa.timestamp("us")),
                "given_by": [r.by for _, r in instructions],
                "rests_on_question": [r.rests_on["question"] if r.rests_on else None for _, r in instructions],
                "rests_on_answer": [r.rests_on["answer"] if r.rests_on else None for _, r in instructions]},
                conflict="ON CONFLICT DO NOTHING")
        structure, by_ops = False, set()
        if new_params:  # a new version: every kept state was computed under another one
            counts["params"] = _insert(con, "params", {
                "version": pa.array([r.version for _, r in new_params], pa.int32()),
                "created_at": pa.array([r.created_at or utc_now() for _, r in new_params], pa.timestamp("us")),
                "body": [json.dumps(r.stored_body()) for _, r in new_params]}, conflict="ON CONFLICT DO NOTHING")
            structure = True
        for handler, items in extra_writers:
            for name, n in handler.write(con, items).items():
                counts[name] = counts.get(name, 0) + n
        for handler in {id(h): h for h, _ in extra_writers}.values():
            questions_changed, structural = handler.changed()
            by_ops |= questions_changed
            structure = structure or structural
        written = {row[1] for row in reading_rows if question_open[row[1]]}
        _check_option_order(con, question_options, {r.question: line for line, r in reversed(readings)
                                                    if r.question in written})
        complete_readings(con)
        if also is not None:
            also(con)
        touched = ({row[1] for row in reading_rows} | {r.question for _, r in settlements}
                   | {r.question for _, r in rejections} | by_ops | settle_copies(con))
        mark_evidence_changed(con, touched, structure=structure)
    if changes is not None:
        changes.update(questions=touched, structure=structure)
    return {k: v for k, v in counts.items() if v}


def _values_added(question_options: dict[str, list[str]], question_open: dict[str, bool], added_values,
                  settlements, merges=(), undos=()) -> list[tuple[int, SettlementOption]]:
    """Extend ``question_options`` (in place) to each open question's options as the file leaves them:
    the values its ``option_added`` records add and the new values its settlements name, appended in
    line order; a merge of two open questions appends the values of ``from`` that ``into`` does not map
    (as :meth:`doxa.data.question_ops.OrganizerWriter._merge` does), and an undo in the file of one of
    the file's own additions takes them off again. Returns the settlements' additions, as option_added
    operations by the settlement's ``by`` at its time (docs/formats.md, "settlement"). A value already
    listed is nothing new; an addition to a closed or unknown question is left to the checks that refuse
    it (and :func:`_check_option_order` refuses a file whose operations leave another order)."""
    events = sorted([(line, 0, r) for line, r in added_values] + [(line, 1, r) for line, r in settlements]
                    + [(line, 2, r) for line, r in merges] + [(line, 3, r) for line, r in undos],
                    key=lambda event: event[:2])
    implied = []
    added: dict[str, tuple[str, list[str]]] = {}  # this file's operation id → (question, values it appended)
    for line, kind, r in events:
        if kind == 2:  # a merge: of two open questions, into lists the values of both
            into, src = question_options.get(r.into), question_options.get(r.from_)
            if into is None or src is None or not (question_open.get(r.into) and question_open.get(r.from_)):
                continue
            mapped = {o for o in src if o in into} | {o for o, n in (r.option_map or {}).items()
                                                      if o in src and n in into}
            values = [o for o in src if o not in mapped]
            into.extend(values)
            added[r.id] = (r.into, values)
            continue
        if kind == 3:  # an undo of one of this file's additions
            qid, values = added.pop(r.op, (None, []))
            options = question_options.get(qid)
            if values and options is not None and options[-len(values):] == values:
                del options[-len(values):]
            continue
        qid, value = (r.question, r.option) if kind == 0 else (r.question, r.answer)
        options = question_options.get(qid)
        if options is None or not question_open.get(qid) or value in options:
            continue
        options.append(value)
        if kind == 0:
            added[r.op_id] = (qid, [value])
        else:
            implied.append((line, SettlementOption(type="option_added", question=qid, option=value, by=r.by,
                                                   at=r.at)))
    return implied


def _check_option_order(con, question_options: dict[str, list[str]], read: dict[str, int]) -> None:
    """The options each open question read by this file (``read``: question → a line of a reading of it)
    ends with begin with the ones its readings were written for (a merge in the same file may have
    added values before them): refuse the file otherwise."""
    if not read:
        return
    rows = con.execute("SELECT id, options FROM questions WHERE id IN (SELECT unnest(?::VARCHAR[]))",
                       [sorted(read)]).fetchall()
    moved = sorted(qid for qid, options in rows if list(options)[:len(question_options[qid])] != question_options[qid])
    if moved:
        raise IngestError([Problem(read[qid], f"this file's operations change the order of the values of {qid!r} "
                                              "that its readings name",
                                   "ingest the operations (merge, undo) in a file of their own first, then the "
                                   "readings", "probs") for qid in moved])


def _check_params(con, params, problems: Problems) -> list:
    """The parameter versions of the file that the store lacks; a version stored with another document
    is refused (a version is never edited: what was read under it would change)."""
    if not params:
        return []
    stored = dict(con.execute("SELECT version, body FROM params WHERE version IN (SELECT unnest(?::INTEGER[]))",
                              [sorted(r.version for _, r in params)]).fetchall())
    new = []
    for line, r in params:
        if r.version not in stored:
            new.append((line, r))
        elif json.loads(stored[r.version]) != r.stored_body():
            problems.add(line, f"parameter version {r.version} is stored with another document",
                         "versions are never edited: leave this record out, or ingest it into a store without "
                         f"version {r.version} (`doxa export` of this store and `doxa ingest` into an empty one)",
                         "body")
    return new


def _check_settlements(con, settlements, problems: Problems) -> None:
    """Refuse two different answers settled for one question at one instant (in the file or against the store)."""
    if not settlements:
        return
    rows = con.execute(
        """SELECT question, settled_at, answer, how, settled_by, note FROM settlements
           WHERE question IN (SELECT unnest(?::VARCHAR[]))""",
        [sorted({r.question for _, r in settlements})]).fetchall()
    answers: dict[tuple, tuple[int | None, str]] = {(q, at): (None, a) for q, at, a, *_ in rows}
    stored = {(q, at, a): (how, by, note) for q, at, a, how, by, note in rows}
    for line, r in settlements:
        old = stored.get((r.question, r.at, r.answer))
        if old is not None and old != (r.how, r.by, r.note):
            problems.add(line, f"this settlement of {r.question!r} is stored with how {old[0]!r} and by {old[1]!r}"
                               + (f" and note {old[2]!r}" if old[2] else ""),
                         "settlements are never edited: settle again at a later time")
            continue
        first = answers.setdefault((r.question, r.at), (line, r.answer))
        if first[1] != r.answer:
            where = f"line {first[0]}" if first[0] is not None else "the store"
            problems.add(line, f"{r.question!r} is settled as {first[1]!r} at {r.at.isoformat()} by {where}; "
                               f"this says {r.answer!r} at the same instant",
                         "one question has one answer at a time: drop one, or give the later one its own time", "at")


def _check_rejections(con, rejections, question_options: dict[str, list[str]], question_open: dict[str, bool],
                      problems: Problems) -> None:
    """Refuse the rejection that would leave a question no possible answer (an open question keeps one:
    a value not listed yet)."""
    if not rejections:
        return
    rows = con.execute(
        "SELECT question, answer FROM rejections WHERE question IN (SELECT unnest(?::VARCHAR[]))",
        [sorted({r.question for _, r in rejections})]).fetchall()
    rejected: dict[str, set[str]] = {}
    for q, a in rows:
        rejected.setdefault(q, set()).add(a)
    for line, r in sorted(rejections, key=lambda item: item[0]):
        opts = question_options.get(r.question)
        if opts is None or r.answer not in opts or question_open.get(r.question):
            continue  # reported above, or open
        now = rejected.setdefault(r.question, set())
        if r.answer not in now and len(now | {r.answer}) == len(opts):
            problems.add(line, f"this rejection would reject every option of {r.question!r} {opts}",
                         "at least one answer must stay possible: settle the question with the right one, "
                         "or split it if no option fits", "answer")
            continue
        now.add(r.answer)


def _insert(con, table: str, columns: dict[str, Any], *, conflict: str, new_only_key: str | None = None) -> int:
    """Bulk insert from an Arrow table, with the table's derived columns (:data:`doxa.data.ingest_rules.DERIVED`)
    computed from it; returns how many rows are new."""
    arrow = pa.table({k: v if isinstance(v, pa.Array) else pa.array(v) for k, v in columns.items()})
    name = f"_stage_{table}"
    con.register(name, arrow)
    try:
        before = con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        cols = ", ".join(ingest_rules.derived_columns(table, columns))
        select = ", ".join(ingest_rules.derived(table, columns))
        con.execute(f"INSERT INTO {table} ({cols}) SELECT {select} FROM {name} {conflict}").fetchall()
        after = con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    finally:
        con.unregister(name)
    return int(after - before)


def _index_terms(con, ids: list[str], texts: list[str]) -> None:
    """Full-text terms of new messages."""
    arrow = pa.table({"id": ids, "text": texts})
    con.register("_stage_terms", arrow)
    try:
        insert_terms(con, "SELECT id, text FROM _stage_terms")
    finally:
        con.unregister("_stage_terms")


class ExtraWriter:
    """Interface for record types added by other parts of doxa (the organizer's operations).

    :func:`write_batch` calls ``check`` for each record type of the file it writes, then ``write``
    for each, then ``changed``."""

    def check(self, con, items: list[tuple[int, Any]], batch: ParsedBatch, problems: Problems) -> None:
        raise NotImplementedError

    def write(self, con, items: list[tuple[int, Any]]) -> dict[str, int]:
        raise NotImplementedError

    def changed(self) -> tuple[set[str], bool]:
        """What the last ``write`` changed: (questions whose options or evidence changed, whether
        questions came or went or evidence moved between them — then every kept state is stale)."""
        return set(), True


__all__ = ["write_batch", "look_alike_warnings", "ExtraWriter"]
