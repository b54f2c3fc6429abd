"""`doxa mcp --http --stores DIR`: one server, a store per principal, nobody in another's (issue 39).

One real server is started for the module, on loopback, over a folder made with `doxa tokens
add` (alice: the demo store; bob: a store about someone else; carol and dave for revocation and
addition while it runs). Through every tool each principal sees its own store only: the other's
question ids are unknown, its words are not found, and another principal's MCP session id
reaches nothing. A missing, wrong, malformed or revoked token (revoked while the server runs)
is refused with 401 and writes nothing anywhere; a principal added while it runs is served at
once. Parallel writes from two principals lose nothing and land each in its own store. `doxa
tokens add/list/revoke` print a token once, never list one, and keep only its hash in a 0600
file; `--stores` refuses `--db` and `--token`; `--allow-forget` reaches `build_server`.

In process, the guard's rules (Host, lockout, body limit) hold with principals, a token is
needed even on loopback, and no refused request builds a principal's server.

Refused requests are sent from their own loopback source addresses (127.0.0.x), so that the
guard's lockout of one address never touches the clients of the other tests.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import stat
import subprocess
import threading
import time
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client
from typer.testing import CliRunner

import doxa
import records as R
from doxa.cli.main import app
from doxa.data.demo import demo_records
from doxa.data.store import Store
from doxa.inference.agent import mcp_http, mcp_server, principals
from test_mcp import BOUND_S, ENTRY, LATER, free_port, snapshot, stop, with_token
from test_mcp import TOKEN as GOOD_TOKEN
from test_mcp_http import ACCEPT, Clock

PROTOCOL = "2025-06-18"
INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
NOTE = "Zeno only eats ramen at Ichiran these days."


def zeno_records() -> list[dict]:
    """Bob's store: someone alice's store never names, in words it never uses."""
    return [R.subject("zeno"), R.source("zeno-chat", ["person", "self", "chat"]),
            R.question("zeno.diet", ["ramen only", "vegan"], kind="diet", subject="zeno"),
            R.message("z1", "zeno-chat", "2026-02-01", NOTE),
            R.reading("z1", "zeno.diet", {"ramen only": 0.9, "vegan": 0.05}, unclear=0.05)]


def tokens(*args: str, code: int = 0):
    result = CliRunner().invoke(app, ["tokens", *args])
    assert result.exit_code == code, (args, result.output, result.exception)
    return result


def add(folder: Path, name: str) -> str:
    return json.loads(tokens("add", name, "--stores", str(folder), "--json").stdout)["token"]


def all_snapshots(folder: Path) -> dict[str, dict]:
    return {path.name: snapshot(str(path)) for path in sorted(folder.glob("*.duckdb"))}


def without_reads(snapshots: dict[str, dict]) -> dict[str, dict]:
    """Snapshots less the reads log (a belief read records its question: how `uncertain` ranks)."""
    return {name: {k: ({c: n for c, n in v.items() if c != "reads"} if k == "counts" else v)
                   for k, v in snap.items() if k != "reads"} for name, snap in snapshots.items()}


def texts(path: str) -> list[str]:
    with Store.open(path) as store:
        return sorted(row[0] for row in store.con.execute("SELECT text FROM messages").fetchall())


class Served:
    """The module's server: its folder, port, log, and each principal's token and store."""

    def __init__(self, folder: Path, port: int, log: Path, proc: subprocess.Popen, tokens: dict[str, str]):
        self.folder, self.port, self.log, self.proc, self.tokens = folder, port, log, proc, tokens

    def store(self, name: str) -> str:
        return str(self.folder / f"{name}.duckdb")

    def client(self, name: str) -> Client:
        return with_token(self.port, self.tokens[name])

    def post(self, body: dict, headers: dict[str, str], source: str = "127.0.0.1") -> tuple[int, str, dict]:
        """A raw POST /mcp from the loopback address ``source``: (status, body, headers)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=BOUND_S,
                                                source_address=(source, 0))
        try:
            connection.request("POST", "/mcp", body=json.dumps(body).encode(),
                               headers={"content-type": "application/json",
                                        "accept": "application/json, text/event-stream", **headers})
            response = connection.getresponse()
            return response.status, response.read().decode("utf-8", "replace"), dict(response.getheaders())
        finally:
            connection.close()

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Served:
    folder = tmp_path_factory.mktemp("tenants") / "stores"
    names = {name: add(folder, name) for name in ("alice", "bob", "carol")}
    with doxa.open(str(folder / "alice.duckdb")) as memory:
        memory.ingest(demo_records())
    with doxa.open(str(folder / "bob.duckdb")) as memory:
        memory.ingest(zeno_records())
    log = folder.parent / "server.log"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOXA_")}  # no model, no single token
    proc = subprocess.Popen([*ENTRY, "mcp", "--http", "--port", str(port), "--stores", str(folder)],
                            stdout=subprocess.DEVNULL, stderr=log.open("w", encoding="utf-8"), env=env)
    deadline = time.monotonic() + BOUND_S
    while "serving http://" not in log.read_text(encoding="utf-8"):
        assert proc.poll() is None, log.read_text(encoding="utf-8")
        assert time.monotonic() < deadline, f"no server within {BOUND_S} s: {log.read_text(encoding='utf-8')}"
        time.sleep(0.1)
    here = Served(folder, port, log, proc, names)
    try:
        yield here
    finally:
        stop(proc)
    text = log.read_text(encoding="utf-8")
    for token in here.tokens.values():
        assert token not in text, "a token reached the log"


