"""The evidence table as arrays: what the scorer and the nightly fit both consume.

One vectorised load (a few SQL queries, ``fetchnumpy``, no per-row Python) turns the
store into :class:`Evidence`. Rules of docs/design.md §1 are applied here, once:

- copies of one message (same fingerprint) are one evidence unit: per (fingerprint,
  question) only the earliest message's reading counts (ties: smallest message id,
  then reader name), so ingest order never matters;
- messages from ``assistant/…`` sources never count;
- only evidence, settlements and rejections at or before ``at`` are loaded.

Rows are sorted by (question index, time, message id). Times are float days since
1970-01-01 (UTC).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

EPOCH_DAYS_SQL = "epoch({col}) / 86400.0"

#: A source with at most this many messages in its history (below) has no history to speak
#: of: its readings can form a campaign (:mod:`doxa.model.independence`). Kept here, with the
#: rule that counts the history, because writes must know when a source crosses it.
FRESH_READINGS = 3
#: Which of the messages sharing a fingerprint is the original (the rest are copies): the
#: earliest, ties broken as the evidence breaks them (the message id's hash), then by the id.
FIRST_COPY_KEY_SQL = "{'t': sent_at, 'h': hash(message) & ~65535::UBIGINT, 'id': message}"


def mark_copies_sql(fps: str) -> str:
    """SQL setting ``readings.is_copy`` on every reading whose ``fp`` the query ``fps`` returns: true
    where an earlier message with a counted reading has the same fingerprint, false elsewhere
    (assistant notes included). A copy is no new evidence (one unit with its original) and adds
    nothing to its source's history."""
    return f"""
UPDATE readings SET is_copy = coalesce(readings.message <> f.first, false)
FROM (SELECT fp, arg_min(message, {FIRST_COPY_KEY_SQL}) FILTER (WHERE counts) AS first FROM readings
      WHERE fp IN ({fps}) GROUP BY fp) f
WHERE readings.fp = f.fp AND readings.is_copy IS DISTINCT FROM coalesce(readings.message <> f.first, false)
"""


#: A source's history: its messages, copies not counted, with a counted reading on an active
#: question up to the cut ``?``; for the sources ``{sources}`` (a query of ids). Inactive
#: questions are few, so leaving theirs out is cheaper than joining the active ones in.
HISTORY_SQL = """
SELECT source, count(DISTINCT message) AS n FROM readings
WHERE counts AND NOT is_copy AND sent_at <= ? AND source IN ({sources})
  AND question NOT IN (SELECT id FROM questions WHERE status <> 'active')
GROUP BY source
"""

#: Joins a question's kind and options into its ``options_key`` (the ASCII unit separator,
#: a control character no name may hold, so two different lists never join alike).
OPTIONS_KEY_SEPARATOR = "\x1f"
#: The same key computed in SQL over the ``questions`` table.
OPTIONS_KEY_SQL = (f"kind || chr({ord(OPTIONS_KEY_SEPARATOR)}) || "
                   f"array_to_string(options, chr({ord(OPTIONS_KEY_SEPARATOR)}))")


def options_key(kind: str, options: list[str]) -> str:
    """The key under which questions of one kind with these options share their priors."""
    return OPTIONS_KEY_SEPARATOR.join([kind, *options])


#: The last state of an open (value) question: "a value no evidence has named yet" (docs/design.md §2,
#: open questions; docs/formats.md "question"). No option of an open question, and no settlement's
#: answer, may be this word.
UNLISTED = "unlisted"
#: Starts the options key of an open question, so an open and a closed question never share priors
#: (a control character no name may hold).
OPEN_KEY_MARK = "\x1e"


