"""POST to an OpenAI-compatible chat-completions server, with retries: shared by the reader and the organizer.

Standard library only (``urllib.request``), so nothing heavy loads on the read path.
Transient failures (timeouts, refused or dropped connections, HTTP 429 and 5xx) are retried
``retries`` times with exponential backoff (``backoff_s · 2^attempt``, or the server's
``Retry-After``, capped at ``max_backoff_s``); any other HTTP error, and a reply that is not
JSON, raise at once: asking again would get the same answer.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable

RETRY_STATUSES = frozenset({429}) | frozenset(range(500, 600))


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
                if err.code not in RETRY_STATUSES:
                    refused = self.error(f"{where}: HTTP {err.code}: {detail}. {self.hint(err.code)}")
                    refused.status = err.code  # callers may react to a refused request field (HTTP 400)
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


__all__ = ["ChatEndpoint", "chat_url", "error_body", "retry_after_s", "RETRY_STATUSES"]
