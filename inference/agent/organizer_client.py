"""The organizer's model client: a model decides which questions a new message bears on (docs/design.md §7:
the model decides what is worth knowing).

:class:`Organizer` is the interface; :class:`OpenAIChatOrganizer` asks any OpenAI-compatible
chat-completions server (llama.cpp, vLLM, Ollama, hosted APIs) with an :class:`~.organizer_schema.OrganizerRequest`
and returns its :class:`~.organizer_schema.OrganizerOutput` (what is shown and answered, and how a reply is
read, are in :mod:`.organizer_schema`). It sends the output's JSON schema, narrowed to the message
(links only to the questions shown), as ``response_format`` where the server takes it: llama.cpp,
llama-cpp-python and vLLM turn it into a grammar, so even a small model's reply parses and
names no question that does not exist. There are two forms of the field (OpenAI's
``json_schema``, and the ``json_object`` with a ``schema`` that llama-cpp-python takes); a server
that refuses one is asked in the next form, then without any, and that is remembered.
Without a schema the reply is parsed as strict JSON after a light repair (code fences, prose
around the object, trailing commas); a reply that still does not parse or validate is sent
back once with what was wrong, and a second failure is an :class:`OrganizerError`. Local models
break structured output often; one retry fixes most of it, more rarely help.

The instructions (the system prompt) are not in this module: they are a versioned text in the
store (``doxa organizer-instructions``), passed in by the caller.

**In steps** (``steps=True``, one message at a time; a window is one call as before). A small model
shown a few questions tends to link one of them to a message that needs a new question. With steps,
each question the reply links (and gives no value) — by its id, or by proposing it again
(:func:`~.organizer_schema.proposed_again`) — is checked by a second, narrow call — the message,
the one question, "does the message tell its answer?", a JSON ``true`` or ``false``
(:data:`CHECK_SYSTEM`) — and a link answered ``false`` is dropped; when every link is dropped and the
reply created nothing, a third call asks again with no question shown, so the model may create one
(or decide nothing). A check that gives no usable answer keeps its link.
"""

from __future__ import annotations

import abc
import json
from dataclasses import dataclass, replace
from typing import Any, Literal, Mapping

from pydantic import ValidationError

from .llm_http import ORGANIZER_ENV, ChatClient
from .organizer_schema import (OrganizerOutput, OrganizerRequest, TurnOutput, WindowOutput, WindowRequest, check_output,
                               check_window_output, parse_reply, proposed_again, validation_problems)
from .untrusted import untrusted

ENV_STRUCTURED = "DOXA_ORGANIZER_STRUCTURED"
ENV_STEPS = "DOXA_ORGANIZER_STEPS"
#: how the reply's schema may be sent (OpenAIChatOrganizer.structured)
STRUCTURED_FORMS = ("auto", "schema", "object", "none")


#: The system prompt of a link's check (``steps``): one question, yes or no.
CHECK_SYSTEM = ("You check one link in an assistant's memory. You are shown a message and one question about a "
                "person. Decide whether the message tells the answer to that question, or a change of it. Reply "
                'with one JSON object and nothing else: {"answers": true} or {"answers": false}.')
CHECK_SCHEMA = {"type": "object", "properties": {"answers": {"type": "boolean"}}, "required": ["answers"],
                "additionalProperties": False}
#: Links of one reply checked at most (``steps``); the rest are kept unchecked.
MAX_CHECKED = 3

#: A window's reply is bounded by ``a + b·turns`` tokens (and ``window_max_tokens``): a turn's entry
#: with one new question is about 70 tokens of Qwen2.5's tokenizer, and most turns have none.
WINDOW_REPLY_TOKENS = (128, 96)


class OrganizerError(RuntimeError):
    """The organizer gave no usable answer; the message says what went wrong and what to change."""

    status: int | None = None
    #: the server refused the prompt as longer than its context (a window of turns is then split)
    context_overflow: bool = False


def context_overflow(detail: str) -> bool:
    """Whether a server's error says the prompt does not fit its context (llama.cpp, llama-cpp-python,
    vLLM and OpenAI each word it their way)."""
    low = detail.lower()
    return "context" in low and any(w in low for w in ("exceed", "too long", "maximum context", "longer than"))


@dataclass
class Organized:
    """An organizer's answer for one message, with how it was got."""

    output: OrganizerOutput
    calls: int = 1
    repaired: bool = False
    retried: bool = False