def open_question_states(options: list[list[str]], keys: np.ndarray, group_of: np.ndarray,
                         is_open: np.ndarray) -> tuple[list[list[str]], np.ndarray, np.ndarray]:
    """The states of open questions: their listed values, then :data:`UNLISTED`; their options keys
    marked open. ``options``/``keys``/``group_of`` as the store's question table holds them (lists
    shared per group; open and closed questions never share a group)."""
    keys = np.asarray(keys, dtype=object).copy()
    extended: dict[int, list[str]] = {}
    states = list(options)
    for i in np.flatnonzero(is_open).tolist():
        g = int(group_of[i])
        if g not in extended:
            extended[g] = [*options[i], UNLISTED]
        states[i] = extended[g]
        keys[i] = OPEN_KEY_MARK + str(keys[i])
    return states, keys, group_of


@dataclass
class QuestionTable:
    """Active questions, indexed 0..Q-1 in id order.

    Questions with the same kind and options share one ``options`` list object: read it,
    do not change it in place.
    """

    ids: np.ndarray  # (Q,) object: question id
    subjects: np.ndarray  # (Q,) object: subject id or None
    kinds: np.ndarray  # (Q,) object: kind
    texts: np.ndarray  # (Q,) object
    shapes: np.ndarray  # (Q,) object
    options: list[list[str]]  # per question, in stored order
    n_options: np.ndarray  # (Q,) int64
    options_key: np.ndarray  # (Q,) object: kind + options joined; equal keys share priors
    option_group: np.ndarray | None = None  # (Q,) int64: equal numbers, equal options_key (computed if None)
    id_hash: np.ndarray | None = None  # (Q,) uint64: DuckDB's hash(id), to match rows keyed by question
    #: (Q,) bool: open (value) questions, whose last option is :data:`UNLISTED` (None: all closed)
    is_open: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.is_open is None:
            self.is_open = np.zeros(len(self.ids), dtype=bool)

    def option_groups(self) -> tuple[np.ndarray, np.ndarray]:
        """(a representative question of each distinct options_key, each question's group number)."""
        if self.option_group is None:
            _, self.option_group = np.unique(self.options_key.astype(str), return_inverse=True)
            self.option_group = self.option_group.reshape(-1)
        group = self.option_group
        n_groups = int(group.max()) + 1 if len(group) else 0
        first = np.full(n_groups, len(group), dtype=np.int64)
        np.minimum.at(first, group, np.arange(len(group)))
        return first, group

    @property
    def k_max(self) -> int:
        return int(self.n_options.max()) if len(self.n_options) else 2

    def index(self) -> dict[str, int]:
        return {qid: i for i, qid in enumerate(self.ids.tolist())}

    def take(self, rows: np.ndarray, ids: np.ndarray) -> "QuestionTable":
        """The questions at ``rows`` (repeats allowed) as a table of their own, named ``ids``: the
        pseudo-questions that copy a question (with planted claims, or cut at a time). Their
        option groups are numbered afresh."""
        rows = np.asarray(rows, dtype=np.int64)
        return QuestionTable(ids=np.asarray(ids, dtype=object), subjects=self.subjects[rows], kinds=self.kinds[rows],
                             texts=self.texts[rows], shapes=self.shapes[rows],
                             options=[self.options[r] for r in rows.tolist()], n_options=self.n_options[rows],
                             options_key=self.options_key[rows], is_open=self.is_open[rows])


@dataclass
class SourceTable:
    """Sources that appear in the loaded evidence, indexed 0..S-1."""

    ids: np.ndarray  # (S,) object
    paths: np.ndarray  # (S,) object: layers/…/id
    trust: np.ndarray  # (S,) float64: user-stated trust, NaN where none
    #: (S,) messages of each source with a counted reading up to the cut, on every question
    #: (not only the loaded ones), so a source's history does not depend on which questions
    #: were asked about; None where the caller built the table by hand (then the loaded
    #: readings are counted)
    readings: np.ndarray | None = None


