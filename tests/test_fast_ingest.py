"""The fast ingest path (data/fast_ingest.py) stores exactly what the per-line path stores, and
refuses exactly what it refuses, with its messages (behaviour only; speed is bench/ingest_speed.py)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from doxa.data import fast_ingest, ingest_rules, models, text
from doxa.data.errors import IngestError
from doxa.data.sql import sql_literal
from doxa.data.store import Store

#: Every table an ingest writes, with the columns that hold the wall clock left out.
TABLES = {
    "subjects": "id, name, aliases", "relations": "*", "sources": "*", "messages": "*",
    "questions": "id, subject, kind, text, shape, options, status, created_by, instructions_version",
    "readings": "*", "settlements": "*", "rejections": "*", "instructions": "*", "message_terms": "*",
    "evidence_epochs": "*", "meta": "* FROM meta WHERE key <> 'store_id'",  # each store's own random id aside
}

EPOCHS = ("evidence_epochs", "meta")


def snapshot(store: Store) -> dict[str, list]:
    return {t: sorted(map(repr, store.con.execute(f"SELECT {cols}" if " FROM " in cols else
                                                  f"SELECT {cols} FROM {t}").fetchall()))
            for t, cols in TABLES.items()}


def as_lines(records, ascii_only: bool = True) -> list[str]:
    return [json.dumps(r, ensure_ascii=ascii_only) + "\n" for r in records]


def both_ways(lines):
    """Ingest ``lines`` into a fresh store by each path: (fast store, its result, per-line store, its result)."""
    fast, slow = Store.memory(), Store.memory()
    return fast, fast.ingest_lines(lines, fast=True), slow, slow.ingest_lines(lines, fast=False)


# ------------------------------------------------------------------------ generated files
TIMES = ["2026-01-0{d}", "2026-01-0{d}T10:00:00", "2026-01-0{d}T10:00:00Z", "2026-01-0{d}T23:30:00+02:00",
         "2026-01-0{d} 08:15", "2026-01-0{d}T10:00:00.25-05:30", "2026-03-0{d}T00:00:00.123456Z"]
PREFIXES = ["", "Fwd: ", "RE: fw: ", "> ", ">> > ", "  ", "re:", "\n> "]
WORDS = ["the parcel", "arrives", "on", "Tuesday", "OK", "ok", "Ünïcode", "ça", "✓", "\t", "\n", "  ", ">", "tschüß",
         "emoji 😀", "AW:", "x"]


@st.composite
def files(draw):
    """A valid file of every core record type, with copies, short texts, odd spacing and unicode."""
    pick = lambda options: draw(st.sampled_from(options))  # noqa: E731
    n_subjects = draw(st.integers(1, 3))
    subjects = [f"s{i}" for i in range(n_subjects)]
    records = [{"type": "subject", "id": s, "name": f"Person {s}", "aliases": draw(st.lists(
        st.sampled_from(["al", "bo", "Çé"]), max_size=2, unique=True))} for s in subjects]
    records += [{"type": "relation", "from": pick(subjects), "to": pick(subjects), "kind": pick(["partner", "boss"])}
                for _ in range(draw(st.integers(0, 3)))]
    sources = []
    for i in range(draw(st.integers(1, 3))):
        layers = pick([["person", "chat"], ["assistant", "notes"], ["Assistant", "notes"], ["business", "email"]])
        record = {"type": "source", "id": f"src{i}", "layers": layers}
        if draw(st.booleans()):
            record["trust"] = draw(st.sampled_from([0.5, 0.9, 1, 0]))
        sources.append(f"src{i}")
        records.append(record)
    questions = {}
    for i in range(draw(st.integers(1, 4))):
        shape = pick(["choice", "yes_no", "scale"])
        options = ["yes", "no"] if shape == "yes_no" else [f"o{j}" for j in range(draw(st.integers(2, 4)))]
        record = {"type": "question", "id": f"q{i}", "kind": pick(["where", "when"]), "text": f"Where is {i}?",
                  "shape": shape}
        if shape != "yes_no" or draw(st.booleans()):
            record["options"] = options
        if draw(st.booleans()):
            record["subject"] = pick(subjects)
        if draw(st.booleans()):
            record["created_by"] = "organizer-model"
            record["instructions_version"] = 1
        questions[f"q{i}"] = options
        records.append(record)
    messages, texts = [], {}
    for i in range(draw(st.integers(1, 8))):
        if messages and draw(st.integers(0, 3)) == 0:
            text = pick(PREFIXES) + texts[pick(messages)]  # a copy of an earlier text
        else:
            text = pick(PREFIXES) + " ".join(draw(st.lists(st.sampled_from(WORDS), max_size=6)))
        record = {"type": "message", "id": f"m{i}", "source": pick(sources),
                  "sent_at": pick(TIMES).format(d=draw(st.integers(1, 9))), "text": text}
        if draw(st.booleans()):
            record["received_at"] = pick(TIMES).format(d=9)
        texts[f"m{i}"] = text
        messages.append(f"m{i}")
        records.append(record)
    for m in messages:
        for reader in draw(st.lists(st.sampled_from(["reader-1", "reader-2"]), max_size=2, unique=True)):
            q = pick(sorted(questions))
            weights = draw(st.lists(st.integers(1, 9), min_size=len(questions[q]) + 1,
                                    max_size=len(questions[q]) + 1))
            total = sum(weights)
            probs = {o: w / total for o, w in zip(questions[q], weights)}
            record = {"type": "reading", "message": m, "question": q, "reader": reader, "probs": probs,
                      "unclear": 1.0 - sum(probs.values()), "one_off": pick([0.0, 0.2, 1])}
            if draw(st.booleans()):
                record["reader_version"] = "v2"
            records.append(record)
    for q in draw(st.lists(st.sampled_from(sorted(questions)), max_size=2, unique=True)):
        record = {"type": "settlement", "question": q, "answer": questions[q][0], "at": "2026-02-01T12:00:00Z",
                  "how": pick(["correction", "approval", "outcome"])}
        if draw(st.booleans()):
            record.update(note="the parcel came", p_before=0.25, params_version=3, by="maya")
        records.append(record)
    for q in draw(st.lists(st.sampled_from(sorted(questions)), max_size=2, unique=True)):
        records.append({"type": "rejection", "question": q, "answer": questions[q][-1], "at": "2026-02-02"})
    for i in range(draw(st.integers(0, 2))):
        record = {"type": "instruction", "id": f"i{i}", "text": "Be brief.", "at": "2026-01-05"}
        if draw(st.booleans()):
            record["subject"] = pick(subjects)
        if draw(st.booleans()):
            q = pick(sorted(questions))
            record["rests_on"] = {"question": q, "answer": questions[q][0]}
        records.append(record)
    if draw(st.booleans()):  # an exact repeat of a record in the same file is nothing new
        records.append(pick([r for r in records if r["type"] != "subject"]))  # (a repeated subject: per-line)
    order = draw(st.permutations(range(len(records))))
    return [records[i] for i in order], draw(st.booleans())


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files())
def test_fast_and_per_line_paths_store_the_same_tables(generated):
    records, ascii_only = generated
    lines = as_lines(records, ascii_only)
    fast, added_fast, slow, added_slow = both_ways(lines)
    assert fast.last_ingest_path == "fast" and slow.last_ingest_path == "per-line"
    assert added_fast == added_slow
    before = snapshot(fast)
    assert before == snapshot(slow)
    # re-ingest adds nothing on either path (a settlement's question is marked touched again by both)
    assert fast.ingest_lines(lines, fast=True) == {} and fast.last_ingest_path == "fast"
    assert slow.ingest_lines(lines, fast=False) == {}
    after = snapshot(fast)
    assert after == snapshot(slow)
    assert {t: v for t, v in after.items() if t not in EPOCHS} == {t: v for t, v in before.items() if t not in EPOCHS}


@st.composite
def broken_files(draw):
    """A generated valid file with one field broken in a way one rule of data/ingest_rules.py catches:
    (records, ascii only, the broken line, its field, the value written, the rule)."""
    records, ascii_only = draw(files())
    targets = [(i, key, rule) for i, record in enumerate(records) for rule in ingest_rules.RULES.values()
               for type_name, key in rule.fields if record["type"] == type_name]  # sources and questions: never none
    index, key, rule = draw(st.sampled_from(targets))
    value = draw(st.sampled_from(rule.refused))
    broken = {**records[index], key: value}
    if rule.runs == "sum":  # a mass that leaves this reading's sum at 1 (0.25 beside three 0.25s) breaks nothing
        assume(not rule.check(ingest_rules.reading_masses(broken["probs"].values(), broken.get("unlisted", 0.0),
                                                          broken.get("unclear", 0.0), broken.get("unrelated", 0.0))))
    records = [*records[:index], broken, *records[index + 1:]]
    return records, ascii_only, index + 1, key, value, rule


def rules_text(rule: ingest_rules.Rule, record: dict, key: str, value) -> str:
    """The problem the per-line path words when ``rule`` refuses ``value``, written as ``key`` of
    ``record`` (after "line N: "; :attr:`doxa.data.ingest_rules.Rule.runs` says how it is worded)."""
    if rule.runs == "sum":  # the reading's masses together; the message is the whole problem
        masses = ingest_rules.reading_masses(record["probs"].values(), record.get("unlisted", 0.0),
                                             record.get("unclear", 0.0), record.get("unrelated", 0.0))
        return f"{rule.message(masses)}: {rule.fix}"
    if rule.runs in ("record", "time"):  # a ValueError: after the field's name, unless the message names it
        said = f"{rule.message(value)}: {rule.fix_for(value)}" if rule.fix else rule.message(value)
        return said if key in said else f"{key}: {said}"
    # a FieldProblem: the field, the message, the fix (a rule without one, a reading's masses: none)
    return f"{key} {rule.message(value)}: {rule.fix_for(value)}" if rule.fix else f"{key} {rule.message(value)}"


def assert_refused_with_rules_text(message: str, line: int, rule, record: dict, key: str, value) -> None:
    """``message`` holds the problem ``rule`` words for line ``line``, as the whole of its line."""
    problem = f"line {line}: {rules_text(rule, record, key, value)}"
    assert f"{problem}\n" in message + "\n", (problem, message)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(broken_files())
def test_a_generated_file_with_a_field_broken_against_a_rule_is_refused_alike_with_the_rules_text(broken):
    records, ascii_only, line, key, value, rule = broken
    message = refused_alike(as_lines(records, ascii_only))  # same refusal and text on both paths, nothing stored
    assert_refused_with_rules_text(message, line, rule, records[line - 1], key, value)


def every_type_file() -> list[dict]:
    """A small valid file with a record of every core type, each field a rule holds given."""
    return [{"type": "subject", "id": "maya", "name": "Maya", "aliases": ["M"]},
            {"type": "subject", "id": "tom", "name": "Tom"},
            {"type": "relation", "from": "maya", "to": "tom", "kind": "partner"},
            {"type": "source", "id": "s", "layers": ["person", "chat"], "trust": 0.9},
            {"type": "question", "id": "q", "kind": "where", "text": "Where?", "options": ["a", "b"],
             "subject": "maya", "created_by": "organizer-model", "instructions_version": 1},
            {"type": "message", "id": "m", "source": "s", "sent_at": "2026-01-01T10:00:00Z",
             "received_at": "2026-01-01T10:05:00Z", "text": "it is at a"},
            {"type": "reading", "message": "m", "question": "q", "reader": "r", "probs": {"a": 0.75, "b": 0.25},
             "unclear": 0.0, "unrelated": 0.0},
            {"type": "settlement", "question": "q", "answer": "a", "at": "2026-02-01T12:00:00Z", "how": "outcome",
             "note": "it was", "p_before": 0.75, "params_version": 3},
            {"type": "rejection", "question": "q", "answer": "b", "at": "2026-02-02"},
            {"type": "instruction", "id": "i", "text": "Be brief.", "at": "2026-01-05"}]


#: Every rule's every refused value, on one of the fields the rule holds (in turn).
EVERY_BREAK = [(rule, rule.fields[i % len(rule.fields)], value)
               for rule in ingest_rules.RULES.values() for i, value in enumerate(rule.refused)]


def test_the_file_of_every_type_is_proved_and_stored_alike():
    fast, added_fast, slow, added_slow = both_ways(as_lines(every_type_file()))
    assert fast.last_ingest_path == "fast" and added_fast == added_slow and snapshot(fast) == snapshot(slow)


@pytest.mark.parametrize("rule, field, value", EVERY_BREAK,
                         ids=[f"{rule.name}-{key}-{i}" for i, (rule, (_, key), _) in enumerate(EVERY_BREAK)])
def test_every_refused_value_of_every_rule_is_refused_alike_with_the_rules_text(rule, field, value):
    records = every_type_file()
    type_name, key = field
    line = next(i for i, record in enumerate(records, start=1) if record["type"] == type_name)
    records[line - 1] = {**records[line - 1], key: value}
    message = refused_alike(as_lines(records, ascii_only=False))
    assert_refused_with_rules_text(message, line, rule, records[line - 1], key, value)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


#: The rules of a number; of a string, whose SQL predicate gives the check's verdict; of a name, whose
#: SQL proves what the check passes. The time, layers and sum rules have tests of their own below.
NUMBER_RULES = [rule for rule in ingest_rules.RULES.values()
                if rule.runs in ("field", "reading") and all(map(_is_number, rule.refused))]
STRING_RULES = [rule for rule in ingest_rules.RULES.values()
                if rule.exact and all(isinstance(v, str) for v in rule.refused)]
NAME_RULES = [rule for rule in ingest_rules.RULES.values() if rule.runs == "name"]


def test_every_rule_has_a_verdict_test():
    tested = [*NUMBER_RULES, *STRING_RULES, *NAME_RULES, ingest_rules.TIME, ingest_rules.SUM,
              ingest_rules.RULES["layers"]]
    assert sorted(rule.name for rule in tested) == sorted(ingest_rules.RULES)


@pytest.mark.parametrize("rule", NUMBER_RULES, ids=lambda rule: rule.name)
@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.integers(-(2**40), 2**40) | st.floats(-4.0, 4.0) | st.sampled_from([0, 1, 0.0, 1.0, -1]),
                       max_size=12))
def test_each_rules_python_check_and_sql_predicate_give_the_same_verdicts(rule, values):
    import duckdb

    values = [*rule.refused, *values]
    column = "v::DOUBLE" if any(isinstance(v, float) for v in values) else "v::HUGEINT"
    verdicts = [row[0] for row in duckdb.connect().execute(
        f"SELECT {rule.sql('x')} FROM (SELECT {column} AS x, n FROM (SELECT unnest(?) AS v, "
        "generate_subscripts(?, 1) AS n)) ORDER BY n", [values, values]).fetchall()]
    assert verdicts == [rule.check(v) for v in values], (rule.name, values)
    assert not any(rule.check(v) for v in rule.refused)


@pytest.mark.parametrize("rule", STRING_RULES, ids=lambda rule: rule.name)
@settings(max_examples=50, deadline=None)
@given(values=st.lists(st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
                       | st.sampled_from(["", " ", "é", "e\u0301", "😀", "\t\n"]), max_size=12))
def test_each_string_rules_python_check_and_sql_predicate_give_the_same_verdicts(rule, values):
    import duckdb

    values = [*rule.refused, *values]
    verdicts = [row[0] for row in duckdb.connect().execute(
        f"SELECT {rule.sql('x')} FROM (SELECT unnest(?) AS x, generate_subscripts(?, 1) AS n) ORDER BY n",
        [values, values]).fetchall()]
    assert verdicts == [rule.check(v) for v in values], rule.name
    assert not any(rule.check(v) for v in rule.refused)


@pytest.mark.parametrize("rule", NAME_RULES, ids=lambda rule: rule.name)
@settings(max_examples=50, deadline=None)
@given(values=st.lists(st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
                       | st.sampled_from(["", " ", "a b", "é", "e\u0301", "😀", "\t\n", "a\u200b", "x" * 201]),
                       max_size=12))
def test_each_name_rules_sql_predicate_proves_only_what_its_python_check_passes(rule, values):
    import duckdb

    values = [*rule.refused, *values]
    proved = [row[0] for row in duckdb.connect().execute(
        f"SELECT {rule.sql('x')} FROM (SELECT unnest(?) AS x, generate_subscripts(?, 1) AS n) ORDER BY n",
        [values, values]).fetchall()]
    assert all(rule.check(v) for v, ok in zip(values, proved) if ok), rule.name
    # where the check refuses, the message and fix are the per-line path's own (none is empty)
    assert all(rule.message(v) and rule.fix_for(v) for v in values if not rule.check(v)), rule.name
    assert not any(rule.check(v) for v in rule.refused) and not any(proved[:len(rule.refused)])


def _verdicts(sql: str, values: list) -> list:
    """``sql`` (of a column ``x``) over ``values``, in their order."""
    import duckdb

    return [row[0] for row in duckdb.connect().execute(
        f"SELECT {sql} FROM (SELECT unnest(?) AS x, generate_subscripts(?, 1) AS n) ORDER BY n",
        [values, values]).fetchall()]


@settings(max_examples=50, deadline=None)
@given(values=st.lists(st.lists(st.text(st.sampled_from("ab/ é"), min_size=1, max_size=4), min_size=1, max_size=3),
                       max_size=10))
def test_the_layers_rules_python_check_and_sql_predicate_give_the_same_verdicts(values):
    rule = ingest_rules.RULES["layers"]
    values = [*rule.refused, *values]
    assert _verdicts(rule.sql("x"), values) == [rule.check(v) for v in values]
    assert not any(rule.check(v) for v in rule.refused)


def _digits(n: int, width: int):
    return st.integers(0, 10**width - 1).map(lambda x: f"{x:0{width}d}") if n else st.just("")


#: Times as written: the forms the columnar path proves, with out-of-range fields, other separators,
#: offsets without a colon, long fractions, and free text.
time_texts = st.one_of(
    st.builds(lambda y, mo, d, sep, h, mi, sec, frac, zone: f"{y}-{mo}-{d}" + (f"{sep}{h}:{mi}{sec}{frac}{zone}"
                                                                               if sep else ""),
              st.sampled_from(["2026", "1000", "1001", "9998", "9999", "0001", "0999", "2024"]) | _digits(1, 4),
              st.sampled_from(["01", "02", "12", "13", "00"]), st.sampled_from(["01", "28", "29", "30", "31", "32"]),
              st.sampled_from(["", "T", " ", "t", "_"]), st.sampled_from(["00", "09", "23", "24"]),
              st.sampled_from(["00", "59", "60"]), st.sampled_from(["", ":00", ":59", ":60", ":5"]),
              st.sampled_from(["", ".1", ".25", ".123456", ".1234567", "."]),
              st.sampled_from(["", "Z", "z", "+02:00", "-05:30", "+14:00", "-23:59", "+24:00", "+0200", "+02"])),
    st.text(st.sampled_from("0123456789-:T Z+."), max_size=25))


@settings(max_examples=100, deadline=None)
@given(values=st.lists(time_texts, max_size=20))
def test_the_time_rules_sql_predicate_proves_only_what_parse_time_reads_and_the_moment_it_reads(values):
    from doxa.data.times import parse_time

    rule = ingest_rules.TIME
    strings = [v for v in rule.refused if isinstance(v, str)]
    values = [*strings, *values]
    moments = _verdicts(rule.read("x"), values)
    proved = _verdicts(rule.sql(rule.read("x")), values)
    for value, moment, ok in zip(values, moments, proved):
        if ok:  # proved: parse_time reads it, as the same moment
            assert rule.check(value) and parse_time(value) == moment, (value, moment)
        else:  # not proved: the per-line path decides, and words a refusal
            assert rule.check(value) or rule.message(value), value
    assert not any(rule.check(v) for v in rule.refused) and not any(proved[:len(strings)])


@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.lists(st.floats(0.0, 1.0) | st.sampled_from([0.0, 0.5, 0.25, 1 / 3, 0.1, 1e-6, 1e-9]),
                                min_size=3, max_size=7), max_size=10),
       near=st.lists(st.floats(-2e-6, 2e-6), max_size=10))
def test_the_sum_rules_sql_predicate_proves_only_sums_its_python_check_passes(values, near):
    rule = ingest_rules.SUM
    # masses that sum to 1 but for a little, around the tolerance
    values = [*values, *([0.5, 0.25 + d, 0.0, 0.25, 0.0] for d in near), [0.5, 0.5, 0.0, 0.0, 0.0]]
    proved = _verdicts(rule.sql("x"), values)
    assert all(rule.check(v) for v, ok in zip(values, proved) if ok)
    assert proved[-1] and all(rule.message(v) and rule.fix for v in values if not rule.check(v))


#: Texts of printable ASCII, tabs and line breaks, rich in what normalise_text removes.
plain_texts = st.lists(st.sampled_from(["Fwd:", "fw :", "RE:", "aw: ", "Wg:", ">", "> >", " ", "  ", "\t", "\n", "\r",
                                        "\r\n", "ok", "The Parcel", "x", ":", "re", "fwd"])
                       | st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7e), max_size=5),
                       max_size=12).map("".join)


@settings(max_examples=100, deadline=None)
@given(texts=st.lists(plain_texts, min_size=1, max_size=20), source=st.sampled_from(["s", "src-1", "a b"]))
def test_the_fingerprint_in_sql_is_pythons_on_plain_texts(texts, source):
    import duckdb

    rows = duckdb.connect().execute(
        f"""SELECT regexp_matches(x, {sql_literal(text.PLAIN_TEXT)}), n,
                   {text.fingerprint_sql('n', sql_literal(source))}
            FROM (SELECT x, {text.normalise_sql('x')} AS n, i
                  FROM (SELECT unnest(?) AS x, generate_subscripts(?, 1) AS i)) ORDER BY i""",
        [texts, texts]).fetchall()
    for value, (plain, normal, print_) in zip(texts, rows):
        assert plain, value
        assert (normal, print_) == (text.normalise_text(value), text.fingerprint(value, source)), value


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(st.characters(max_codepoint=0x17f, blacklist_categories=("Cs",),
                                      blacklist_characters="\x00"), max_size=10)
                | st.sampled_from(["assistant", "Assistant", "ASSISTANT", "ASSİSTANT", "aſſiſtant", "assistan"]),
                min_size=1, max_size=10))
def test_is_assistant_in_sql_gives_pythons_verdict_wherever_it_is_used(layers):
    import duckdb

    rows = duckdb.connect().execute(
        f"SELECT {ingest_rules.IS_ASSISTANT_SQL}, {ingest_rules.IS_ASSISTANT_SQL_AGREES} "
        "FROM (SELECT [unnest(?)] AS layers)", [layers]).fetchall()
    for layer, (in_sql, agrees) in zip(layers, rows):
        assert agrees == layer.isascii()
        if agrees:
            assert in_sql == ingest_rules.is_assistant_layer(layer), layer


# ------------------------------------------------------------------------ hand-written cases
def small_file(n_messages: int = 40) -> list[dict]:
    records = [{"type": "source", "id": "s", "layers": ["person", "chat"]},
               {"type": "question", "id": "q", "kind": "where", "text": "Where?", "options": ["a", "b"]}]
    for i in range(n_messages):
        records.append({"type": "message", "id": f"m{i}", "source": "s", "sent_at": "2026-01-01T10:00:00Z",
                        "text": f"message {i} says a"})
        records.append({"type": "reading", "message": f"m{i}", "question": "q", "reader": "r",
                        "probs": {"a": 0.75, "b": 0.25}})
    return records


def refusal(store: Store, lines, **kwargs) -> str:
    with pytest.raises(IngestError) as caught:
        store.ingest_lines(lines, **kwargs)
    return str(caught.value)


def refused_alike(lines) -> str:
    """The fast path refuses ``lines`` with the per-line path's message and stores nothing; the message."""
    fast = Store.memory()
    empty = snapshot(fast)
    message = refusal(fast, lines, fast=True)
    assert message == refusal(Store.memory(), lines, fast=False)
    assert snapshot(fast) == empty and fast.last_ingest_path == "per-line"
    return message


