"""Conversations in: chat sessions kept turn by turn, then organized a window of turns at a time.

`doxa remember --conversation FILE` and :meth:`AgentMemory.remember_conversation` take chat
sessions in one of three forms (:func:`load_sessions`):

- a LongMemEval record (one JSON object with ``haystack_sessions``, ``haystack_dates`` and
  ``haystack_session_ids``; a session is a list of turns ``{"role", "content"}``);
- LongMemEval's own release, a JSON list of such records (every record's sessions, each once);
- neutral JSON Lines, one turn a line: ``{"session", "date", "role", "content"}`` (docs/formats.md).

**Kept.** Every turn is kept verbatim, in order, dated by its session (turn ``i`` at the session's
date + ``i`` seconds): the user's turns as messages from the user's own source
(:data:`USER_SOURCE`, ``person/self/chat/me-chat``), the assistant's as assistant notes
(:data:`ASSISTANT_SOURCE`: kept, searchable, never evidence). A message's id comes from its session
id and turn number, so a conversation remembered twice is stored once. The user is the subject
``me`` (:data:`doxa.inference.agent.answer.USER_SUBJECT`), made when the store has no user subject.
All of it is one transaction: a bad line refuses the whole file and writes nothing.

**Organized** (unless ``keep_only``). The user's turns of a session go to the organizer a window at
a time (:data:`DEFAULT_WINDOW` turns per call at most, :class:`~.organizer_schema.WindowRequest`):
the instructions first and the window's fixed rules next, byte-identical from call to call, so a
server that caches prompts reads them once; the turns numbered last. The reply says which turns
link, create or add a value to which question. Turns with nothing to track by a cheap check
(:func:`worth_organizing`: a few words, or no first-person word at all) are not shown. The reader
then reads only the (turn, question) pairs the organizer named, the questions of one turn in one
batch where the reader allows (:func:`~.remember.read_questions`). Each window is written in one
transaction (questions, values, readings, and every turn's state, ``done``); a failure leaves the
windows before it written and the rest kept, and running it again goes on where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from doxa.data import organizer_instructions, remembered
from doxa.data.errors import StoreError
from doxa.data.times import parse_time

from .answer import USER_ID, USER_SUBJECT, user_subject
from .organizer_memory import keeper, kept_organizer
from .organizer_schema import MAX_TURN_CHARS, WindowRequest
from .remember import Decisions, NO_ORGANIZER_HINT, NO_READER_HINT, RememberError, _model_errors, _models
from .remember import organizer_request, read_questions

if TYPE_CHECKING:
    from doxa.inference.read.memory import Memory

#: The user's own source: their side of the conversation (a person speaking for themself).
USER_SOURCE = "person/self/chat/me-chat"
#: The assistant's side: a first layer of ``assistant`` marks notes that are kept and never evidence.
ASSISTANT_SOURCE = "assistant/chat/assistant-chat"
ROLES = ("user", "assistant")
#: The most user turns shown to the organizer in one call (a session is split into windows of this many).
DEFAULT_WINDOW = 10
#: A user turn with fewer words than this is not shown to the organizer ("thanks!", "ok, go on").
MIN_WORDS = 4
#: Words that make a statement about the speaker or their people ("me" alone is mostly a request: "tell me").
FIRST_PERSON = frozenset({"i", "i'm", "im", "i've", "ive", "i'd", "i'll", "my", "mine", "myself", "we", "we're",
                          "we've", "our", "ours", "us", "me"})
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?")
#: LongMemEval's dates: "2023/05/21 (Sun) 19:50".
_LME_DATE = re.compile(r"^\s*(\d{4})/(\d{1,2})/(\d{1,2})\s*(?:\([A-Za-z]+\))?\s*(?:(\d{1,2}):(\d{2})(?::(\d{2}))?)?\s*$")


class ConversationError(StoreError):
    """A conversation file that cannot be read; the text names the line or field and the fix."""


@dataclass
class Session:
    """One chat session: its id, when it took place, its turns ``(role, content)`` in order."""

    id: str
    date: datetime
    turns: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.id = str(self.id)
        if not isinstance(self.date, datetime):
            self.date = parse_date(self.date)
        self.turns = [(str(role), str(content)) for role, content in self.turns]


def parse_date(value: Any) -> datetime:
    """An ISO 8601 date or date-time, or LongMemEval's "2023/05/21 (Sun) 19:50", as naive UTC."""
    if isinstance(value, str):
        found = _LME_DATE.match(value)
        if found:
            y, mo, d, h, mi, s = (int(x) if x else 0 for x in found.groups())
            return datetime(y, mo, d, h, mi, s)
    return parse_time(value)


