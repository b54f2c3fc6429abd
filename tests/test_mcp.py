"""`doxa mcp` (issue 12), spawned as its own process and driven by the MCP SDK's own client.

Over stdio: every tool is listed and called, and each result is the JSON `doxa VERB --json`
prints on an identical copy of the store; refused calls (unknown question, bad option,
malformed arguments) come back as tool errors with the CLI's text and leave the store
unchanged; the server holds no lock on the store between calls; a correction made through
the server is a settlement the belief reads at once and the nightly fit learns trust from.
Over streamable HTTP on loopback: the same results; with a bearer token on a non-loopback
address, requests without the right token are refused, logged, and change nothing.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from typer.testing import CliRunner

import doxa
import records as R
from doxa.cli.main import app
from doxa.data.demo import DEMO_NOW, demo_records
from doxa.data.store import Store
from doxa.inference.read import params as parameters

AT = DEMO_NOW
LATER = "2026-12-01T13:00:00"
ENTRY = [sys.executable, "-c", "from doxa.cli import main; main()"]
#: Every call of a test finishes within this many seconds, or the test fails (no hang).
BOUND_S = 120
#: A bearer token that meets the rule (43 visible characters, enough of them different).
TOKEN = "Jx7_kq2ZfV9wL0pR3mN8sT1uY4cB6dE5gH-aQzXoWiK"

TOOLS = {"belief", "beliefs", "uncertain", "context", "explain", "search", "ask", "correct", "approve", "outcome",
         "reject", "instruct", "remember", "answer", "history"}

#: (tool, MCP arguments, the same call on the command line), in the order both stores see them.
CALLS = [
    ("belief", {"question": "maya.diet", "at": AT}, ["belief", "maya.diet", "--at", AT]),
    ("beliefs", {"subject": "maya", "at": AT}, ["beliefs", "--subject", "maya", "--at", AT]),
    ("uncertain", {"at": AT}, ["beliefs", "--uncertain", "--at", AT]),
    ("context", {"task": "book Maya's birthday dinner", "at": AT},
     ["context", "book Maya's birthday dinner", "--at", AT]),
    ("explain", {"question": "maya.likes_loud_places", "at": AT}, ["explain", "maya.likes_loud_places", "--at", AT]),
    ("search", {"words": "peanut satay"}, ["search", "peanut satay"]),
    ("ask", {"question": "Does Maya have allergies?", "subject": "maya", "options": ["yes", "no"], "at": AT},
     ["ask", "Does Maya have allergies?", "--subject", "maya", "--options", "yes,no", "--at", AT]),
    ("correct", {"question": "maya.diet", "answer": "vegetarian", "at": LATER, "by": "ana"},
     ["correct", "maya.diet", "vegetarian", "--at", LATER, "--by", "ana"]),
    ("approve", {"question": "maya.favourite_flower", "at": LATER}, ["approve", "maya.favourite_flower", "--at", LATER]),
    ("outcome", {"question": "maya.home", "answer": "12 Elm Street", "how": "a letter came back", "at": LATER},
     ["outcome", "maya.home", "12 Elm Street", "--how", "a letter came back", "--at", LATER]),
    ("reject", {"question": "maya.birthday", "answer": "May", "at": LATER},
     ["reject", "maya.birthday", "May", "--at", LATER]),
    ("instruct", {"subject": "maya", "text": "Book quiet tables", "at": LATER,
                  "rests_on": {"question": "maya.likes_loud_places", "answer": "no"}},
     ["instruct", "maya", "Book quiet tables", "--rests-on", "maya.likes_loud_places=no", "--at", LATER]),
    ("remember", {"text": "Maya eats fish on Fridays now", "source": "mum-chat", "sent_at": LATER},
     ["remember", "Maya eats fish on Fridays now", "--source", "mum-chat", "--at", LATER]),
    ("belief", {"question": "maya.diet", "at": LATER}, ["belief", "maya.diet", "--at", LATER]),
    ("uncertain", {"at": LATER}, ["beliefs", "--uncertain", "--at", LATER]),
    ("answer", {"question": "Where did Maya live before?", "at": AT}, ["answer", "Where did Maya live before?", "--at", AT]),
    ("history", {"question": "maya.home", "end": LATER}, ["history", "maya.home", "--to", LATER]),
]

#: Calls doxa refuses: the tool error's text is the line the CLI prints on standard error.
REFUSED = [
    ("belief", {"question": "maya.dit"}, ["belief", "maya.dit"]),
    ("explain", {"question": "maya.dit"}, ["explain", "maya.dit"]),
    ("beliefs", {"subject": "nobody"}, ["beliefs", "--subject", "nobody"]),
    ("search", {"words": "x", "subject": "nobody"}, ["search", "x", "--subject", "nobody"]),
    ("correct", {"question": "maya.dit", "answer": "vegetarian"}, ["correct", "maya.dit", "vegetarian"]),
    ("correct", {"question": "maya.diet", "answer": "vegan"}, ["correct", "maya.diet", "vegan"]),
    ("approve", {"question": "maya.diet", "answer": "vegan"}, ["approve", "maya.diet", "vegan"]),
    ("outcome", {"question": "maya.diet", "answer": "vegan", "how": "x"},
     ["outcome", "maya.diet", "vegan", "--how", "x"]),
    ("reject", {"question": "maya.home", "answer": "Paris"}, ["reject", "maya.home", "Paris"]),
    ("instruct", {"subject": "mya", "text": "x"}, ["instruct", "mya", "x"]),
    ("remember", {"text": "x", "source": "person/family/mum-chat"},
     ["remember", "x", "--source", "person/family/mum-chat"]),
    ("ask", {"question": "Allergies?", "subject": "nobody", "options": ["yes", "no"]},
     ["ask", "Allergies?", "--subject", "nobody", "--options", "yes,no"]),
    ("answer", {"question": "Where?", "subject": "nobody"}, ["answer", "Where?", "--subject", "nobody"]),
    ("history", {"question": "maya.dit"}, ["history", "maya.dit"]),
]

#: Arguments that do not fit a tool's input schema (or no such tool): refused before doxa runs.
MALFORMED = [
    ("belief", {}),
    ("correct", {"question": "maya.diet"}),
    ("correct", {"question": 5, "answer": "vegetarian"}),
    ("beliefs", {"act_at": 2.0}),
    ("outcome", {"question": "maya.diet", "answer": "vegetarian", "how": ""}),
    ("instruct", {"subject": "maya", "text": "x", "rests_on": "maya.diet"}),
    ("no_such_tool", {}),
]


def cli(*args: str, code: int = 0):
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == code, (args, result.exit_code, result.output, result.exception)
    return result


def snapshot(path: str) -> dict:
    with Store.open(path) as store:  # fails if the server held the file: it must not
        return R.snapshot(store)


@pytest.fixture
def stores(tmp_path, monkeypatch) -> tuple[str, str]:
    """Two identical demo stores: one served over MCP, one read by the CLI."""
    for name in ("DOXA_READER_URL", "DOXA_ORGANIZER_URL"):
        monkeypatch.delenv(name, raising=False)
    served, by_cli = str(tmp_path / "served.duckdb"), str(tmp_path / "cli.duckdb")
    with doxa.open(served) as memory:
        memory.ingest(demo_records())
    shutil.copy(served, by_cli)
    return served, by_cli


def stdio(path: str, log: Path):
    params = StdioServerParameters(command=ENTRY[0], args=[*ENTRY[1:], "mcp", "--db", path])
    return Client(stdio_client(params, errlog=log.open("w", encoding="utf-8")))


def result_json(result) -> object:
    assert not result.is_error, result.content[0].text
    (block,) = result.content
    return json.loads(block.text)


def assert_same_as_cli(tool: str, result, cli_args: list[str], db: str) -> None:
    served = result_json(result)
    printed = json.loads(cli(*cli_args, "--db", db, "--json").stdout)
    assert served == printed, tool
    structured = result.structured_content
    assert structured == ({tool: printed} if tool in ("beliefs", "uncertain") else printed)


def test_every_tool_over_stdio_answers_what_the_cli_prints(stores, tmp_path):
    served, by_cli = stores

    async def session():
        with anyio.fail_after(BOUND_S):
            async with stdio(served, tmp_path / "server.log") as client:
                listed = (await client.list_tools()).tools
                assert {t.name for t in listed} == TOOLS
                for t in listed:
                    assert "never stores a probability" in t.description, t.name
                    assert t.output_schema and t.input_schema["type"] == "object", t.name
                for tool, arguments, cli_args in CALLS:
                    result = await client.call_tool(tool, arguments)
                    assert_same_as_cli(tool, result, cli_args, by_cli)
                    snapshot(served)  # the server holds no lock between calls

    anyio.run(session)
    a, b = snapshot(served), snapshot(by_cli)  # the same facts written (wall-clock stamps aside)
    assert a["counts"] == b["counts"]
    for table in ("settlements", "rejections", "instructions", "readings"):
        assert a[table] == b[table], table


def test_refused_calls_are_tool_errors_with_the_cli_text_and_write_nothing(stores, tmp_path):
    served, by_cli = stores
    before = snapshot(served)

    async def session():
        with anyio.fail_after(BOUND_S):
            async with stdio(served, tmp_path / "server.log") as client:
                for tool, arguments, cli_args in REFUSED:
                    result = await client.call_tool(tool, arguments)
                    assert result.is_error, (tool, arguments)
                    printed = cli(*cli_args, "--db", by_cli, code=1).stderr.strip()
                    assert result.content[0].text == printed, (tool, arguments)
                for tool, arguments in MALFORMED:
                    result = await client.call_tool(tool, arguments)
                    assert result.is_error, (tool, arguments)
                    assert result.content[0].text.strip(), (tool, arguments)
                assert snapshot(served) == before

    anyio.run(session)


# ---------------------------------------------------------------------------- correction → settlement → trust
PARCELS = 12
CORRECTED = 6
SENT = "2026-03-01T09:00:00"
SETTLED = "2026-03-02T09:00:00"


def parcel_records() -> tuple[list[dict], dict[str, str]]:
    """Two sources read about every parcel: the carrier says what happened, the tracker the opposite.
    Nothing but a settled fact can tell which of them to believe."""
    rng = random.Random(3)
    records = [R.subject("shop"), R.source("carrier", ["email", "carrier"]), R.source("tracker", ["email", "tracker"])]
    truth = {}
    for i in range(PARCELS):
        qid = f"shop.parcel{i}"
        truth[qid] = rng.choice(["yes", "no"])
        records.append(R.question(qid, ["yes", "no"], kind="delivered", subject="shop", shape="yes_no",
                                  text=f"Did parcel {i} arrive?"))
        for src, honest in (("carrier", True), ("tracker", False)):
            said = truth[qid] if honest else {"yes": "no", "no": "yes"}[truth[qid]]
            records.append(R.message(f"{src}-{i}", src, SENT, f"{src}: parcel {i} {said}"))
            records.append(R.reading(f"{src}-{i}", qid, {"yes": 0.9 if said == "yes" else 0.1,
                                                         "no": 0.1 if said == "yes" else 0.9}))
    return records, truth


def test_a_correction_through_mcp_is_a_settlement_and_training_moves_trust(tmp_path):
    path = str(tmp_path / "parcels.duckdb")
    records, truth = parcel_records()
    with doxa.open(path) as memory:
        memory.ingest(records)
        trust_before = {s: parameters.trust_for_source(memory.params(), f"email/{s}/{s}", None)[0] for s in ("carrier", "tracker")}
    corrected = sorted(truth)[:CORRECTED]

    async def session():
        with anyio.fail_after(BOUND_S):
            async with stdio(path, tmp_path / "server.log") as client:
                for qid in corrected:
                    before = result_json(await client.call_tool("belief", {"question": qid, "at": SETTLED}))
                    assert before["p_top"] < 0.8  # the two sources cancel out
                    done = result_json(await client.call_tool("correct", {"question": qid, "answer": truth[qid],
                                                                          "at": SETTLED}))
                    assert done["recorded"] and done["record"]["how"] == "correction"
                    after = result_json(await client.call_tool("belief", {"question": qid, "at": SETTLED}))
                    assert (after["top"], after["p_top"], after["n_settled"]) == (truth[qid], 1.0, 1)

    anyio.run(session)
    with doxa.open(path) as memory:
        assert {(s["question"], s["answer"], s["how"]) for s in memory.store.settlements()} == {
            (q, truth[q], "correction") for q in corrected}
    cli("train", "--db", path, "--max-steps", "40", "--folds", "0", "--no-progress", "--json")
    with doxa.open(path) as memory:
        trust = {s: parameters.trust_for_source(memory.params(), f"email/{s}/{s}", None) for s in ("carrier", "tracker")}
        assert all(node.startswith("email/") for _, node in trust.values())  # fitted, not defaults
        assert trust["tracker"][0] < trust_before["tracker"] and trust["tracker"][0] < trust["carrier"][0]
        # and the parcels nobody settled now follow the source the settled facts vindicated
        for qid in sorted(truth)[CORRECTED:]:
            assert memory.belief(qid).top == truth[qid]


# ---------------------------------------------------------------------------- streamable HTTP
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_http(path: str, log: Path, *args: str, env: dict | None = None,
               host: str = "127.0.0.1") -> tuple[subprocess.Popen, int]:
    """`doxa mcp --http` on a free port, once it listens (at HOST: where ARGS bind it)."""
    port = free_port()
    full_env = {k: v for k, v in os.environ.items() if k not in ("DOXA_MCP_TOKEN", "DOXA_READER_URL")}
    full_env.update(env or {})
    proc = subprocess.Popen([*ENTRY, "mcp", "--http", "--port", str(port), "--db", path, *args],
                            stdout=subprocess.DEVNULL, stderr=log.open("w", encoding="utf-8"), env=full_env)
    deadline = time.monotonic() + BOUND_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text(encoding="utf-8")
        try:
            with socket.create_connection((host, port), timeout=1):
                return proc, port
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"doxa mcp --http did not listen within {BOUND_S} s: {log.read_text(encoding='utf-8')}")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=20)


def test_streamable_http_on_loopback_answers_what_the_cli_prints(stores, tmp_path):
    served, by_cli = stores
    log = tmp_path / "http.log"
    proc, port = start_http(served, log)
    try:
        async def session():
            with anyio.fail_after(BOUND_S):
                async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                    assert {t.name for t in (await client.list_tools()).tools} == TOOLS
                    for tool, arguments, cli_args in [CALLS[0], CALLS[7], CALLS[12]]:
                        assert_same_as_cli(tool, await client.call_tool(tool, arguments), cli_args, by_cli)

        anyio.run(session)
    finally:
        stop(proc)
    assert f"serving http://127.0.0.1:{port}/mcp" in log.read_text(encoding="utf-8")  # loopback by default


def post_call(port: int, headers: dict[str, str]) -> int:
    """A raw JSON-RPC tools/call of `correct`, as a client that skips the handshake would send it."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "correct", "arguments": {"question": "maya.diet", "answer": "vegetarian"}}})
    request = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=body.encode(), method="POST",
                                     headers={"content-type": "application/json",
                                              "accept": "application/json, text/event-stream", **headers})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code


