"""Readers: turn (message text, question) into a reading.

A reading is what the scorer consumes for one (message, question) pair (DESIGN §1,
FORMATS ``reading``): a probability per option of what the message *states*, plus
``unclear`` (about the question, but no answer can be told), ``unrelated`` (says nothing
about it), which together sum to 1, and ``one_off`` (the message describes a one-off,
not a lasting state). Whether the message is *true* is not the reader's business: that
is the source's trust, learned nightly.

Two ways in:

- :class:`OpenAIChatReader` asks any OpenAI-compatible chat-completions server with
  log-probabilities (llama.cpp ``llama-server``, vLLM, Ollama, hosted APIs) one lettered
  multiple-choice question and reads the probabilities off the first generated token.
  :func:`reader_from_env` builds one from ``DOXA_READER_URL`` / ``DOXA_READER_MODEL`` /
  ``DOXA_READER_KEY``.
- Readings made elsewhere are ingested as JSON Lines ``reading`` records with
  ``doxa ingest``; :func:`load_readings` only validates such a file and returns
  :class:`Reading` objects (for a caller that wants them in memory, or to check a file
  before ingesting it).

Standard library only (``urllib.request``): this module sits on the read path of
``doxa ask`` and must not pull in torch, pyro or pandas.
"""

from __future__ import annotations

import abc
import http.client
import json
import math
import os
import socket
import string
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence, TextIO

__all__ = [
    "Reading",
    "Reader",
    "ReaderError",
    "ReadingFormatError",
    "OpenAIChatReader",
    "reader_from_env",
    "letter_probabilities",
    "FileReading",
    "load_readings",
    "SUM_TOLERANCE",
    "PROMPT_VERSION",
]

#: FORMATS: ``probs + unclear + unrelated`` sums to 1 within this.
SUM_TOLERANCE = 1e-6

#: Bumped whenever the wording of the questions below changes: a reader's fitted
#: temperature belongs to one wording, so a new wording is a new reader version.
PROMPT_VERSION = "1"

UNCLEAR = "unclear"
UNRELATED = "unrelated"

ENV_URL = "DOXA_READER_URL"
ENV_MODEL = "DOXA_READER_MODEL"
ENV_KEY = "DOXA_READER_KEY"


class ReaderError(RuntimeError):
    """A reader could not produce a reading; the message says what went wrong and how to fix it."""


class ReadingFormatError(ValueError):
    """A reading record is malformed; the message names the line, the field and the fix."""


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class Reading:
    """One reader's output for one (message, question).

    ``probs`` maps every option of the question to the probability that the message
    states it; ``probs + unclear + unrelated`` sums to 1. ``one_off`` in [0, 1] is the
    probability that the message describes a one-off rather than a lasting state.
    """

    probs: dict[str, float]
    unclear: float
    unrelated: float
    one_off: float = 0.0
    reader: str = "unknown"
    reader_version: str = ""

    def __post_init__(self) -> None:
        problem = _reading_problem(self.probs, self.unclear, self.unrelated, self.one_off)
        if problem:
            raise ValueError(f"invalid reading from reader {self.reader!r}: {problem}")

    @property
    def top(self) -> str:
        """The option the message most likely states (ignoring unclear / unrelated)."""
        return max(self.probs, key=self.probs.__getitem__)

    def to_record(self, message_id: str, question_id: str) -> dict[str, Any]:
        """The FORMATS ``reading`` record for this reading, ready for ``doxa ingest``.

        ``reader_version`` is written when set (it fills the store's ``reader_version``
        column).
        """
        record: dict[str, Any] = {
            "type": "reading",
            "message": message_id,
            "question": question_id,
            "reader": self.reader,
            "probs": dict(self.probs),
            "unclear": self.unclear,
            "unrelated": self.unrelated,
            "one_off": self.one_off,
        }
        if self.reader_version:
            record["reader_version"] = self.reader_version
        return record


def _is_probability(x: Any) -> bool:
    return (
        isinstance(x, (int, float))
        and not isinstance(x, bool)
        and math.isfinite(x)
        and 0.0 <= x <= 1.0
    )