def run_as(served: Served, name: str, calls: list[tuple[str, dict]]) -> list:
    """Each call through one MCP session with ``name``'s token: [(is_error, text)]."""
    async def session():
        with anyio.fail_after(BOUND_S):
            async with served.client(name) as client:
                out = []
                for tool, arguments in calls:
                    result = await client.call_tool(tool, arguments)
                    out.append((result.is_error, result.content[0].text))
                return out

    return anyio.run(session)


def answered(text: str) -> str:
    """A read's result without what it echoes of the call (the words searched, the task), in lower-case words."""
    value = json.loads(text)
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if k not in ("words", "terms", "task")}
    return " ".join("".join(c if c.isalnum() else " " for c in json.dumps(value).lower()).split())


# ---------------------------------------------------------------------------- isolation
def test_each_principal_sees_only_its_own_store_through_every_tool(served):
    before = all_snapshots(served.folder)
    alice_only = [("belief", {"question": "maya.diet"}), ("explain", {"question": "maya.diet"}),
                  ("history", {"question": "maya.diet"}), ("beliefs", {"subject": "maya"}),
                  ("uncertain", {"subject": "maya"}), ("search", {"words": "x", "subject": "maya"}),
                  ("correct", {"question": "maya.diet", "answer": "vegetarian", "at": LATER}),
                  ("reject", {"question": "maya.diet", "answer": "vegan", "at": LATER}),
                  ("instruct", {"subject": "maya", "text": "Book quiet tables", "at": LATER})]
    bob_only = [("belief", {"question": "zeno.diet"}), ("explain", {"question": "zeno.diet"}),
                ("history", {"question": "zeno.diet"}), ("beliefs", {"subject": "zeno"}),
                ("uncertain", {"subject": "zeno"}), ("search", {"words": "x", "subject": "zeno"}),
                ("approve", {"question": "zeno.diet", "at": LATER}),
                ("outcome", {"question": "zeno.diet", "answer": "vegan", "how": "seen", "at": LATER})]
    # each principal asking about the other's ids: refused, and nothing written anywhere
    for name, foreign in (("bob", alice_only), ("alice", bob_only)):
        for (is_error, text), (tool, _) in zip(run_as(served, name, foreign), foreign):
            assert is_error, (name, tool, text)
            assert text.startswith("Error: "), (name, tool, text)
            assert "vegetarian" not in text and "ramen" not in text, (name, tool, text)
    assert all_snapshots(served.folder) == before

    reads = [("beliefs", {}), ("uncertain", {}), ("search", {"words": "ramen Ichiran"}),
             ("search", {"words": "peanut satay"}), ("context", {"task": "book Maya's birthday dinner"}),
             ("context", {"task": "cook for Zeno"})]
    alice, bob = run_as(served, "alice", reads), run_as(served, "bob", reads)
    assert not any(is_error for is_error, _ in alice + bob), (alice, bob)
    alice_ids = {b["question"] for b in json.loads(alice[0][1])}
    bob_ids = {b["question"] for b in json.loads(bob[0][1])}
    assert "maya.diet" in alice_ids and not any(q.startswith("zeno.") for q in alice_ids)
    assert bob_ids == {"zeno.diet"}
    assert json.loads(alice[2][1])["hits"] == [] and json.loads(bob[3][1])["hits"] == []
    assert [h["text"] for h in json.loads(bob[2][1])["hits"]] == [NOTE]
    assert json.loads(alice[3][1])["hits"]
    for _, text in alice:
        assert not {"zeno", "ramen", "ichiran"} & set(answered(text).split()), text
    for _, text in bob:
        assert not {"maya", "satay", "peanut"} & set(answered(text).split()), text
    # the same question id answers each from its own store
    (_, mine), = run_as(served, "bob", [("belief", {"question": "zeno.diet"})])
    assert json.loads(mine)["top"] == "ramen only"
    assert without_reads(all_snapshots(served.folder)) == without_reads(before)  # reads log their question


