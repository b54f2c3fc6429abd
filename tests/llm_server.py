"""A small OpenAI-compatible chat-completions server for testing readers over real HTTP.

It listens on 127.0.0.1 (port 0: the OS picks a free one) in a background thread and
answers ``POST /v1/chat/completions`` the way llama.cpp / vLLM do with
``logprobs=true``: one generated token, with its ``top_logprobs``. Which letter it
favours is decided by rules the test sets: ``{"peanut": "yes"}`` makes every message
containing "peanut" answer the letter whose label is "yes". Faults can be queued, one per
request, to check the client's retries and errors.

    with FakeChatServer({"peanut": "yes"}) as server:
        server.fail("500", times=2)
        reader = OpenAIChatReader(server.url, retries=3, backoff_s=0.01)

The probability layout of a normal answer, for ``n`` letters in the prompt:

- the favoured letter gets ``favoured_p``, split over two tokens spelling it,
  ``"X"`` (90 %) and ``" X"`` (10 %), as real tokenizers do;
- a non-letter token ``"The"`` gets ``non_letter_p``;
- the other letters share the rest equally;
- the list is sorted by probability and cut to the request's ``top_logprobs`` (or
  ``top_n`` when smaller), so letters can go missing.
"""

from __future__ import annotations

import inspect
import json
import math
import re
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: Faults a test can queue. Each is used for one request, in order.
FAULTS = (
    "pass",  # a normal answer (to let some requests through before a fault)
    "500",  # HTTP 500 with a JSON error body
    "503",  # HTTP 503
    "429",  # HTTP 429 with Retry-After: 0
    "400",  # HTTP 400 with a JSON error body
    "401",  # HTTP 401
    "malformed",  # HTTP 200 whose body is not JSON
    "no_choices",  # HTTP 200, "choices": []
    "no_logprobs",  # HTTP 200, a normal choice with "logprobs": null
    "no_letter",  # HTTP 200, top tokens contain no letter
    "slow",  # sleep slow_s before a normal answer (past the client's timeout)
    "drop",  # close the connection without answering
    # for organizer requests (a JSON reply in the message content):
    "truncated",  # the JSON reply cut in half, finish_reason "length"
    "prose",  # a reply with no JSON at all ("Sure! Here is what I found…")
    "fenced",  # the right JSON inside a Markdown code fence, with a sentence before it
    "trailing_comma",  # the right JSON with a trailing comma (repairable)
    "refusal",  # an OpenAI-style refusal: content null, message.refusal set
    "bad_link",  # valid JSON linking a question id that was not shown
    "schema_400",  # HTTP 400 when the request carries response_format, in any form (a server without it)
    "schema_500",  # HTTP 500 naming the field for the json_schema form only, as llama-cpp-python 0.3 answers
    "extra_field",  # valid JSON with a "confidence" key the schema forbids
    "context_400",  # HTTP 400: the prompt is longer than the context, as llama-cpp-python words it
)
ORGANIZER_FAULTS = ("truncated", "prose", "fenced", "trailing_comma", "refusal", "bad_link", "schema_400", "schema_500",
                    "extra_field", "context_400")

_LETTER_LINE = re.compile(r"^([A-Z])\. (.+)$", re.MULTILINE)
_MESSAGE = re.compile(r"<message>\n(.*)\n</message>", re.DOTALL)
_QUOTED_MESSAGE = re.compile(r'^Message: "(.*)"$', re.MULTILINE)
_BATCH_QUESTION = re.compile(r"^Question (\d+) \(person: [^)]*\): .*$", re.MULTILINE)
DEFAULT_LABELS = ("unrelated", "lasting", "unchanged")
#: What the reader's prompt calls the answers a rule names by their short name.
LABEL_WORDING = {"unrelated": "the message says nothing about", "unclear": "the message talks about",
                 "lasting": "how things usually are", "one-off": "one single occasion"}
