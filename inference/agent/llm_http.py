"""A client of an OpenAI-compatible chat-completions server: shared by the reader and the organizer.

:class:`ChatClient` holds a client's connection settings (URL, model, key, timeout, retries) and
reads them from the environment (:meth:`ChatClient.from_env`, by the names of a :class:`ChatEnv`);
:class:`ChatEndpoint` POSTs, with retries; :func:`http_hint` says what to check after an HTTP
error. Standard library only (``urllib.request``), so nothing heavy loads on the read path.
Transient failures (timeouts, refused or dropped connections, HTTP 429 and 5xx) are retried
``retries`` times with exponential backoff (``backoff_s · 2^attempt``, or the server's
``Retry-After``, capped at ``max_backoff_s``); any other HTTP error, and a reply that is not
JSON, raise at once: asking again would get the same answer.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Literal, Mapping

RETRY_STATUSES = frozenset({429}) | frozenset(range(500, 600))
#: Optional request fields a server may refuse. A 5xx whose detail names one the request sends is a
#: refusal, not a passing fault (llama-cpp-python answers a ``json_schema`` response_format with HTTP 500):
#: it is not retried, and the caller may step down to another form at once.
OPTIONAL_FIELDS = ("response_format", "json_schema", "logprobs", "top_logprobs")


def names_a_sent_field(detail: str, body: dict[str, Any]) -> bool:
    """Whether an error's ``detail`` names an optional field that ``body`` sends (``json_schema`` is sent
    inside ``response_format``)."""
    sent = {f for f in OPTIONAL_FIELDS if f in body}
    if "response_format" in sent and (body["response_format"] or {}).get("type") == "json_schema":
        sent.add("json_schema")
    return any(f in detail for f in sent)


def chat_url(base_url: str) -> str:
    url = base_url.strip().rstrip("/")
    if url.endswith("/chat/completions"):
        return url
    return url + "/chat/completions"


@dataclass
class ChatEndpoint:
    """Where and how to POST chat-completion requests.

    ``what`` names the server in errors ("reader server"); ``error`` is the exception class
    raised; ``hint(code)`` says what to check after an HTTP error that is not retried.
    """

    url: str
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 30.0
    retries: int = 3
    backoff_s: float = 0.5
    max_backoff_s: float = 30.0
    what: str = "server"
    error: type[Exception] = RuntimeError
    hint: Callable[[int], str] = field(default=lambda code: "This error is not retried.", repr=False)
    unreachable_hint: str = "Check that the server is running and reachable."

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ValueError(f"retries must be >= 0, got {self.retries}")
        self.chat_url = chat_url(self.url)
        #: HTTP requests sent (each retry counts): what `remember` reports as calls.
        self.requests = 0

    def post(self, body: dict[str, Any]) -> Any:
        data = json.dumps(body).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        where = f"{self.what} {self.chat_url}"
        last_problem = ""
        last_status, last_detail = None, ""
        for attempt in range(self.retries + 1):
            wait = self.backoff_s * (2**attempt)
            request = urllib.request.Request(self.chat_url, data=data, headers=headers, method="POST")
            self.requests += 1
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    raw = response.read()
            except urllib.error.HTTPError as err:
                detail = error_body(err)
                if err.code not in RETRY_STATUSES or names_a_sent_field(detail, body):
                    refused = self.error(f"{where}: HTTP {err.code}: {detail}. {self.hint(err.code)}")
                    refused.status = err.code  # callers may react to a refused request field (HTTP 400, or a 5xx naming it)
                    refused.detail = detail
                    raise refused from err
                last_problem = f"HTTP {err.code}: {detail}"
                last_status, last_detail = err.code, detail
                retry_after = retry_after_s(err.headers.get("Retry-After") if err.headers else None)
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
                    raise self.error(
                        f"{where}: reply is not JSON ({err}): {raw[:200]!r}. Check that the URL "
                        "points at an OpenAI-compatible API (…/v1), not a web page or proxy."
                    ) from err
            if attempt < self.retries:
                time.sleep(min(max(wait, 0.0), self.max_backoff_s))
        failed = self.error(
            f"{where}: gave up after {self.retries + 1} attempts; last: {last_problem}. "
            f"{self.unreachable_hint} Or raise the timeout / retries for a slow model."
        )
        # a server may answer a field it does not take with a 5xx (llama-cpp-python: 500 for json_schema)
        failed.status, failed.detail = last_status, last_detail
        raise failed


def error_body(err: urllib.error.HTTPError) -> str:
    try:
        text = err.read().decode("utf-8", "replace")
    except Exception:  # the body is only used to explain the error
        text = ""
    text = " ".join(text.split())
    return text[:300] or (err.reason or "no detail")


def retry_after_s(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff


# ---------------------------------------------------------------------------- a client's settings
@dataclass(frozen=True)
class ChatEnv:
    """The environment variables that configure one client: its server's URL, model and key.

    Each falls back to ``fallback``'s variable of the same kind when unset or blank (the
    organizer's to the reader's: one server can do both jobs)."""

    url: str
    model: str
    key: str
    fallback: ChatEnv | None = None

    def value(self, env: Mapping[str, str], which: Literal["url", "model", "key"]) -> str | None:
        """The variable's value, stripped, else its fallback's; None when neither is set."""
        return (env.get(getattr(self, which)) or "").strip() or (
            self.fallback.value(env, which) if self.fallback else None)

    def described(self, which: Literal["url", "model", "key"]) -> str:
        """The variable's name for a message: ``DOXA_ORGANIZER_KEY (or DOXA_READER_KEY)``."""
        name = getattr(self, which)
        return f"{name} (or {self.fallback.described(which)})" if self.fallback else name


