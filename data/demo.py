"""The Maya example, as ingest records (docs/formats.md), and the store `doxa demo` writes.

Everything the seed's story needs: her diet from three messages of different sources
and ages, her partner Sam (vegetarian), a florist's marketing email (and a forwarded
copy) claiming she loves lilies against her own word, her old address and a recent
move, an old message about a peanut allergy that no question covers yet, the
instruction to avoid loud restaurants and her recent post about a loud taco place, and
an assistant note that must never count.
"""

from __future__ import annotations

from pathlib import Path

from .errors import StoreError

DEMO_NOW = "2026-12-01T12:00:00Z"
#: Where `doxa demo` writes unless given --db: never the store other commands use by default.
DEMO_DB = "doxa-demo.duckdb"
#: The `meta` row that marks a store as made by `doxa demo`, so that only such a store is replaced.
DEMO_MARK = ("made_by", "doxa demo")


def demo_records() -> list[dict]:
    def msg(mid, source, sent_at, text):
        return {"type": "message", "id": mid, "source": source, "sent_at": sent_at, "text": text}

    def reading(mid, question, probs, unclear=0.0, unrelated=0.0, one_off=0.0):
        return {"type": "reading", "message": mid, "question": question, "reader": "jev-1",
                "probs": probs, "unclear": unclear, "unrelated": unrelated, "one_off": one_off}

    return [
        {"type": "subject", "id": "maya", "name": "Maya", "aliases": ["my sister", "Maya Lind"]},
        {"type": "subject", "id": "sam", "name": "Sam", "aliases": ["Maya's partner"]},
        {"type": "relation", "from": "maya", "to": "sam", "kind": "partner"},
        # sources: the path is the layers, most general first; the id is the leaf
        {"type": "source", "id": "my-notes", "layers": ["user", "notes"]},
        {"type": "source", "id": "maya-chat", "layers": ["person", "self", "chat"]},
        {"type": "source", "id": "maya-social", "layers": ["person", "self", "social"]},
        {"type": "source", "id": "sam-chat", "layers": ["person", "self", "chat"]},
        {"type": "source", "id": "mum-chat", "layers": ["family", "about-other", "chat"]},
        {"type": "source", "id": "bloom-florist", "layers": ["business", "about-other", "email", "marketing"]},
        {"type": "source", "id": "my-forwards", "layers": ["user", "forwards"]},
        {"type": "source", "id": "assistant-notes", "layers": ["assistant", "notes"]},
        # questions: written by the organizer, never with a probability
        {"type": "question", "id": "maya.diet", "subject": "maya", "kind": "diet",
         "text": "What does Maya eat?", "shape": "choice",
         "options": ["vegetarian", "eats fish", "eats meat"]},
        {"type": "question", "id": "sam.diet", "subject": "sam", "kind": "diet",
         "text": "What does Sam eat?", "shape": "choice",
         "options": ["vegetarian", "eats fish", "eats meat"]},
        {"type": "question", "id": "maya.favourite_flower", "subject": "maya", "kind": "favourite_flower",
         "text": "Which flowers does Maya like best?", "shape": "choice",
         "options": ["lilies", "tulips", "roses", "peonies"]},
        {"type": "question", "id": "maya.home", "subject": "maya", "kind": "home_address",
         "text": "Where does Maya live?", "shape": "choice",
         "options": ["12 Elm Street", "7 Harbour Road"]},
        {"type": "question", "id": "maya.likes_loud_places", "subject": "maya", "kind": "likes_loud_places",
         "text": "Does Maya enjoy loud restaurants and bars?", "shape": "yes_no", "options": ["yes", "no"]},
        {"type": "question", "id": "maya.birthday", "subject": "maya", "kind": "birthday_month",
         "text": "In which month is Maya's birthday dinner?", "shape": "choice",
         "options": ["March", "April", "May"]},
        # diet: your note two years ago, her April cleanse, her June message
        msg("m1", "my-notes", "2024-11-20", "Maya is vegetarian, remember for dinners."),
        reading("m1", "maya.diet", {"vegetarian": 0.95, "eats fish": 0.02, "eats meat": 0.01},
                unclear=0.02, one_off=0.03),
        msg("m2", "maya-chat", "2026-04-14", "No meat for me this week, I'm doing a cleanse."),
        reading("m2", "maya.diet", {"vegetarian": 0.80, "eats fish": 0.08, "eats meat": 0.02},
                unclear=0.08, unrelated=0.02, one_off=0.85),
        msg("m3", "maya-chat", "2026-06-02", "Started eating fish again!"),
        reading("m3", "maya.diet", {"vegetarian": 0.01, "eats fish": 0.93, "eats meat": 0.0},
                unclear=0.04, unrelated=0.02, one_off=0.09),
        # Sam, her partner, is vegetarian: found only by stepping one hop out from Maya
        msg("s1", "sam-chat", "2025-09-03", "Still going strong with the veggie life, eight years now."),
        reading("s1", "sam.diet", {"vegetarian": 0.92, "eats fish": 0.03, "eats meat": 0.02},
                unclear=0.03, one_off=0.02),
        msg("s2", "maya-chat", "2026-10-12", "Sam made his famous lentil curry again, no meat in our house!"),
        reading("s2", "sam.diet", {"vegetarian": 0.78, "eats fish": 0.05, "eats meat": 0.02},
                unclear=0.12, unrelated=0.03, one_off=0.1),
        # flowers: her own word against a florist's marketing email (and a forwarded copy of it)
        msg("f1", "maya-chat", "2026-03-01", "Tulips are my favourite, lilies make me sneeze."),
        reading("f1", "maya.favourite_flower", {"lilies": 0.02, "tulips": 0.93, "roses": 0.02, "peonies": 0.01},
                unclear=0.02, one_off=0.02),
        msg("f2", "bloom-florist", "2026-09-10",
            "Maya loves lilies! Order her a lily bouquet today with 20% off at Bloom."),
        reading("f2", "maya.favourite_flower", {"lilies": 0.90, "tulips": 0.02, "roses": 0.02, "peonies": 0.02},
                unclear=0.04),
        msg("f3", "my-forwards", "2026-09-11",
            "Fwd: Maya loves lilies! Order her a lily bouquet today with 20% off at Bloom."),
        reading("f3", "maya.favourite_flower", {"lilies": 0.90, "tulips": 0.02, "roses": 0.02, "peonies": 0.02},
                unclear=0.04),
        # address: an old note and a recent move
        msg("a1", "my-notes", "2024-10-01", "Maya's address: 12 Elm Street, second floor."),
        reading("a1", "maya.home", {"12 Elm Street": 0.96, "7 Harbour Road": 0.01}, unclear=0.03),
        msg("a2", "maya-chat", "2026-08-15", "We finally moved! New place is 7 Harbour Road, come visit."),
        reading("a2", "maya.home", {"12 Elm Street": 0.02, "7 Harbour Road": 0.95}, unclear=0.03),
        # an old message about a peanut allergy: no question covers it yet (`doxa ask` finds it)
        msg("p1", "mum-chat", "2023-05-10",
            "Remember Maya is allergic to peanuts, no satay at the party please."),
        # loud places: an older dislike, the instruction, and her recent post
        msg("l1", "maya-chat", "2025-02-08", "That bar was way too loud for me, I left early."),
        reading("l1", "maya.likes_loud_places", {"yes": 0.06, "no": 0.88}, unclear=0.06, one_off=0.15),
        {"type": "instruction", "id": "i1", "subject": "maya", "text": "Avoid loud restaurants for Maya",
         "at": "2025-02-10", "rests_on": {"question": "maya.likes_loud_places", "answer": "no"}},
        msg("l2", "maya-social", "2026-11-20", "Loved the noise and chaos at Taco Loco last night, what a party!"),
        reading("l2", "maya.likes_loud_places", {"yes": 0.85, "no": 0.05}, unclear=0.1, one_off=0.2),
        # the birthday: one vague message, so the belief stays uncertain and doxa says to ask
        msg("b1", "mum-chat", "2026-02-02", "Isn't Maya's birthday sometime in spring? March or April I think."),
        reading("b1", "maya.birthday", {"March": 0.45, "April": 0.40, "May": 0.05}, unclear=0.1),
        # the assistant's own note: stored, never evidence
        msg("n1", "assistant-notes", "2026-06-03", "Assistant note: Maya is vegetarian."),
        reading("n1", "maya.diet", {"vegetarian": 0.97, "eats fish": 0.01, "eats meat": 0.01}, unclear=0.01),
    ]