#: An open question's extra answer (the reader's "a different answer for X, not listed above"): a
#: rule naming "unlisted" picks it.
LABEL_WORDING["unlisted"] = "a different answer for"
#: The reader's question whether a message says the answer changed: a rule naming "changed" picks its
#: yes; by default the answer is no ("unchanged": the message does not say it changed).
LABEL_WORDING.update({"changed": "yes: it says", "unchanged": "no: it does not say"})
#: Rules naming one of these make the digit after a reading's letter say lasting (1) or one-off (2).
DIGIT_LABELS = {"lasting": "1", "one-off": "2"}


class FakeChatServer:
    """An OpenAI-compatible chat server on loopback whose answers the test decides."""

    def __init__(
        self,
        rules: dict[str, str] | None = None,
        *,
        favoured_p: float = 0.85,
        non_letter_p: float = 0.02,
        top_n: int = 20,
        slow_s: float = 1.0,
        shape: str = "chat",
        organizer=None,
        no_digit: bool = False,
        answerer=None,
        max_prompt_chars: int | None = None,
    ) -> None:
        if shape not in ("chat", "legacy"):
            raise ValueError("shape is 'chat' (choices[0].logprobs.content) or 'legacy'")
        self.rules = dict(rules or {})
        self.favoured_p = favoured_p
        self.non_letter_p = non_letter_p
        self.top_n = top_n
        self.slow_s = slow_s
        self.shape = shape
        #: Stop after the letter (a model that ignores the digit): the reader must ask the one-off question apart.
        self.no_digit = no_digit
        #: Batch prompts: question numbers the reply leaves out (a model that skips a line), and
        #: whether to answer with the first line only (a server that stops early).
        self.batch_skip: set[int] = set()
        self.batch_first_line_only = False
        #: Answers organizer requests (those without logprobs): ``organizer(message, prompt) -> dict``,
        #: the JSON object the "model" replies with (a script taking a third argument gets the system
        #: prompt too: the instructions). Default: nothing to organize.
        self.organizer = organizer or (lambda message, prompt: {"links": [], "new_questions": [],
                                                                "new_subjects": [], "new_relations": []})
        #: Answers plain chat requests before any other rule (bench/conversations.py's baselines):
        #: ``answerer(system, prompt) -> None | text | (text, p)``; None leaves the request to the
        #: rules above, a text is the reply, and with ``logprobs`` asked its words come as tokens
        #: whose probabilities multiply to ``p`` (default 0.9). Default: answers nothing.
        self.answerer = answerer
        #: A context window: a request whose messages hold more characters is refused with HTTP 400
        #: and OpenAI's ``context_length_exceeded``, as a real server refuses a prompt over its context.
        self.max_prompt_chars = max_prompt_chars
        #: Every request received: {"path", "headers", "body", "labels", "letter", "kind"}.
        self.requests: list[dict[str, Any]] = []
        self._faults: deque[tuple[str, str]] = deque()
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- control -----------------------------------------------------------------

    def fail(self, kind: str, times: int = 1, *, to: str = "any") -> None:
        """Answer the next ``times`` requests (of kind ``to``: any, reader or organizer) with fault ``kind``."""
        if kind not in FAULTS:
            raise ValueError(f"unknown fault {kind!r}; one of {FAULTS}")
        if to not in ("any", "reader", "organizer"):
            raise ValueError("to is any, reader or organizer")
        with self._lock:
            self._faults.extend([(kind, to)] * times)

    def requests_of(self, kind: str) -> list[dict[str, Any]]:
        """The requests received of one kind: "reader" (with logprobs) or "organizer"."""
        with self._lock:
            return [r for r in self.requests if r["kind"] == kind]

    def start(self) -> "FakeChatServer":
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.fake = self  # type: ignore[attr-defined]
        # A short poll keeps shutdown (once per test) from waiting the default 0.5 s.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> "FakeChatServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        """The OpenAI base URL, as DOXA_READER_URL would hold it."""
        return f"http://127.0.0.1:{self.port}/v1"

    # -- answering ---------------------------------------------------------------

    def _next_fault(self, kind: str) -> str | None:
        with self._lock:
            for i, (fault, to) in enumerate(self._faults):
                if to in ("any", kind):
                    del self._faults[i]
                    return fault
            return None

    def choose_letter(self, message: str, labels: dict[str, str]) -> str:
        """The letter the rules pick for this message among this prompt's labels."""
        text = message.lower()
        for keyword, wanted in self.rules.items():
            if keyword.lower() in text:
                letter = _find_label(labels, wanted)
                if letter:
                    return letter
        for wanted in DEFAULT_LABELS:
            letter = _find_label(labels, wanted)
            if letter:
                return letter
        return min(labels) if labels else "A"

    def choose_digit(self, message: str) -> str:
        """The digit after a reading's letter: 2 (one-off) when a rule naming "one-off" matches, else 1."""
        text = message.lower()
        for keyword, wanted in self.rules.items():
            if keyword.lower() in text and wanted in DIGIT_LABELS:
                return DIGIT_LABELS[wanted]
        return "1"

    def top_logprobs(self, letters: list[str], favoured: str, limit: int) -> list[tuple[str, float]]:
        others = [letter for letter in letters if letter != favoured]
        rest = max(0.0, 1.0 - self.favoured_p - self.non_letter_p)
        entries = [
            (favoured, 0.9 * self.favoured_p),
            (" " + favoured, 0.1 * self.favoured_p),
            ("The", self.non_letter_p),
        ]
        entries += [(letter, rest / len(others)) for letter in others] if others else []
        entries = [(t, p) for t, p in entries if p > 0]
        entries.sort(key=lambda e: -e[1])
        return [(t, math.log(p)) for t, p in entries[: min(limit, self.top_n)]]