# ---------------------------------------------------------------------------- reading the forms
def load_sessions(path: str | Path) -> list[Session]:
    """The sessions of a conversation file, in any of the three forms (see the module docstring).
    Raises :class:`ConversationError` naming every bad line or field (the first 20)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConversationError(f"no such file: {path}") from None
    except UnicodeDecodeError as err:
        raise ConversationError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start}): save it as UTF-8") from None
    stripped = text.lstrip()
    if not stripped:
        raise ConversationError(f"{path}: the file is empty: give chat sessions (docs/formats.md, \"Conversations\")")
    whole: Any = None
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, dict) and "haystack_sessions" in whole:
        return _check(path, _from_record(whole, ""))
    if isinstance(whole, list):
        problems: list[str] = []
        sessions: dict[str, Session] = {}
        for i, record in enumerate(whole):
            if not isinstance(record, dict) or "haystack_sessions" not in record:
                problems.append(f"[{i}]: not a LongMemEval record (an object with haystack_sessions)")
                continue
            found, bad = _from_record(record, f"[{i}].")
            problems += bad
            for s in found:
                if s.id in sessions and sessions[s.id].turns != s.turns:
                    problems.append(f"[{i}]: session {s.id!r} appears before with other turns: give each session "
                                    "one id")
                sessions.setdefault(s.id, s)
        return _check(path, (list(sessions.values()), problems))
    return _check(path, _from_lines(text))


def _check(path: Path, found: tuple[list[Session], list[str]]) -> list[Session]:
    sessions, problems = found
    if problems:
        shown = problems[:20] + ([f"… and {len(problems) - 20} more"] if len(problems) > 20 else [])
        raise ConversationError(f"{path}: {len(problems)} problem(s); nothing was remembered. Fix them and run "
                                "again:\n  " + "\n  ".join(shown))
    if not sessions:
        raise ConversationError(f"{path}: no turns found: give chat sessions (docs/formats.md, \"Conversations\")")
    return sessions


def _turn_problem(where: str, role: Any, content: Any) -> str | None:
    if role not in ROLES:
        return f"{where}role: unknown role {role!r}: a turn's role is \"user\" or \"assistant\""
    if not isinstance(content, str) or not content.strip():
        return f"{where}content: missing or empty: a turn's content is its text, as said"
    return None


def _from_record(record: dict[str, Any], at: str) -> tuple[list[Session], list[str]]:
    """The sessions of one LongMemEval record (``at``: where it is, for the errors)."""
    problems: list[str] = []
    raw = record.get("haystack_sessions")
    dates = record.get("haystack_dates")
    ids = record.get("haystack_session_ids")
    if not isinstance(raw, list):
        return [], [f"{at}haystack_sessions: expected a list of sessions (each a list of turns)"]
    if not isinstance(dates, list) or len(dates) != len(raw):
        return [], [f"{at}haystack_dates: expected one date per session ({len(raw)}), "
                    f"got {len(dates) if isinstance(dates, list) else type(dates).__name__}"]
    if ids is None:
        base = str(record.get("question_id") or "session")
        ids = [f"{base}_{n}" for n in range(1, len(raw) + 1)]
    if not isinstance(ids, list) or len(ids) != len(raw):
        return [], [f"{at}haystack_session_ids: expected one id per session ({len(raw)})"]
    sessions = []
    for n, (sid, date, turns) in enumerate(zip(ids, dates, raw)):
        where = f"{at}haystack_sessions[{n}]"
        try:
            when = parse_date(date)
        except ValueError as err:
            problems.append(f"{at}haystack_dates[{n}]: {err}")
            continue
        if not isinstance(turns, list):
            problems.append(f"{where}: expected a list of turns {{\"role\", \"content\"}}")
            continue
        kept = []
        for i, turn in enumerate(turns):
            if not isinstance(turn, dict):
                problems.append(f"{where}[{i}]: expected a turn {{\"role\", \"content\"}}")
                continue
            problem = _turn_problem(f"{where}[{i}].", turn.get("role"), turn.get("content"))
            if problem:
                problems.append(problem)
                continue
            kept.append((turn["role"], turn["content"]))
        if not isinstance(sid, (str, int)) or not str(sid).strip():
            problems.append(f"{at}haystack_session_ids[{n}]: a session id is a non-empty string")
            continue
        sessions.append(Session(str(sid), when, kept))
    return sessions, problems


def _from_lines(text: str) -> tuple[list[Session], list[str]]:
    """Neutral JSON Lines: one ``{"session", "date", "role", "content"}`` a line."""
    problems: list[str] = []
    sessions: dict[str, Session] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as err:
            problems.append(f"line {number}: not JSON ({err.msg} at column {err.colno}): each line is one "
                            "{\"session\", \"date\", \"role\", \"content\"} object")
            continue
        if not isinstance(value, dict):
            problems.append(f"line {number}: expected a JSON object {{\"session\", \"date\", \"role\", \"content\"}}")
            continue
        missing = [k for k in ("session", "date", "role", "content") if value.get(k) in (None, "")]
        if missing:
            problems.append(f"line {number}: missing field(s) {', '.join(repr(k) for k in missing)}: each line is "
                            "{\"session\", \"date\", \"role\", \"content\"}")
            continue
        unknown = sorted(set(value) - {"session", "date", "role", "content", "has_answer"})
        if unknown:
            problems.append(f"line {number}: unknown field(s) {unknown}: a turn has session, date, role and content")
            continue
        problem = _turn_problem(f"line {number}: ", value["role"], value["content"])
        if problem:
            problems.append(problem)
            continue
        try:
            when = parse_date(value["date"])
        except ValueError as err:
            problems.append(f"line {number}: date: {err}")
            continue
        sid = str(value["session"])
        session = sessions.get(sid)
        if session is None:
            session = sessions[sid] = Session(sid, when, [])
        elif when != session.date:
            problems.append(f"line {number}: date {value['date']!r} differs from the date of session {sid!r} "
                            f"({session.date.isoformat()}): every turn of a session carries the session's date")
            continue
        session.turns.append((value["role"], value["content"]))
    return list(sessions.values()), problems


# ---------------------------------------------------------------------------- what is kept
def turn_message_id(session_id: str, index: int, occurrence: int = 0) -> str:
    """A turn's message id, from its session id and its number in the session. ``occurrence``: the
    how-many-eth session of that id this one is in what was given (LongMemEval's haystacks repeat an
    id now and then, with other turns or another date); the first keeps the plain id, so a file
    remembered again gives the same ids."""
    key = str(session_id) if occurrence == 0 else f"{session_id}#{occurrence}"
    return f"turn-{hashlib.sha1(key.encode('utf-8')).hexdigest()[:16]}-{index:04d}"


def worth_organizing(text: str) -> bool:
    """Whether a user turn may tell something to track: at least :data:`MIN_WORDS` words, one of them
    in the first person. (On LongMemEval's oracle dev haystacks it keeps 655 of 660 user turns and
    every one of the 103 that hold an answer: its job is "ok thanks" and pure questions.)"""
    tokens = [w.lower().replace("’", "'") for w in _WORD.findall(text)]
    return len(tokens) >= MIN_WORDS and any(t in FIRST_PERSON for t in tokens)


@dataclass
class ModelCost:
    """What one model did: HTTP calls, the tokens its server reported, the seconds waited for it."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0


