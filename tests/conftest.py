"""Shared fixtures: an in-memory store, small hand-written evidence, the record builders.

The builders live in tests/records.py (importable by hypothesis tests, which cannot
use function-scoped fixtures); the fixtures here wrap them.
"""

from __future__ import annotations

from datetime import datetime

import pytest

import doxa
import records as R

#: A moment after everything in ``small_store_records``: beliefs there are fully determined.
SMALL_NOW = datetime(2026, 6, 1)


@pytest.fixture
def mem():
    """A fresh ``:memory:`` store behind the Python API."""
    memory = doxa.open(":memory:")
    yield memory
    memory.close()


@pytest.fixture
def small_records() -> list[dict]:
    return R.small_store_records()


@pytest.fixture
def small_mem(mem, small_records):
    """``mem`` with the small hand-written store ingested."""
    mem.ingest(small_records)
    return mem


@pytest.fixture
def rec():
    """The record builders (``rec.message(...)``, ``rec.reading(...)``, ``rec.snapshot(store)``)."""
    return R