def test_a_bad_line_late_in_a_multi_block_file_stores_nothing_and_names_the_line(monkeypatch):
    monkeypatch.setattr(fast_ingest, "BLOCK_LINES", 16)  # 82 good lines: six blocks before the bad one
    lines = as_lines(small_file()) + ['{"type": "message", "id": "late", "source": "s", "sent_at": "someday", '
                                      '"text": "x"}\n']
    fast, slow = Store.memory(), Store.memory()
    empty = snapshot(fast)
    message = refusal(fast, lines, fast=True)
    assert f"line {len(lines)}" in message and "sent_at" in message
    assert message == refusal(slow, lines, fast=False)
    assert snapshot(fast) == empty


def test_a_late_reference_problem_found_by_the_joins_is_reported_as_the_per_line_path_does(monkeypatch):
    monkeypatch.setattr(fast_ingest, "BLOCK_LINES", 16)
    lines = as_lines(small_file() + [{"type": "reading", "message": "m3", "question": "nowhere", "reader": "r",
                                      "probs": {"a": 1.0}}])
    fast = Store.memory()
    empty = snapshot(fast)
    message = refusal(fast, lines, fast=True)
    assert "unknown question 'nowhere'" in message and f"line {len(lines)}" in message
    assert message == refusal(Store.memory(), lines, fast=False)
    assert snapshot(fast) == empty


