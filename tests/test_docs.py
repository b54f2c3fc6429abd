"""Every command of the `doxa` app is documented in README.md (as `doxa <command>`).

The command list is read from the typer app itself, so a new command without README
text fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

from doxa.cli.main import app

README = Path(__file__).resolve().parent.parent / "README.md"


def command_names() -> list[str]:
    group = typer.main.get_command(app)
    return sorted(name for name, command in group.commands.items() if not command.hidden)


def test_the_app_has_the_core_commands():
    assert {"init", "ingest", "belief", "beliefs", "explain", "demo"} <= set(command_names())


@pytest.mark.parametrize("command", command_names())
def test_every_command_appears_in_the_readme(command):
    assert README.exists(), "README.md is missing: it documents every `doxa` command"
    text = README.read_text(encoding="utf-8")
    # `doxa belief` must not be satisfied by `doxa beliefs`
    assert re.search(rf"\bdoxa {re.escape(command)}(?![\w-])", text), (
        f"README.md never shows `doxa {command}`: add it with what it does")