class Organizer(abc.ABC):
    """Decides which questions a message bears on. Subclasses set ``name`` and implement :meth:`organize`."""

    name: str = "organizer"

    @abc.abstractmethod
    def organize(self, request: OrganizerRequest, instructions: str) -> Organized:
        """The links, new values, new questions, subjects and relations for ``request``, following
        ``instructions``.

        The output returned has been through :func:`check_output`: every link is a question shown,
        every new value is for an open question shown and not one of its options, every subject of a
        new question or relation is known or new. Raises :class:`OrganizerError`."""

    def organize_window(self, request: WindowRequest, instructions: str) -> Organized:
        """The decisions for a window of numbered turns (``Organized.output`` a :class:`WindowOutput`,
        through :func:`check_window_output`). This default asks :meth:`organize` once per turn; a model
        client overrides it with one call for the whole window."""
        turns, subjects, relations, calls = [], [], [], 0
        for number, _ in request.turns:
            organized = self.organize(request.turn_request(number), instructions)
            calls += organized.calls
            out = organized.output
            subjects += out.new_subjects
            relations += out.new_relations
            if out.links or out.new_values or out.new_questions:
                turns.append(TurnOutput(turn=number, links=out.links, new_values=out.new_values,
                                        new_questions=out.new_questions))
        window = WindowOutput(turns=turns, new_subjects=subjects, new_relations=relations)
        clean, problems = check_window_output(window, request)
        if problems:
            raise OrganizerError(f"organizer {self.name}: " + "; ".join(problems[:4]))
        return Organized(output=clean, calls=calls)