def test_no_tool_takes_a_path(served):
    async def session():
        with anyio.fail_after(BOUND_S):
            async with served.client("alice") as client:
                return (await client.list_tools()).tools

    for tool in anyio.run(session):
        assert not {"path", "db", "store", "stores", "file"} & set(tool.input_schema.get("properties", {})), tool.name


def test_another_principals_session_id_reaches_nothing(served):
    before = all_snapshots(served.folder)
    alice = {"authorization": f"Bearer {served.tokens['alice']}"}
    status, _, headers = served.post(INIT, alice)
    assert status == 200
    session = {k.lower(): v for k, v in headers.items()}["mcp-session-id"]
    with_alices_session = {"mcp-session-id": session, "mcp-protocol-version": PROTOCOL}
    for tool, arguments in (("belief", {"question": "maya.diet"}),
                            ("correct", {"question": "maya.diet", "answer": "vegetarian", "at": LATER})):
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
        status, text, _ = served.post(body, {"authorization": f"Bearer {served.tokens['bob']}",
                                             **with_alices_session})
        assert status == 404, (status, text)  # bob's server never heard of alice's session
        assert "vegetarian" not in text and "maya" not in text
    assert all_snapshots(served.folder) == before


# ---------------------------------------------------------------------------- refused tokens
def test_a_missing_wrong_or_malformed_token_is_refused_and_writes_nothing(served):
    before = all_snapshots(served.folder)
    remember = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "remember", "arguments": {"text": "intruder was here", "source": "mum-chat"}}}
    alice, guess = served.tokens["alice"], principals.new_token()
    refused = [{}, {"authorization": f"Bearer {guess}"}, {"authorization": f"Bearer {GOOD_TOKEN}"},
               {"authorization": alice}, {"authorization": "Bearer"}, {"authorization": "Bearer "},
               {"authorization": f"Basic {alice}"}, {"authorization": f"Bearer {alice[:-1]}"},
               {"authorization": f"Bearer  {alice}"}]
    for headers in refused:
        status, text, _ = served.post(remember, headers, source="127.0.0.21")
        assert status == 401, (headers, status, text)
        assert alice not in text and guess not in text and str(served.folder) not in text
        if headers and headers["authorization"].startswith("Bearer ") and len(headers["authorization"]) > 8:
            assert "unknown or revoked bearer token" in text, text  # never whether it once was valid
    # raw bytes no header decodes to a token (latin-1 on the wire)
    status, _, _ = served.post(remember, {"authorization": "Bearer \xe9\xe9"}, source="127.0.0.22")
    assert status == 401
    assert all_snapshots(served.folder) == before
    log = served.log_text()
    assert log.count("unauthorized:") >= len(refused) + 1
    assert "no bearer token" in log and "wrong bearer token" in log and "malformed Authorization header" in log
    assert alice not in log and guess not in log and GOOD_TOKEN not in log


