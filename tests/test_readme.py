"""The README's examples run as written, and print what the README says they print.

Every ```bash, ```console and ```python block of README.md is run in document order in
one fresh temporary directory that holds a copy of examples/ (so `examples/maya.jsonl`
resolves as it does in a clone), with the virtual environment's bin first on PATH, no
$DOXA_DB and no reader configured. In docs/*.md only blocks marked by a line
``<!-- doxa:run -->`` right before the fence are run (each page in its own directory).

- ```bash: each command must exit 0; its output is not compared.
- ```console: ``$ command`` lines, each followed by the output the page shows. The
  command must exit 0, or non-zero where the shown output has a line starting with
  ``Error:``. The shown lines must appear in the real output in the same order, compared
  with whitespace collapsed (so line wrapping does not matter) and with durations
  (``21.8 s``, ``37 ms``, ``1 min``) matching any duration. A line ``…`` on its own
  stands for lines the page leaves out.
- ```python: run with the environment's Python; it must exit 0.

The two set-up commands of "Two commands" are skipped: they build the environment this
test already runs in, and CI runs exactly them (scripts/test.sh).

Run ``python tests/test_readme.py [PAGE.md]`` to print every command's real output.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BIN = Path(sys.executable).parent
SETUP_COMMANDS = {"bash scripts/setup.sh && .venv/bin/doxa demo", "bash scripts/test.sh"}
RUN_MARK = "<!-- doxa:run -->"
SHELL_LANGS = {"bash", "console", "sh", "shell"}
ELLIPSIS = {"…", "..."}
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
_DURATION = re.compile(r"\d+(?:\.\d+)?(?: ?(?:µs|ms|s|min|h)\b)")


@dataclass
class Step:
    lang: str
    command: str
    shown: list[str] = field(default_factory=list)
    line: int = 0

    @property
    def expects_failure(self) -> bool:
        return any(s.startswith("Error:") for s in self.shown)


def blocks(text: str, *, marked_only: bool) -> list[tuple[str, str, int]]:
    """(language, body, line number) of each fenced block to run."""
    found = []
    for match in _FENCE.finditer(text):
        lang = match.group(1).lower()
        if lang not in SHELL_LANGS | {"python"}:
            continue
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        if marked_only and before != RUN_MARK:
            continue
        found.append((lang, match.group(2), text.count("\n", 0, match.start()) + 2))
    return found


def _logical_lines(body: str, first_line: int) -> list[tuple[int, str]]:
    """Lines with backslash continuations joined, each with its line number."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for offset, raw in enumerate(body.split("\n")):
        if not pending:
            start = first_line + offset
        if raw.endswith("\\"):
            pending += raw[:-1] + " "
            continue
        out.append((start, pending + raw))
        pending = ""
    if pending:
        out.append((start, pending))
    return out


def steps(text: str, *, marked_only: bool = False) -> list[Step]:
    out: list[Step] = []
    for lang, body, first in blocks(text, marked_only=marked_only):
        if lang == "python":
            out.append(Step("python", body, line=first))
            continue
        for number, line in _logical_lines(body, first):
            if lang == "console":
                if line.startswith("$ "):
                    out.append(Step("console", line[2:].strip(), line=number))
                elif out and out[-1].lang == "console" and line.strip():
                    out[-1].shown.append(line)
            elif line.strip() and not line.lstrip().startswith("#"):
                out.append(Step("bash", line.strip(), line=number))
    return [s for s in out if s.command not in SETUP_COMMANDS]


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _pattern(segment: list[str]) -> re.Pattern:
    text = _collapse(" ".join(segment))
    pieces, last = [], 0
    for match in _DURATION.finditer(text):
        pieces.append(re.escape(text[last:match.start()]))
        pieces.append(_DURATION.pattern)
        last = match.end()
    pieces.append(re.escape(text[last:]))
    return re.compile("".join(pieces))


def missing_shown_lines(shown: list[str], output: str) -> list[str] | None:
    """None when every shown segment appears in ``output`` in order; else the first segment that does not."""
    segments: list[list[str]] = [[]]
    for line in shown:
        if line.strip() in ELLIPSIS:
            segments.append([])
        else:
            segments[-1].append(line)
    actual, at = _collapse(output), 0
    for segment in filter(None, segments):
        match = _pattern(segment).search(actual, at)
        if match is None:
            return segment
        at = match.end()
    return None


def _environment(workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DOXA_") and k not in {"VIRTUAL_ENV", "PYTHONPATH"}}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", COLUMNS="100", NO_COLOR="1",
               HOME=str(workdir), PYTHONIOENCODING="utf-8")
    env.pop("FORCE_COLOR", None)
    return env