@dataclass
class Evidence:
    """Counted readings, settlements and rejections for a set of questions."""

    questions: QuestionTable
    # --- readings that count (one row per evidence unit and question) ---
    q: np.ndarray  # (N,) int64 question index
    t: np.ndarray  # (N,) float64 days since epoch (message sent_at)
    source_index: np.ndarray  # (N,) int64 into ``sources``
    reader_index: np.ndarray  # (N,) int64 into ``readers``
    probs: np.ndarray  # (N, K_max) float64 reader probabilities, 0 beyond the question's K
    unclear: np.ndarray  # (N,)
    unrelated: np.ndarray  # (N,)
    one_off: np.ndarray  # (N,)
    # --- settlements: observed truth at a time ---
    settle_q: np.ndarray  # (S,) int64
    settle_t: np.ndarray  # (S,) float64
    settle_answer: np.ndarray  # (S,) int64 option index
    settle_how: np.ndarray  # (S,) object
    # --- rejections: option is out from that time on ---
    reject_q: np.ndarray  # (R,) int64
    reject_t: np.ndarray  # (R,) float64
    reject_answer: np.ndarray  # (R,) int64
    sources: SourceTable
    readers: np.ndarray  # (R,) object reader names
    message: np.ndarray | None = None  # (N,) object message ids, when loaded ``with_messages``
    message_text: np.ndarray | None = None  # (N,) object their texts, where the loader had them at hand
    at: float = field(default=float("inf"))  # the time evidence was cut at (days)
    #: (N, K_max) bool: states of an open question the reading did not name (values listed after it
    #: was written, or left out of it); their ``probs`` column holds the reading's ``unlisted`` mass,
    #: and :func:`named_states` excludes them from the reading's own total. None: none (closed questions).
    unnamed: np.ndarray | None = None
    #: (N,) how surely each reading's message reports that the answer changed (docs/design.md §2,
    #: "Reported changes"); None: no reading reports one
    changed: np.ndarray | None = None

    # Per-row views, for code that prefers them (vectorised gathers, no Python loop).
    @property
    def source(self) -> np.ndarray:
        return self.sources.ids[self.source_index]

    @property
    def source_path(self) -> np.ndarray:
        return self.sources.paths[self.source_index]

    @property
    def source_trust(self) -> np.ndarray:
        return self.sources.trust[self.source_index]

    @property
    def reader(self) -> np.ndarray:
        return self.readers[self.reader_index]

    @property
    def n_readings(self) -> int:
        return int(self.q.shape[0])


def open_readings(probs: np.ndarray, q: np.ndarray, questions: QuestionTable, unlisted: np.ndarray,
                  n_listed: np.ndarray) -> np.ndarray:
    """Lay readings of open questions over their states, in place; return the ``unnamed`` mask.

    A reading of an open question stores a probability for each value it names (NaN for one it
    leaves out; values listed after it was written lie past its list's end) and its ``unlisted``
    mass. The question's last state is ``unlisted``: it gets that mass. A value the reading did not
    name cannot be told apart by it from any other unnamed value, so its state reads exactly as
    ``unlisted`` does: its column gets the same mass, marked ``unnamed`` so that it is not counted
    twice in the reading's total (docs/design.md §2, open questions).
    """
    k_max = probs.shape[1]
    k = questions.n_options[q]
    open_row = questions.is_open[q]
    column = np.arange(k_max)[None, :]
    last = open_row[:, None] & (column == (k - 1)[:, None])
    listed = open_row[:, None] & (column < (k - 1)[:, None])
    unnamed = listed & ((column >= n_listed[:, None]) | np.isnan(probs))
    probs[last] = np.broadcast_to(unlisted[:, None], probs.shape)[last]
    probs[unnamed] = np.broadcast_to(unlisted[:, None], probs.shape)[unnamed]
    return unnamed


def reported_changes(changed: np.ndarray) -> np.ndarray | None:
    """A reading column of ``changed`` as :class:`Evidence` keeps it: None where none reports a change."""
    changed = np.asarray(changed, dtype=np.float64)
    return changed if len(changed) and bool((changed > 0).any()) else None


def named_states(evidence: "Evidence") -> np.ndarray:
    """(N, K_max) bool: the states each reading's own probabilities cover (its question's options;
    for an open question, the values it named and ``unlisted``)."""
    k = evidence.questions.n_options[evidence.q]
    mask = np.arange(evidence.probs.shape[1])[None, :] < k[:, None]
    return mask if evidence.unnamed is None else mask & ~evidence.unnamed

