"""`doxa mcp`: the store as an MCP server (the official Python SDK's ``MCPServer``), one store per server.

Tools: ``belief``, ``beliefs``, ``uncertain``, ``context``, ``explain``, ``search``, ``ask``
(reads), ``remember`` (a raw message in) and ``correct``, ``approve``, ``outcome``, ``reject``,
``instruct`` (feedback that becomes settled fact). Each calls the function of the same name in
:mod:`doxa.inference.agent.tools`, the one the CLI calls for ``--json``, so a tool's text result
is byte for byte what `doxa VERB --json` prints; its structured result is the same value
(a list is given under one key, since structured results are objects). A refused call
comes back as a tool error whose text is the line the CLI prints on standard error
("Error: …"), and nothing is written.

The server does not hold the store: every call opens it through
:func:`doxa.inference.read.memory.open_store` and closes it before answering, so `doxa train`,
the CLI and other programs use the same file between calls. Calls are served one at a time.

Over HTTP (streamable HTTP) the server binds to loopback unless told otherwise; any other
address needs a bearer token. :class:`HttpGuard` checks every request before the MCP layer
sees it: Host and Origin (DNS rebinding, on every bind), failed-authentication lockout, the
token, the body size. A refused request reaches no tool, so it changes nothing; each is
logged on standard error. docs/agents.md ("Security model") states the rules.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import math
import secrets
import sys
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from doxa import __version__
from doxa.data.errors import IngestError, StoreError
from doxa.data.search import SearchHit

from . import tools
from .ask import AskResult
from .context import Context
from .remember import RememberResult
from doxa.inference.read.feedback import Feedback, Uncertain
from doxa.inference.read.memory import Belief, Explanation, open_store

log = logging.getLogger("doxa.mcp")

COMPUTED_ON_READ = ("Probabilities are computed when the tool runs, from the kept evidence and the latest "
                    "trained parameters; doxa never stores a probability as a belief.")

INSTRUCTIONS = (
    "doxa is a belief memory: every answer to a question about a person or thing comes with the probability "
    "the kept evidence supports. Before acting on what you remember, call `context` with the task (or `belief` "
    "for one question); where `act` is false (or `ask` is true), ask the user first, and `uncertain` lists "
    "what is most worth asking. Record what the user and the world tell you with `correct`, `approve`, "
    "`outcome`, `reject` and `instruct`: these become settled facts the nightly training learns from; hand "
    "over new raw messages with `remember`. "
    + COMPUTED_ON_READ)


@dataclass
class BeliefList:
    beliefs: list[Belief]


@dataclass
class UncertainList:
    uncertain: list[Uncertain]


@dataclass
class SearchResult:
    words: str
    terms: list[str]
    hits: list[SearchHit]


#: Under which key a tool's list result is given as structured content.
LIST_KEYS = {"beliefs": "beliefs", "uncertain": "uncertain"}

QuestionId = Annotated[str, Field(description="Question id, e.g. maya.diet.")]
At = Annotated[str | None, Field(description="ISO 8601 time; default now. For reads: only evidence up to then. "
                                             "For feedback: when it happened (a repeat with the same time is "
                                             "the same record).")]
ActAt = Annotated[float | None, Field(ge=0.0, le=1.0, description="Act threshold: below this the top answer is "
                                                                  "too uncertain to act on (default 0.8).")]
Subject = Annotated[str | None, Field(description="Subject id, e.g. maya (default: every subject).")]
Limit = Annotated[int, Field(ge=0, description="At most this many (0: all).")]
By = Annotated[str, Field(min_length=1, description="Who says so (recorded with the fact).")]

READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
FEEDBACK = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


class StrictServer(MCPServer):
    """An ``MCPServer`` that refuses arguments a tool does not take (the SDK would drop them silently): the
    call is a tool error naming them and the arguments it takes, and nothing runs. Input schemas say so
    (``additionalProperties: false``)."""

    async def list_tools(self):
        return [tool.model_copy(update={"input_schema": {**tool.input_schema, "additionalProperties": False}})
                for tool in await super().list_tools()]

    async def call_tool(self, name: str, arguments: dict[str, Any], context=None):
        schema = next((tool.input_schema for tool in await super().list_tools() if tool.name == name), None)
        if schema is not None:  # an unknown tool is the SDK's error
            known = list(schema.get("properties", {}))
            unknown = sorted(set(arguments) - set(known))
            if unknown:
                text = (f"Error: unknown argument{'s' if len(unknown) > 1 else ''} "
                        f"{', '.join(repr(a) for a in unknown)} for tool {name}: its arguments are "
                        f"{', '.join(known)}; nothing was done")
                return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
        return await super().call_tool(name, arguments, context)


def build_server(db_path: str) -> MCPServer:
    """An MCP server over the store at ``db_path`` (which must exist)."""
    server = StrictServer("doxa", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")
    one_at_a_time = threading.Lock()

    def call(verb: str, **arguments: Any) -> CallToolResult:
        with one_at_a_time:
            try:
                with open_store(db_path) as mem:
                    value = getattr(tools, verb)(mem, **arguments)
            except (StoreError, IngestError) as err:
                # returned, not raised: the SDK would prefix a raised error's text, and this is the CLI's
                return CallToolResult(content=[TextContent(type="text", text=f"Error: {err}")], is_error=True)
        text = json.dumps(value, indent=2, ensure_ascii=False)
        structured = {LIST_KEYS[verb]: value} if verb in LIST_KEYS else value
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured)

    def tool(annotations: ToolAnnotations, description: str):
        return server.tool(annotations=annotations, description=f"{description} {COMPUTED_ON_READ}")

    @tool(READ, "The probability of every answer to one question, as `doxa belief --json` prints it: answers "
                "(option → probability), top, p_top, act (false: too uncertain to act on, ask first), "
                "n_evidence, n_settled, rejected, params_version.")
    def belief(question: QuestionId, at: At = None, act_at: ActAt = None) -> Annotated[CallToolResult, Belief]:
        return call("belief", question=question, at=at, act_at=act_at)

    @tool(READ, "Every belief about a subject (or every belief), in question-id order: {beliefs: [belief, …]}; "
                "the text result is the list `doxa beliefs --json` prints.")
    def beliefs(subject: Subject = None, at: At = None, act_at: ActAt = None,
                limit: Limit = 0) -> Annotated[CallToolResult, BeliefList]:
        return call("beliefs", subject=subject, at=at, act_at=act_at, limit=limit)

    @tool(READ, "The beliefs to ask the user about before acting, most useful first: {uncertain: [{belief, why, "
                "p_wrong, recent_reads, usefulness, entropy, instructions, ask_user}, …]} (the list "
                "`doxa beliefs --uncertain --json` prints). usefulness = P(wrong if acting now) × (1 + reads "
                "in the last 30 days); ask_user is a question to put to the user.")
    def uncertain(subject: Subject = None, at: At = None, act_at: ActAt = None,
                  limit: Limit = 0) -> Annotated[CallToolResult, UncertainList]:
        return call("uncertain", subject=subject, at=at, act_at=act_at, limit=limit)

    @tool(READ, "What a task needs to know, as `doxa context --json` prints it: the subjects it names and one "
                "relation out, their questions ranked by relevance with every answer's probability and an `ask` "
                "flag, and the user's instructions beside them, with a question for the user where the evidence "
                "now contradicts one.")
    def context(task: Annotated[str, Field(min_length=1, description="The task in words, e.g. \"book Maya's "
                                                                     "birthday dinner\".")],
                at: At = None, act_at: ActAt = None,
                limit: Annotated[int, Field(ge=1, description="At most this many questions.")] = 20,
                ) -> Annotated[CallToolResult, Context]:
        return call("context", task=task, at=at, act_at=act_at, limit=limit)

    @tool(READ, "Why doxa believes what it does about one question, term by term (`doxa explain --json`): the "
                "belief, the prior, the change rate, and each message with its source, trust, the reader's "
                "reading, its log-likelihood ratio and how much of it is left after decay; settlements and "
                "rejections.")
    def explain(question: QuestionId, at: At = None) -> Annotated[CallToolResult, Explanation]:
        return call("explain", question=question, at=at)

    @tool(READ, "Full-text search (BM25) over every kept message, best first (`doxa search --json`): {words, "
                "terms, hits: [{message, score, text, source, source_path, sent_at, is_assistant, matched}]}.")
    def search(words: Annotated[str, Field(description="Words to look for.")], subject: Subject = None,
               limit: Annotated[int, Field(ge=1, description="At most this many messages.")] = 20,
               ) -> Annotated[CallToolResult, SearchResult]:
        return call("search", words=words, subject=subject, limit=limit)

    @tool(FEEDBACK, "Ask memory a question nobody prepared (`doxa ask --json`): the question is created (never "
                    "with a probability), the kept messages about the subject are read by the configured reader, "
                    "and the belief is returned; with no reader configured, the messages found and how to "
                    "configure one.")
    def ask(question: Annotated[str, Field(min_length=1, description="The question in words.")],
            subject: Annotated[str, Field(description="Whom it is about (subject id).")],
            options: Annotated[list[str], Field(min_length=2, description="The possible answers.")],
            kind: Annotated[str | None, Field(description="The question's kind (default: from its words).")] = None,
            question_id: Annotated[str | None, Field(description="Question id (default SUBJECT.KIND).")] = None,
            at: At = None, limit: Annotated[int, Field(ge=1, description="Read at most this many messages.")] = 20,
            ) -> Annotated[CallToolResult, AskResult]:
        return call("ask", question=question, subject=subject, options=options, kind=kind, question_id=question_id,
                    at=at, limit=limit)

    @tool(FEEDBACK, "Hand memory a raw message exactly as it arrived (`doxa remember --json`): it is kept with its "
                    "source and time, the organizer links it to the questions it bears on (creating new ones where "
                    "none fits), the reader reads it against each, and the beliefs it moved come back before and "
                    "after, with the model calls made. With no model configured the message is kept as pending "
                    "(status pending, hint says how to configure one); remembering it again changes nothing.")
    def remember(text: Annotated[str, Field(min_length=1, description="The message exactly as it arrived.")],
                 source: Annotated[str, Field(min_length=1, description="Who it came from: a stored source id, or a "
                                                                         "new source's path such as "
                                                                         "person/self/chat/maya-chat.")],
                 sent_at: Annotated[str | None, Field(description="When it was sent (ISO 8601); default now.")]
                 = None,
                 keep: Annotated[bool, Field(description="When a model call fails, keep the message as pending "
                                                         "instead of refusing it.")] = False,
                 ) -> Annotated[CallToolResult, RememberResult]:
        return call("remember", text=text, source=source, sent_at=sent_at, keep=keep)

    feedback_result = ("Returns {verb, recorded (false: already recorded, nothing written), record (as stored), "
                       "before, after (the belief at that time without and with it), message}.")

    @tool(FEEDBACK, "The user corrected you: record ANSWER as the settled answer to QUESTION (a settlement, how "
                    "correction; `doxa correct --json`). Training learns from it which sources to trust. "
                    + feedback_result)
    def correct(question: QuestionId, answer: Annotated[str, Field(description="The right answer (an option).")],
                at: At = None, by: By = "user") -> Annotated[CallToolResult, Feedback]:
        return call("correct", question=question, answer=answer, at=at, by=by)

    @tool(FEEDBACK, "The user approved what you proposed (`doxa approve --json`): a settlement (how approval) of "
                    "ANSWER, by default the current top answer, recorded with the probability doxa gave it then "
                    "(record.p_before). " + feedback_result)
    def approve(question: QuestionId,
                answer: Annotated[str | None, Field(description="What was approved (default: the top answer).")]
                = None, at: At = None, by: By = "user") -> Annotated[CallToolResult, Feedback]:
        return call("approve", question=question, answer=answer, at=at, by=by)

    @tool(FEEDBACK, "The world showed the answer — a parcel arrived, an email bounced (`doxa outcome --json`): a "
                    "settlement (how outcome) with how it showed. " + feedback_result)
    def outcome(question: QuestionId, answer: Annotated[str, Field(description="The answer the world showed.")],
                how: Annotated[str, Field(min_length=1, description="How it showed, e.g. \"the parcel arrived\".")],
                at: At = None, by: By = "world") -> Annotated[CallToolResult, Feedback]:
        return call("outcome", question=question, answer=answer, how=how, at=at, by=by)

    @tool(FEEDBACK, "The user says ANSWER is not it (`doxa reject --json`): it reads 0 from then on. "
                    + feedback_result)
    def reject(question: QuestionId, answer: Annotated[str, Field(description="The answer that is not it.")],
               at: At = None, by: By = "user") -> Annotated[CallToolResult, Feedback]:
        return call("reject", question=question, answer=answer, at=at, by=by)

    @tool(FEEDBACK, "A directive from the user about a subject (`doxa instruct --json`), kept beside beliefs and "
                    "never merged with them; rests_on names the belief it presumes, so `context` can say when "
                    "the evidence turns against it. Returns {verb, recorded, record (with its id), message}.")
    def instruct(subject: Annotated[str, Field(description="Whom it is about (subject id).")],
                 text: Annotated[str, Field(min_length=1, description="The instruction in words.")],
                 rests_on: Annotated[dict[str, str] | None, Field(
                     description='The belief it presumes: {"question": QUESTION_ID, "answer": OPTION}.')] = None,
                 at: At = None, by: By = "user") -> Annotated[CallToolResult, Feedback]:
        return call("instruct", subject=subject, text=text, at=at, by=by, rests_on=rests_on)

    return server


# ---------------------------------------------------------------------------- HTTP and its guard
#: The names every loopback address answers to; a request that arrived on loopback may use any of them.
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
#: A bearer token is at least this many characters (what ``secrets.token_urlsafe(32)`` gives: 32 random bytes)…
TOKEN_MIN_CHARS = 43
#: …with at least this many different characters (refuses "aaaa…" and "abab…"; any random token passes).
TOKEN_MIN_DISTINCT = 10
#: A request body over this many bytes is answered 413 before the MCP layer reads it.
MAX_BODY_BYTES = 1024 * 1024
#: Past the limit, this much more is read and thrown away, so that a client still sending can read the 413;
#: a larger body gets the 413 and the connection is closed under it.
DRAIN_BYTES = 16 * 1024 * 1024
#: After this many failed authentications from one client within FAILURE_WINDOW_S seconds, that client is
#: answered 429 for LOCKOUT_S seconds, whatever it sends.
MAX_FAILURES = 10
FAILURE_WINDOW_S = 60.0
LOCKOUT_S = 300.0
#: At most this many client addresses are remembered (the least recently failed are forgotten first).
MAX_CLIENTS = 4096


def canonical_host(name: str) -> str:
    """A host as a Host header, a bind address or an Origin names it, in one spelling: lower case, without
    IPv6 brackets, an IP address in its standard form, an IPv4-mapped IPv6 address as the IPv4 address."""
    name = name.strip().lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return name
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return str(address)


def is_loopback(host: str) -> bool:
    """The one rule for loopback: ``localhost``, every address in 127.0.0.0/8 and every spelling of ::1
    (``0:0:0:0:0:0:0:1``, ``[::1]``, ``::ffff:127.0.0.1`` …)."""
    name = canonical_host(host)
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def token_problem(token: str) -> str | None:
    """What is wrong with a bearer token, or None when it meets the rule: at least TOKEN_MIN_CHARS visible
    ASCII characters (no whitespace anywhere), at least TOKEN_MIN_DISTINCT of them different."""
    fix = "make one with `doxa mcp --new-token`"
    if not token.strip():
        return f"it is empty or only whitespace; {fix}"
    if token != token.strip():
        return f"it has leading or trailing whitespace (read from a file with its newline?); {fix}"
    odd = sorted({c for c in token if not ("!" <= c <= "~")})
    if odd:
        return (f"it contains {', '.join(repr(c) for c in odd)}: a token is visible ASCII characters only, "
                f"no whitespace; {fix}")
    if len(token) < TOKEN_MIN_CHARS:
        return (f"it has {len(token)} character{'' if len(token) == 1 else 's'}; a token needs at least "
                f"{TOKEN_MIN_CHARS} (32 random bytes); {fix}")
    distinct = len(set(token))
    if distinct < TOKEN_MIN_DISTINCT:
        return (f"it uses only {distinct} different characters; a token needs at least {TOKEN_MIN_DISTINCT} "
                f"(a random one has far more); {fix}")
    return None


def new_token() -> str:
    """A fresh bearer token: 32 random bytes, URL-safe base64 (43 characters)."""
    return secrets.token_urlsafe(32)


def allow_host_problem(name: str) -> str | None:
    """What is wrong with an ``--allow-host`` value, or None: a host name or an IP address, as a proxy sends it
    in ``Host``, without scheme, port or path."""
    host = canonical_host(name)
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    if host and all(part and part.replace("-", "").isalnum() and part.isascii() for part in host.split(".")):
        return None
    return (f"--allow-host {name!r} is not a host name: give the name alone, as the proxy sends it in Host, "
            f"without scheme, port or path, e.g. --allow-host memory.example.com")


def split_host_header(value: str) -> tuple[str, int | None] | None:
    """``name[:port]`` or ``[v6]:port`` → (canonical name, port or None); None when it is not one."""
    if value.startswith("["):
        name, bracket, rest = value[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return None
        port = rest[1:] if rest else None
    else:
        name, colon, port = value.partition(":")
        if ":" in port or (colon and not port):
            return None
        port = port if colon else None
    if not name or (port is not None and not (port.isascii() and port.isdigit() and len(port) <= 5)):
        return None
    return canonical_host(name), None if port is None else int(port)


@dataclass
class Allowed:
    """Which names a request may give in Host and Origin: the address it arrived at and, when that is
    loopback, the loopback names, on the port it arrived at; and the ``--allow-host`` names on any port."""
    names: frozenset[str]
    port: int
    proxied: frozenset[str]

    def admits(self, name: str, port: int) -> bool:
        return name in self.proxied or (name in self.names and port == self.port)

    def spelled(self) -> str:
        here = [f"[{n}]:{self.port}" if ":" in n else f"{n}:{self.port}" for n in sorted(self.names)]
        return ", ".join(here + [f"{n} (any port)" for n in sorted(self.proxied)])


class FailedAuthentications:
    """Failed authentications per client (an IPv4 address, an IPv6 /64): after MAX_FAILURES within
    FAILURE_WINDOW_S, the client is locked out for LOCKOUT_S. Memory is bounded: MAX_FAILURES times per
    client, MAX_CLIENTS clients. ``clock`` is a monotonic clock in seconds."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.failures: OrderedDict[str, deque[float]] = OrderedDict()
        self.locked_until: OrderedDict[str, float] = OrderedDict()

    @staticmethod
    def client_key(address: str) -> str:
        try:
            ip = ipaddress.ip_address(canonical_host(address))
        except ValueError:
            return address
        if isinstance(ip, ipaddress.IPv6Address):
            return str(ipaddress.ip_network(f"{ip}/64", strict=False))
        return str(ip)

    def retry_after(self, address: str) -> int:
        """Seconds the client must wait (0: not locked out)."""
        key = self.client_key(address)
        until = self.locked_until.get(key)
        if until is None:
            return 0
        left = until - self.clock()
        if left <= 0:
            del self.locked_until[key]
            return 0
        return max(1, math.ceil(left))

    def failed(self, address: str) -> bool:
        """Record one failure; True when it locks the client out."""
        key, now = self.client_key(address), self.clock()
        times = self.failures.pop(key, None) or deque(maxlen=MAX_FAILURES)
        while times and times[0] <= now - FAILURE_WINDOW_S:
            times.popleft()
        times.append(now)
        if len(times) < MAX_FAILURES:
            self.failures[key] = times
            while len(self.failures) > MAX_CLIENTS:
                self.failures.popitem(last=False)
            return False
        self.locked_until.pop(key, None)
        self.locked_until[key] = now + LOCKOUT_S
        while len(self.locked_until) > MAX_CLIENTS:
            self.locked_until.popitem(last=False)
        return True