def test_an_edited_record_is_refused_with_the_per_line_message():
    store = Store.memory()
    records = small_file(5)
    store.ingest_lines(as_lines(records), fast=True)
    assert store.last_ingest_path == "fast"
    kept = snapshot(store)
    for index, change in ((2, {"text": "message 0 now says b"}), (3, {"probs": {"a": 0.5, "b": 0.5}}),
                          (1, {"options": ["a", "b", "c"]}), (0, {"trust": 0.9})):
        edited = [dict(r) for r in records]
        edited[index].update(change)
        lines = as_lines(edited)
        other = Store.memory()
        other.ingest_lines(as_lines(records), fast=False)
        message = refusal(store, lines, fast=True)
        assert "is stored with" in message and f"line {index + 1}:" in message
        assert message == refusal(other, lines, fast=False)
        assert snapshot(store) == kept


def test_a_generator_read_once_is_replayed_for_the_per_line_path(monkeypatch):
    monkeypatch.setattr(fast_ingest, "BLOCK_LINES", 10)
    lines = as_lines(small_file()) + ['{"type": "reading", "message": "m1", "question": "q", "reader": "r2", '
                                      '"probs": {"a": "0.5", "b": 0.5}}\n']
    message = refusal(Store.memory(), (line for line in lines), fast=True)
    assert f"line {len(lines)}" in message and "JSON number" in message
    assert message == refusal(Store.memory(), lines, fast=False)


