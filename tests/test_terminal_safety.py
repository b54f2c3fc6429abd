"""What reaches a terminal, and how a command ends (issue 34: items 5, 8, 9).

Item 5: a message, question, option or instruction text may hold characters a terminal obeys
(``\\x1b[2J`` clears the screen, U+202E reverses the line): every human-readable output shows
them escaped; ``--json`` keeps the exact text. Items 8 and 9: an argument or standard input that
is not UTF-8, a huge number, a directory or a symbolic-link loop where a file belongs, an
output the locale cannot encode: each ends with one clear line, never a traceback or an
"internal error", on the fast path of `doxa belief` as on every other command.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import subprocess
import sys
import unicodedata

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import doxa
import records as R
from doxa.cli import common, entry
from doxa.cli.main import app
from doxa.cli.terminal import json_safe, printable
from doxa.data.errors import IngestError

ENTRY = [sys.executable, "-c", "from doxa.cli import main; main()"]
#: The categories a terminal acts on or hides: controls, format (bidi, zero-width), separators, surrogates.
UNSAFE = {"Cc", "Cf", "Zl", "Zp", "Cs"}
ATTACK = "\x1b[2J\x1b[H\x1b[32m→ maya.diet: vegetarian (0.99): act on it\u202e"
TRICKY = ["\x1b[2J", "\x1b]0;title\x07", "\x9b31m", "\r", "\n", "\t", "\x00", "\x7f", "\u202e", "\u2066",
          "\u200b", "\u200f", "\u061c", "\u2028", "\ufeff", "\U000e0041", "[bold", "[/]", "\\x1b", "é→👍"]
#: Any text, with terminal controls mixed in often.
TEXT = st.lists(st.one_of(st.text(max_size=6), st.sampled_from(TRICKY)), min_size=1, max_size=5).map("".join)

_counter = itertools.count()


def unsafe_in(text: str, keep: str = "\n") -> list[str]:
    return [c for c in text if c not in keep and unicodedata.category(c) in UNSAFE]


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"DOXA_DEBUG": "1"})


# ---------------------------------------------------------------------------- the sanitiser
def test_printable_escapes_every_control_format_and_separator_character():
    unsafe = [chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) in UNSAFE]
    assert len(unsafe) > 2000  # C0, C1, bidi, tags, surrogates
    shown = printable("".join(unsafe))
    assert unsafe_in(shown, keep="") == []
    assert printable("\x1b[2J\u202e\n\t\udcff\U000e0041") == "\\x1b[2J\\u202e\\n\\t\\udcff\\U000e0041"
    assert printable("a\n\tb\x1b", multiline=True) == "a\n\tb\\x1b"  # a document keeps its lines
    plain = "Maya é → 👍 [bold] C:\\path 日本語 \u00a0"
    assert printable(plain) == plain


def test_json_safe_escapes_what_json_leaves_raw_and_parses_back_to_the_exact_text():
    text = "".join(TRICKY) + "\u0085\U000e007f"
    serialised = json_safe(json.dumps({"text": text}, ensure_ascii=False))
    assert unsafe_in(serialised, keep="") == []
    assert json.loads(serialised) == {"text": text}
    assert "é→👍" in serialised  # only the unsafe characters are escaped


def test_error_and_warning_lines_show_user_text_escaped(capsys, monkeypatch):
    monkeypatch.setattr(common, "_json_mode", False)  # human lines, whatever a command before left set
    with pytest.raises(SystemExit):
        common.fail(f"no question {ATTACK}\n  second line")
    common.warn(f"odd text {ATTACK}")
    err = capsys.readouterr().err
    assert unsafe_in(err) == []
    assert "\\x1b[2J" in err and "\\u202e" in err and "\n  second line" in err  # doxa's own lines stay lines


# ---------------------------------------------------------------------------- every human output
def _attack_store(path: str, text: str, question: str, option: str, instruction: str) -> list[str]:
    """A store whose free texts are the given ones; the options it took (an odd option may be refused)."""
    def records(options):
        return [R.subject("fz", "Fz"), R.source("src", ["person", "self", "chat"]),
                R.question("fz.q", options, kind="thing", subject="fz", text=f"Q {question}"),
                R.message("m1", "src", "2026-01-01", f"peanut {text}"),
                R.reading("m1", "fz.q", {options[0]: 0.7, options[1]: 0.3}),
                R.instruction("i1", f"I {instruction}", "2026-01-02", subject="fz")]

    with doxa.open(path) as mem:
        options = [option, "other"] if option.strip() and option.strip() != "other" else ["yes", "no"]
        try:
            mem.ingest(records(options))
        except IngestError:
            options = ["yes", "no"]
            mem.ingest(records(options))  # the free texts themselves are always taken
        kept = mem.store.question("fz.q")
        assert kept["text"] == f"Q {question}"  # verbatim
    return options


def _human_commands(db: str, text: str, options: list[str], tmp_path) -> list[list[str]]:
    doc = tmp_path / f"instructions-{next(_counter)}.txt"
    doc.write_text(f"Organize carefully.\n{text}\n", encoding="utf-8")
    return [["belief", "fz.q"], ["beliefs"], ["beliefs", "--uncertain"], ["explain", "fz.q"],
            ["search", "peanut"], ["context", "Fz"], ["ops"],
            ["ask", "peanut for Fz?", "--subject", "fz", "--options", "a,b"],
            ["explain", f"fz.{text}"], ["correct", "fz.q", options[0]], ["reject", "fz.q", options[1]],
            ["instruct", "fz", f"I {text}"], ["organizer-instructions", "set", str(doc)],
            ["organizer-instructions", "show"], ["organizer-instructions", "history"],
            ["organizer-instructions", "diff", "1", "2"]]


def test_no_human_output_carries_a_terminal_control_whatever_the_store_holds(tmp_path, monkeypatch):
    for name in ("DOXA_READER_URL", "DOXA_ORGANIZER_URL"):
        monkeypatch.delenv(name, raising=False)

    @settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow],
              phases=(Phase.explicit, Phase.reuse, Phase.generate))  # no shrinking: seconds an example
    @given(text=TEXT, question=TEXT, option=TEXT, instruction=TEXT)
    def outputs(text, question, option, instruction):
        db = str(tmp_path / f"t-{next(_counter)}.duckdb")
        options = _attack_store(db, text, question, option, instruction)
        for args in _human_commands(db, text, options, tmp_path):
            result = invoke(*args, "--db", db)
            assert result.exit_code in (0, 1, 2), (args, result.output)
            keep = "\n\t" if args[0] == "organizer-instructions" else "\n"  # a document keeps its tabs
            assert unsafe_in(result.stdout, keep) == [], (args, result.stdout)
            assert unsafe_in(result.stderr) == [], (args, result.stderr)

    outputs()


def test_the_reported_attack_prints_escaped_and_json_keeps_it(tmp_path):
    db = str(tmp_path / "a.duckdb")
    _attack_store(db, ATTACK, f"What does Maya eat? {ATTACK}", "veg\u202eetarian", ATTACK)
    for args in (["belief", "fz.q"], ["explain", "fz.q"], ["search", "peanut"], ["context", "Fz"]):
        out = invoke(*args, "--db", db).stdout
        assert "\x1b" not in out and "\u202e" not in out, args
        assert "\\x1b[2J" in out, args
    answer = json.loads(invoke("belief", "fz.q", "--db", db, "--json").stdout)
    assert answer["text"] == f"Q What does Maya eat? {ATTACK}"  # the exact text
    raw = invoke("search", "peanut", "--db", db, "--json").stdout
    assert unsafe_in(raw) == [] and json.loads(raw)["hits"][0]["text"] == f"peanut {ATTACK}"


# ---------------------------------------------------------------------------- how a command ends
@pytest.fixture
def store(tmp_path, small_records) -> str:
    path = str(tmp_path / "doxa.duckdb")
    with doxa.open(path) as mem:
        mem.ingest(small_records)
    return path


def _run(args: list, stdin: bytes = b"", **env) -> subprocess.CompletedProcess:
    return subprocess.run(ENTRY + args, input=stdin, capture_output=True, timeout=120,
                          env={**os.environ, **env})


def _clean(done) -> str:
    out = done.stdout.decode("utf-8", "replace") + done.stderr.decode("utf-8", "replace")
    assert "Traceback" not in out and "internal error" not in out, out
    return out


def test_an_argument_that_is_not_utf8_is_named_on_the_fast_path_and_in_typer(store):
    fast = _run([b"belief", b"maya.\xff", b"--db", store.encode()])
    assert fast.returncode == 2
    assert "argument 2 is not valid UTF-8: maya.\\xff" in _clean(fast)
    typed = _run([b"beliefs", b"--subject", b"\xe9", b"--db", store.encode(), b"--json"])
    assert typed.returncode == 2
    assert json.loads(typed.stderr)["error"].startswith("argument 3 is not valid UTF-8: \\xe9")


def test_standard_input_that_is_not_utf8_is_refused_with_the_fix_under_any_locale(store):
    strict = {"LC_ALL": "C", "PYTHONIOENCODING": "ascii:strict"}
    for args in (["ingest", "-"], ["remember", "--file", "-"], ["organizer-instructions", "set", "-"]):
        done = _run([*args, "--db", store], b'{"text": "caf\xe9"}\n', **strict)
        assert done.returncode == 1, args
        assert "standard input is not UTF-8 (byte 0xe9" in _clean(done) and "iconv" in done.stderr.decode()
    utf8 = R.to_lines([R.subject("zoé", "Zoé")])[0].encode("utf-8")  # UTF-8 is read as such, whatever the locale
    assert _run(["ingest", "-", "--db", store], utf8 + b"\n", **strict).returncode == 0


def test_output_the_locale_cannot_encode_is_written_escaped(store):
    done = _run(["belief", "maya.diet", "--db", store], PYTHONIOENCODING="ascii:strict")
    assert done.returncode == 0
    assert "\\u2192" in _clean(done)  # the arrow of the verdict line


def test_a_directory_or_a_link_loop_where_a_file_belongs_is_one_line(store, tmp_path):
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    for args in (["belief", "maya.diet", "--db", str(tmp_path)], ["belief", "maya.diet", "--db", str(tmp_path / "loop1")],
                 ["ingest", str(tmp_path / "loop1"), "--db", store]):
        done = _run(args)
        assert done.returncode in (1, 2), args
        assert done.stderr.decode().startswith("Error: "), args
        _clean(done)


def test_the_handler_maps_what_the_system_raises_to_one_line(capsys):
    cases = [(IsADirectoryError(21, "Is a directory", "/tmp/x"), "cannot open /tmp/x: Is a directory: give a file"),
             (OSError(40, "Too many levels of symbolic links", "loop"), "cannot open loop: Too many levels"),
             (PermissionError(13, "Permission denied", "s.duckdb"), "check its permissions"),
             (RecursionError("maximum recursion depth exceeded"), "nested too deeply"),
             (MemoryError(), "out of memory")]
    for err, says in cases:
        with pytest.raises(SystemExit) as stop:
            common.report_uncaught(err, False)
        assert stop.value.code == 1
        message = capsys.readouterr().err
        assert says in message and "internal error" not in message, (err, message)
    with pytest.raises(SystemExit):
        common.report_uncaught(ZeroDivisionError("x"), False)
    assert "internal error" in capsys.readouterr().err  # anything unforeseen is still called a bug


#: Arguments that once reached a traceback or an internal error, and their neighbours.
ODD_ARGS = ["1e999999", "-1e999999", "nan", "inf", "99999999999999999999", "-99999999999999999999", "0", "",
            "\udcff", "maya.\udce9", "caf\udce9.duckdb", "--json", "--limit", "--act-at", "--at", "--subject",
            "maya.diet", "-", "2026-13-45"]


def test_no_argument_and_no_input_ends_in_a_traceback_or_an_internal_error(store, tmp_path, monkeypatch, capsys):
    """In-process through the console entry point itself (doxa.cli.entry.run), fast path included."""
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    (tmp_path / "not-a-store").write_text("hello", encoding="utf-8")
    paths = [store, str(tmp_path), str(tmp_path / "loop1"), str(tmp_path / "missing.duckdb"),
             str(tmp_path / "not-a-store")]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DOXA_DB", str(tmp_path / "default.duckdb"))
    for name in ("DOXA_READER_URL", "DOXA_ORGANIZER_URL", "DOXA_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    commands = st.sampled_from([["belief"], ["belief", "maya.diet"], ["beliefs"], ["explain"], ["search"],
                                ["context"], ["ingest"], ["init"], ["ops"], ["organize"], ["remember", "--file"],
                                ["organizer-instructions", "set"], ["organizer-instructions", "show", "--version"]])
    option = st.sampled_from(["--limit", "--act-at", "--at", "--subject", "--db", "--version"])
    value = st.one_of(st.sampled_from(ODD_ARGS + paths),
                      st.binary(max_size=6).map(lambda b: b.decode("utf-8", "surrogateescape")))

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow],
              phases=(Phase.explicit, Phase.reuse, Phase.generate))  # no shrinking: seconds an example
    @given(command=commands, rest=st.lists(st.one_of(value, st.tuples(option, value).map(list)), max_size=3),
           db=st.sampled_from(paths), data=st.binary(max_size=20), as_json=st.booleans())
    def run(command, rest, db, data, as_json):
        argv = list(command)
        for item in rest:
            argv += item if isinstance(item, list) else [item]
        argv += ["--db", db] + (["--json"] if as_json else [])
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="latin-1"))
        try:
            entry.run(argv)
        except SystemExit as stop:
            assert stop.code in (None, 0, 1, 2), (argv, stop.code)
        finally:
            common.set_json_mode(False)
        captured = capsys.readouterr()
        out = captured.out + captured.err
        assert "Traceback" not in out and "internal error" not in out, (argv, out)

    run()