READER_ENV = ChatEnv("DOXA_READER_URL", "DOXA_READER_MODEL", "DOXA_READER_KEY")
ORGANIZER_ENV = ChatEnv("DOXA_ORGANIZER_URL", "DOXA_ORGANIZER_MODEL", "DOXA_ORGANIZER_KEY", fallback=READER_ENV)


def http_hint(code: int, names: ChatEnv, rejected: str = "") -> str:
    """What to check after HTTP error ``code`` (one that is not retried), naming the client's variables;
    ``rejected``: what else to check when the server rejects the request (400, 422)."""
    if code in (401, 403):
        return f"The server refused the key: set {names.described('key')} to a valid API key."
    if code == 404:
        return (f"Check that {names.url} is the API base (ending in /v1) and that {names.model} "
                "names a model the server serves.")
    if code in (400, 422):
        return f"The server rejected the request: check {names.model}{rejected}."
    return "This error is not retried."


@dataclass
class ChatClient:
    """The connection settings every client of a chat server has, and its :class:`ChatEndpoint`.

    A client (the reader, the organizer) subclasses it as a dataclass and sets the class
    attributes: ``names`` (the variables it is configured by), ``role`` (what its server is
    called in errors), ``error`` (what it raises) and ``rejected`` (see :func:`http_hint`).
    ``extra_body`` is merged into every request body, for server-specific switches, e.g.
    ``{"chat_template_kwargs": {"enable_thinking": False}}`` for thinking models.
    """

    url: str
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    name: str = ""
    timeout_s: float = 30.0
    retries: int = 3
    backoff_s: float = 0.5
    max_backoff_s: float = 30.0
    extra_body: dict[str, Any] = field(default_factory=dict)

    names: ClassVar[ChatEnv]
    role: ClassVar[str]
    error: ClassVar[type[Exception]]
    rejected: ClassVar[str] = ""

    def __post_init__(self) -> None:
        if not self.url or not self.url.strip():
            raise self.error(f"no {self.role} URL given: set {self.names.described('url')} to the server's OpenAI "
                             "base URL, e.g. http://127.0.0.1:8080/v1")
        if not self.name:
            self.name = f"llm:{self.model}" if self.model else "llm:default"
        self.endpoint = ChatEndpoint(
            self.url, api_key=self.api_key, timeout_s=self.timeout_s, retries=self.retries, backoff_s=self.backoff_s,
            max_backoff_s=self.max_backoff_s, what=f"{self.role} server", error=self.error,
            hint=lambda code: http_hint(code, self.names, self.rejected),
            unreachable_hint=f"Check that the server is running and reachable at {self.names.url}.")
        self.chat_url = self.endpoint.chat_url

    @property
    def requests(self) -> int:
        """HTTP requests sent so far (each retry counts): what `remember` reports as calls."""
        return self.endpoint.requests

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any):
        """The client configured in the environment (``os.environ`` by default), or None when no URL is set.

        URL, model and key come from the variables of ``cls.names``; a client's own variables from
        :meth:`settings_from_env`. Keyword arguments override the environment."""
        env = os.environ if env is None else env
        url = cls.names.value(env, "url")
        if not url:
            return None
        settings = {"url": url, "model": cls.names.value(env, "model"), "api_key": cls.names.value(env, "key"),
                    **cls.settings_from_env(env)}
        settings.update(overrides)
        return cls(**settings)

    @classmethod
    def settings_from_env(cls, env: Mapping[str, str]) -> dict[str, Any]:
        """The settings of this kind of client that its own environment variables give (none here)."""
        return {}


__all__ = ["ChatClient", "ChatEndpoint", "ChatEnv", "ORGANIZER_ENV", "READER_ENV", "chat_url", "error_body",
           "http_hint", "retry_after_s", "RETRY_STATUSES", "OPTIONAL_FIELDS", "names_a_sent_field"]