def test_a_token_revoked_or_added_while_the_server_runs_counts_at_the_next_request(served):
    carol = served.tokens["carol"]
    belief = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
              "params": {"name": "remember", "arguments": {"text": "carol after revoke", "source": "user/notes/x"}}}
    (is_error, text), = run_as(served, "carol", [("beliefs", {})])
    assert not is_error and json.loads(text) == []
    tokens("revoke", "carol", "--stores", str(served.folder))
    before = all_snapshots(served.folder)
    status, text, _ = served.post(belief, {"authorization": f"Bearer {carol}"}, source="127.0.0.31")
    assert status == 401 and "unknown or revoked bearer token" in text, text
    assert "revoked bearer token (principal carol" in served.log_text()
    assert all_snapshots(served.folder) == before

    # added while it runs: served at once, over its own new store
    served.tokens["dave"] = add(served.folder, "dave")
    (is_error, text), = run_as(served, "dave", [("remember", {"text": "dave's first note", "source": "user/notes/dave"})])
    assert not is_error, text
    assert texts(served.store("dave")) == ["dave's first note"]
    # carol again: a new token works, the revoked one stays refused
    served.tokens["carol"] = add(served.folder, "carol")
    (is_error, _), = run_as(served, "carol", [("beliefs", {})])
    assert not is_error
    status, _, _ = served.post(belief, {"authorization": f"Bearer {carol}"}, source="127.0.0.31")
    assert status == 401
    assert texts(served.store("carol")) == []