@pytest.mark.parametrize("odd", [
    {"sent_at": "2026-01-01T10:00:00+0200"},          # a time form only the per-line path reads
    {"text": "a line ending in a comma,}"},            # looks like a trailing comma to the JSON check
    {"sent_at": " 2026-01-01"},                        # trimmed by parse_time
])
def test_valid_lines_the_fast_checks_cannot_prove_are_stored_by_the_per_line_path(odd):
    records = small_file(3)
    records[2] = {**records[2], **odd}
    fast, added_fast, slow, added_slow = both_ways(as_lines(records))
    assert fast.last_ingest_path == "per-line" and added_fast == added_slow
    assert snapshot(fast) == snapshot(slow)


def test_large_files_take_the_fast_path_by_themselves(tmp_path, monkeypatch):
    monkeypatch.setattr(fast_ingest, "FAST_MIN_LINES", 50)
    path = tmp_path / "big.jsonl"
    path.write_text("".join(as_lines(small_file())), encoding="utf-8")
    store = Store.open(tmp_path / "doxa.duckdb")
    assert store.ingest_file(path)["readings"] == 40 and store.last_ingest_path == "fast"
    small = tmp_path / "small.jsonl"
    small.write_text("".join(as_lines(small_file(3))), encoding="utf-8")
    assert store.ingest_file(small) == {} and store.last_ingest_path == "per-line"
    store.close()


