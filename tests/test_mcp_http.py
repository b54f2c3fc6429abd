"""`doxa mcp --http` against a hostile client (issue 34: items 1, 12 and 18).

The guarded ASGI app is driven in-process (httpx2's ASGITransport; the address a request
arrived at is the URL's host and port, as uvicorn reports the socket's), and one real server
on 127.0.0.2 is spawned for what only a socket shows. A foreign Host or Origin is refused on
every spelling of loopback and writes nothing, though the same calls with this server's own
name do write; a public bind without a token, a short, blank or whitespace-padded token
refuse to start; `--new-token` prints a token that meets the rule; repeated wrong tokens
lock the client out (429 with Retry-After) and the log holds no token; an unknown tool
argument is a tool error that writes nothing; a body over the limit gets 413.
"""

from __future__ import annotations

import contextlib
import json
import logging
import string
import urllib.error
import urllib.request

import anyio
import httpx2
import pytest
from mcp import Client
from typer.testing import CliRunner

from doxa.cli.main import app
from doxa.inference.agent import mcp_http, mcp_server
from test_mcp import BOUND_S, LATER, snapshot, start_http, stop, stores  # noqa: F401  (stores: a fixture)
from test_mcp import TOKEN as GOOD_TOKEN

PORT = 8799
PROTOCOL = "2025-06-18"
ACCEPT = {"accept": "application/json, text/event-stream"}
INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "page", "version": "1"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
CORRECT = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
           "params": {"name": "correct", "arguments": {"question": "maya.diet", "answer": "vegetarian", "at": LATER}}}
LOOPBACK_BINDS = ["127.0.0.1", "127.0.0.2", "localhost", "::1", "0:0:0:0:0:0:0:1"]


def url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@contextlib.asynccontextmanager
async def guarded(path: str, host: str, token: str | None = None, allow_hosts: tuple[str, ...] = (),
                  clock=None):
    """The app `doxa mcp --http --host HOST --port PORT` serves, running; yields ``connect(client=…)``, which
    gives an HTTP client whose requests arrive at HOST:PORT from that client address."""
    server = mcp_server.build_server(path)
    guarded_app = mcp_http.http_app(server, host, PORT, token, allow_hosts, **({"clock": clock} if clock else {}))
    async with server.session_manager.run(), contextlib.AsyncExitStack() as stack:
        async def connect(client: tuple[str, int] = ("127.0.0.1", 50000)) -> httpx2.AsyncClient:
            transport = httpx2.ASGITransport(guarded_app, client=client)
            return await stack.enter_async_context(httpx2.AsyncClient(
                transport=transport, base_url=f"http://{url_host(host)}:{PORT}", timeout=BOUND_S))

        yield connect


async def handshake_and_correct(http: httpx2.AsyncClient, headers: dict[str, str]) -> tuple[list[int], str]:
    """What a web page would send: initialize, initialized, then `correct`; each status, and the last text."""
    init = await http.post("/mcp", json=INIT, headers={**ACCEPT, **headers})
    session = {**ACCEPT, **headers, "mcp-protocol-version": PROTOCOL,
               "mcp-session-id": init.headers.get("mcp-session-id", "none")}
    initialized = await http.post("/mcp", json=INITIALIZED, headers=session)
    call = await http.post("/mcp", json=CORRECT, headers=session)
    return [init.status_code, initialized.status_code, call.status_code], call.text


def settlements(path: str) -> int:
    return snapshot(path)["counts"]["settlements"]


# ---------------------------------------------------------------------------- DNS rebinding
@pytest.mark.parametrize("name, loopback", [
    ("127.0.0.1", True), ("127.0.0.2", True), ("127.255.255.254", True), ("localhost", True), ("LocalHost", True),
    ("::1", True), ("[::1]", True), ("0:0:0:0:0:0:0:1", True), ("::ffff:127.0.0.1", True), ("::ffff:127.0.0.2", True),
    ("0.0.0.0", False), ("::", False), ("10.0.0.1", False), ("128.0.0.1", False), ("::ffff:10.0.0.1", False),
    ("localhost.example.com", False), ("example.com", False)])
def test_one_rule_says_what_is_loopback(name, loopback):
    assert mcp_http.is_loopback(name) is loopback