def _reading_problem(
    probs: Any, unclear: Any, unrelated: Any, one_off: Any
) -> str | None:
    """Why these fields are not a valid reading, or None when they are."""
    if not isinstance(probs, Mapping) or not probs:
        return "probs: expected a non-empty object {option: probability}"
    for option, p in probs.items():
        if not isinstance(option, str):
            return f"probs: option {option!r} is not a string"
        if not _is_probability(p):
            return f"probs[{option!r}]: {p!r} is not a probability in [0, 1]"
    for name, value in (("unclear", unclear), ("unrelated", unrelated), ("one_off", one_off)):
        if not _is_probability(value):
            return f"{name}: {value!r} is not a probability in [0, 1]"
    total = math.fsum(probs.values()) + unclear + unrelated
    if abs(total - 1.0) > SUM_TOLERANCE:
        return (
            f"probs + unclear + unrelated sums to {total:.9g}, not 1 "
            f"(within {SUM_TOLERANCE:g}): renormalise them together"
        )
    return None


# --------------------------------------------------------------------------- reader


class Reader(abc.ABC):
    """Reads a message against a question.

    Subclasses set ``name`` and ``version`` (written into every reading: the nightly
    fit learns one temperature per reader name) and implement :meth:`read`.
    """

    name: str = "reader"
    version: str = ""

    @abc.abstractmethod
    def read(
        self,
        message_text: str,
        question_text: str,
        options: list[str],
        *,
        subject: str | None = None,
    ) -> Reading:
        """The reading of ``message_text`` for the question; ``options`` in question order."""


# --------------------------------------------------------------------------- letters

#: Letters used to label answers. 26 letters: up to 24 options plus unclear / unrelated.
LETTERS = string.ascii_uppercase

#: Characters a tokenizer may leave around a letter: spaces, SentencePiece / byte-level
#: BPE word markers, and the punctuation of "A." / "(A)" / "A:".
_TOKEN_DECORATION = " \t\n\r\u2581\u0120.():*"


def _token_letter(token: Any) -> str | None:
    """The answer letter a token stands for (" a", "A.", "(A" → "A"), else None."""
    if not isinstance(token, str):
        return None
    core = token.strip(_TOKEN_DECORATION)
    if len(core) == 1 and core.upper() in LETTERS:
        return core.upper()
    return None


def letter_probabilities(
    top_logprobs: Sequence[tuple[str, float]], letters: Sequence[str]
) -> dict[str, float] | None:
    """Probability of each answer letter from the top log-probabilities of one token.

    Tokens that spell the same letter (``"A"``, ``" A"``, ``"a"``) are pooled by adding
    their probabilities. A letter absent from the list is below every listed token, and
    can hold at most the mass the list leaves out; it gets
    ``min(unlisted mass / number of absent letters, smallest listed probability)`` —
    its fair share of what the server did not show, capped by what it could at most be.
    The letters are then renormalised to sum to 1: the question allowed only a letter,
    so the answer is conditioned on being one.

    Returns None when no token of the list is one of ``letters``.
    """
    wanted = {letter.upper() for letter in letters}
    mass: dict[str, float] = {}
    listed_probs: list[float] = []
    for token, logprob in top_logprobs:
        if logprob is None or not math.isfinite(logprob):
            continue
        p = math.exp(min(float(logprob), 0.0))
        listed_probs.append(p)
        letter = _token_letter(token)
        if letter in wanted:
            mass[letter] = mass.get(letter, 0.0) + p
    if not mass:
        return None
    absent = [letter for letter in letters if letter.upper() not in mass]
    if absent:
        unlisted = max(0.0, 1.0 - math.fsum(listed_probs))
        share = min(unlisted / len(absent), min(listed_probs))
        for letter in absent:
            mass[letter.upper()] = share
    total = math.fsum(mass.values())
    return {letter: mass[letter.upper()] / total for letter in letters}


# --------------------------------------------------------------------------- prompts