@dataclass
class ConversationResult:
    """What :func:`remember_conversation` did (``doxa remember --conversation --json``)."""

    sessions: int = 0
    turns: int = 0
    user_turns: int = 0
    assistant_turns: int = 0
    #: messages newly stored (0 when the conversation was kept before)
    messages_added: int = 0
    keep_only: bool = False
    #: user turns not organized before this call, shown to the organizer, left out by the cheap check
    to_organize: int = 0
    organized_turns: int = 0
    skipped_turns: int = 0
    windows: int = 0
    #: windows the server refused as longer than its context, each split in two (and the ones after it cut smaller)
    windows_split: int = 0
    questions_created: list[str] = field(default_factory=list)
    questions_linked: list[str] = field(default_factory=list)
    values_added: dict[str, list[str]] = field(default_factory=dict)
    readings: int = 0
    organizer: ModelCost = field(default_factory=ModelCost)
    reader: ModelCost = field(default_factory=ModelCost)
    #: done, or pending (no organizer / no reader: kept, waiting; `doxa organize` or a later run finishes)
    status: str = "done"
    hint: str | None = None
    organizer_name: str | None = None
    reader_name: str | None = None
    instructions_version: int | None = None

    def per_user_turn(self) -> dict[str, float]:
        """Model cost per user turn of the conversation."""
        n = max(self.user_turns, 1)
        out = {}
        for who in ("organizer", "reader"):
            cost = getattr(self, who)
            for key in ("calls", "prompt_tokens", "completion_tokens", "seconds"):
                out[f"{who}_{key}"] = getattr(cost, key) / n
        return out

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["per_user_turn"] = self.per_user_turn()
        return out