# ---------------------------------------------------------------------------- parallel writes
def test_parallel_writes_from_two_principals_lose_nothing(served):
    per_thread, threads_each = 10, 2
    failures: list = []

    def write(name: str, source: str, part: int):
        try:
            calls = [("remember", {"text": f"{name} note {part}-{i}", "source": source})
                     for i in range(per_thread)]
            for is_error, text in run_as(served, name, calls):
                if is_error:
                    failures.append((name, text))
        except BaseException as err:  # noqa: BLE001 - reported below, in the test's thread
            failures.append((name, repr(err)))

    before = {name: texts(served.store(name)) for name in ("alice", "bob")}
    threads = [threading.Thread(target=write, args=(name, source, part))
               for part in range(threads_each) for name, source in (("alice", "mum-chat"), ("bob", "zeno-chat"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(BOUND_S)
    assert failures == []
    for name in ("alice", "bob"):
        mine = [t for t in texts(served.store(name)) if t not in before[name]]
        assert sorted(mine) == sorted(f"{name} note {p}-{i}" for p in range(threads_each) for i in range(per_thread))
    assert not any("bob note" in t for t in texts(served.store("alice")))
    assert not any("alice note" in t for t in texts(served.store("bob")))


# ---------------------------------------------------------------------------- the guard, in process
def test_the_guards_rules_hold_with_principals_and_a_refused_request_builds_no_server(tmp_path):
    """Host, lockout and body limit as for one store; a token is needed even on loopback; a principal's
    server is built at its first admitted request, and only then."""
    folder = tmp_path / "stores"
    ana = add(folder, "ana")
    table = principals.PrincipalTable(folder)
    clock, built, port = Clock(), [], 8799
    right = {**ACCEPT, "authorization": f"Bearer {ana}"}

    def build(name: str):
        built.append(name)
        return mcp_server.build_server(table.store_path(name))

    guard = mcp_http.tenants_app(build, table, "127.0.0.1", port, clock=clock)

    async def session():
        with anyio.fail_after(BOUND_S):
            async with guard.app.running(), contextlib.AsyncExitStack() as stack:
                async def connect(address: str) -> httpx2.AsyncClient:
                    return await stack.enter_async_context(httpx2.AsyncClient(
                        transport=httpx2.ASGITransport(guard, client=(address, 40000)),
                        base_url=f"http://127.0.0.1:{port}", timeout=BOUND_S))

                guesser, owner = await connect("127.0.0.9"), await connect("127.0.0.10")
                foreign = await owner.post("/mcp", json=INIT, headers={**right, "host": f"attacker.example:{port}"})
                assert foreign.status_code == 421
                assert (await owner.post("/mcp", json=INIT, headers=ACCEPT)).status_code == 401  # loopback too
                big = await owner.post("/mcp", content=b" " * (mcp_http.MAX_BODY_BYTES + 1),
                                       headers={**right, "content-type": "application/json"})
                assert big.status_code == 413
                assert built == []  # refused before the principal's server: none was built
                for _ in range(mcp_http.MAX_FAILURES):
                    wrong = await guesser.post("/mcp", json=INIT,
                                               headers={**ACCEPT, "authorization": f"Bearer {GOOD_TOKEN}"})
                    assert wrong.status_code == 401
                assert (await guesser.post("/mcp", json=INIT, headers=right)).status_code == 429
                served = await owner.post("/mcp", json=INIT, headers=right)
                assert served.status_code == 200 and "mcp-session-id" in served.headers, served.text

    anyio.run(session)
    assert built == ["ana"]


# ---------------------------------------------------------------------------- the table
def test_the_table_reads_a_changed_file_and_fails_closed_on_a_broken_one(tmp_path):
    folder = tmp_path / "stores"
    ana = add(folder, "ana")
    table = principals.PrincipalTable(folder)
    assert table.authenticate(f"Bearer {ana}".encode()) == ("ana", "")
    assert table.authenticate(f"bearer {ana}".encode()) == ("ana", "")  # the scheme is case-insensitive
    assert table.authenticate(None) == (None, "no bearer token")
    assert table.authenticate(b"Bearer")[1].startswith("malformed")
    ben = add(folder, "ben")
    assert table.authenticate(f"Bearer {ben}".encode()) == ("ben", "")
    tokens("revoke", "ana", "--stores", str(folder))
    name, why = table.authenticate(f"Bearer {ana}".encode())
    assert name is None and why.startswith("revoked bearer token (principal ana")
    saved = principals.principals_file(folder).read_bytes()
    principals.principals_file(folder).write_text("{not json")
    name, why = table.authenticate(f"Bearer {ben}".encode())
    assert name is None and "is not JSON" in why
    principals.principals_file(folder).write_bytes(saved)
    assert table.authenticate(f"Bearer {ben}".encode()) == ("ben", "")


# ---------------------------------------------------------------------------- doxa tokens
def test_tokens_add_list_revoke_show_a_token_once_and_keep_only_its_hash(tmp_path):
    folder = tmp_path / "stores"
    plain = tokens("add", "ana", "--stores", str(folder)).stdout
    token = plain.strip().splitlines()[-1]
    assert mcp_http.token_problem(token) is None
    ben = add(folder, "ben")
    file = principals.principals_file(folder)
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    data = file.read_bytes()
    for secret in (token, ben):
        assert secret.encode() not in data
        assert principals.token_digest(secret).encode() in data
    assert (folder / "ana.duckdb").exists() and (folder / "ben.duckdb").exists()

    listed = tokens("list", "--stores", str(folder)).stdout
    as_json = json.loads(tokens("list", "--stores", str(folder), "--json").stdout)
    assert [row["name"] for row in as_json] == ["ana", "ben"]
    assert set(as_json[0]) == {"name", "created", "revoked", "store"}
    for output in (listed, json.dumps(as_json)):
        assert token not in output and ben not in output and "sha256" not in output
    assert "ana" in listed and "active" in listed

    again = tokens("add", "ana", "--stores", str(folder), code=1).stderr
    assert "already has a token" in again and "doxa tokens revoke ana" in again
    bad = tokens("add", "../ana", "--stores", str(folder), code=1).stderr
    assert "lower-case letters a-z, digits, '-' and '_'" in bad
    assert tokens("add", "Ana", "--stores", str(folder), code=1).stderr.startswith("Error: principal name 'Ana'")
    assert "no principal zed" in tokens("revoke", "zed", "--stores", str(folder), code=1).stderr

    revoked = json.loads(tokens("revoke", "ana", "--stores", str(folder), "--json").stdout)
    assert revoked["name"] == "ana" and revoked["revoked"] and not revoked["already_revoked"]
    assert json.loads(tokens("revoke", "ana", "--stores", str(folder), "--json").stdout)["already_revoked"]
    assert "revoked" in tokens("list", "--stores", str(folder)).stdout
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    # a revoked principal gets a new token and keeps its store
    with doxa.open(str(folder / "ana.duckdb")) as memory:
        memory.ingest(zeno_records())
    fresh = json.loads(tokens("add", "ana", "--stores", str(folder), "--json").stdout)
    assert fresh["token"] != token and fresh["store_created"] is False
    assert texts(str(folder / "ana.duckdb")) == [NOTE]
    assert fresh["token"].encode() not in file.read_bytes()

    missing = tokens("list", "--stores", str(tmp_path / "nowhere"), code=1).stderr
    assert "doxa tokens add NAME --stores" in missing
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    assert "chmod 700" in tokens("add", "ana", "--stores", str(shared)).stderr  # said, not refused
    assert "Warning" not in tokens("add", "cleo", "--stores", str(folder)).stderr


# ---------------------------------------------------------------------------- doxa mcp --stores
@pytest.fixture
def never_serve(monkeypatch):
    """`doxa mcp` whose serving is recorded instead of done."""
    seen: dict[str, list] = {"single": [], "tenants": [], "built": []}
    monkeypatch.setattr(mcp_http, "serve_http", lambda server, *args: seen["single"].append(args))
    monkeypatch.setattr(mcp_http, "serve_tenants",
                        lambda build, table, *args: seen["tenants"].append((build, table, args)))
    real = mcp_server.build_server
    monkeypatch.setattr(mcp_server, "build_server",
                        lambda path, **kw: seen["built"].append((path, kw)) or real(path))
    monkeypatch.setattr(mcp_server, "configure_logging", lambda: None)
    monkeypatch.delenv("DOXA_MCP_TOKEN", raising=False)
    return seen


def doxa_mcp(*args: str):
    return CliRunner().invoke(app, ["mcp", *args])


def test_stores_refuses_db_and_token_and_needs_http(tmp_path, never_serve):
    folder = tmp_path / "stores"
    add(folder, "ana")
    for args, says in ((["--http", "--db", str(folder / "ana.duckdb")], "it does not take --db"),
                       (["--http", "--token", GOOD_TOKEN], "it does not take --token"),
                       (["--http", "--db", "x.duckdb", "--token", GOOD_TOKEN], "--db and --token"),
                       ([], "--stores serves HTTP only"),
                       (["--http", "--allow-host", "https://x.example"], "without scheme, port or path")):
        result = doxa_mcp("--stores", str(folder), *args)
        assert result.exit_code == 2, (args, result.output)
        assert says in result.stderr and "Error: " in result.stderr, result.stderr
    missing = doxa_mcp("--http", "--stores", str(tmp_path / "nowhere"))
    assert missing.exit_code == 1 and "doxa tokens add NAME --stores" in missing.stderr
    assert never_serve["single"] == never_serve["tenants"] == []


def test_allow_forget_reaches_build_server_in_both_modes(tmp_path, never_serve):
    folder = tmp_path / "stores"
    add(folder, "ana")
    single = folder / "ana.duckdb"
    for forget in (False, True):
        extra = ["--allow-forget"] if forget else []
        assert doxa_mcp("--http", "--db", str(single), *extra).exit_code == 0
        assert never_serve["built"][-1] == (str(single), {"allow_forget": forget})
        assert doxa_mcp("--http", "--stores", str(folder), "--host", "0.0.0.0", *extra).exit_code == 0
        build, table, (host, port, allow_hosts) = never_serve["tenants"][-1]
        assert host == "0.0.0.0" and table.folder == folder  # every principal has a token: any bind may serve
        build("ana")  # what the server does at the first request with ana's token
        assert never_serve["built"][-1] == (str(folder / "ana.duckdb"), {"allow_forget": forget})