# ------------------------------------------------------------------------ the column checks themselves
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=2), inner, max_size=2),
    max_leaves=4)


@settings(max_examples=200, deadline=None)
@given(st.lists(json_values, min_size=1, max_size=20), st.sampled_from([(", ", ": "), (",", ":"), (" ,  ", " :  ")]))
def test_the_json_type_read_from_the_first_character_gives_json_types_verdicts(values, separators):
    import duckdb

    lines = [json.dumps({"a": v}, separators=separators) for v in values]
    rows = duckdb.connect().execute(
        f"""SELECT json_type(v) AS t, {fast_ingest.json_type_sql('v')} AS mine, TRY_CAST(v AS INTEGER) IS NULL AS big
            FROM (SELECT json_extract(j, '$.a') AS v FROM (SELECT unnest(?) AS j))""", [lines]).fetchall()
    integers = {"BIGINT", "UBIGINT"}
    for (t, mine, big), value in zip(rows, values):
        if t in integers or mine in integers:  # an integer past 64 bits: DOUBLE to json_type, refused either way
            assert mine in integers and (t in integers or big), (value, t, mine)
        else:
            assert mine == t, (value, t, mine)


@pytest.mark.parametrize("fault", [
    {"unclear": "0.1"},                      # a number as a string
    {"unclear": True},                       # a boolean where a number belongs
    {"reader": 7},                           # a number where a name belongs
    {"note": "an unknown key"},              # a key no reading has
    {"probs": {"a": 0.75, "b": "0.25"}},     # a probability as a string
    {"probs": {"a": 1.5, "b": -0.5}},        # probabilities outside [0, 1] that still sum to 1
    {"probs": [0.75, 0.25]},                 # a list where an object belongs
])
def test_a_reading_with_a_faulty_field_is_refused_as_the_per_line_path_refuses_it(fault, monkeypatch):
    monkeypatch.setattr(fast_ingest, "BLOCK_LINES", 16)
    records = small_file()
    records[-1] = {**records[-1], **fault}
    lines = as_lines(records)
    assert f"line {len(lines)}" in refused_alike(lines)