# ---------------------------------------------------------------------------- model cost
@contextmanager
def _metered(client, cost: ModelCost):
    """Count ``client``'s HTTP calls and reported tokens (from each reply's ``usage``) and the seconds
    spent inside the block into ``cost``. A client without an HTTP endpoint counts seconds only."""
    endpoint = getattr(client, "endpoint", None)
    post = getattr(endpoint, "post", None)
    before = getattr(endpoint, "requests", None)
    counts_itself = hasattr(client, "prompt_tokens")  # the organizer keeps its own count
    tokens_before = (client.prompt_tokens, client.completion_tokens) if counts_itself else None
    if callable(post) and not counts_itself:
        def counting(body, _post=post):
            answer = _post(body)
            usage = answer.get("usage") if isinstance(answer, dict) else None
            if isinstance(usage, dict):
                cost.prompt_tokens += int(usage.get("prompt_tokens") or 0)
                cost.completion_tokens += int(usage.get("completion_tokens") or 0)
            return answer

        endpoint.post = counting
    start = time.perf_counter()
    try:
        yield
    finally:
        cost.seconds += time.perf_counter() - start
        if callable(post) and not counts_itself:
            del endpoint.post  # the instance attribute goes: the class's method again
        if isinstance(before, int):
            cost.calls += endpoint.requests - before
        if tokens_before is not None:
            cost.prompt_tokens += client.prompt_tokens - tokens_before[0]
            cost.completion_tokens += client.completion_tokens - tokens_before[1]


# ---------------------------------------------------------------------------- remembering
@dataclass
class _Turn:
    id: str
    session: str
    index: int
    role: str
    text: str
    sent_at: datetime


def _turns(sessions: Sequence[Session]) -> list[_Turn]:
    seen: dict[str, int] = {}
    occurrence = []  # of each session, in the order given: two sessions of one id get two sets of ids
    for s in sessions:
        occurrence.append(seen.get(s.id, 0))
        seen[s.id] = occurrence[-1] + 1
    out = []
    # stable: sessions of one date keep their order
    for n in sorted(range(len(sessions)), key=lambda n: sessions[n].date):
        s = sessions[n]
        for i, (role, text) in enumerate(s.turns):
            out.append(_Turn(turn_message_id(s.id, i, occurrence[n]), s.id, i, role, text,
                             s.date + timedelta(seconds=i)))
    return out


def _sources(store) -> tuple[list[dict[str, Any]], str, str]:
    """(records to add, the user's source id, the assistant's source id)."""
    records = []
    ids = []
    for path in (USER_SOURCE, ASSISTANT_SOURCE):
        leaf = path.rsplit("/", 1)[-1]
        row = store.execute("SELECT path FROM sources WHERE id = ?", [leaf]).fetchone()
        if row is None:
            records.append({"type": "source", "id": leaf, "layers": path.split("/")[:-1]})
        elif row[0] != path:
            raise RememberError(f"source {leaf!r} is stored with path {row[0]!r}, not {path!r}: a conversation keeps "
                                f"the user's turns under {USER_SOURCE} and the assistant's under {ASSISTANT_SOURCE}")
        ids.append(leaf)
    return records, ids[0], ids[1]


