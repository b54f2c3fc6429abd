"""The reader over any OpenAI-compatible chat-completions server with log-probabilities.

Standard library HTTP (``urllib.request``), no client library: ``doxa ask`` must start
without pulling in an SDK, and the loopback test server speaks the same protocol.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Sequence

from .llm_http import READER_ENV, ChatClient
from .reader_prompts import (BATCH_PROMPT_VERSION, LASTING, LETTERS, ONE_OFF, OPEN_PROMPT_VERSION, PROMPT_VERSION,
                             batch_messages, change_messages, choice_labels, choice_messages, excerpt,
                             excerpt_version, letter_probabilities, one_off_messages, open_labels, open_messages)
from .reading import Reader, ReaderError, Reading

#: The environment variable of the batch size; URL, model and key are READER_ENV's
#: (:meth:`OpenAIChatReader.from_env`).
ENV_BATCH = "DOXA_READER_BATCH"
#: The environment variable that turns on the change question (:attr:`OpenAIChatReader.ask_changes`).
ENV_CHANGES = "DOXA_READER_CHANGES"

#: Tokens generated for one reading: the letter, a space, the digit (and room for a tokenizer
#: that splits them differently).
REPLY_TOKENS = 4
#: Tokens allowed per question of a batch reply ("12: B 1\n", with room for odd tokenizers).
BATCH_TOKENS_PER_QUESTION = 8
#: The most values of an open question one prompt lists (the most recent ones): the letters left
#: after unlisted, unclear and unrelated. A value left out is read as any value not named.
MAX_OPEN_VALUES = len(LETTERS) - 3
#: What a batch reply's line holds before the letter, and before the digit.
_BEFORE_LETTER = re.compile(r"^\s*(\d+)\s*[:.)]\s*$")
_BEFORE_DIGIT = re.compile(r"^\s*(\d+)\s*[:.)]\s*\(?[A-Za-z][).:]?\s*$")


@dataclass
class OpenAIChatReader(ChatClient, Reader):
    """A reader backed by an OpenAI-compatible chat-completions server with logprobs.

    The message and the question's options go out as one lettered multiple-choice question
    (options ``A, B, …``, then one letter for *unclear* and one for *unrelated*) after a few
    worked examples (:mod:`.reader_prompts`), with ``logprobs=true, top_logprobs=20, temperature=0``.
    The ``top_logprobs`` of the first generated token are mapped to letters and normalised
    over them (:func:`letter_probabilities`): the probability of each letter is the reading.
    When ``ask_one_off`` is on, the reply goes on with a digit, ``1`` (lasting) or ``2`` (one
    occasion), and ``one_off = P(2) / (P(1) + P(2))`` at that token: one call per reading. A
    model that gives no digit is asked the lasting / one-off question on its own (a second
    call; its *cannot tell* counts as not one-off, since doubt about what the message says is
    already in the first answer's *unclear*).

    Transient failures (timeouts, refused or dropped connections, HTTP 429 and 5xx) are
    retried ``retries`` times with exponential backoff (``backoff_s · 2^attempt``, or the
    server's ``Retry-After``, capped at ``max_backoff_s``). Any other HTTP error and any
    malformed answer raise :class:`ReaderError` at once. ``requests`` counts the HTTP
    requests sent (retries included). The connection settings (``url``, ``model``, ``api_key``,
    ``timeout_s``, ``retries``, ``extra_body``, …) and :meth:`from_env` are :class:`.ChatClient`'s.
    """

    ask_one_off: bool = True
    #: an open question's reading that states an answer is asked whether the message says it changed
    #: (a second call; docs/design.md §2, reported changes). Off by default: Qwen2.5-Coder-1.5B answers
    #: it at about 0.6 whether or not the message reports a change (bench/change_reports.py), and a
    #: report that says nothing about the change must not weigh every step toward one
    ask_changes: bool = False
    top_logprobs: int = 20
    #: The most questions of one message asked in one prompt by :meth:`read_many`; 1 = one at a time.
    batch: int = 1
    version: str = f"prompt-{PROMPT_VERSION}"

    #: reads open questions (``read(…, open=True)``; ``read_many`` takes (text, options, person, open))
    reads_open = True
    names = READER_ENV
    role = "reader"
    error = ReaderError
    rejected = ", and that the server accepts logprobs / top_logprobs (up to 20)"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 1 <= self.top_logprobs <= 20:
            raise ValueError(f"top_logprobs must be in 1..20 (the OpenAI limit), got {self.top_logprobs}")
        if not isinstance(self.batch, int) or self.batch < 1:
            raise ValueError(f"batch must be a whole number ≥ 1 (questions per prompt), got {self.batch!r}")
        self.batch_version = f"{self.version}-batch-{BATCH_PROMPT_VERSION}"
        self.open_version = f"{self.version}-open-{OPEN_PROMPT_VERSION}"
        self._batch_works = True

    @classmethod
    def settings_from_env(cls, env) -> dict[str, Any]:
        """``DOXA_READER_BATCH``: the most questions of one message asked in one prompt (default 1);
        ``DOXA_READER_CHANGES=1``: ask a reading that states an answer whether the message says it
        changed (:attr:`ask_changes`)."""
        out: dict[str, Any] = {}
        changes = (env.get(ENV_CHANGES) or "").strip()
        if changes:
            if changes not in ("0", "1"):
                raise ReaderError(f"{ENV_CHANGES} must be 1 (ask whether a message says the answer changed) or 0, "
                                  f"got {changes!r}")
            out["ask_changes"] = changes == "1"
        batch = (env.get(ENV_BATCH) or "").strip()
        if not batch:
            return out
        if not batch.isdigit() or int(batch) < 1:
            raise ReaderError(f"{ENV_BATCH} must be a whole number ≥ 1 (questions per prompt), got {batch!r}; "
                              f"unset it to read one question at a time")
        return {**out, "batch": int(batch)}

    # -- public ------------------------------------------------------------------

    def read(
        self,
        message_text: str,
        question_text: str,
        options: list[str],
        *,
        subject: str | None = None,
        open: bool = False,
    ) -> Reading:
        """The reading of ``message_text`` for the question. ``open``: an open question (its
        ``options`` are the values named so far, perhaps none), asked with one more answer, "a
        different answer, not listed above", whose probability is the reading's ``unlisted``; of
        more than :data:`MAX_OPEN_VALUES` values the most recent (the last) are listed. A message
        too long for a prompt is shown as the excerpt that bears on the question
        (:func:`~.reader_prompts.excerpt`), and the reading's version says so."""
        options = list(options)
        message_text, cut = excerpt(message_text, " ".join([question_text, *options]))
        if open:
            _check_values(options)
            options = options[-MAX_OPEN_VALUES:]
            labels = open_labels(options, subject)
            messages = open_messages(message_text, question_text, labels, subject)
        else:
            _check_options(options)
            labels = choice_labels(options, subject)
            messages = choice_messages(message_text, question_text, labels, subject)
        letters = LETTERS[: len(labels)]
        tokens = self._ask(messages, REPLY_TOKENS if self.ask_one_off else 1)
        p = self._letters(tokens[0], letters)
        probs = {option: p[letters[i]] for i, option in enumerate(options)}
        extra = len(options) + 1 if open else len(options)  # the letter of unclear
        unclear = p[letters[extra]]
        unrelated = p[letters[extra + 1]]

        one_off = 0.0
        if self.ask_one_off:
            digits = _digit_probabilities(tokens[1:])
            if digits is None:  # no digit after the letter: ask the question on its own
                q = self._letters(self._ask(one_off_messages(message_text, question_text, subject), 1)[0], "ABC")
                one_off = q["B"]
            else:
                one_off = digits
        unlisted = p[letters[len(options)]] if open else None
        changed = 0.0
        # a change is worth asking about where the message states an answer: a value, listed or not
        if open and self.ask_changes and sum(probs.values()) + unlisted >= 0.5:
            changed = self._letters(self._ask(change_messages(message_text, question_text, subject), 1)[0], "AB")["A"]
        return Reading(
            probs=probs,
            unclear=unclear,
            unrelated=unrelated,
            one_off=min(1.0, max(0.0, one_off)),
            reader=self.name,
            reader_version=excerpt_version(self.open_version if open else self.version, cut),
            unlisted=unlisted,
            changed=min(1.0, max(0.0, changed)),
        )

    def read_many(self, message_text: str, questions: Sequence[tuple]) -> list[Reading]:
        """The readings of one message against several (question text, options, person[, open]), in
        order: ``batch`` closed questions per call where the server's replies allow it, else one call
        each; an open question is read on its own, with its ``unlisted`` answer (:meth:`read`)."""
        asked = [(q[0], list(q[1]), q[2], bool(q[3]) if len(q) > 3 else False) for q in questions]
        if not any(is_open for *_, is_open in asked):
            return self._read_closed(message_text, [(text, options, subject) for text, options, subject, _ in asked])
        closed = [i for i, q in enumerate(asked) if not q[3]]
        out: list[Reading | None] = [None] * len(asked)
        for i, reading in zip(closed, self._read_closed(message_text, [asked[i][:3] for i in closed])):
            out[i] = reading
        for i, (text, options, subject, is_open) in enumerate(asked):
            if is_open:
                out[i] = self.read(message_text, text, options, subject=subject, open=True)
        return out  # type: ignore[return-value]

    def _read_closed(self, message_text: str,
                     questions: Sequence[tuple[str, list[str], str | None]]) -> list[Reading]:
        questions = [(text, list(options), subject) for text, options, subject in questions]
        if self.batch == 1 or len(questions) < 2 or not self._batch_works:
            return [self.read(message_text, text, options, subject=subject) for text, options, subject in questions]
        out: list[Reading] = []
        for start in range(0, len(questions), self.batch):
            chunk = questions[start:start + self.batch]
            out += self._read_chunk(message_text, chunk) if len(chunk) > 1 else [
                self.read(message_text, chunk[0][0], chunk[0][1], subject=chunk[0][2])]
        return out

    def _read_chunk(self, message_text: str, chunk: list[tuple[str, list[str], str | None]]) -> list[Reading]:
        labels = []
        for _, options, subject in chunk:
            _check_options(options)
            labels.append(choice_labels(options, subject))
        shown, cut = excerpt(message_text, " ".join(" ".join([text, *options]) for text, options, _ in chunk))
        tokens = self._ask_tokens(batch_messages(shown, [(text, lab, subject) for (text, _, subject), lab
                                                         in zip(chunk, labels)]),
                                  BATCH_TOKENS_PER_QUESTION * len(chunk))
        answered = _batch_answers(tokens, len(chunk))
        if not answered:
            self._batch_works = False  # this server or model does not answer in lines: one question at a time
        out = []
        for n, ((text, options, subject), lab) in enumerate(zip(chunk, labels), start=1):
            letter_top, digit_top = answered.get(n, (None, None))
            letters = LETTERS[: len(lab)]
            p = letter_probabilities(letter_top, letters) if letter_top else None
            if p is None or (self.ask_one_off and digit_top is None):
                out.append(self.read(message_text, text, options, subject=subject))
                continue
            one_off = (_digit_probabilities([digit_top]) or 0.0) if self.ask_one_off else 0.0
            out.append(Reading(probs={o: p[letters[i]] for i, o in enumerate(options)},
                               unclear=p[letters[len(options)]], unrelated=p[letters[len(options) + 1]],
                               one_off=min(1.0, max(0.0, one_off)), reader=self.name,
                               reader_version=excerpt_version(self.batch_version, cut)))
        return out

    # -- one question ------------------------------------------------------------

    def _ask(self, messages: list[dict[str, str]], max_tokens: int) -> list[list[tuple[str, float]]]:
        return [top for _, top in self._ask_tokens(messages, max_tokens)]

    def _ask_tokens(self, messages: list[dict[str, str]],
                    max_tokens: int) -> list[tuple[str, list[tuple[str, float]]]]:
        """(generated token, its top log-probabilities) for each token of the reply."""
        body: dict[str, Any] = {
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": 0,
            "logprobs": True,
            "top_logprobs": self.top_logprobs,
        }
        if self.model:
            body["model"] = self.model
        body.update(self.extra_body)
        return self._reply_tokens(self.endpoint.post(body))

    def _letters(self, top: list[tuple[str, float]], letters: Sequence[str]) -> dict[str, float]:
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

    def _reply_tokens(self, answer: Any) -> list[tuple[str, list[tuple[str, float]]]]:
        """Each generated token with its top log-probabilities (at least the first's)."""
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
        tokens = _parse_tokens(choices[0].get("logprobs"))
        if not tokens:
            raise ReaderError(
                f"{where}: server did not return logprobs for the first token. doxa needs "
                "log-probabilities: use llama.cpp llama-server (recent build), vLLM, a "
                "recent Ollama (0.12.11+ with logprobs on /v1), or a hosted model that "
                "supports logprobs / top_logprobs (reasoning models usually do not)."
            )
        return tokens


def _check_options(options: list[str]) -> None:
    if not options:
        raise ValueError("a question needs at least one option to be read against")
    if len(set(options)) != len(options):
        raise ValueError(f"options repeat: {options!r}")
    if len(options) + 2 > len(LETTERS):
        raise ValueError(f"{len(options)} options is too many for one lettered question "
                         f"(at most {len(LETTERS) - 2}): split the question")


def _check_values(values: list[str]) -> None:
    """An open question's values: any number (the most recent are listed), each once."""
    if len(set(values)) != len(values):
        raise ValueError(f"values repeat: {values!r}")


def _batch_answers(tokens: Sequence[tuple[str, list[tuple[str, float]]]],
                   n_questions: int) -> dict[int, tuple[list[tuple[str, float]], list[tuple[str, float]] | None]]:
    """{question number: (top log-probabilities at its letter, at its digit or None)} of a batch reply.

    A token is question n's letter when the reply's line so far reads "n:" (or "n." / "n)"),
    and its digit when the line reads "n: X"; the first answer to a number counts."""
    answers: dict[int, tuple[list[tuple[str, float]], list[tuple[str, float]] | None]] = {}
    line = ""
    for token, top in tokens:
        token = token if isinstance(token, str) else ""
        head = line.split("\n")[-1]
        before_letter = _BEFORE_LETTER.match(head)
        before_digit = _BEFORE_DIGIT.match(head)
        if before_letter and token.strip(" \t\u2581\u0120"):
            n = int(before_letter.group(1))
            if 1 <= n <= n_questions and n not in answers:
                answers[n] = (top, None)
        elif before_digit and token.strip(" \t\u2581\u0120"):
            n = int(before_digit.group(1))
            if n in answers and answers[n][1] is None:
                answers[n] = (answers[n][0], top)
        line += token.replace("\u2581", " ").replace("\u0120", " ").replace("\u010a", "\n")
    return answers


def _digit_probabilities(tokens: Sequence[list[tuple[str, float]]]) -> float | None:
    """``P(one-off)`` at the first later token whose top entries spell the digit 1 or 2, or None."""
    for top in tokens:
        mass = {LASTING: 0.0, ONE_OFF: 0.0}
        for token, logprob in top:
            core = token.strip(" \t\n\u2581\u0120.") if isinstance(token, str) else ""
            if core in mass and logprob is not None and math.isfinite(logprob):
                mass[core] += math.exp(min(float(logprob), 0.0))
        total = mass[LASTING] + mass[ONE_OFF]
        if total > 0:
            return mass[ONE_OFF] / total
    return None


def _parse_tokens(logprobs: Any) -> list[tuple[str, list[tuple[str, float]]]] | None:
    """(generated token, its top log-probabilities) per generated token, in either OpenAI shape;
    the generated token is the server's, or the top entry where it gives none."""
    tops = _parse_top_logprobs(logprobs)
    if not tops:
        return None
    chosen: list[Any] = []
    if isinstance(logprobs.get("content"), list):
        chosen = [item.get("token") if isinstance(item, dict) else None for item in logprobs["content"]]
    elif isinstance(logprobs.get("tokens"), list):
        chosen = list(logprobs["tokens"])
    out = []
    for i, top in enumerate(tops):
        token = chosen[i] if i < len(chosen) and isinstance(chosen[i], str) else None
        if token is None:
            token = max(top, key=lambda e: e[1])[0] if top else ""
        out.append((token, top))
    return out


def _parse_top_logprobs(logprobs: Any) -> list[list[tuple[str, float]]] | None:
    """``[[(token, logprob), …] per generated token]``, in either OpenAI shape.

    Chat shape: ``{"content": [{"token", "logprob", "top_logprobs": [{"token", "logprob"}]}]}``.
    Legacy completions shape: ``{"tokens": [...], "top_logprobs": [{token: logprob}, …]}``.
    """
    if not isinstance(logprobs, dict):
        return None
    content = logprobs.get("content")
    out: list[list[tuple[str, float]]] = []
    if isinstance(content, list) and content and isinstance(content[0], dict):
        for item in content:
            if not isinstance(item, dict):
                break
            entries = item.get("top_logprobs") or []
            top = [(e.get("token"), e.get("logprob")) for e in entries
                   if isinstance(e, dict) and isinstance(e.get("logprob"), (int, float))]
            if not top and isinstance(item.get("logprob"), (int, float)):
                top = [(item.get("token"), item["logprob"])]
            out.append(top)
        return out if out and out[0] else None
    legacy = logprobs.get("top_logprobs")
    if isinstance(legacy, list) and legacy and isinstance(legacy[0], dict):
        for item in legacy:
            if not isinstance(item, dict):
                break
            out.append([(t, lp) for t, lp in item.items() if isinstance(lp, (int, float))])
        return out if out and out[0] else None
    return None