@dataclass
class OpenAIChatOrganizer(ChatClient, Organizer):
    """The organizer over an OpenAI-compatible chat-completions server.

    ``structured``: how the message's JSON schema (:meth:`OrganizerOutput.response_schema`) is sent.
    ``"schema"``: as ``response_format`` ``{"type": "json_schema", …}`` (OpenAI, vLLM, llama.cpp's
    own server); ``"object"``: as ``{"type": "json_object", "schema": …}``, the form
    llama-cpp-python's server turns into a grammar (it answers the first form with HTTP 500);
    ``"none"``: not at all (strict JSON, repair and one retry only); ``"auto"`` tries them in that
    order, stepping down for good when a server refuses a form. ``max_tokens`` bounds the reply (a reply cut off there is
    asked again once). Transport failures are retried as the reader's are (:mod:`.llm_http`). The
    connection settings and :meth:`from_env` are :class:`.ChatClient`'s; the organizer waits longer.
    """

    timeout_s: float = 120.0
    retries: int = 2
    max_tokens: int = 768
    #: the bound of a window's reply (:meth:`organize_window`): several turns' decisions
    window_max_tokens: int = 1536
    structured: Literal["auto", "schema", "object", "none"] = "auto"  # one of STRUCTURED_FORMS
    #: check each link by a narrow second call, and ask again with no question shown when none holds
    #: (the module docstring, "In steps")
    steps: bool = False

    names = ORGANIZER_ENV
    role = "organizer"
    error = OrganizerError

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.structured not in STRUCTURED_FORMS:
            raise ValueError(f"structured is one of {', '.join(STRUCTURED_FORMS)}, not {self.structured!r}")
        #: the forms of response_format still to try, the one in use first
        #: tokens the server reported (``usage``) over every request, retries included
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self._formats: list[str] = {"auto": ["json_schema", "json_object"], "schema": ["json_schema"],
                                    "object": ["json_object"], "none": []}[self.structured]

    @property
    def response_format(self) -> str | None:
        """The form of ``response_format`` sent now: ``json_schema``, ``json_object`` or None."""
        return self._formats[0] if self._formats else None

    def organize(self, request: OrganizerRequest, instructions: str) -> Organized:
        before = self.endpoint.requests
        organized = self._organize(instructions, request, OrganizerOutput.response_schema(request),
                                   lambda value: self._checked(OrganizerOutput, check_output, value, request),
                                   self.max_tokens)
        if not self.steps:
            return organized
        out = organized.output
        valued = {v.question for v in out.new_values}
        shown = {q["id"]: q for q in request.questions}
        # a shown question proposed again is a link too (remember links it): checked the same way
        again = {i: proposed_again(q, request.questions) for i, q in enumerate(out.new_questions)}
        tied = list(dict.fromkeys([*out.links, *(q for q in again.values() if q is not None)]))
        checked = [q for q in tied if q not in valued and q in shown][:MAX_CHECKED]
        dropped = {q for q in checked if not self._answers(request, shown[q])}
        links = [q for q in out.links if q not in dropped]
        questions = [q for i, q in enumerate(out.new_questions) if again[i] is None or again[i] not in dropped]
        if not dropped or links or questions or out.new_values:
            output = out.model_copy(update={"links": links, "new_questions": questions})
        else:  # nothing holds: ask again with no question shown (a new question, or nothing)
            bare = replace(request, questions=[])
            output = self._organize(instructions, bare, OrganizerOutput.response_schema(bare),
                                    lambda value: self._checked(OrganizerOutput, check_output, value, bare),
                                    self.max_tokens).output
        return Organized(output=output, calls=self.endpoint.requests - before, repaired=organized.repaired,
                         retried=organized.retried)

    def _answers(self, request: OrganizerRequest, question: dict[str, Any]) -> bool:
        """Whether the model says the message tells the answer to ``question`` (``steps``); True when its
        reply gives no JSON ``true`` or ``false`` (a check that fails keeps the link)."""
        options = " | ".join(question.get("options") or [])
        prompt = (f"Message:\n<message>\n{untrusted(request.text)}\n</message>\n\n"
                  + untrusted(f"Question about {question['subject']}: {question['text']} [{options}]")
                  + "\n\nDoes the message tell the answer to this question? Reply with the JSON object only.")
        content, _ = self._complete([{"role": "system", "content": CHECK_SYSTEM}, {"role": "user", "content": prompt}],
                                    CHECK_SCHEMA, 16)
        value, _, _ = parse_reply(content)
        answer = value.get("answers") if isinstance(value, dict) else None
        return answer is not False

    def organize_window(self, request: WindowRequest, instructions: str) -> Organized:
        """One call for the whole window: the instructions (system prompt) first, then the window's
        fixed rules, so a server that caches prompts reads both once (:meth:`WindowRequest.prompt`)."""
        return self._organize(instructions, request, WindowOutput.response_schema(request),
                              lambda value: self._checked(WindowOutput, check_window_output, value, request),
                              min(self.window_max_tokens, WINDOW_REPLY_TOKENS[0] + WINDOW_REPLY_TOKENS[1] * len(request.turns)))

    @staticmethod
    def _checked(model, check, value, request):
        try:
            output = model.model_validate(value)
        except ValidationError as err:
            return None, validation_problems(err)
        clean, problems = check(output, request)
        return (None if problems else clean), problems

    def _organize(self, instructions: str, request, schema: dict[str, Any], check, max_tokens: int) -> Organized:
        messages = [{"role": "system", "content": instructions}, {"role": "user", "content": request.prompt()}]
        before = self.endpoint.requests
        content, finish = self._complete(messages, schema, max_tokens)
        output, problems, repaired = self._read(content, finish, check, max_tokens)
        retried = False
        if problems:
            retried = True
            messages += [{"role": "assistant", "content": content},
                         {"role": "user", "content": "Your reply could not be used:\n- " + "\n- ".join(problems)
                          + "\nReply again with only the corrected JSON object, in the format given."}]
            content, finish = self._complete(messages, schema, max_tokens)
            output, problems, repaired = self._read(content, finish, check, max_tokens)
        if problems:
            raise OrganizerError(
                f"organizer server {self.endpoint.chat_url}: no usable answer after one retry: "
                + "; ".join(problems[:4]) + f". Reply began: {content[:160]!r}. Use an instruction-tuned model "
                "that follows a JSON format, or a server that turns a response_format schema into a grammar (llama.cpp, vLLM)"
                + (", or raise max_tokens" if finish == "length" else "") + ".")
        assert output is not None
        return Organized(output=output, calls=self.endpoint.requests - before, repaired=repaired, retried=retried)

    # -- one completion ----------------------------------------------------------
    def _body(self, messages: list[dict[str, str]], schema: dict[str, Any], max_tokens: int | None = None
              ) -> dict[str, Any]:
        body: dict[str, Any] = {"messages": messages, "temperature": 0,
                                "max_tokens": self.max_tokens if max_tokens is None else max_tokens}
        if self.model:
            body["model"] = self.model
        if self.response_format == "json_schema":
            body["response_format"] = {"type": "json_schema", "json_schema": {
                "name": "doxa_organizer", "strict": True, "schema": schema}}
        elif self.response_format == "json_object":
            body["response_format"] = {"type": "json_object", "schema": schema}
        body.update(self.extra_body)
        return body

    def _complete(self, messages: list[dict[str, str]], schema: dict[str, Any], max_tokens: int | None = None
                  ) -> tuple[str, str]:
        while True:
            try:
                answer = self.endpoint.post(self._body(messages, schema, max_tokens))
                break
            except OrganizerError as err:
                status, detail = getattr(err, "status", None), getattr(err, "detail", "") or ""
                if context_overflow(detail):  # the prompt is too long: no other form of the schema helps
                    err.context_overflow = True
                    raise
                # refused outright (400, 422), or an error that names the field (llama-cpp-python answers 500)
                refused = self.response_format is not None and (status in (400, 422) or (
                    status is not None and ("response_format" in detail or "json_schema" in detail)))
                if not (refused and self.structured == "auto"):
                    raise
                self._formats.pop(0)  # this server does not take that form: the next one from now on
        where = f"organizer server {self.endpoint.chat_url}"
        usage = answer.get("usage") if isinstance(answer, dict) else None
        if isinstance(usage, dict):  # what the server says it read and wrote (OpenAI's usage object)
            self.prompt_tokens += int(usage.get("prompt_tokens") or 0)
            self.completion_tokens += int(usage.get("completion_tokens") or 0)
        if not isinstance(answer, dict):
            raise OrganizerError(f"{where}: reply is not a JSON object: {str(answer)[:200]!r}")
        choices = answer.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            if "error" in answer:
                raise OrganizerError(f"{where}: server returned an error: {str(answer['error'])[:300]}")
            raise OrganizerError(f"{where}: reply has no choices: {json.dumps(answer)[:300]}. "
                                 "Check that the URL is an OpenAI-compatible /v1 endpoint.")
        message = choices[0].get("message") or {}
        refusal = message.get("refusal")
        if refusal:
            raise OrganizerError(f"{where}: the model refused: {str(refusal)[:300]!r}. Nothing was stored; use "
                                 "another model, or change the organizer's instructions (doxa organizer-instructions).")
        content = message.get("content")
        if not isinstance(content, str):
            content = ""
        return content, str(choices[0].get("finish_reason") or "")

    def _read(self, content: str, finish: str, check, max_tokens: int) -> tuple[Any, list[str], bool]:
        value, problem, repaired = parse_reply(content)
        if value is None:
            if finish == "length":
                problem = f"the reply was cut off at {max_tokens} tokens before the JSON object ended; be shorter"
            return None, [problem], False
        output, problems = check(value)
        return output, problems, repaired

    @classmethod
    def settings_from_env(cls, env: Mapping[str, str]) -> dict[str, Any]:
        """``DOXA_ORGANIZER_STRUCTURED`` (auto, schema, object or none; default auto): how the reply's schema is
        sent; ``DOXA_ORGANIZER_STEPS`` (1 or 0; default 0): organize in steps (the module docstring)."""
        settings: dict[str, Any] = {}
        structured = (env.get(ENV_STRUCTURED) or "").strip().lower()
        if structured:
            if structured not in STRUCTURED_FORMS:
                raise OrganizerError(f"{ENV_STRUCTURED} is {env.get(ENV_STRUCTURED)!r}: set it to one of "
                                     f"{', '.join(STRUCTURED_FORMS)} (or unset it for auto)")
            settings["structured"] = structured
        steps = (env.get(ENV_STEPS) or "").strip()
        if steps:
            if steps not in ("0", "1"):
                raise OrganizerError(f"{ENV_STEPS} is {env.get(ENV_STEPS)!r}: set it to 1 (organize in steps) or 0")
            settings["steps"] = steps == "1"
        return settings


def organizer_from_env(env: Mapping[str, str] | None = None, **kwargs: Any) -> Organizer | None:
    """The organizer configured in the environment, or None.

    ``DOXA_ORGANIZER_URL`` / ``DOXA_ORGANIZER_MODEL`` / ``DOXA_ORGANIZER_KEY``, each defaulting to
    the reader's (``DOXA_READER_URL`` / ``_MODEL`` / ``_KEY``): one server can do both jobs.
    ``DOXA_ORGANIZER_STRUCTURED`` (auto, schema, object or none; default auto) picks how the reply's
    schema is sent (:class:`OpenAIChatOrganizer`). Keyword arguments go to
    :class:`OpenAIChatOrganizer` and override the environment (:meth:`OpenAIChatOrganizer.from_env`).
    """
    return OpenAIChatOrganizer.from_env(env, **kwargs)


__all__ = ["Organizer", "OpenAIChatOrganizer", "OrganizerError", "Organized", "organizer_from_env",
           "ENV_STRUCTURED", "STRUCTURED_FORMS"]