_SYSTEM_PROMPT = (
    "You read one message and answer one multiple-choice question about what the "
    "message says. Judge only what the message states or clearly implies, not whether "
    "it is true. Answer with a single capital letter and nothing else."
)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _fenced_message(message_text: str) -> str:
    # The message is untrusted text; keep it from closing its own fence.
    body = message_text.replace("</message>", "</ message>")
    return f"<message>\n{body}\n</message>"


def _choice_prompt(
    message_text: str, question_text: str, labels: Sequence[str], subject: str | None
) -> str:
    about = f" (about {_one_line(subject)})" if subject else ""
    lines = [
        _fenced_message(message_text),
        "",
        f"Question{about}: {_one_line(question_text)}",
        "Which answer does the message state or imply?",
    ]
    lines += [f"{LETTERS[i]}. {label}" for i, label in enumerate(labels)]
    lines.append("Answer with one letter.")
    return "\n".join(lines)


def _choice_labels(options: Sequence[str]) -> list[str]:
    return [_one_line(o) for o in options] + [
        f"{UNCLEAR} (the message is about this question but does not say which answer)",
        f"{UNRELATED} (the message says nothing about this question)",
    ]


_ONE_OFF_LABELS = (
    "lasting (a state that holds over time)",
    "one-off (a single event or occasion)",
    "unclear",
)


def _one_off_prompt(message_text: str, question_text: str, subject: str | None) -> str:
    about = f" (about {_one_line(subject)})" if subject else ""
    lines = [
        _fenced_message(message_text),
        "",
        f"Topic{about}: {_one_line(question_text)}",
        "Is what the message says on this topic a lasting state or a one-off?",
    ]
    lines += [f"{LETTERS[i]}. {label}" for i, label in enumerate(_ONE_OFF_LABELS)]
    lines.append("Answer with one letter.")
    return "\n".join(lines)


# --------------------------------------------------------------------------- HTTP reader

_RETRY_STATUSES = frozenset({429}) | frozenset(range(500, 600))


def _chat_url(base_url: str) -> str:
    url = base_url.strip().rstrip("/")
    if url.endswith("/chat/completions"):
        return url
    return url + "/chat/completions"