#: Tables the store fills by itself (read logs, kept states, search terms, bookkeeping): what they
#: hold is not a record anyone wrote, so they may differ from a fresh demo's.
DERIVED_TABLES = frozenset({"meta", "reads", "read_logs", "belief_states", "evidence_epochs", "message_terms"})


def _connect_demo(path: str | Path):
    """A read-only connection to ``path`` when it is a DuckDB file, else None (not ours to open)."""
    import duckdb

    from .connection import connect

    with open(path, "rb") as handle:
        header = handle.read(12)
    # A DuckDB file says DUCK at byte 8; anything else is not ours to open, let alone replace.
    if header[8:12] != b"DUCK":
        return None
    try:
        return connect(str(path), read_only=True)
    except (duckdb.Error, StoreError) as err:
        raise StoreError(f"cannot open {path} to check it is a demo store: {err}") from err


def _is_marked(con) -> bool:
    import duckdb

    try:
        row = con.execute("SELECT value FROM meta WHERE key = ?", [DEMO_MARK[0]]).fetchone()
    except duckdb.Error:
        return False
    return row is not None and row[0] == DEMO_MARK[1]


def is_demo_store(path: str | Path) -> bool:
    """Whether ``path`` is a DuckDB file that `doxa demo` made (its ``meta`` carries :data:`DEMO_MARK`)."""
    con = _connect_demo(path)
    if con is None:
        return False
    try:
        return _is_marked(con)
    finally:
        con.close()