def keep_turns(memory: "Memory", turns: list[_Turn], *, pending: bool) -> int:
    """Store every turn not stored yet, with the sources and the user subject, in one transaction;
    ``pending``: mark the user's new turns as waiting for the organizer. Returns the messages added."""
    store = memory.store
    records, user_source, assistant_source = _sources(store)
    if user_subject(store) is None:
        records.insert(0, dict(USER_SUBJECT))
    ids = [t.id for t in turns]
    stored = {row[0]: row[1:] for row in store.execute(
        "SELECT id, text, source, sent_at FROM messages WHERE id IN (SELECT unnest(?::VARCHAR[]))", [ids]).fetchall()}
    new = []
    for t in turns:
        source = user_source if t.role == "user" else assistant_source
        if t.id in stored:
            if tuple(stored[t.id]) != (t.text, source, t.sent_at):
                raise RememberError(f"session {t.session!r} turn {t.index}: message {t.id} is stored with other "
                                    "content: evidence is never edited; give the changed session a new id")
            continue
        new.append(t)
        records.append({"type": "message", "id": t.id, "source": source, "sent_at": t.sent_at.isoformat(),
                        "text": t.text})
    states = [{"message": t.id, "status": remembered.PENDING, "waiting_for": "organizer",
               "reason": "a conversation turn, not organized yet"} for t in new if t.role == "user" and pending]
    if records:
        memory.ingest(records, also=(lambda con: remembered.mark_remembered(con, states)) if states else None)
    return len(new)


def _not_done(store, turns: list[_Turn]) -> list[_Turn]:
    """The user turns not organized yet (no state, or pending for the organizer)."""
    ids = [t.id for t in turns if t.role == "user"]
    done = {row[0] for row in store.execute(
        "SELECT message FROM remembered WHERE (status = 'done' OR waiting_for = 'reader') "
        "AND message IN (SELECT unnest(?::VARCHAR[]))", [ids]).fetchall()}
    return [t for t in turns if t.role == "user" and t.id not in done]


def _windows(turns: list[_Turn], window: int, max_chars: int | None = None) -> list[list[_Turn]]:
    """The turns to organize cut into windows: within one session, at most ``window`` turns each, and
    at most ``max_chars`` characters of turns shown (a single longer turn is a window of its own)."""
    out: list[list[_Turn]] = []
    size = 0
    for t in turns:
        length = min(len(t.text), MAX_TURN_CHARS)
        if (out and out[-1][0].session == t.session and len(out[-1]) < window
                and (max_chars is None or size + length <= max_chars)):
            out[-1].append(t)
            size += length
        else:
            out.append([t])
            size = length
    return out