@pytest.mark.parametrize("bind", LOOPBACK_BINDS)
def test_a_foreign_host_or_origin_is_refused_on_every_loopback_spelling_and_writes_nothing(stores, bind):
    served, _ = stores
    before = snapshot(served)
    here = f"{url_host(bind)}:{PORT}"
    foreign = [
        ({"host": f"attacker.example:{PORT}", "origin": f"http://attacker.example:{PORT}"}, 421),
        ({"host": f"attacker.example:{PORT}"}, 421),
        ({"host": f"{url_host(bind)}:{PORT + 1}"}, 421),  # this name, another port
        ({"host": ""}, 421),
        ({"host": here, "origin": f"http://attacker.example:{PORT}"}, 403),
        ({"host": here, "origin": f"http://{url_host(bind)}.attacker.example:{PORT}"}, 403),
        ({"host": here, "origin": "null"}, 403),
        ({"host": here, "origin": f"http://127.0.0.1:{PORT + 1}"}, 403),
    ]

    async def session():
        with anyio.fail_after(BOUND_S):
            async with guarded(served, bind) as connect:
                http = await connect()
                for headers, status in foreign:
                    statuses, text = await handshake_and_correct(http, headers)
                    assert statuses == [status] * 3, (bind, headers, statuses, text)
                    assert "not this server" in text
                assert snapshot(served) == before
                # the same calls under this server's own names do write: what was refused would have
                for name in {url_host(bind), "127.0.0.1", "localhost", "[::1]"}:
                    headers = {"host": f"{name}:{PORT}", "origin": f"http://{name}:{PORT}"}
                    statuses, text = await handshake_and_correct(http, headers)
                    assert statuses == [200, 202, 200], (bind, headers, statuses, text)
                    assert '"recorded"' in text

    anyio.run(session)
    assert settlements(served) == before["counts"]["settlements"] + 1  # one settlement; the repeats are the same


def test_a_reverse_proxy_name_is_admitted_only_when_allowed(stores):
    served, _ = stores
    before = snapshot(served)

    async def session():
        with anyio.fail_after(BOUND_S):
            async with guarded(served, "127.0.0.1", allow_hosts=("Memory.Example.com",)) as connect:
                http = await connect()
                statuses, _ = await handshake_and_correct(http, {"host": "other.example.com"})
                assert statuses == [421] * 3
                assert snapshot(served) == before
                for headers in ({"host": "memory.example.com", "origin": "https://memory.example.com"},
                                {"host": "memory.example.com:8443", "origin": "http://memory.example.com:8443"}):
                    statuses, text = await handshake_and_correct(http, headers)
                    assert statuses == [200, 202, 200], (headers, text)

    anyio.run(session)


def test_a_rebinding_request_to_a_real_server_on_127_0_0_2_is_refused(stores, tmp_path):
    """The reported attack, on a socket: bound to 127.0.0.2 with no token, a page at attacker.example."""
    served, _ = stores
    before = snapshot(served)
    log = tmp_path / "http.log"
    proc, port = start_http(served, log, "--host", "127.0.0.2", host="127.0.0.2")
    try:
        for headers, status in (({"Host": f"attacker.example:{port}", "Origin": f"http://attacker.example:{port}"},
                                 421),
                                ({"Host": f"127.0.0.2:{port}", "Origin": f"http://attacker.example:{port}"}, 403)):
            request = urllib.request.Request(f"http://127.0.0.2:{port}/mcp", data=json.dumps(INIT).encode(),
                                             method="POST", headers={"content-type": "application/json",
                                                                     **ACCEPT, **headers})
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=BOUND_S)
            assert refused.value.code == status
    finally:
        stop(proc)
    assert snapshot(served) == before
    text = log.read_text(encoding="utf-8")
    assert "Host 'attacker.example:" in text and "Origin 'http://attacker.example:" in text


# ---------------------------------------------------------------------------- tokens
@pytest.fixture
def never_serve(monkeypatch):
    """`doxa mcp --http` whose serving is recorded instead of done: [(host, port, token, allow_hosts)]."""
    served = []
    monkeypatch.setattr(mcp_http, "serve_http",
                        lambda server, host, port, token, allow_hosts=():
                        served.append((host, port, token, allow_hosts)))
    # a log handler on CliRunner's stream would outlive it
    monkeypatch.setattr(mcp_server, "configure_logging", lambda: None)
    monkeypatch.delenv("DOXA_MCP_TOKEN", raising=False)
    return served