def test_a_key_given_twice_in_one_line_is_refused_as_the_per_line_path_refuses_it(monkeypatch):
    monkeypatch.setattr(fast_ingest, "BLOCK_LINES", 16)
    lines = as_lines(small_file())
    lines[-1] = lines[-1].replace('"reader": "r"', '"reader": "r", "reader": "r2"')
    fast = Store.memory()
    try:
        fast.ingest_lines(lines, fast=True)
        outcome = ("stored", snapshot(fast))
    except IngestError as refused:
        outcome = ("refused", str(refused))
    slow = Store.memory()
    try:
        slow.ingest_lines(lines, fast=False)
        assert outcome == ("stored", snapshot(slow))
    except IngestError as refused:
        assert outcome == ("refused", str(refused))
    assert fast.last_ingest_path == "per-line"


@pytest.mark.parametrize("index, change", [(2, {"text": "message 0 now says b"}),
                                           (3, {"probs": {"a": 0.5, "b": 0.5}}),
                                           (1, {"text": "Where else?"})])
def test_a_record_given_twice_differently_in_one_file_is_refused_as_the_per_line_path_refuses_it(
        index, change, monkeypatch):
    monkeypatch.setattr(fast_ingest, "BLOCK_LINES", 16)  # the two lines land in different blocks and workers
    records = small_file()
    records.append({**records[index], **change})
    refused_alike(as_lines(records))


# ------------------------------------------------------------------------ a file read as bytes
@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"),
                                          max_size=12),
                          st.sampled_from(["\n", "\r\n"])), max_size=30),
       st.booleans(), st.integers(1, 64))
def test_a_file_cut_at_its_bytes_gives_the_lines_text_mode_gives(tmp_path_factory, lines, last_open, chunk):
    import pytest as _pytest

    body = "".join(text + end for text, end in lines)
    if last_open and lines:
        body = body[: -len(lines[-1][1])]  # the last line without its line break
    path = tmp_path_factory.mktemp("blocks") / "file.jsonl"
    path.write_bytes(body.encode("utf-8"))
    with open(path, encoding="utf-8") as handle:
        expected = list(handle)
    with _pytest.MonkeyPatch.context() as patch:
        patch.setattr(fast_ingest, "CHUNK_BYTES", chunk)  # chunks that cut lines and characters apart
        patch.setattr(fast_ingest, "BLOCK_LINES", 3)
        got = [line for block in fast_ingest.file_blocks(path) for line in block.to_pylist()]
    assert got == expected


@pytest.mark.parametrize("body", [b'{"a": 1}\r{"b": 2}\n', b'{"a": "caf\xe9"}\n'])
def test_bytes_text_mode_reads_otherwise_are_left_to_it(tmp_path, body):
    path = tmp_path / "odd.jsonl"
    path.write_bytes(body)
    with pytest.raises(fast_ingest.NotPlainBytes):
        list(fast_ingest.file_blocks(path))