class HttpGuard:
    """ASGI middleware in front of the MCP layer; a refused request reaches no tool and is logged on standard
    error with the client address, the path and the reason (never a header's secret). In this order:

    1. ``Host`` must name this server (else 421), an ``Origin``, when sent, too (else 403): the DNS-rebinding
       guard, on every bind, loopback included (see :class:`Allowed`).
    2. A client locked out after failed authentications gets 429 with ``Retry-After``.
    3. With a token, ``Authorization: Bearer TOKEN``, compared in constant time (else 401, counted).
    4. A body over MAX_BODY_BYTES (by ``Content-Length``, or counted as it streams) gets 413.
    """

    def __init__(self, app, host: str, port: int, token: str | None, allow_hosts: tuple[str, ...] = (),
                 clock=time.monotonic):
        self.app = app
        self.host, self.port = host, port
        self.expected = None if token is None else f"Bearer {token}".encode("utf-8")
        self.proxied = frozenset(canonical_host(name) for name in allow_hosts)
        self.failures = FailedAuthentications(clock)

    def allowed(self, scope) -> Allowed:
        # the address and port the request arrived at: the bound one (for 0.0.0.0 or ::, the machine's
        # address the client connected to)
        host, port = scope.get("server") or (self.host, self.port)
        here = canonical_host(host)
        names = {here, *LOOPBACK_NAMES} if is_loopback(here) else {here}
        return Allowed(frozenset(names), port, self.proxied)

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            return await self.app(scope, receive, send)
        if scope["type"] != "http":
            return await send({"type": "websocket.close", "code": 1008})
        headers: dict[bytes, bytes] = {}
        for name, value in scope.get("headers") or []:
            headers.setdefault(name, value)  # the first of a repeated header, as the SDK reads it
        client = scope.get("client") or ("?", 0)
        path = str(scope.get("path"))
        where = f"{scope.get('method')} {path if path.isprintable() else repr(path)} from {client[0]}:{client[1]}"

        async def refuse(status: int, why: str, hint: str, extra: list | None = None, log_it: bool = True):
            if log_it:
                log.warning("refused %s: %s", where, why)
            body = json.dumps({"error": f"{why}; {hint}"}, ensure_ascii=True).encode()
            await send({"type": "http.response.start", "status": status,
                        "headers": [(b"content-type", b"application/json"), (b"connection", b"close"),
                                    *(extra or [])]})
            await send({"type": "http.response.body", "body": body})

        allowed = self.allowed(scope)
        host_header = headers.get(b"host", b"").decode("latin-1")
        parsed = split_host_header(host_header)
        if parsed is None or not allowed.admits(parsed[0], 80 if parsed[1] is None else parsed[1]):
            return await refuse(421, f"Host {host_header[:200]!r} is not this server",
                                f"allowed: {allowed.spelled()} (behind a reverse proxy, start doxa mcp with "
                                f"--allow-host NAME)")
        origin = headers.get(b"origin")
        if origin is not None and not origin_admitted(origin.decode("latin-1"), allowed):
            return await refuse(403, f"Origin {origin.decode('latin-1')[:200]!r} is not this server",
                                f"a web page from another site may not call it; allowed: http:// or https:// with "
                                f"{allowed.spelled()}")
        wait = self.failures.retry_after(client[0])
        if wait:  # not logged: the lockout was, and a flood of these must not flood the log
            return await refuse(429, "too many failed authentications from this address",
                                f"retry after {wait} s", [(b"retry-after", str(wait).encode())], log_it=False)
        if self.expected is not None:
            given = headers.get(b"authorization")
            if given is None or not hmac.compare_digest(given, self.expected):
                why = "no bearer token" if given is None else "wrong bearer token"
                if self.failures.failed(client[0]):
                    why += (f"; {MAX_FAILURES} failed authentications within {FAILURE_WINDOW_S:g} s: "
                            f"{FailedAuthentications.client_key(client[0])} is refused for {LOCKOUT_S:g} s")
                return await refuse(401, f"unauthorized: {why}", "send Authorization: Bearer <token>",
                                    [(b"www-authenticate", b"Bearer")])
        too_large = ("request body over the limit", f"send at most {MAX_BODY_BYTES} bytes")
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            if int(declared) <= MAX_BODY_BYTES + DRAIN_BYTES:
                await drain(receive, DRAIN_BYTES + MAX_BODY_BYTES)
            return await refuse(413, *too_large)
        messages, size = [], 0
        while True:  # counts a chunked body as it streams, keeping at most MAX_BODY_BYTES
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > MAX_BODY_BYTES:
                if message.get("more_body", False):
                    await drain(receive, DRAIN_BYTES)
                return await refuse(413, *too_large)
            if not message.get("more_body", False):
                break

        async def replay():
            return messages.pop(0) if messages else await receive()

        return await self.app(scope, replay, send)