@dataclass
class OpenAIChatReader(Reader):
    """A reader backed by an OpenAI-compatible chat-completions server with logprobs.

    The message and the question's options go out as one lettered multiple-choice
    question (options ``A, B, …``, then one letter for *unclear* and one for
    *unrelated*), with ``max_tokens=1, logprobs=true, top_logprobs=20, temperature=0``.
    The ``top_logprobs`` of the first generated token are mapped to letters and
    normalised over them (:func:`letter_probabilities`): the probability of each letter
    is the reading. When ``ask_one_off`` is on, a second question ("lasting / one-off /
    unclear") gives ``one_off = P(one-off)``; its *unclear* counts as not one-off, since
    doubt about the message's content is already in the first question's ``unclear``.

    Transient failures (timeouts, refused or dropped connections, HTTP 429 and 5xx)
    are retried ``retries`` times with exponential backoff (``backoff_s · 2^attempt``,
    or the server's ``Retry-After`` when it gives one, capped at ``max_backoff_s``).
    Any other HTTP error and any malformed answer raise :class:`ReaderError` at once.
    """

    url: str
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    name: str = ""
    timeout_s: float = 30.0
    retries: int = 3
    backoff_s: float = 0.5
    max_backoff_s: float = 30.0
    ask_one_off: bool = True
    top_logprobs: int = 20
    #: Merged into every request body, for server-specific switches, e.g.
    #: ``{"chat_template_kwargs": {"enable_thinking": False}}`` for thinking models.
    extra_body: dict[str, Any] = field(default_factory=dict)
    version: str = f"prompt-{PROMPT_VERSION}"

    def __post_init__(self) -> None:
        if not self.url or not self.url.strip():
            raise ReaderError(
                f"no reader URL given: set {ENV_URL} to the server's OpenAI base URL, "
                "e.g. http://127.0.0.1:8080/v1"
            )
        if self.retries < 0:
            raise ValueError(f"retries must be >= 0, got {self.retries}")
        if not 1 <= self.top_logprobs <= 20:
            raise ValueError(f"top_logprobs must be in 1..20 (the OpenAI limit), got {self.top_logprobs}")
        self.chat_url = _chat_url(self.url)
        if not self.name:
            self.name = f"llm:{self.model}" if self.model else "llm:default"

    # -- public ------------------------------------------------------------------

    def read(
        self,
        message_text: str,
        question_text: str,
        options: list[str],
        *,
        subject: str | None = None,
    ) -> Reading:
        options = list(options)
        if not options:
            raise ValueError("a question needs at least one option to be read against")
        if len(set(options)) != len(options):
            raise ValueError(f"options repeat: {options!r}")
        labels = _choice_labels(options)
        if len(labels) > len(LETTERS):
            raise ValueError(
                f"{len(options)} options is too many for one lettered question "
                f"(at most {len(LETTERS) - 2}): split the question"
            )
        letters = LETTERS[: len(labels)]
        prompt = _choice_prompt(message_text, question_text, labels, subject)
        p = self._ask(prompt, letters)
        probs = {option: p[letters[i]] for i, option in enumerate(options)}
        unclear = p[letters[len(options)]]
        unrelated = p[letters[len(options) + 1]]

        one_off = 0.0
        if self.ask_one_off:
            q = self._ask(_one_off_prompt(message_text, question_text, subject), "ABC")
            one_off = q["B"]
        return Reading(
            probs=probs,
            unclear=unclear,
            unrelated=unrelated,
            one_off=min(1.0, max(0.0, one_off)),
            reader=self.name,
            reader_version=self.version,
        )

    # -- one question ------------------------------------------------------------

    def _ask(self, prompt: str, letters: Sequence[str]) -> dict[str, float]:
        body: dict[str, Any] = {
            "messages": [
                {"role": "system", "content": _SYSTEM_PROMPT},
                {"role": "user", "content": prompt},
            ],
            "max_tokens": 1,
            "temperature": 0,
            "logprobs": True,
            "top_logprobs": self.top_logprobs,
        }
        if self.model:
            body["model"] = self.model
        body.update(self.extra_body)
        answer = self._post(body)
        top = self._first_token_top_logprobs(answer)
        probs = letter_probabilities(top, letters)
        if probs is None:
            shown = ", ".join(repr(t) for t, _ in top[:8]) or "none"
            raise ReaderError(
                f"reader server {self.chat_url}: no answer letter ({', '.join(letters)}) among "
                f"the top tokens of the reply (got {shown}). The model did not answer with a "
                "letter: use an instruction-tuned chat model, make sure the server applies its "
                "chat template (llama.cpp: --jinja), and turn off thinking for reasoning models "
                "(e.g. extra_body={'chat_template_kwargs': {'enable_thinking': False}})."
            )
        return probs

    def _first_token_top_logprobs(self, answer: Any) -> list[tuple[str, float]]:
        where = f"reader server {self.chat_url}"
        if not isinstance(answer, dict):
            raise ReaderError(f"{where}: reply is not a JSON object: {str(answer)[:200]!r}")
        if "error" in answer and "choices" not in answer:
            raise ReaderError(f"{where}: server returned an error: {str(answer['error'])[:300]}")
        choices = answer.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise ReaderError(
                f"{where}: reply has no choices: {json.dumps(answer)[:300]}. "
                "Check that the URL is an OpenAI-compatible /v1 endpoint."
            )
        logprobs = choices[0].get("logprobs")
        top = _parse_top_logprobs(logprobs)
        if top is None:
            raise ReaderError(
                f"{where}: server did not return logprobs for the first token. doxa needs "
                "log-probabilities: use llama.cpp llama-server (recent build), vLLM, a "
                "recent Ollama (0.12.11+ with logprobs on /v1), or a hosted model that "
                "supports logprobs / top_logprobs (reasoning models usually do not)."
            )
        return top

    # -- HTTP --------------------------------------------------------------------

    def _post(self, body: dict[str, Any]) -> Any:
        data = json.dumps(body).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        where = f"reader server {self.chat_url}"
        last_problem = ""
        for attempt in range(self.retries + 1):
            wait = self.backoff_s * (2**attempt)
            request = urllib.request.Request(self.chat_url, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    raw = response.read()
            except urllib.error.HTTPError as err:
                detail = _error_body(err)
                if err.code not in _RETRY_STATUSES:
                    raise ReaderError(f"{where}: HTTP {err.code}: {detail}. {_http_hint(err.code)}") from err
                last_problem = f"HTTP {err.code}: {detail}"
                retry_after = _retry_after_s(err.headers.get("Retry-After") if err.headers else None)
                if retry_after is not None:
                    wait = retry_after
            except (TimeoutError, socket.timeout) as err:
                last_problem = f"no answer within {self.timeout_s:g} s ({err})"
            except urllib.error.URLError as err:
                if isinstance(err.reason, (TimeoutError, socket.timeout)):
                    last_problem = f"no answer within {self.timeout_s:g} s ({err.reason})"
                else:
                    last_problem = f"cannot connect ({err.reason})"
            except (ConnectionError, http.client.HTTPException, OSError) as err:
                last_problem = f"connection failed ({type(err).__name__}: {err})"
            else:
                try:
                    return json.loads(raw.decode("utf-8"))
                except (UnicodeDecodeError, json.JSONDecodeError) as err:
                    raise ReaderError(
                        f"{where}: reply is not JSON ({err}): {raw[:200]!r}. Check that the URL "
                        "points at an OpenAI-compatible API (…/v1), not a web page or proxy."
                    ) from err
            if attempt < self.retries:
                time.sleep(min(max(wait, 0.0), self.max_backoff_s))
        raise ReaderError(
            f"{where}: gave up after {self.retries + 1} attempts; last: {last_problem}. "
            f"Check that the server is running and reachable at {ENV_URL}, or raise the "
            "timeout / retries for a slow model."
        )


def _parse_top_logprobs(logprobs: Any) -> list[tuple[str, float]] | None:
    """``[(token, logprob), …]`` for the first generated token, in either OpenAI shape.

    Chat shape: ``{"content": [{"token", "logprob", "top_logprobs": [{"token", "logprob"}]}]}``.
    Legacy completions shape: ``{"tokens": [...], "top_logprobs": [{token: logprob}]}``.
    """
    if not isinstance(logprobs, dict):
        return None
    content = logprobs.get("content")
    if isinstance(content, list) and content and isinstance(content[0], dict):
        first = content[0]
        entries = first.get("top_logprobs") or []
        top = [
            (e.get("token"), e.get("logprob"))
            for e in entries
            if isinstance(e, dict) and isinstance(e.get("logprob"), (int, float))
        ]
        if not top and isinstance(first.get("logprob"), (int, float)):
            top = [(first.get("token"), first["logprob"])]
        return top or None
    legacy = logprobs.get("top_logprobs")
    if isinstance(legacy, list) and legacy and isinstance(legacy[0], dict):
        top = [(t, lp) for t, lp in legacy[0].items() if isinstance(lp, (int, float))]
        return top or None
    return None


def _error_body(err: urllib.error.HTTPError) -> str:
    try:
        text = err.read().decode("utf-8", "replace")
    except Exception:  # the body is only used to explain the error
        text = ""
    text = " ".join(text.split())
    return text[:300] or (err.reason or "no detail")


def _http_hint(code: int) -> str:
    if code in (401, 403):
        return f"The server refused the key: set {ENV_KEY} to a valid API key."
    if code == 404:
        return (
            f"Check that {ENV_URL} is the API base (ending in /v1) and that {ENV_MODEL} "
            "names a model the server serves."
        )
    if code == 400:
        return (
            f"The server rejected the request: check {ENV_MODEL}, and that the server "
            "accepts logprobs / top_logprobs (up to 20) and max_tokens=1."
        )
    return "This error is not retried."


def _retry_after_s(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff


def reader_from_env(env: Mapping[str, str] | None = None, **kwargs: Any) -> Reader | None:
    """The reader configured in the environment, or None when ``DOXA_READER_URL`` is unset.

    ``DOXA_READER_URL`` is the server's OpenAI base URL (``http://127.0.0.1:8080/v1``),
    ``DOXA_READER_MODEL`` the model name to send (optional for llama.cpp, which serves
    one), ``DOXA_READER_KEY`` an API key sent as a bearer token (optional). Keyword
    arguments go to :class:`OpenAIChatReader` and override the environment.
    """
    env = os.environ if env is None else env
    url = (env.get(ENV_URL) or "").strip()
    if not url:
        return None
    config: dict[str, Any] = {
        "url": url,
        "model": (env.get(ENV_MODEL) or "").strip() or None,
        "api_key": (env.get(ENV_KEY) or "").strip() or None,
    }
    config.update(kwargs)
    return OpenAIChatReader(**config)


# --------------------------------------------------------------------------- readings from a file


@dataclass(frozen=True)
class FileReading:
    """A ``reading`` record from a file: which message and question, and the reading."""

    message: str
    question: str
    reading: Reading
    line: int


def load_readings(
    source: str | Path | TextIO | Iterable[str],
    *,
    options_by_question: Mapping[str, Sequence[str]] | None = None,
) -> list[FileReading]:
    """Validate the ``reading`` records of a JSON Lines file and return them.

    Readings made outside doxa go into the store with ``doxa ingest FILE`` (which also
    takes every other record type); this helper only checks them and returns
    :class:`Reading` objects, e.g. to test a reader's output file before ingesting it.
    Lines of other ``type`` and blank lines are skipped. With ``options_by_question``
    (question id → options) the ``probs`` keys must be exactly the question's options.

    Raises :class:`ReadingFormatError` listing every bad line (number, field, fix); a
    file is accepted whole or not at all, as ingest does.
    """
    if isinstance(source, (str, Path)):
        with open(source, encoding="utf-8") as handle:
            return load_readings(handle, options_by_question=options_by_question)

    loaded: list[FileReading] = []
    problems: list[str] = []
    for number, line in enumerate(source, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            problems.append(f"line {number}: not JSON ({err.msg} at column {err.colno})")
            continue
        if not isinstance(record, dict):
            problems.append(f"line {number}: expected a JSON object, got {type(record).__name__}")
            continue
        if record.get("type") != "reading":
            continue
        problem = _record_problem(record, options_by_question)
        if problem:
            problems.append(f"line {number}: {problem}")
            continue
        reading = Reading(
            probs={k: float(v) for k, v in record["probs"].items()},
            unclear=float(record["unclear"]),
            unrelated=float(record["unrelated"]),
            one_off=float(record.get("one_off", 0.0)),
            reader=record["reader"],
            reader_version=record.get("reader_version", ""),
        )
        loaded.append(FileReading(record["message"], record["question"], reading, number))
    if problems:
        shown = problems[:20]
        more = f"\n… and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise ReadingFormatError(
            "reading records refused (nothing loaded):\n" + "\n".join(shown) + more
        )
    return loaded


def _record_problem(
    record: dict[str, Any], options_by_question: Mapping[str, Sequence[str]] | None
) -> str | None:
    for name in ("message", "question", "reader"):
        if not isinstance(record.get(name), str) or not record[name]:
            return f'{name}: missing or not a string; a reading needs "{name}": "<id>"'
    if "reader_version" in record and not isinstance(record["reader_version"], str):
        return "reader_version: must be a string"
    for name in ("probs", "unclear", "unrelated"):
        if name not in record:
            return f"{name}: missing (docs/formats.md: probs + unclear + unrelated sum to 1)"
    problem = _reading_problem(
        record["probs"], record["unclear"], record["unrelated"], record.get("one_off", 0.0)
    )
    if problem:
        return problem
    if options_by_question is not None:
        options = options_by_question.get(record["question"])
        if options is None:
            return f"question: {record['question']!r} is not a known question"
        if set(record["probs"]) != set(options):
            missing = sorted(set(options) - set(record["probs"]))
            extra = sorted(set(record["probs"]) - set(options))
            return (
                f"probs: keys must be the question's options {list(options)!r} "
                f"(missing {missing!r}, unknown {extra!r})"
            )
    return None
