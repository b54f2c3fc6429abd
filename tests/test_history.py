"""`doxa history` / `mem.history`: the belief after each change of evidence, and where its top answer changed.

The truth each point is held to is an independent path: `mem.belief(q, at=t)`, which loads the
evidence as of ``t`` and runs the scorer (or reads a kept state) on its own; the changes are held
to the tops of those reads, compared one after the other.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import doxa
import records as R
from doxa.cli.main import app
from doxa.data.errors import StoreError
from doxa.inference.agent import tools

HOME = ["12 Elm Street", "7 Harbour Road", "3 Mill Lane"]
END = "2026-12-01"


def home_records() -> list[dict]:
    """Maya's address over two years: a note, a move, a claim about a third address, a settlement,
    a rejection, and two readings at one time. Events are days apart from different sources, so no
    reading shares a burst group with another (the history weighs them as a read at the time does)."""
    return [
        R.subject("maya"),
        R.source("notes", ["user", "notes"]),
        R.source("maya-chat", ["person", "self", "chat"]),
        R.source("mum-chat", ["family", "about-other", "chat"]),
        R.source("shop", ["business", "about-other", "email"]),
        R.question("maya.home", HOME, kind="home_address", subject="maya", text="Where does Maya live?"),
        R.message("a1", "notes", "2024-10-01", "Maya's address: 12 Elm Street."),
        R.reading("a1", "maya.home", {"12 Elm Street": 0.9, "7 Harbour Road": 0.05, "3 Mill Lane": 0.0}, unclear=0.05),
        R.message("a2", "maya-chat", "2026-03-10", "We moved! New place is 7 Harbour Road."),
        R.reading("a2", "maya.home", {"12 Elm Street": 0.03, "7 Harbour Road": 0.92, "3 Mill Lane": 0.02},
                  unclear=0.03),
        R.message("a3", "shop", "2026-05-02", "Your order ships to 3 Mill Lane."),
        R.reading("a3", "maya.home", {"12 Elm Street": 0.05, "7 Harbour Road": 0.05, "3 Mill Lane": 0.85},
                  unclear=0.05),
        R.message("a4", "mum-chat", "2026-05-02", "Maya is at 3 Mill Lane these days."),
        R.reading("a4", "maya.home", {"12 Elm Street": 0.05, "7 Harbour Road": 0.1, "3 Mill Lane": 0.8},
                  unclear=0.05),
        R.settlement("maya.home", "7 Harbour Road", "2026-07-01T09:00:00"),
        R.rejection("maya.home", "7 Harbour Road", "2026-10-01T09:00:00"),
    ]


@pytest.fixture
def mem():
    memory = doxa.open(":memory:", log_reads=False)
    memory.ingest(home_records())
    yield memory
    memory.close()


def test_every_point_is_the_belief_read_at_its_time(mem):
    h = mem.history("maya.home", end=END)
    times = ["2024-10-01T00:00:00", "2026-03-10T00:00:00", "2026-05-02T00:00:00", "2026-07-01T09:00:00",
             "2026-10-01T09:00:00"]
    assert [p.at for p in h.points] == times
    for point in h.points:
        read = mem.belief("maya.home", point.at)
        assert point.top == read.top and point.p == pytest.approx(read.p_top, abs=2e-6), point.at
        assert point.act == read.act
        for option in HOME:
            assert point.probs[option] == pytest.approx(read.answers[option], abs=2e-6), (point.at, option)


def test_the_events_are_named_and_two_at_one_time_make_one_point(mem):
    points = mem.history("maya.home", end=END).points
    assert points[0].event == {"kind": "reading", "message": "a1", "source": "notes", "stated": "12 Elm Street"}
    assert points[0].also == []
    both = {points[2].event["message"], points[2].also[0]["message"]}
    assert both == {"a3", "a4"} and len(points[2].also) == 1
    assert points[3].event == {"kind": "settlement", "answer": "7 Harbour Road", "how": "correction"}
    assert points[4].event == {"kind": "rejection", "answer": "7 Harbour Road"}


def test_changes_are_where_the_top_read_at_each_time_changes(mem):
    h = mem.history("maya.home", end=END)
    tops = [(p.at, mem.belief("maya.home", p.at).top) for p in h.points]
    expected = [{"at": at, "from": before, "to": now}
                for (_, before), (at, now) in zip(tops, tops[1:]) if before != now]
    assert h.changes == expected
    # the story the records tell: Elm → Harbour (her own word) → Harbour settled → Harbour rejected
    assert [c["to"] for c in h.changes][0] == "7 Harbour Road"
    assert h.changes[-1]["from"] == "7 Harbour Road" and h.changes[-1]["at"] == "2026-10-01T09:00:00"
    assert h.points[3].p == 1.0  # a settlement is the truth at its time


def test_the_window_keeps_its_points_and_the_change_into_it(mem):
    whole = mem.history("maya.home", end=END)
    part = mem.history("maya.home", start="2026-03-01", end="2026-06-30")
    assert [p.at for p in part.points] == ["2026-03-10T00:00:00", "2026-05-02T00:00:00"]
    assert part.points == whole.points[1:3]
    # the change at the window's first point is against the point before the window
    assert part.changes == [c for c in whole.changes if "2026-03-01" <= c["at"] <= "2026-06-30"]
    assert part.changes[0]["from"] == "12 Elm Street"
    # evidence after --to does not exist for the history
    assert mem.history("maya.home", end="2025-01-01").points[-1].at == "2024-10-01T00:00:00"


def test_a_question_without_evidence_has_no_points_and_bad_input_says_the_fix(mem):
    mem.ingest([R.question("maya.pet", ["cat", "dog"], subject="maya")])
    empty = mem.history("maya.pet", end=END)
    assert empty.points == [] and empty.changes == []
    with pytest.raises(StoreError, match="no question 'maya.hom'"):
        mem.history("maya.hom")
    with pytest.raises(StoreError, match="--from before --to"):
        mem.history("maya.home", start="2026-06-01", end="2026-01-01")


def test_cli_history_json_is_the_tool_result_and_the_table_shows_the_changes(tmp_path):
    db = str(tmp_path / "home.duckdb")
    with doxa.open(db) as memory:
        memory.ingest(home_records())
        expected = tools.history(memory, "maya.home", None, END)
    runner = CliRunner()
    out = runner.invoke(app, ["history", "maya.home", "--to", END, "--db", db, "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout) == json.loads(json.dumps(expected))
    assert set(json.loads(out.stdout)) >= {"question", "points", "changes"}
    text = runner.invoke(app, ["history", "maya.home", "--to", END, "--db", db])
    assert text.exit_code == 0, text.output
    assert "changed 2026-03-10: 12 Elm Street → 7 Harbour Road" in " ".join(text.stdout.split())
    bad = runner.invoke(app, ["history", "maya.home", "--from", "someday", "--db", db])
    assert bad.exit_code == 2 and "--from" in bad.output
    helped = runner.invoke(app, ["history", "--help"])
    assert helped.exit_code == 0 and "--from" in helped.stdout and "--to" in helped.stdout
