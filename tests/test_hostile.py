"""Hostile input, sampled: refused or taken as the contract says, nothing partial, nothing raw (issue 34).

The generators are tests/hostile.py's (numbers as strings, booleans or past their column,
ids with zero-width or bidi characters, texts that drive a terminal, texts past the cap,
blank instructions, the assistant's layer in other cases, lines that are not records);
bench/hostile.py runs all of them, thousands of times, and prints the counts. Here
hypothesis samples them within CI's time, through the per-line path, the fast path and
the command line as a process.
"""

from __future__ import annotations

import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hostile

VARIANTS = hostile.Generator(seed=1).all()
FAST_VARIANTS = [v for v in hostile.Generator(seed=2, start=100_000).all()
                 if not v.name.endswith(">cap") and v.name != "deep-nesting"]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("hostile")


@pytest.fixture(scope="module")
def demo_db(work):
    db = str(work / "hostile.duckdb")
    hostile.demo_store(db)
    return db


def _no_problems(outcome: hostile.Outcome) -> None:
    assert outcome.problems == {}, (outcome.variant, outcome.problems)


def test_every_hostile_record_is_refused_or_taken_as_the_contract_says(demo_db, work):
    @settings(max_examples=45, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(variant=st.sampled_from(VARIANTS), as_json=st.booleans())
    def check(variant, as_json):
        _no_problems(hostile.run_variant(hostile.cli_runner_invoke, demo_db, work, variant, as_json=as_json))

    check()


def test_the_fast_path_decides_hostile_records_as_the_per_line_path(demo_db, work):
    pad = hostile.padding(demo_db, work)

    @settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(variant=st.sampled_from(FAST_VARIANTS))
    def check(variant):
        _no_problems(hostile.run_variant(hostile.cli_runner_invoke, demo_db, work, variant, pad=pad))

    check()


def test_hostile_command_lines_end_in_a_message_never_a_traceback(demo_db, work):
    cases = hostile.command_cases(work, demo_db)
    doxa_command = [sys.executable, "-c", "import sys; from doxa.cli import main; sys.exit(main())"]

    @settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(case=st.sampled_from(cases))
    def check(case):
        assert hostile.run_command_case(case, doxa_command) == {}, case.name

    check()


def test_the_generators_cover_every_class_of_defect():
    """A guard on the sample above: each class the issue names has variants, and some are accepted."""
    names = [v.name for v in VARIANTS]
    for fragment in ("=string", "=true", "=int32+1", "=digits-5000", ".id+\\u200b", ".id+\\u202e", "~",
                     ">cap", "=blank", "source.layers=Assistant", "not-utf8"):
        assert any(fragment in name for name in names), fragment
    assert {v.expect for v in VARIANTS} == {"accept", "refuse"}