def _find_label(labels: dict[str, str], wanted: str) -> str | None:
    wanted = wanted.lower()
    for letter, label in sorted(labels.items()):
        if label.lower() == wanted:
            return letter
    wording = LABEL_WORDING.get(wanted)
    for letter, label in sorted(labels.items()):
        if wording and label.lower().startswith(wording):
            return letter
    for letter, label in sorted(labels.items()):
        low = label.lower()
        if low.startswith(wanted + " ") or low.startswith(wanted + "("):
            return letter
    return None


def _parse_prompt(body: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """(message text, {letter: label}) from the last user message of a request."""
    user = [m for m in body.get("messages", []) if m.get("role") == "user"]
    content = user[-1]["content"] if user else ""
    found = _MESSAGE.search(content) or _QUOTED_MESSAGE.search(content)
    message = found.group(1) if found else content
    after = content[found.end():] if found else content
    labels = {m.group(1): m.group(2).strip() for m in _LETTER_LINE.finditer(after)}
    return message, labels


def _batch_blocks(content: str) -> dict[int, dict[str, str]]:
    """{question number: {letter: label}} of a batch prompt (several numbered questions), else {}."""
    found = list(_BATCH_QUESTION.finditer(content))
    blocks = {}
    for i, m in enumerate(found):
        end = found[i + 1].start() if i + 1 < len(found) else len(content)
        blocks[int(m.group(1))] = {x.group(1): x.group(2).strip() for x in _LETTER_LINE.finditer(content[m.end():end])}
    return blocks


def _completion(tokens: list[list[tuple[str, float]]] | None, shape: str, content: str) -> dict:
    """A completion whose generated tokens are the first entry of each list in ``tokens``
    (a list of top_logprobs per generated token; a single list is one token)."""
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": content},
        "finish_reason": "length",
        "logprobs": None,
    }
    if tokens and isinstance(tokens[0], tuple):
        tokens = [tokens]
    if tokens and tokens[0]:
        chosen = [top[0] for top in tokens]
        if shape == "chat":
            choice["logprobs"] = {"content": [
                {"token": token, "logprob": lp, "bytes": list(token.encode()),
                 "top_logprobs": [{"token": t, "logprob": p, "bytes": list(t.encode())} for t, p in top]}
                for (token, lp), top in zip(chosen, tokens)]}
        else:
            choice["logprobs"] = {
                "tokens": [t for t, _ in chosen],
                "token_logprobs": [lp for _, lp in chosen],
                "top_logprobs": [dict(top) for top in tokens],
            }
        choice["message"]["content"] = "".join(t for t, _ in chosen) if len(chosen) > 1 else content
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "fake-reader",
        "choices": [choice],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def _call_organizer(organizer, message: str, prompt: str, system: str) -> dict:
    """``organizer(message, prompt)``, or ``organizer(message, prompt, system)`` for a script that takes a
    third argument: the system prompt (the organizer's instructions), for a model whose answer depends on them."""
    try:
        takes = len([p for p in inspect.signature(organizer).parameters.values()
                     if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)])
    except (TypeError, ValueError):
        takes = 2
    return organizer(message, prompt, system) if takes >= 3 else organizer(message, prompt)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def _send(self, status: int, payload: bytes, extra: dict[str, str] | None = None) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for key, value in (extra or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout test): nothing to answer

    def _send_json(self, status: int, obj: Any, extra: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(obj).encode(), extra)

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        fake: FakeChatServer = self.server.fake  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            self._send_json(400, {"error": {"message": "request body is not JSON"}})
            return
        message, labels = _parse_prompt(body)
        kind = "reader" if body.get("logprobs") else "organizer"
        record = {"path": self.path, "headers": dict(self.headers), "body": body, "labels": labels, "kind": kind}
        with fake._lock:
            fake.requests.append(record)

        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send_json(404, {"error": {"message": f"no route {self.path}"}})
            return
        chars = sum(len(str(m.get("content") or "")) for m in body.get("messages") or [])
        if fake.max_prompt_chars is not None and chars > fake.max_prompt_chars:
            self._send_json(400, {"error": {"message": f"the prompt holds {chars} characters, over this server's "
                                                       f"{fake.max_prompt_chars}", "type": "invalid_request_error",
                                            "code": "context_length_exceeded"}})
            return
        if fake.answerer is not None and self._answer(fake, body, record):
            return

        fault = fake._next_fault(kind)
        if kind == "organizer" and fault not in ("500", "503", "429", "400", "401", "drop", "malformed", "no_choices"):
            if fault == "slow":
                time.sleep(fake.slow_s)
            self._organizer_reply(fake, body, message, fault)
            return
        if fault in ("500", "503", "400", "401"):
            self._send_json(int(fault), {"error": {"message": f"injected {fault}"}})
            return
        if fault == "429":
            self._send_json(429, {"error": {"message": "slow down"}}, {"Retry-After": "0"})
            return
        if fault == "drop":
            self.close_connection = True
            self.connection.shutdown(2)
            return
        if fault == "malformed":
            self._send(200, b'{"choices": [ this is not json')
            return
        if fault == "no_choices":
            self._send_json(200, {"id": "x", "object": "chat.completion", "choices": []})
            return
        if fault == "slow":
            time.sleep(fake.slow_s)

        limit = int(body.get("top_logprobs") or 0) if body.get("logprobs") else 0
        user = [m for m in body.get("messages", []) if m.get("role") == "user"]
        blocks = _batch_blocks(user[-1]["content"] if user else "")
        if blocks and limit > 0 and fault is None:
            record["kind"] = "reader-batch"
            self._send_json(200, _completion(self._batch_tokens(fake, message, blocks, record, limit),
                                             fake.shape, ""))
            return
        letter = fake.choose_letter(message, labels)
        record["letter"] = letter
        if fault == "no_logprobs" or limit <= 0:
            self._send_json(200, _completion(None, fake.shape, letter))
            return
        if fault == "no_letter":
            words = [("The", -0.2), ("I", -1.9), ("Answer", -3.0), ("**", -4.0)]
            self._send_json(200, _completion(words, fake.shape, "The"))
            return
        top = fake.top_logprobs(sorted(labels) or ["A"], letter, limit)
        tokens = [top]
        if int(body.get("max_tokens") or 1) >= 2 and not fake.no_digit:
            # the reply goes on: a space and the lasting / one-off digit, as the reader's prompt asks
            digit = fake.choose_digit(message)
            other = "1" if digit == "2" else "2"
            tokens.append(fake.top_logprobs([digit, other], digit, limit))
        self._send_json(200, _completion(tokens, fake.shape, letter))

    def _batch_tokens(self, fake: FakeChatServer, message: str, blocks: dict[int, dict[str, str]],
                      record: dict[str, Any], limit: int) -> list[list[tuple[str, float]]]:
        """One "n: X d" line per question, each letter and digit with its top log-probabilities."""
        sure = math.log(0.999)  # the tokens around the answers: all but certain
        tokens: list[list[tuple[str, float]]] = []
        record["letters"] = {}
        for n, labels in sorted(blocks.items()):
            if n in fake.batch_skip:
                continue
            letter = fake.choose_letter(message, labels)
            record["letters"][n] = letter
            digit = fake.choose_digit(message)
            tokens += [[(str(n), sure)], [(":", sure)], fake.top_logprobs(sorted(labels), letter, limit)]
            tokens += [[(" ", sure)], fake.top_logprobs([digit, "1" if digit == "2" else "2"], digit, limit)]
            if fake.batch_first_line_only:
                break
            tokens.append([("\n", sure)])
        return tokens or [[("The", math.log(0.9)), ("I", math.log(0.05))]]  # every line skipped: prose

    def _answer(self, fake: FakeChatServer, body: dict[str, Any], record: dict[str, Any]) -> bool:
        """Reply with ``fake.answerer``'s text when it has one for this request (True), else False."""
        system = "\n".join(m.get("content") or "" for m in body.get("messages", []) if m.get("role") == "system")
        user = [m.get("content") or "" for m in body.get("messages", []) if m.get("role") == "user"]
        scripted = fake.answerer(system, user[-1] if user else "")
        if scripted is None:
            return False
        text, p = scripted if isinstance(scripted, tuple) else (scripted, 0.9)
        record["kind"] = "answer"
        pieces = re.findall(r"\S+\s*", text) or [text]
        tokens = [[(piece, math.log(p) / len(pieces))] for piece in pieces] if body.get("logprobs") else None
        reply = _completion(tokens, fake.shape, text)
        reply["choices"][0]["message"]["content"] = text
        reply["choices"][0]["finish_reason"] = "stop"
        reply["usage"] = {"prompt_tokens": len((system + " ".join(user)).split()), "completion_tokens": len(pieces),
                          "total_tokens": len((system + " ".join(user)).split()) + len(pieces)}
        self._send_json(200, reply)
        return True

    def _organizer_reply(self, fake: FakeChatServer, body: dict[str, Any], message: str, fault: str | None) -> None:
        if fault == "schema_500" and (body.get("response_format") or {}).get("type") == "json_schema":
            self._send_json(500, {"error": {"message": "1 validation error: {'type': 'literal_error', 'loc': ('body', "
                                            "'response_format', 'type'), 'msg': \"Input should be 'text' or "
                                            "'json_object'\", 'input': 'json_schema'}"}})
            return
        if fault == "context_400":
            self._send_json(400, {"error": {"message": "This model's maximum context length is 2048 tokens. However, "
                                            "you requested 2600 tokens (1800 in the messages, 800 in the completion).",
                                            "type": "invalid_request_error", "code": "context_length_exceeded"}})
            return
        if fault == "schema_400" and "response_format" in body:
            self._send_json(400, {"error": {"message": "response_format json_schema is not supported"}})
            return
        user = [m for m in body.get("messages", []) if m.get("role") == "user"]
        prompt = user[0]["content"] if user else ""
        found = _MESSAGE.search(prompt)  # the first user turn holds the message (later ones ask for a repair)
        system = "\n".join(m.get("content") or "" for m in body.get("messages", []) if m.get("role") == "system")
        reply = _call_organizer(fake.organizer, found.group(1) if found else prompt, prompt, system)
        text = json.dumps(reply)
        finish = "stop"
        refusal = None
        if fault == "truncated":
            text, finish = text[: max(1, len(text) // 2)], "length"
        elif fault == "prose":
            text = "Sure! The message is about a person and their food preferences."
        elif fault == "fenced":
            text = "Here is the JSON:\n```json\n" + json.dumps(reply, indent=2) + "\n```"
        elif fault == "trailing_comma":
            text = text[:-1] + ",}"
        elif fault == "bad_link":
            text = json.dumps(dict(reply, links=list(reply.get("links", [])) + ["nobody.nothing"]))
        elif fault == "extra_field":
            text = json.dumps(dict(reply, confidence=0.9))
        elif fault == "refusal":
            text, refusal = None, "I can't help with organizing personal information."
        choice = {"index": 0, "message": {"role": "assistant", "content": text, "refusal": refusal},
                  "finish_reason": finish, "logprobs": None}
        self._send_json(200, {"id": "chatcmpl-org", "object": "chat.completion", "created": int(time.time()),
                              "model": "fake-organizer", "choices": [choice],
                              "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})


# ---------------------------------------------------------------------------- `doxa answer`'s requests
def answer_model(*, choose=None, propose=None, otherwise=None):
    """An ``organizer`` for :class:`FakeChatServer` that also answers the two requests `doxa answer` and
    `doxa ask` send the organizer's model (inference/agent/question_model.py), told apart by their prompt:

    - "Tracked questions:" (which tracked question a question in words asks): replies
      ``{"question": choose(prompt)}`` (default: None, none of them);
    - "Kept messages" (the options of a new question): replies ``propose(prompt)``, a
      ``{"kind", "text", "options"}`` dict (default: yes/no);

    anything else goes to ``otherwise(message, prompt)`` (default: nothing to organize). Each call of
    either request is recorded in the returned function's ``calls`` list as ``(request, prompt)``.
    """
    def reply(message: str, prompt: str) -> dict:
        if "Tracked questions:" in prompt:
            reply.calls.append(("choose", prompt))
            return {"question": choose(prompt) if choose else None}
        if "Kept messages" in prompt:
            reply.calls.append(("propose", prompt))
            return propose(prompt) if propose else {"kind": "custom", "text": "", "options": ["yes", "no"]}
        if otherwise is not None:
            return otherwise(message, prompt)
        return {"links": [], "new_questions": [], "new_subjects": [], "new_relations": []}

    reply.calls = []
    return reply


# ---------------------------------------------------------------------------- open questions (issue 36)
_HOME_VALUE = re.compile(r"\b(?:live at|moved to|living at|address is)\s+"
                         r"(\d+\s+[A-Z][\w ]*?(?:Street|Lane|Road|Avenue))", re.IGNORECASE)


def diet_organizer(message: str, prompt: str) -> dict:
    """A scripted organizer that links what it is shown and proposes what it is not (as a good organizer
    would): a message about food is about ``maya.diet`` (created when not shown), a peanut makes an allergy
    question, Leo is a new subject (Maya's brother)."""
    text = message.lower()
    out = {"links": [], "new_questions": [], "new_subjects": [], "new_relations": []}
    if any(w in text for w in ("vegetarian", "fish", "meat")):
        if "maya.diet" in prompt:
            out["links"].append("maya.diet")
        else:
            out["new_questions"].append({"subject": "maya", "kind": "diet", "text": "What does Maya eat?",
                                         "shape": "choice", "options": ["vegetarian", "eats fish", "eats meat"]})
    if "peanut" in text:
        out["new_questions"].append({"subject": "maya", "kind": "allergies", "text": "Is Maya allergic to peanuts?",
                                     "shape": "yes_no", "options": ["yes", "no"]})
    if "leo" in text:
        out["new_subjects"].append({"id": "leo", "name": "Leo", "aliases": ["Maya's brother"]})
        out["new_relations"].append({"from": "maya", "to": "leo", "kind": "sibling"})
    return out


def value_organizer(subject: str = "maya", kind: str = "home", *, style: str = "new_values"):
    """A scripted organizer for open (value) questions: a message naming an address ("I live at 12
    Elm Street", "We moved to 5 Oak Lane") is about ``subject``'s home. With no open ``<subject>.<kind>``
    shown, it proposes one (shape ``value``, the address as its only option); with it shown, it
    names the address by ``style``: ``"new_values"`` (the decision the instructions teach; the
    address as the message spells it, so "5 oak  lane" names the listed "5 Oak Lane" again) or
    ``"propose_again"`` (a small model's slip: the same question proposed again, with the address
    as its option). A message that names no address ("we moved, no address yet") only links the
    question, when it is shown."""
    qid = f"{subject}.{kind}"

    def organize(message: str, prompt: str) -> dict:
        out = {"links": [], "new_values": [], "new_questions": [], "new_subjects": [], "new_relations": []}
        found = _HOME_VALUE.search(message)
        shown = re.search(rf"^- {re.escape(qid)} \(about {re.escape(subject)}, open\)", prompt, re.MULTILINE)
        if found is None:
            if shown and "moved" in message.lower():
                out["links"].append(qid)
            return out
        value = found.group(1).strip()
        question = {"subject": subject, "kind": kind, "text": f"Where does {subject.title()} live?",
                    "shape": "value", "options": [value]}
        if not shown or style == "propose_again":
            out["new_questions"].append(question)
        else:
            out["new_values"].append({"question": qid, "value": value})
        return out

    return organize


# ---------------------------------------------------------------------------- conversations (issue 37)
_TURN = re.compile(r"^<turn (\d+)>\n(.*?)\n</turn \1>$", re.MULTILINE | re.DOTALL)
_JOB_VALUE = re.compile(r"\b(?:work as an?|working as an?|started as an?|job as an?|i am an?|i'm an?)\s+([a-z]+)",
                        re.IGNORECASE)


def window_organizer(subject: str = "me", kind: str = "job", *, style: str = "new_values"):
    """A scripted organizer for windows of numbered turns (``<turn N>…</turn N>`` in the prompt): a turn
    naming a job ("I work as a nurse", "I just started as a teacher") is about ``subject``'s job. With
    no open ``<subject>.<kind>`` shown, the first such turn proposes it (shape ``value``) and a later
    one proposes it again with its own value (what the window rules teach); with it shown, a turn names
    its job by ``style``: ``"new_values"`` or ``"propose_again"``. Other turns are left out of the reply.
    Each window's turn numbers are recorded in the returned function's ``windows`` list; a prompt with
    no turns (one message) is answered with nothing to organize."""
    qid = f"{subject}.{kind}"

    def organize(message: str, prompt: str) -> dict:
        turns = [(int(n), text) for n, text in _TURN.findall(prompt)]
        if not turns:
            return {"links": [], "new_values": [], "new_questions": [], "new_subjects": [], "new_relations": []}
        organize.windows.append([n for n, _ in turns])
        shown = re.search(rf"^- {re.escape(qid)} \(about {re.escape(subject)}, open\)", prompt, re.MULTILINE)
        out = []
        for n, text in turns:
            found = _JOB_VALUE.search(text)
            if found is None:
                continue
            value = found.group(1).lower()
            entry = {"turn": n, "links": [], "new_values": [], "new_questions": []}
            if shown and style == "new_values":
                entry["new_values"].append({"question": qid, "value": value})
            else:
                entry["new_questions"].append({"subject": subject, "kind": kind, "text": "What is my job?",
                                               "shape": "value", "options": [value]})
            out.append(entry)
        return {"turns": out, "new_subjects": [], "new_relations": []}

    organize.windows = []
    return organize