def test_a_file_with_windows_line_breaks_is_stored_as_the_per_line_path_stores_it(tmp_path, monkeypatch):
    monkeypatch.setattr(fast_ingest, "FAST_MIN_LINES", 50)
    path = tmp_path / "crlf.jsonl"
    path.write_bytes("".join(as_lines(small_file(), ascii_only=False)).replace("\n", "\r\n").encode("utf-8"))
    fast, slow = Store.open(tmp_path / "a.duckdb"), Store.open(tmp_path / "b.duckdb")
    assert fast.ingest_file(path) == slow.ingest_lines(open(path, encoding="utf-8"), fast=False)
    assert fast.last_ingest_path == "fast" and snapshot(fast) == snapshot(slow)
    fast.close(), slow.close()


def test_a_file_with_a_lone_carriage_return_is_read_as_text_lines(tmp_path, monkeypatch):
    monkeypatch.setattr(fast_ingest, "FAST_MIN_LINES", 50)
    path = tmp_path / "cr.jsonl"
    text = "".join(as_lines(small_file()))
    path.write_text(text[:-1] + "\r", encoding="utf-8", newline="")  # text mode reads "\r" as a line break
    fast, slow = Store.open(tmp_path / "a.duckdb"), Store.open(tmp_path / "b.duckdb")
    assert fast.ingest_file(path) == slow.ingest_lines(open(path, encoding="utf-8"), fast=False)
    assert fast.last_ingest_path == "fast" and snapshot(fast) == snapshot(slow)
    fast.close(), slow.close()


@pytest.mark.parametrize("bad", ['{"type": "message", "id": "cut', '{"type": "reading",}', "[1, 2]", "not json"])
def test_a_line_that_is_no_json_object_late_in_a_file_is_refused_as_the_per_line_path_refuses_it(bad, monkeypatch):
    monkeypatch.setattr(fast_ingest, "BLOCK_LINES", 16)
    lines = as_lines(small_file()) + [bad + "\n"]
    assert f"line {len(lines)}" in refused_alike(lines)


def test_workers_that_write_out_what_they_proved_midway_store_what_the_per_line_path_stores(monkeypatch):
    monkeypatch.setattr(fast_ingest, "BLOCK_LINES", 8)
    monkeypatch.setattr(fast_ingest, "FLUSH_LINES", 12)  # each worker writes to its file every other block
    records = small_file() + [small_file()[5], {"type": "message", "id": "m-x", "source": "s",
                                                "sent_at": "2026-01-02", "text": "Ünïcode ça ✓ says a"}]
    fast, added_fast, slow, added_slow = both_ways(as_lines(records, ascii_only=False))
    assert fast.last_ingest_path == "fast" and added_fast == added_slow
    assert snapshot(fast) == snapshot(slow)


# ------------------------------------------------------------------------ issue 34: strict values on both paths
SETTLE = {"type": "settlement", "question": "q", "answer": "a", "at": "2026-02-01T12:00:00Z", "how": "outcome"}
ASK = {"type": "question", "id": "q2", "kind": "where", "text": "Where now?", "options": ["a", "b"]}
TEN_DIGITS = "1" + "0" * 4300  # 4,301 digits: past Python's limit on reading an integer


@pytest.mark.parametrize("bad, field", [
    ({**SETTLE, "params_version": 2**31}, "params_version"),              # past a schema INTEGER
    ({**SETTLE, "params_version": -(2**31) - 1}, "params_version"),
    ({**ASK, "instructions_version": 2**31}, "instructions_version"),
    ({**SETTLE, "p_before": "0.5"}, "p_before"),                         # numbers as strings or booleans
    ({**SETTLE, "p_before": True}, "p_before"),
    ({**SETTLE, "params_version": "7"}, "params_version"),
    ({**SETTLE, "params_version": 7.0}, "params_version"),               # an integer field takes integers
    ({**SETTLE, "params_version": True}, "params_version"),
    ({**ASK, "instructions_version": "2"}, "instructions_version"),
    ({"type": "source", "id": "s2", "layers": ["web"], "trust": True}, "trust"),
    ({**SETTLE, "note": "x" * (models.MAX_TEXT_CHARS + 1)}, "note"),     # every free text capped
    ({"type": "instruction", "id": "i", "text": " \t ", "at": "2026-01-05"}, "text"),  # blank texts
    ({**ASK, "text": "   "}, "text"),
    ({"type": "subject", "id": "maya\u200b", "name": "Maya"}, "id"),     # zero-width, bidi, format characters
    ({"type": "subject", "id": "maya", "name": "Maya\u200d"}, "name"),
    ({"type": "subject", "id": "maya", "name": "Maya", "aliases": ["\u202eayam"]}, "aliases.0"),
    ({"type": "source", "id": "s\u2066", "layers": ["web"]}, "id"),
    ({"type": "source", "id": "s2", "layers": ["web\ufeff"]}, "layers.0"),
    ({**ASK, "options": ["a\u200e", "b"]}, "options.0"),
    ({**ASK, "id": "q 2"}, "id"),                                         # white space in an id
    ({**ASK, "id": "q\u00a02"}, "id"),
    ({"type": "message", "id": "m\u3000x", "source": "s", "sent_at": "2026-01-01", "text": "hi"}, "id"),
    ({"type": "instruction", "id": "i\u2003x", "text": "Be brief.", "at": "2026-01-05"}, "id"),
    ({**ASK, "id": "qe\u0301"}, "id"),                                    # not NFC
    ({"type": "subject", "id": "maya", "name": "Ame\u0301lie"}, "name"),
])
def test_a_value_issue_34_refuses_is_refused_alike_on_both_paths_with_its_field(bad, field, monkeypatch):
    monkeypatch.setattr(fast_ingest, "BLOCK_LINES", 16)
    lines = as_lines(small_file()) + as_lines([bad])
    message = refused_alike(lines)
    assert f"line {len(lines)}: {field}" in message, message
    assert "internal error" not in message and message.count("\n") == 1  # one problem, on its line