def origin_admitted(origin: str, allowed: Allowed) -> bool:
    """``Origin: http(s)://HOST[:PORT]`` naming an allowed host; ``null`` and anything else are not."""
    scheme, sep, authority = origin.partition("://")
    parsed = split_host_header(authority) if sep and scheme.lower() in ("http", "https") else None
    if parsed is None:
        return False
    name, port = parsed
    return allowed.admits(name, port if port is not None else (443 if scheme.lower() == "https" else 80))


async def drain(receive, limit: int) -> None:
    """Read and throw away the rest of a request body, up to ``limit`` bytes."""
    seen = 0
    while seen <= limit:
        message = await receive()
        if message["type"] != "http.request":
            return
        seen += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


def http_app(server: MCPServer, host: str, port: int, token: str | None, allow_hosts: tuple[str, ...] = (),
             clock=time.monotonic):
    """The streamable-HTTP ASGI app behind :class:`HttpGuard` (the SDK's own Host rule, which covers only the
    literal default hosts, is off: the guard's covers every bind)."""
    app = server.streamable_http_app(host=host, max_request_body_size=MAX_BODY_BYTES,
                                     transport_security=TransportSecuritySettings(
                                         enable_dns_rebinding_protection=False))
    return HttpGuard(app, host, port, token, allow_hosts, clock)


def serve_http(server: MCPServer, host: str, port: int, token: str | None, allow_hosts: tuple[str, ...] = ()) -> None:
    """Serve streamable HTTP at http://HOST:PORT/mcp until interrupted."""
    import anyio
    import uvicorn

    # proxy_headers off: the client address (logged, and what the lockout counts) is the connection's peer,
    # which no request header can change
    config = uvicorn.Config(http_app(server, host, port, token, allow_hosts), host=host, port=port,
                            log_level="warning", lifespan="on", proxy_headers=False)
    http = uvicorn.Server(config)
    shown = f"[{host}]" if ":" in host else host
    print(f"doxa mcp: serving http://{shown}:{port}/mcp" + (" (bearer token required)" if token else ""),
          file=sys.stderr, flush=True)
    anyio.run(http.serve)


def configure_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("doxa mcp: %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False


__all__ = ["build_server", "StrictServer", "http_app", "serve_http", "HttpGuard", "is_loopback", "token_problem",
           "new_token", "allow_host_problem", "COMPUTED_ON_READ", "configure_logging"]