def doxa_mcp(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(app, ["mcp", *args], env=env)


@pytest.mark.parametrize("args, env, says", [
    (["--host", "0.0.0.0"], None, "`doxa mcp --new-token` makes one"),
    (["--host", "10.1.2.3"], None, "not loopback"),
    (["--host", "0.0.0.0", "--token", "a"], None, "it has 1 character; a token needs at least 43"),
    (["--host", "0.0.0.0", "--token", " "], None, "empty or only whitespace"),
    (["--host", "0.0.0.0", "--token", ""], None, "empty or only whitespace"),
    (["--host", "0.0.0.0", "--token", f" {GOOD_TOKEN}"], None, "leading or trailing whitespace"),
    (["--host", "0.0.0.0"], {"DOXA_MCP_TOKEN": f"{GOOD_TOKEN}\n"}, "($DOXA_MCP_TOKEN) is refused: it has leading"),
    (["--host", "0.0.0.0", "--token", GOOD_TOKEN[:20] + " " + GOOD_TOKEN[20:]], None, "contains ' '"),
    (["--host", "0.0.0.0", "--token", "ab" * 30], None, "only 2 different characters"),
    (["--token", "short"], None, "it has 5 characters"),  # loopback: a token given must meet the rule too
    (["--host", "127.0.0.2", "--token", "x" * 50], None, "only 1 different character"),
    (["--allow-host", "http://proxy.example.com:443"], None, "without scheme, port or path"),
])
def test_a_bad_token_or_a_public_bind_without_one_refuses_to_start(stores, never_serve, args, env, says):
    served, _ = stores
    result = doxa_mcp("--http", *args, "--db", served, env=env)
    assert result.exit_code == 2, (args, result.output, result.exception)
    assert says in result.stderr and "Error: " in result.stderr, result.stderr
    assert "--new-token" in result.stderr or "--allow-host" in args
    assert never_serve == []


def test_new_token_prints_a_token_the_server_accepts(stores, never_serve):
    served, _ = stores
    plain = doxa_mcp("--new-token")
    assert plain.exit_code == 0, plain.output
    as_json = doxa_mcp("--new-token", "--json")
    assert as_json.exit_code == 0, as_json.output
    tokens = [plain.stdout.strip(), json.loads(as_json.stdout)["token"]]
    assert tokens[0] != tokens[1]
    for token in tokens:
        assert len(token) >= mcp_http.TOKEN_MIN_CHARS
        assert set(token) <= set(string.ascii_letters + string.digits + "-_")
        assert mcp_http.token_problem(token) is None
        started = doxa_mcp("--http", "--host", "0.0.0.0", "--token", token, "--db", served)
        assert started.exit_code == 0, started.output
    assert [t for _, _, t, _ in never_serve] == tokens


# ---------------------------------------------------------------------------- failed authentications
@pytest.fixture
def doxa_log():
    """What the server logs (doxa.mcp), line by line."""
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    handler = Keep(level=logging.INFO)
    logger = logging.getLogger("doxa.mcp")
    logger.addHandler(handler)
    yield lines
    logger.removeHandler(handler)


def test_repeated_wrong_tokens_lock_the_client_out_and_no_token_is_logged(stores, doxa_log):
    served, _ = stores
    before = snapshot(served)
    clock = Clock()
    guesses = [f"guess-{i}-{GOOD_TOKEN}" for i in range(mcp_http.MAX_FAILURES)]
    right = {"authorization": f"Bearer {GOOD_TOKEN}"}

    async def session():
        with anyio.fail_after(BOUND_S):
            async with guarded(served, "127.0.0.1", token=GOOD_TOKEN, clock=clock) as connect:
                attacker, other = await connect(("127.0.0.9", 40000)), await connect(("127.0.0.10", 40001))
                for guess in guesses:
                    wrong = await attacker.post("/mcp", json=INIT,
                                                headers={**ACCEPT, "authorization": f"Bearer {guess}"})
                    assert wrong.status_code == 401, wrong.text
                    clock.now += 1
                statuses, text = await handshake_and_correct(attacker, right)  # even the right token, now
                assert statuses == [429] * 3, (statuses, text)
                retry = (await attacker.post("/mcp", json=INIT, headers={**ACCEPT, **right})).headers["retry-after"]
                assert int(retry) == pytest.approx(mcp_http.LOCKOUT_S, abs=1)
                assert snapshot(served) == before
                statuses, _ = await handshake_and_correct(other, right)  # another client is not locked out
                assert statuses == [200, 202, 200]
                clock.now += mcp_http.LOCKOUT_S + 1
                statuses, _ = await handshake_and_correct(attacker, right)  # the back-off is over
                assert statuses == [200, 202, 200]

    anyio.run(session)
    refused = [line for line in doxa_log if line.startswith("refused ")]
    assert len(refused) == mcp_http.MAX_FAILURES  # the 429s are not logged, one by one
    assert all("POST /mcp from 127.0.0.9:40000: unauthorized: wrong bearer token" in line for line in refused)
    assert "is refused for 300 s" in refused[-1] and "127.0.0.9" in refused[-1]
    for line in doxa_log:
        assert GOOD_TOKEN not in line and "guess-" not in line


def test_failed_authentications_are_counted_per_client_in_bounded_memory():
    clock = Clock()
    failures = mcp_http.FailedAuthentications(clock)
    for i in range(mcp_http.MAX_CLIENTS + 100):
        assert not failures.failed(f"10.{i // 65536}.{i // 256 % 256}.{i % 256}")
    assert len(failures.failures) == mcp_http.MAX_CLIENTS
    # one IPv6 /64 is one client: varying the low bits does not escape the count
    locked = [failures.failed(f"2001:db8::{i:x}") for i in range(mcp_http.MAX_FAILURES)]
    assert locked == [False] * (mcp_http.MAX_FAILURES - 1) + [True]
    assert failures.retry_after("2001:db8::ffff:1") == mcp_http.LOCKOUT_S
    assert failures.retry_after("2001:db9::1") == 0
    # failures older than the window are forgotten
    for _ in range(mcp_http.MAX_FAILURES - 1):
        failures.failed("192.0.2.1")
    clock.now += mcp_http.FAILURE_WINDOW_S + 1
    assert not failures.failed("192.0.2.1")


# ---------------------------------------------------------------------------- arguments and bodies
def test_an_unknown_argument_is_a_tool_error_naming_it_and_writes_nothing(stores):
    served, _ = stores
    before = snapshot(served)

    async def session():
        with anyio.fail_after(BOUND_S):
            async with Client(mcp_server.build_server(served)) as client:
                for tool in (await client.list_tools()).tools:
                    assert tool.input_schema["additionalProperties"] is False, tool.name
                result = await client.call_tool("belief", {"question": "maya.diet", "sql": "DROP TABLE messages"})
                assert result.is_error
                assert result.content[0].text == ("Error: unknown argument 'sql' for tool belief: its arguments "
                                                  "are question, at, act_at; nothing was done")
                result = await client.call_tool("correct", {"question": "maya.diet", "answer": "vegetarian",
                                                            "at": LATER, "by": "ana", "note": "x", "how": "y"})
                assert result.is_error
                assert "unknown arguments 'how', 'note' for tool correct" in result.content[0].text
                assert "question, answer, at, by" in result.content[0].text
                assert snapshot(served) == before
                done = await client.call_tool("correct", {"question": "maya.diet", "answer": "vegetarian",
                                                          "at": LATER})
                assert not done.is_error  # without the stray argument the same call writes

    anyio.run(session)
    assert settlements(served) == before["counts"]["settlements"] + 1


def test_a_body_over_the_limit_gets_413_before_the_mcp_layer(stores, doxa_log):
    served, _ = stores
    before = snapshot(served)
    limit = mcp_http.MAX_BODY_BYTES
    call = dict(CORRECT, params={**CORRECT["params"], "arguments": {**CORRECT["params"]["arguments"],
                                                                    "by": "x" * (2 * limit)}})
    big = json.dumps(call).encode()

    async def chunks(data: bytes, size: int = 64 * 1024):
        for start in range(0, len(data), size):
            yield data[start:start + size]

    async def session():
        with anyio.fail_after(BOUND_S):
            async with guarded(served, "127.0.0.1") as connect:
                http = await connect()
                init = await http.post("/mcp", json=INIT, headers=ACCEPT)
                session_headers = {**ACCEPT, "content-type": "application/json", "mcp-protocol-version": PROTOCOL,
                                   "mcp-session-id": init.headers["mcp-session-id"]}
                await http.post("/mcp", json=INITIALIZED, headers=session_headers)
                declared = await http.post("/mcp", content=big, headers=session_headers)
                assert declared.status_code == 413, declared.text
                streamed = await http.post("/mcp", content=chunks(big), headers=session_headers)
                assert streamed.request.headers["transfer-encoding"] == "chunked"
                assert streamed.status_code == 413, streamed.text
                assert f"at most {limit} bytes" in streamed.json()["error"]
                padded = json.dumps(CORRECT).encode()
                padded += b" " * (limit - len(padded))  # exactly the limit: served
                done = await http.post("/mcp", content=chunks(padded), headers=session_headers)
                assert done.status_code == 200 and '"recorded"' in done.text, done.text

    anyio.run(session)
    assert settlements(served) == before["counts"]["settlements"] + 1
    assert sum("request body over the limit" in line for line in doxa_log) == 2


def test_a_real_server_answers_an_oversize_body_413_even_when_the_client_closes(stores, tmp_path):
    """urllib sends `Connection: close` and writes the whole body before reading: it reads the 413."""
    served, _ = stores
    log = tmp_path / "http.log"
    proc, port = start_http(served, log)
    try:
        for size in (2 * mcp_http.MAX_BODY_BYTES, 5_000_000):
            request = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=b" " * size, method="POST",
                                             headers={"content-type": "application/json", **ACCEPT})
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=BOUND_S)
            assert refused.value.code == 413, size
    finally:
        stop(proc)