def remember_conversation(memory: "Memory", sessions: str | Path | Iterable[Session], *, keep_only: bool = False,
                          organizer=None, reader=None, progress: Callable[[int, int], None] | None = None,
                          window: int = DEFAULT_WINDOW, use_env: bool = True,
                          reuse_decisions: bool = True) -> ConversationResult:
    """Keep a conversation's turns, then (unless ``keep_only``) organize the user's turns a window at a
    time and read the turns against the questions the organizer named. See the module docstring.

    ``sessions``: a file (:func:`load_sessions`) or :class:`Session` objects. ``organizer`` / ``reader``:
    default from the environment when ``use_env``. ``progress(done, total)``: after each window.
    ``window``: the most user turns per organizer call (within one session). Each window's decision is
    kept (table ``organizer_decisions``) and identical inputs are answered from it with no model call,
    unless ``reuse_decisions`` is False (:mod:`.organizer_memory`). Raises
    :class:`ConversationError` for a bad file (nothing written) and :class:`RememberError` when a model
    fails (the windows before are written; run it again to go on)."""
    if not isinstance(window, int) or window < 1:
        raise ConversationError(f"window must be a whole number ≥ 1 (user turns per organizer call), got {window!r}")
    if isinstance(sessions, (str, Path)):
        sessions = load_sessions(sessions)
    sessions = [s if isinstance(s, Session) else Session(*s) for s in sessions]
    for s in sessions:
        for i, (role, content) in enumerate(s.turns):
            problem = _turn_problem(f"session {s.id!r} turn {i}: ", role, content)
            if problem:
                raise ConversationError(problem + "; nothing was remembered")
    turns = _turns(sessions)
    result = ConversationResult(sessions=len(sessions), turns=len(turns), keep_only=keep_only,
                                user_turns=sum(t.role == "user" for t in turns))
    result.assistant_turns = result.turns - result.user_turns
    if not keep_only:
        organizer, reader = _models(organizer, reader, use_env)
        organizer = kept_organizer(organizer, memory.store, reuse=reuse_decisions)
    result.messages_added = keep_turns(memory, turns, pending=not keep_only)
    if keep_only:
        return result
    todo = _not_done(memory.store, turns)
    result.to_organize = len(todo)
    to_read = _pending_reads(memory.store, turns)  # organized by an earlier run, not read yet
    windows: list[list[_Turn]] = []
    if todo and organizer is None:
        result.status, result.hint = "pending", NO_ORGANIZER_HINT
        todo = []
    if todo:
        candidates = [t for t in todo if worth_organizing(t.text)]
        skipped = [t for t in todo if not worth_organizing(t.text)]
        result.skipped_turns = len(skipped)
        windows = _windows(candidates, window)
        instructions = organizer_instructions.current(memory.store, organizer_instructions.ORGANIZER)
        result.organizer_name, result.instructions_version = organizer.name, instructions.version
        # the skipped turns are done: nothing in them to track (a later instructions version may say otherwise)
        skip_states = [{"message": t.id, "status": remembered.DONE, "reason": "skipped: nothing to track (few "
                        "words, or no first-person statement)"} for t in skipped]
        if skip_states:
            memory.ingest([], also=lambda con: remembered.mark_remembered(con, skip_states))
    linked, created = [], []
    queue = deque(windows)
    done = 0
    while queue:
        turns_of_window = queue.popleft()
        try:
            to_read += _organize_window(memory, turns_of_window, organizer, instructions, result, linked, created)
        except _model_errors() as err:
            if getattr(err, "context_overflow", False) and len(turns_of_window) > 1:
                # the server's context is too small for this window: halve it, and the windows still to come
                half = len(turns_of_window) // 2
                queue.extendleft([turns_of_window[half:], turns_of_window[:half]])
                budget = max(1, sum(min(len(t.text), MAX_TURN_CHARS) for t in turns_of_window) // 2)
                queue = deque(w for rest in queue for w in _windows(rest, window, budget))
                result.windows_split += 1
                continue
            raise RememberError(f"window {done + 1} of {done + 1 + len(queue)} (session "
                                f"{turns_of_window[0].session!r}): the organizer failed; the {done} window(s) before "
                                f"it are written and every turn is kept: run it again to go on. {err}") from err
        done += 1
        result.windows += 1
        if progress:
            progress(done, done + len(queue) + len(to_read))
    if to_read and reader is None:
        result.status, result.hint = "pending", result.hint or NO_READER_HINT
    elif to_read:
        total = done + len(to_read)
        try:
            _read_turns(memory, to_read, reader, result, (lambda d, _: progress(done + d, total)) if progress else None)
        except _model_errors() as err:
            raise RememberError(f"the reader failed; every window is organized and the turns read so far are "
                                f"written: run it again to read the rest. {err}") from err
    result.questions_linked = list(dict.fromkeys(linked))
    result.questions_created = list(dict.fromkeys(created))
    return result


def _organize_window(memory: "Memory", turns: list[_Turn], organizer, instructions, result: ConversationResult,
                     linked: list[str], created: list[str]) -> list[tuple[_Turn, list[str]]]:
    """Organize one window and write what it decided, the turns with questions left waiting for the
    reader: (turn, its questions) for each of those."""
    store = memory.store
    user_source = USER_SOURCE.rsplit("/", 1)[-1]
    text = "\n".join(t.text for t in turns)
    base = organizer_request(memory, text, user_source, USER_SOURCE, turns[0].sent_at, messages=len(turns))
    request = WindowRequest(text=text, source=base.source, source_path=base.source_path, sent_at=base.sent_at,
                            subjects=base.subjects, questions=base.questions,
                            known_subject_ids=base.known_subject_ids,
                            turns=[(n, t.text) for n, t in enumerate(turns, start=1)],
                            user=user_subject(store) or USER_ID)
    with _metered(organizer, result.organizer):
        organized = organizer.organize_window(request, instructions.text)
    out = organized.output
    at = turns[-1].sent_at
    decisions = Decisions(store, request, organizer.name, instructions.version, at)
    decisions.people(out)
    per_turn: dict[int, list[str]] = {}
    for t in out.turns:
        bears, made = decisions.apply(t)
        per_turn[t.turn] = list(dict.fromkeys(bears + made))
        linked.extend(bears)
        created.extend(made)
    records = decisions.records()
    for qid, values in decisions.adding.items():
        have = result.values_added.setdefault(qid, [])
        have += [v for v in values if v not in have]
    for q in decisions.created:
        if q.get("open"):
            have = result.values_added.setdefault(q["id"], [])
            have += [v for v in q["options"] if v not in have]
    states, to_read = [], []
    organizer_calls = organized.calls
    for n, t in enumerate(turns, start=1):
        questions = per_turn.get(n, [])
        state = {"message": t.id, "status": remembered.DONE, "waiting_for": None, "reason": None,
                 "organizer": organizer.name, "instructions_version": instructions.version, "questions": questions,
                 "organizer_calls": organizer_calls}
        organizer_calls = 0  # the window's calls are counted once, on its first turn
        if questions:  # read after every window is organized (see _read_turns)
            state.update(status=remembered.PENDING, waiting_for="reader", reason="organized; to be read")
            to_read.append((t, questions))
        states.append(state)
    result.organized_turns += len(turns)
    made = [q["id"] for q in decisions.created]
    keep = keeper(organized, messages=[t.id for t in turns], instructions_version=instructions.version,
                  created=made, linked=list(dict.fromkeys(q for qs in per_turn.values() for q in qs if q not in made)))

    def also(con) -> None:  # inside the ingest's transaction: the turns' states, and the decision applied
        remembered.mark_remembered(con, states)
        keep(con)

    memory.ingest(records, also=also)
    return to_read


def _read_turns(memory: "Memory", to_read: list[tuple[_Turn, list[str]]], reader, result: ConversationResult,
                progress: Callable[[int, int], None] | None) -> None:
    """Read each (turn, the questions the organizer named for it), one transaction per turn (its readings
    and its state, done). The organizer's calls all come first and the reader's after them, so each
    model's fixed prompt opening stays in a prompt-caching server's cache from one call to the next."""
    store = memory.store
    names = {s["id"]: s["name"] for s in store.subjects()}
    result.reader_name = getattr(reader, "name", type(reader).__name__)
    asked_cache: dict[str, tuple[str, list[str], str, bool]] = {}
    for done, (t, questions) in enumerate(to_read, start=1):
        asked = []
        for qid in questions:
            if qid not in asked_cache:
                q = store.question(qid)
                asked_cache[qid] = (q["text"], list(q["options"]), names.get(q["subject"], q["subject"]),
                                    bool(q["open"]))
            asked.append(asked_cache[qid])
        calls_before = result.reader.calls
        with _metered(reader, result.reader):
            readings = read_questions(reader, t.text, asked)
        calls = (result.reader.calls - calls_before) if hasattr(reader, "endpoint") else len(asked)
        records = [reading.to_record(t.id, qid) for qid, reading in zip(questions, readings)]
        state = {"message": t.id, "status": remembered.DONE, "waiting_for": None, "reason": None,
                 "reader": result.reader_name, "questions": questions, "reader_calls": calls}
        memory.ingest(records, also=lambda con, state=state: remembered.mark_remembered(con, [state]))
        result.readings += len(readings)
        if progress:
            progress(done, len(to_read))


def _pending_reads(store, turns: list[_Turn]) -> list[tuple[_Turn, list[str]]]:
    """The user turns organized before but waiting for the reader, with their questions."""
    by_id = {t.id: t for t in turns if t.role == "user"}
    rows = store.execute("SELECT message, questions FROM remembered WHERE status = 'pending' AND waiting_for = 'reader' "
                         "AND message IN (SELECT unnest(?::VARCHAR[]))", [list(by_id)]).fetchall()
    waiting = {m: list(q) for m, q in rows}
    return [(by_id[m], waiting[m]) for m in by_id if m in waiting]


__all__ = ["Session", "ConversationResult", "ConversationError", "ModelCost", "load_sessions", "parse_date",
           "remember_conversation", "keep_turns", "turn_message_id", "worth_organizing", "USER_SOURCE",
           "ASSISTANT_SOURCE", "DEFAULT_WINDOW", "MIN_WORDS"]