def _record_tables(con) -> dict[str, tuple[int, list | None]]:
    """Every record table of a store: (row count, its sorted ids where the table has an ``id`` column)."""
    tables = [t for (t,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE NOT internal").fetchall()
              if t not in DERIVED_TABLES]
    found = {}
    for table in tables:
        has_id = con.execute("SELECT count(*) FROM duckdb_columns() WHERE table_name = ? AND column_name = 'id'",
                             [table]).fetchone()[0]
        count = con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
        ids = None
        if has_id:
            ids = [i for (i,) in con.execute(f'SELECT id::VARCHAR FROM "{table}" ORDER BY 1').fetchall()]
        found[table] = (int(count), ids)
    return found


def records_beyond_demo(con) -> list[str]:
    """What a store (open on ``con``) holds beyond the records `doxa demo` writes, one line per
    table (empty: exactly the demo's records, so rebuilding it loses nothing of anyone's)."""
    from .store import Store

    with Store.memory() as fresh:
        fresh.ingest_records(demo_records())
        expected = _record_tables(fresh.con)
    beyond = []
    for table, (count, ids) in sorted(_record_tables(con).items()):
        want_count, want_ids = expected.get(table, (0, None))
        if ids is not None and want_ids is not None and ids != want_ids:
            extra = sorted(set(ids) - set(want_ids))
            shown = ", ".join(extra[:5]) + (f" and {len(extra) - 5} more" if len(extra) > 5 else "")
            beyond.append(f"{table}: {shown}" if extra else f"{table}: {count} rows where the demo writes {want_count}")
        elif count != want_count:
            beyond.append(f"{table}: {count} rows where the demo writes {want_count}")
    return beyond


def open_demo_store(path: str | None = None):
    """A fresh store at ``path`` (default :data:`DEMO_DB`), marked as the demo's.

    An existing file is rebuilt only when `doxa demo` made it and it holds exactly the demo's
    records; any other file is refused, so the demo never deletes anything it did not write.
    """
    from .durable import store_file
    from .store import Store

    path = str(path or DEMO_DB)
    if path != ":memory:":
        target = Path(path)
        if target.is_dir():
            raise StoreError(f"{path} is a directory, not a store: give `doxa demo --db` a file path")
        if target.exists():
            _check_replaceable(path)
            file = Path(store_file(path))  # through a symlink: the file it leads to
            file.unlink()
            Path(str(file) + ".wal").unlink(missing_ok=True)
    store = Store.open(path)
    with store.writing():  # a session of its own: the file is let go again once marked
        store.con.execute("INSERT INTO meta VALUES (?, ?)", list(DEMO_MARK))
    return store


def _check_replaceable(path: str) -> None:
    """Raise :class:`StoreError` unless ``path`` is a demo store holding only the demo's records."""
    elsewhere = ("give `doxa demo --db` a new path" if Path(path).name == DEMO_DB and Path(path).parent == Path(".")
                 else f"run `doxa demo` without --db (it writes ./{DEMO_DB}) or give --db a new path")
    con = _connect_demo(path)
    if con is None:
        raise StoreError(f"{path} is not a demo store (`doxa demo` did not make it), so the demo will not "
                         f"replace it: {elsewhere}")
    try:
        if not _is_marked(con):
            raise StoreError(f"{path} is not a demo store (`doxa demo` did not make it), so the demo will not "
                             f"replace it: {elsewhere}")
        beyond = records_beyond_demo(con)
    finally:
        con.close()
    if beyond:
        raise StoreError(f"{path} was made by `doxa demo` but holds records the demo did not write "
                         f"({'; '.join(beyond)}), so the demo will not replace it and they stay as they are: "
                         f"{elsewhere}")
