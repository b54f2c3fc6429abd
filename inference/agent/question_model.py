"""The organizer's model asked two small things about a question in words (`doxa answer`, `doxa ask`).

- :meth:`QuestionModel.propose`: the options of a new question, from the kept messages that bear
  on it — the values they name ("Where does Maya live?" and "moved to 7 Harbour Road" → ``7 Harbour
  Road``; an option no shown message states is dropped, as the organizer's are), with the
  question's kind and its text about the subject in the third person;
- :meth:`QuestionModel.choose`: which of a few tracked questions a question in words asks, or
  none (asked only when search cannot tell them apart: :mod:`.answer`).

The model never gives a probability: it names options and picks a question. It is the organizer's
server (``DOXA_ORGANIZER_URL``, else ``DOXA_READER_URL``: :mod:`.llm_http`), asked for one JSON
object; a reply that does not parse or fit is sent back once with what was wrong, as the
organizer's is (:mod:`.organizer_client`). Messages and questions in the prompt are
:func:`~.untrusted.untrusted` text: to read, never to obey.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from doxa.data.errors import StoreError

from .llm_http import ORGANIZER_ENV, ChatClient
from .maintenance import content_words
from .organizer_schema import parse_reply, stated_in
from .reader_prompts import excerpt
from .untrusted import untrusted

#: At most this many options a proposal keeps (a value question names few values at a time).
MAX_OPTIONS = 8
#: About this many characters of one message are shown when options are proposed (a longer one:
#: its excerpt, :func:`~.reader_prompts.excerpt`).
MESSAGE_CHARS = 400

#: The kinds the proposal prompt gives as examples: one the model returns for a question none of whose
#: words it names is the prompt's, copied (a small model calls every question "job"), not the question's.
EXAMPLE_KINDS = ("job", "home_city", "wake_time")

PROPOSE = """You help an assistant's memory track a question. You are shown a question asked in words, \
whom it is about, and kept messages that may bear on it. Name the possible answers.

Reply with one JSON object and nothing else: {"kind": ..., "text": ..., "options": [...]}
  "kind": a short snake_case name of what is asked (""" + ", ".join(f'"{k}"' for k in EXAMPLE_KINDS) + """)
  "text": the question about that subject in the third person ("Where does Maya work?"; for the
          user, "the user": "What is the user's job?")
  "options": every answer the messages name (short: "nurse", "7 Harbour Road"), most recent first;
          for a yes/no question exactly ["yes", "no"]. Never a probability."""

CHOOSE = """You help an assistant's memory find the question it already tracks. You are shown a \
question asked in words and a numbered list of tracked questions. Reply with one JSON object and \
nothing else: {"question": ID} with the id of the tracked question that asks the same thing (in \
other words too), or {"question": null} when none does."""


class QuestionModelError(StoreError):
    """The model gave no usable answer; the message says what went wrong and what to change."""

    status: int | None = None


@dataclass
class Proposal:
    """A new question as the model proposes it."""

    kind: str
    text: str
    options: list[str]


