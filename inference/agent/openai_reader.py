"""The reader over any OpenAI-compatible chat-completions server with log-probabilities.

Standard library HTTP (``urllib.request``), no client library: ``doxa ask`` must start
without pulling in an SDK, and the loopback test server speaks the same protocol.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Sequence

from .prompts import (LETTERS, PROMPT_VERSION, _SYSTEM_PROMPT, _choice_labels, _choice_prompt, _one_off_prompt,
                      letter_probabilities)
from .reading import Reader, ReaderError, Reading

#: The environment variables :func:`doxa.inference.agent.readers.reader_from_env` reads
#: (named in this reader's error messages).
ENV_URL = "DOXA_READER_URL"
ENV_MODEL = "DOXA_READER_MODEL"
ENV_KEY = "DOXA_READER_KEY"

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