@pytest.mark.parametrize("big", [f'"params_version": {TEN_DIGITS}', f'"p_before": -{TEN_DIGITS}',
                                 f'"p_before": 0.5, "params_version": {TEN_DIGITS}'])
def test_an_integer_of_more_digits_than_python_reads_is_a_problem_of_its_line(big, monkeypatch):
    monkeypatch.setattr(fast_ingest, "BLOCK_LINES", 16)
    lines = as_lines(small_file()) + [json.dumps(SETTLE)[:-1] + ", " + big + "}\n"]
    message = refused_alike(lines)
    field = big.split('"')[-2]
    assert f"line {len(lines)}: {field}: number too long (4301 digits)" in message, message
    assert "at most 4300 digits" in message


def test_sources_whose_first_layer_is_assistant_in_any_case_are_the_assistant_on_both_paths():
    records = small_file(4)
    records[0] = {"type": "source", "id": "s", "layers": ["Assistant", "notes"]}
    records.append({"type": "source", "id": "t", "layers": ["ASSISTANT"]})
    records.append({"type": "source", "id": "u", "layers": ["ASSİSTANT"]})  # not ASCII: the per-line way
    fast, added_fast, slow, added_slow = both_ways(as_lines(records))
    assert added_fast == added_slow and snapshot(fast) == snapshot(slow)
    assert fast.last_ingest_path == "per-line"
    flags = dict(slow.con.execute("SELECT id, is_assistant FROM sources").fetchall())
    assert flags == {"s": True, "t": True, "u": False}
    assert slow.con.execute("SELECT bool_or(counts) FROM readings").fetchone()[0] is False
    records.pop()  # without the non-ASCII layer the fast path stores it, alike
    fast, added_fast, slow, added_slow = both_ways(as_lines(records))
    assert fast.last_ingest_path == "fast" and added_fast == added_slow and snapshot(fast) == snapshot(slow)
    assert dict(fast.con.execute("SELECT id, is_assistant FROM sources").fetchall()) == {"s": True, "t": True}


@pytest.mark.parametrize("name", ["क्षमा", "Nguyễn", "Ame\u0301lie".replace("e\u0301", "é"), "Åsa"])
def test_names_in_nfc_with_accents_and_combining_marks_are_stored_alike(name):
    records = small_file(3) + [{"type": "subject", "id": "x", "name": name, "aliases": [name + " B"]}]
    fast, added_fast, slow, added_slow = both_ways(as_lines(records, ascii_only=False))
    assert added_fast == added_slow and snapshot(fast) == snapshot(slow)


def look_alikes(records, stored=(), *, fast: bool) -> list[str]:
    """The warnings an ingest of ``records`` gives on one path, into a store holding ``stored``."""
    from doxa.data import ingest, writer

    store = Store.memory()
    if stored:
        store.ingest_lines(as_lines(stored), fast=False)
    warnings: list[str] = []
    lines = as_lines(records, ascii_only=False)
    if fast:
        stage = fast_ingest.stage_lines(lines)
        try:
            fast_ingest.write_stage(store.con, stage.paths, unique=stage.unique, warnings=warnings)
        finally:
            stage.close()
    else:
        writer.write_batch(store.con, ingest.parse_lines(lines), warnings=warnings)
    return warnings


@pytest.mark.parametrize("fast", [False, True])
def test_a_new_subject_or_question_id_that_looks_like_another_is_warned_of_not_refused(fast):
    stored = [{"type": "subject", "id": "maya", "name": "Maya"}, ASK]
    new = [{"type": "subject", "id": "m\u0430ya", "name": "Maya C"},     # Cyrillic а
           {"type": "subject", "id": "Maya", "name": "Maya D"},          # another case
           {"type": "subject", "id": "maya", "name": "Maya"},            # the stored one again: no warning
           {"type": "subject", "id": "ｍaya2", "name": "Wide"}, {"type": "subject", "id": "maya2", "name": "Narrow"},
           {**ASK, "id": "Q2"}, {**ASK, "id": "q3"}]
    warnings = look_alikes(new, stored, fast=fast)
    heads = [w.split(" (only case")[0] for w in warnings]
    assert heads == ["new subject id 'Maya' looks like 'maya'", "new subject id 'mаya' looks like 'Maya', 'maya'",
                     "new subject id 'ｍaya2' looks like 'maya2'",  # two new ones: the later in order is named
                     "new question id 'Q2' looks like 'q2'"], warnings
    assert all("if they are one" in w and "use one id" in w for w in warnings)
    assert look_alikes([{"type": "subject", "id": "bob", "name": "Bob"}], stored, fast=fast) == []


def test_an_ingest_that_stages_removes_what_a_killed_ingest_staged(tmp_path, monkeypatch):
    """Staged files hold message text: a killed ingest's are removed by the next ingest that stages
    (not only by `doxa forget`); a live one's, and this ingest's own until it closes, are kept."""
    import os
    import subprocess
    import sys
    import tempfile

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    left = tmp_path / f"{fast_ingest.STAGING_PREFIX}{dead.pid}-abc"
    left.mkdir()
    (left / "stage-0.duckdb").write_text("a message someone asked to forget")
    spool = tmp_path / f"{fast_ingest.STAGING_PREFIX}{dead.pid}-x.arrows"
    spool.write_text("staged lines")
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = tmp_path / f"{fast_ingest.STAGING_PREFIX}{alive.pid}-mine"
        live.mkdir()
        stage = fast_ingest.Stage(1)
        try:
            assert not left.exists() and not spool.exists() and live.exists()
            assert os.path.isdir(stage.folder) and stage.folder.startswith(str(tmp_path))
        finally:
            stage.close()
    finally:
        alive.kill()
        alive.wait()