def with_token(port: int, token: str) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    return Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http))


def test_a_non_loopback_address_needs_a_token_and_refused_requests_change_nothing(stores, tmp_path):
    served, _ = stores
    refused = cli("mcp", "--http", "--host", "0.0.0.0", "--db", served, code=2)
    assert "not loopback" in refused.stderr and "DOXA_MCP_TOKEN" in refused.stderr
    assert "--http only" in cli("mcp", "--token", "t", "--db", served, code=2).stderr

    log = tmp_path / "guarded.log"
    before = snapshot(served)
    proc, port = start_http(served, log, "--host", "0.0.0.0", env={"DOXA_MCP_TOKEN": TOKEN})
    try:
        def refusals() -> int:
            return log.read_text(encoding="utf-8").count("doxa mcp: refused")

        assert post_call(port, {}) == 401
        assert post_call(port, {"authorization": "Bearer guess"}) == 401
        assert post_call(port, {"authorization": TOKEN}) == 401  # the scheme is part of the header
        assert refusals() == 3

        async def wrong():
            with anyio.fail_after(BOUND_S):
                async with with_token(port, "guess") as client:
                    await client.call_tool("correct", {"question": "maya.diet", "answer": "vegetarian"})

        with pytest.raises(Exception):  # the SDK client cannot even start its session
            anyio.run(wrong)
        assert refusals() > 3
        assert snapshot(served) == before

        async def right():
            with anyio.fail_after(BOUND_S):
                async with with_token(port, TOKEN) as client:
                    return result_json(await client.call_tool(
                        "correct", {"question": "maya.diet", "answer": "vegetarian", "at": LATER}))

        assert anyio.run(right)["recorded"]
    finally:
        stop(proc)
    text = log.read_text(encoding="utf-8")
    assert "refused POST /mcp" in text and "no bearer token" in text and "wrong bearer token" in text
    assert snapshot(served)["counts"]["settlements"] == before["counts"]["settlements"] + 1


# ---------------------------------------------------------------------------- the read path stays light
def test_the_read_path_never_imports_the_mcp_sdk(stores):
    served, _ = stores
    probe = ("import sys; from doxa.cli import main; main(); "
             "print(sorted(m for m in sys.modules if m.split('.')[0] in "
             "{'mcp', 'mcp_types', 'starlette', 'uvicorn', 'httpx2', 'typer'}), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", probe, "belief", "maya.diet", "--db", served, "--json"],
                          capture_output=True, text=True, timeout=BOUND_S)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["question"] == "maya.diet"
    assert done.stderr.strip().splitlines()[-1] == "[]"