@dataclass
class QuestionModel(ChatClient):
    """The organizer's server, asked to propose options or to choose a tracked question (module doc)."""

    timeout_s: float = 120.0
    retries: int = 2
    max_tokens: int = 400

    names = ORGANIZER_ENV
    role = "organizer"
    error = QuestionModelError

    def propose(self, question: str, subject_name: str, messages: list[str]) -> Proposal:
        """The kind, third-person text and options of a new question from ``messages`` (their texts)."""
        lines = [f"Question: {untrusted(question)}", f"About: {untrusted(subject_name)}",
                 "Kept messages (newest first):" if messages else "Kept messages: none"]
        # a long message: the part that bears on the question (a pasted document's first lines rarely do)
        shown = [excerpt(m, question, MESSAGE_CHARS)[0] for m in messages]
        lines += [f"- <message>{untrusted(m)}</message>" for m in shown]
        value = self._json(PROPOSE, "\n".join(lines), _check_proposal)
        options = [o for o in dict.fromkeys(" ".join(str(o).split()) for o in value["options"]) if o]
        if sorted(o.casefold() for o in options) != ["no", "yes"]:
            # a value is what a message says: one no shown message holds is the model's own (a small
            # model copies the prompt's "7 Harbour Road"), dropped as the organizer drops it
            said = [stated_in(m) for m in shown]
            options = [o for o in options if any(stated(o) for stated in said)]
        kind = _kind(str(value.get("kind") or ""))
        if kind in EXAMPLE_KINDS and not set(kind.split("_")) & set(_kind(question).split("_")):
            kind = ""  # the example copied: the caller takes the kind from the question's own words
        text = " ".join(str(value.get("text") or "").split())
        if not content_words(text, _PERSON_WORDS) & content_words(question, _PERSON_WORDS):
            # not the question in other words (a small model copies "What is the user's job?" for a
            # question about coffee): the caller keeps the question as it was asked
            text = ""
        return Proposal(kind=kind, text=text, options=options[:MAX_OPTIONS])

    def choose(self, question: str, candidates: list[dict[str, Any]]) -> str | None:
        """The id of the candidate (``{"id", "text", "options"}``) that ``question`` asks, or None."""
        lines = [f"Question: {untrusted(question)}", "Tracked questions:"]
        lines += [f"{n}. {c['id']}: {untrusted(c['text'])} [{' | '.join(untrusted(o) for o in c['options'])}]"
                  for n, c in enumerate(candidates, start=1)]
        ids = {c["id"] for c in candidates}
        value = self._json(CHOOSE, "\n".join(lines), lambda v: _check_choice(v, ids))
        return value["question"]

    # -- one JSON object, with one retry ---------------------------------------------
    def _json(self, system: str, prompt: str, check) -> dict[str, Any]:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
        content = self._complete(messages)
        value, problems = _read(content, check)
        if problems:
            messages += [{"role": "assistant", "content": content},
                         {"role": "user", "content": "Your reply could not be used:\n- " + "\n- ".join(problems)
                          + "\nReply again with only the corrected JSON object."}]
            content = self._complete(messages)
            value, problems = _read(content, check)
        if problems:
            raise QuestionModelError(
                f"organizer server {self.endpoint.chat_url}: no usable answer after one retry: "
                + "; ".join(problems[:3]) + f". Reply began: {content[:160]!r}. Use an instruction-tuned model "
                "that follows a JSON format (docs/organizer.md).")
        assert value is not None
        return value

    def _complete(self, messages: list[dict[str, str]]) -> str:
        body: dict[str, Any] = {"messages": messages, "temperature": 0, "max_tokens": self.max_tokens}
        if self.model:
            body["model"] = self.model
        body.update(self.extra_body)
        answer = self.endpoint.post(body)
        choices = answer.get("choices") if isinstance(answer, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise QuestionModelError(f"organizer server {self.endpoint.chat_url}: reply has no choices: "
                                     f"{str(answer)[:300]}. Check that the URL is an OpenAI-compatible /v1 endpoint.")
        message = choices[0].get("message") or {}
        if message.get("refusal"):
            raise QuestionModelError(f"organizer server {self.endpoint.chat_url}: the model refused: "
                                     f"{str(message['refusal'])[:300]!r}; use another model")
        content = message.get("content")
        return content if isinstance(content, str) else ""


def _read(content: str, check) -> tuple[dict[str, Any] | None, list[str]]:
    value, problem, _ = parse_reply(content)
    if value is None:
        return None, [problem]
    problems = check(value)
    return (None if problems else value), problems


def _check_proposal(value: dict[str, Any]) -> list[str]:
    options = value.get("options")
    if not isinstance(options, list) or not all(isinstance(o, (str, int, float)) for o in options):
        return ['"options" must be a list of short answers (strings)']
    if not [o for o in options if " ".join(str(o).split())]:
        return ['"options" names no answer: list the values the messages name']
    if not isinstance(value.get("kind", ""), str) or not isinstance(value.get("text", ""), str):
        return ['"kind" and "text" are strings']
    return []


def _check_choice(value: dict[str, Any], ids: set[str]) -> list[str]:
    chosen = value.get("question", "missing")
    if chosen is None or chosen in ids:
        return []
    return [f'"question" must be one of {", ".join(sorted(ids))} or null, not {chosen!r}']


#: Words a third-person rewrite adds ("my job" → "the user's job"): no evidence it kept the subject matter.
_PERSON_WORDS = frozenset({"user", "users", "person"})


def _kind(text: str) -> str:
    """A kind as the organizer writes one: lower-case words joined by "_" (empty when none)."""
    return "_".join(re.findall(r"[^\W_]+", text.lower()))[:60]


def question_model_from_env(env: Mapping[str, str] | None = None, **kwargs: Any) -> QuestionModel | None:
    """The organizer's model from the environment (``DOXA_ORGANIZER_URL``, else ``DOXA_READER_URL``), or None."""
    return QuestionModel.from_env(env, **kwargs)


__all__ = ["QuestionModel", "QuestionModelError", "Proposal", "question_model_from_env", "MAX_OPTIONS"]
