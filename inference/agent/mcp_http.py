"""`doxa mcp --http`: the MCP server over streamable HTTP, behind a guard (:class:`HttpGuard`).

The server binds to loopback unless told otherwise; any other address needs a bearer token.
:class:`HttpGuard` checks every request before the MCP layer sees it: Host and Origin (DNS
rebinding, on every bind), failed-authentication lockout, the token, the body size. A refused
request reaches no tool, so it changes nothing; each is logged on standard error (the logger of
:mod:`.mcp_server`). docs/agents.md ("Security model") states the rules.

With ``--stores DIR`` one server serves several principals (:mod:`.principals`): the guard reads
whose token a request carries, and :class:`Tenants` hands the request to that principal's own
``MCPServer``, built over that principal's store alone when its token is first used. A request
can reach no other store: no tool takes a path, and each server knows one.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import math
import sys
import time
from collections import OrderedDict, deque
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Callable

from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings

from .principals import PrincipalTable, new_token

log = logging.getLogger("doxa.mcp")


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
    3. With a token, ``Authorization: Bearer TOKEN``, compared in constant time (else 401, counted). With
       ``principals`` (``--stores``) a token is always needed, and must be an active principal's: the
       request goes on with that principal's name in the scope (:data:`PRINCIPAL`); an unknown, revoked or
       malformed one is 401, counted, logged with why (never the token) and answered without it.
    4. A body over MAX_BODY_BYTES (by ``Content-Length``, or counted as it streams) gets 413.
    """

    def __init__(self, app, host: str, port: int, token: str | None, allow_hosts: tuple[str, ...] = (),
                 clock=time.monotonic, principals: PrincipalTable | None = None):
        if token is not None and principals is not None:
            raise ValueError("one bearer token or a table of principals, not both")
        self.app = app
        self.host, self.port = host, port
        self.expected = None if token is None else f"Bearer {token}".encode("utf-8")
        self.principals = principals
        self.proxied = frozenset(canonical_host(name) for name in allow_hosts)
        self.failures = FailedAuthentications(clock)

    def authenticate(self, given: bytes | None) -> tuple[bool, str | None, str, str]:
        """(admitted, principal, why it was refused as logged, as told to the client)."""
        if self.principals is not None:
            name, why = self.principals.authenticate(given)
            # the client is not told whether a token was never valid or is revoked; the log says which
            told = why if why == "no bearer token" or why.startswith("malformed") else "unknown or revoked bearer token"
            return name is not None, name, why, told
        if self.expected is None:
            return True, None, "", ""
        if given is not None and hmac.compare_digest(given, self.expected):
            return True, None, "", ""
        why = "no bearer token" if given is None else "wrong bearer token"
        return False, None, why, why

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

        async def refuse(status: int, why: str, hint: str, extra: list | None = None, log_it: bool = True,
                         told: str | None = None):
            if log_it:
                log.warning("refused %s: %s", where, why)
            body = json.dumps({"error": f"{why if told is None else told}; {hint}"}, ensure_ascii=True).encode()
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
        admitted, principal, why, told = self.authenticate(headers.get(b"authorization"))
        if not admitted:
            locked = ""
            if self.failures.failed(client[0]):
                locked = (f"; {MAX_FAILURES} failed authentications within {FAILURE_WINDOW_S:g} s: "
                          f"{FailedAuthentications.client_key(client[0])} is refused for {LOCKOUT_S:g} s")
            return await refuse(401, f"unauthorized: {why}{locked}", "send Authorization: Bearer <token>",
                                [(b"www-authenticate", b"Bearer")], told=f"unauthorized: {told}{locked}")
        if principal is not None:
            scope = {**scope, PRINCIPAL: principal}
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


def streamable_app(server: MCPServer, host: str):
    """The SDK's streamable-HTTP app of one server (the SDK's own Host rule, which covers only the literal
    default hosts, is off: :class:`HttpGuard`'s covers every bind)."""
    return server.streamable_http_app(host=host, max_request_body_size=MAX_BODY_BYTES,
                                      transport_security=TransportSecuritySettings(
                                          enable_dns_rebinding_protection=False))


def http_app(server: MCPServer, host: str, port: int, token: str | None, allow_hosts: tuple[str, ...] = (),
             clock=time.monotonic):
    """The streamable-HTTP ASGI app behind :class:`HttpGuard`."""
    return HttpGuard(streamable_app(server, host), host, port, token, allow_hosts, clock)


#: The scope key under which :class:`HttpGuard` hands on the principal a request's token belongs to.
PRINCIPAL = "doxa.principal"