def run_step(step: Step, workdir: Path) -> subprocess.CompletedProcess:
    argv = ([str(BIN / "python"), "-c", step.command] if step.lang == "python"
            else ["bash", "-c", step.command])
    return subprocess.run(argv, cwd=workdir, env=_environment(workdir), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=300)


def check_page(page: Path, workdir: Path, *, marked_only: bool) -> int:
    shutil.copytree(ROOT / "examples", workdir / "examples")
    todo = steps(page.read_text(encoding="utf-8"), marked_only=marked_only)
    for step in todo:
        result = run_step(step, workdir)
        where = f"{page.relative_to(ROOT)} line {step.line}: {step.command}"
        if step.expects_failure:
            assert result.returncode != 0, f"{where}\nshould fail, exited 0:\n{result.stdout}"
        else:
            assert result.returncode == 0, f"{where}\nexited {result.returncode}:\n{result.stdout}"
        gap = missing_shown_lines(step.shown, result.stdout)
        assert gap is None, ("{}\nthe page shows lines the command did not print:\n  {}\nit printed:\n{}"
                             .format(where, "\n  ".join(gap or []), result.stdout))
    return len(todo)


def marked_pages() -> list[Path]:
    return sorted(p for p in (ROOT / "docs").glob("*.md") if RUN_MARK in p.read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------- the tests
def test_the_readme_runs_as_written(tmp_path):
    assert check_page(README, tmp_path, marked_only=False) >= 15


@pytest.mark.parametrize("page", marked_pages(), ids=lambda p: p.name)
def test_marked_docs_blocks_run_as_written(page, tmp_path):
    assert check_page(page, tmp_path, marked_only=True) >= 1


def test_the_readme_shows_the_core_commands_with_their_output():
    shown = {s.command.split()[1] for s in steps(README.read_text(encoding="utf-8"))
             if s.lang == "console" and s.shown and s.command.startswith("doxa ")}
    assert {"init", "ingest", "belief", "explain", "context", "merge", "undo", "replay"} <= shown


def test_only_the_two_setup_commands_are_skipped():
    text = README.read_text(encoding="utf-8")
    every = [line for lang, body, first in blocks(text, marked_only=False) if lang in SHELL_LANGS
             for _, line in _logical_lines(body, first)]
    assert SETUP_COMMANDS <= {line.strip() for line in every}, "README lost one of its two set-up commands"


# The comparison itself: it must tolerate wrapping and timings and nothing else.
def test_shown_lines_match_across_wrapping_and_durations():
    output = "published parameter version 1 · 8057 readings · 504 steps in\n44.6 s\nposterior draws: v1.nc\n"
    assert missing_shown_lines(["published parameter version 1 · 8057 readings · 504 steps in 21.8 s"], output) is None
    assert missing_shown_lines(["published parameter version 1", "…", "posterior draws: v1.nc"], output) is None


def test_shown_lines_fail_on_a_changed_number_a_missing_line_or_the_wrong_order():
    output = "maya.diet: What does Maya eat?\n  eats fish 0.62\n  vegetarian 0.27\n"
    assert missing_shown_lines(["  eats fish 0.61"], output) == ["  eats fish 0.61"]
    assert missing_shown_lines(["  eats meat 0.11"], output) is not None
    assert missing_shown_lines(["vegetarian 0.27", "…", "eats fish 0.62"], output) == ["eats fish 0.62"]


def test_console_blocks_split_into_commands_and_their_output():
    page = ("```console\n$ doxa ingest examples/bad.jsonl\nError: refused\n  line 3: x\n"
            "$ doxa belief a \\\n  --at 2026-12-01\nq: text\n```\n\n```bash\n# a comment\n"
            "bash scripts/test.sh\ndoxa init   # an empty store\n```\n")
    found = steps(page)
    assert [(s.lang, s.command, s.expects_failure) for s in found] == [
        ("console", "doxa ingest examples/bad.jsonl", True),
        ("console", "doxa belief a    --at 2026-12-01", False),
        ("bash", "doxa init   # an empty store", False)]
    assert found[0].shown == ["Error: refused", "  line 3: x"]


if __name__ == "__main__":
    page = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else README
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(ROOT / "examples", Path(tmp) / "examples")
        for step in steps(page.read_text(encoding="utf-8"), marked_only=page != README):
            result = run_step(step, Path(tmp))
            print(f"$ {step.command}   [exit {result.returncode}]\n{result.stdout}")
