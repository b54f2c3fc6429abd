"""Builders of docs/formats.md records for tests, and a snapshot of a store's contents.

Each builder returns the plain dict a caller would write as one JSON line, so tests
read like the ingest files they stand for.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

#: Tables whose contents must not move when an ingest is refused (every table of schema.sql
#: a caller can write to, plus the ones written as a side effect of ingest).
STORE_TABLES = ("subjects", "relations", "sources", "messages", "questions", "readings", "settlements",
                "rejections", "instructions", "params", "reads", "message_terms", "prompts", "remembered")


def subject(id: str, name: str | None = None, aliases: list[str] | None = None) -> dict:
    return {"type": "subject", "id": id, "name": name or id.title(), "aliases": aliases or []}


def relation(from_: str, to: str, kind: str = "partner") -> dict:
    return {"type": "relation", "from": from_, "to": to, "kind": kind}


def source(id: str, layers: list[str], trust: float | None = None) -> dict:
    record = {"type": "source", "id": id, "layers": layers}
    if trust is not None:
        record["trust"] = trust
    return record


def question(id: str, options: list[str], kind: str | None = None, subject: str | None = None,
             text: str | None = None, shape: str = "choice") -> dict:
    record = {"type": "question", "id": id, "kind": kind or id.split(".")[-1], "text": text or f"What is {id}?",
              "shape": shape, "options": options}
    if subject is not None:
        record["subject"] = subject
    return record


def message(id: str, source: str, sent_at: str, text: str, received_at: str | None = None) -> dict:
    record = {"type": "message", "id": id, "source": source, "sent_at": sent_at, "text": text}
    if received_at is not None:
        record["received_at"] = received_at
    return record


def reading(message: str, question: str, probs: dict[str, float], reader: str = "reader-1",
            unclear: float = 0.0, unrelated: float = 0.0, one_off: float = 0.0) -> dict:
    return {"type": "reading", "message": message, "question": question, "reader": reader, "probs": probs,
            "unclear": unclear, "unrelated": unrelated, "one_off": one_off}


def settlement(question: str, answer: str, at: str, how: str = "correction") -> dict:
    return {"type": "settlement", "question": question, "answer": answer, "at": at, "how": how}


def rejection(question: str, answer: str, at: str) -> dict:
    return {"type": "rejection", "question": question, "answer": answer, "at": at}


def instruction(id: str, text: str, at: str, subject: str | None = None) -> dict:
    record = {"type": "instruction", "id": id, "text": text, "at": at}
    if subject is not None:
        record["subject"] = subject
    return record


def to_lines(records: Iterable[dict]) -> list[str]:
    return [json.dumps(r) for r in records]


def write_jsonl(path, records: Iterable[dict]) -> str:
    path.write_text("\n".join(to_lines(records)) + "\n", encoding="utf-8")
    return str(path)


def snapshot(store) -> dict[str, Any]:
    """Every row of every table, in a stable order: equal snapshots mean an unchanged store."""
    out: dict[str, Any] = {"counts": store.counts()}
    for table in STORE_TABLES:
        rows = store.con.execute(f"SELECT * FROM {table}").fetchall()
        out[table] = sorted(rows, key=repr)
    return out


# ---------------------------------------------------------------------------- a small hand-written store
DIET = ["vegetarian", "eats fish", "eats meat"]


def small_store_records() -> list[dict]:
    """Two people, three sources of different trust, two questions, a few readings.

    Small enough to reason about by hand; the tests that use it state what they expect.
    """
    return [
        subject("maya"),
        subject("sam"),
        relation("maya", "sam"),
        source("maya-chat", ["person", "self", "chat"]),
        source("florist", ["business", "about-other", "email", "marketing"], trust=0.4),
        source("notes", ["user", "notes"]),
        source("helper", ["assistant", "notes"]),
        question("maya.diet", DIET, kind="diet", subject="maya"),
        question("sam.diet", DIET, kind="diet", subject="sam"),
        question("maya.flower", ["lilies", "tulips"], kind="flower", subject="maya"),
        message("m1", "notes", "2025-01-10", "Maya is vegetarian, remember it for dinners."),
        reading("m1", "maya.diet", {"vegetarian": 0.9, "eats fish": 0.05, "eats meat": 0.0}, unclear=0.05),
        message("m2", "maya-chat", "2026-03-01", "I have started eating fish again, finally!"),
        reading("m2", "maya.diet", {"vegetarian": 0.05, "eats fish": 0.9, "eats meat": 0.0}, unclear=0.05),
        message("m3", "maya-chat", "2026-02-01", "Tulips are my favourite, lilies make me sneeze."),
        reading("m3", "maya.flower", {"lilies": 0.05, "tulips": 0.9}, unclear=0.05),
        message("m4", "florist", "2026-04-01", "Maya loves lilies! Order a bouquet today."),
        reading("m4", "maya.flower", {"lilies": 0.9, "tulips": 0.05}, unclear=0.05),
        message("m5", "maya-chat", "2026-01-15", "Sam cooked his lentil curry again, no meat at home."),
        reading("m5", "sam.diet", {"vegetarian": 0.8, "eats fish": 0.05, "eats meat": 0.05}, unclear=0.1),
        message("n1", "helper", "2026-03-02", "Assistant note: Maya is still vegetarian."),
        reading("n1", "maya.diet", {"vegetarian": 0.97, "eats fish": 0.02, "eats meat": 0.01}),
    ]