class Tenants:
    """ASGI app that serves each principal its own ``MCPServer``, behind :class:`HttpGuard` with a
    :class:`PrincipalTable` (which puts the principal's name in the scope; a request without one is a
    programming error and gets 500, never a store).

    A principal's server is built by ``build(name)`` (``build_server`` over that principal's store) when its
    token is first used, so a principal added while the server runs is served at once, and a server never
    used costs nothing. Each server's session manager (the SDK's: it holds the MCP sessions, whose ids mean
    nothing to another principal's manager) runs in this app's task group, which :meth:`running` holds
    open for the app's lifetime (the ASGI lifespan under uvicorn).
    """

    def __init__(self, build: Callable[[str], MCPServer], host: str):
        self.build = build
        self.host = host
        self.apps: dict[str, object] = {}
        self.task_group = None
        self.starting = None

    @asynccontextmanager
    async def running(self):
        import anyio

        async with anyio.create_task_group() as group:
            self.task_group, self.starting = group, anyio.Lock()
            try:
                yield self
            finally:
                group.cancel_scope.cancel()
                self.task_group = None
                self.apps.clear()

    async def app_of(self, name: str):
        """The principal's streamable-HTTP app, its server built and its session manager started if need be."""
        app = self.apps.get(name)
        if app is not None:
            return app
        if self.task_group is None:
            raise RuntimeError("Tenants is not running: serve it with its lifespan, or inside running()")
        async with self.starting:  # one build per principal, even when its first requests come together
            if name not in self.apps:
                server = self.build(name)
                app = streamable_app(server, self.host)
                await self.task_group.start(self._run_sessions, server)
                self.apps[name] = app
                log.info("serving principal %s", name)
        return self.apps[name]

    @staticmethod
    async def _run_sessions(server: MCPServer, *, task_status) -> None:
        import anyio

        async with server.session_manager.run():
            task_status.started()
            await anyio.sleep_forever()

    async def lifespan(self, receive, send) -> None:
        message = await receive()
        if message["type"] != "lifespan.startup":
            return
        async with self.running():
            await send({"type": "lifespan.startup.complete"})
            while (await receive())["type"] != "lifespan.shutdown":
                pass
        await send({"type": "lifespan.shutdown.complete"})

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            return await self.lifespan(receive, send)
        name = scope.get(PRINCIPAL)
        if name is None:
            await send({"type": "http.response.start", "status": 500,
                        "headers": [(b"content-type", b"application/json")]})
            return await send({"type": "http.response.body", "body": b'{"error": "no principal"}'})
        return await (await self.app_of(name))(scope, receive, send)


def tenants_app(build: Callable[[str], MCPServer], principals: PrincipalTable, host: str, port: int,
                allow_hosts: tuple[str, ...] = (), clock=time.monotonic) -> HttpGuard:
    """`doxa mcp --http --stores DIR`: :class:`Tenants` behind :class:`HttpGuard` (the app is the guard; its
    ``app`` attribute is the :class:`Tenants`, whose :meth:`Tenants.running` a test may hold instead of a
    lifespan)."""
    return HttpGuard(Tenants(build, host), host, port, None, allow_hosts, clock, principals=principals)


def _serve(app, host: str, port: int, banner: str) -> None:
    import anyio
    import uvicorn

    # proxy_headers off: the client address (logged, and what the lockout counts) is the connection's peer,
    # which no request header can change
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on", proxy_headers=False)
    http = uvicorn.Server(config)
    shown = f"[{host}]" if ":" in host else host
    print(f"doxa mcp: serving http://{shown}:{port}/mcp{banner}", file=sys.stderr, flush=True)
    anyio.run(http.serve)


def serve_http(server: MCPServer, host: str, port: int, token: str | None, allow_hosts: tuple[str, ...] = ()) -> None:
    """Serve streamable HTTP at http://HOST:PORT/mcp until interrupted."""
    _serve(http_app(server, host, port, token, allow_hosts), host, port,
           " (bearer token required)" if token else "")


def serve_tenants(build: Callable[[str], MCPServer], principals: PrincipalTable, host: str, port: int,
                  allow_hosts: tuple[str, ...] = ()) -> None:
    """Serve each principal of ``principals`` its own store at http://HOST:PORT/mcp until interrupted."""
    active = sorted(p.name for p in principals.principals.values() if p.active)
    _serve(tenants_app(build, principals, host, port, allow_hosts), host, port,
           f" for the principals of {principals.folder} (each token reaches its own store; now "
           f"{len(active)} active: {', '.join(active) or 'none'})")


__all__ = ["http_app", "serve_http", "tenants_app", "serve_tenants", "HttpGuard", "Tenants", "PRINCIPAL",
           "FailedAuthentications", "is_loopback", "token_problem", "new_token", "allow_host_problem"]
