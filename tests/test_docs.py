"""The documentation keeps up with the code.

- Every command of the `doxa` app is shown in README.md, and has a section in
  docs/formats.md naming each of its options; every record type that ingest knows (the
  pydantic models that data/records.py lists: data/models.py and the organizer's operation records) has a section
  in docs/formats.md naming each of its fields. Both lists are read from the code
  itself, so a new command, option, record type or field without documentation fails.
- Every relative link in README.md and docs/*.md resolves to a file inside the
  repository (and, for a link into a Markdown page, to one of its headings).
- Nothing a user reads points outside the repository (../shared, FORMATS.md, DESIGN.md).
- examples/maya.jsonl holds exactly the demo's records.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import click
import pytest
import typer

from doxa.cli.main import app
from doxa.data import records
from doxa.data.demo import demo_records

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
FORMATS = ROOT / "docs" / "formats.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
_LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)\)|!\[[^\]\n]*\]\(([^)\s]+)\)")


def command_group() -> click.Group:
    return typer.main.get_command(app)


def command_names() -> list[str]:
    return sorted(name for name, command in command_group().commands.items() if not command.hidden)


def record_types() -> list[str]:
    return sorted(records.RECORD_TYPES)


def section(text: str, heading: str) -> str | None:
    """The text under the `### heading` line, up to the next heading of level 2 or 3."""
    match = re.search(rf"^### {re.escape(heading)}[ \t]*$(.*?)(?=^##+ |\Z)", text, re.S | re.M)
    return match.group(1) if match else None


def field_names(record_type: str) -> list[str]:
    fields = records.RECORD_TYPES[record_type].model_fields
    return sorted(info.alias or name for name, info in fields.items())


def option_names(command: str) -> list[str]:
    params = command_group().commands[command].params
    return sorted(opt for p in params if isinstance(p, click.Option)
                  for opt in [*p.opts, *p.secondary_opts] if opt.startswith("--") and opt != "--help")


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def relative_links(page: Path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    targets = [a or b for a, b in _LINK.findall(text)]
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


# ---------------------------------------------------------------------------- commands
def test_the_app_has_the_core_commands():
    assert {"init", "ingest", "belief", "beliefs", "explain", "demo"} <= set(command_names())


@pytest.mark.parametrize("command", command_names())
def test_every_command_appears_in_the_readme(command):
    assert README.exists(), "README.md is missing: it documents every `doxa` command"
    text = README.read_text(encoding="utf-8")
    # `doxa belief` must not be satisfied by `doxa beliefs`
    assert re.search(rf"\bdoxa {re.escape(command)}(?![\w-])", text), (
        f"README.md never shows `doxa {command}`: add it with what it does")


@pytest.mark.parametrize("command", command_names())
def test_every_command_and_option_is_in_the_formats_page(command):
    body = section(FORMATS.read_text(encoding="utf-8"), f"`doxa {command}`")
    assert body is not None, f"docs/formats.md has no section \"### `doxa {command}`\": document the command"
    missing = [opt for opt in option_names(command) if not re.search(rf"`{re.escape(opt)}(?![\w-])", body)]
    assert not missing, f"docs/formats.md, `doxa {command}`: options {missing} are not documented"


# ---------------------------------------------------------------------------- records
def test_ingest_knows_the_plain_and_the_organizer_record_types():
    assert {"subject", "source", "question", "message", "reading", "settlement",
            "question_merge", "question_split", "undo"} <= set(record_types())


@pytest.mark.parametrize("record_type", record_types())
def test_every_record_type_and_field_is_in_the_formats_page(record_type):
    body = section(FORMATS.read_text(encoding="utf-8"), f"`{record_type}`")
    assert body is not None, f"docs/formats.md has no section \"### `{record_type}`\": document the record type"
    missing = [f for f in field_names(record_type) if f"| `{f}` |" not in body]
    assert not missing, f"docs/formats.md, `{record_type}`: fields {missing} have no row in its table"
    assert re.search(rf'"type": ?"{re.escape(record_type)}"', body), (
        f"docs/formats.md, `{record_type}`: show an example record")


@pytest.mark.parametrize("record_type", record_types())
def test_the_example_record_of_each_type_is_valid(record_type):
    """The first example line of each section validates as that record type."""
    body = section(FORMATS.read_text(encoding="utf-8"), f"`{record_type}`")
    example = re.search(r"^```json\n(.*?)\n", body, re.M)
    assert example, f"docs/formats.md, `{record_type}`: no ```json example"
    record = records.record_adapter.validate_python(json.loads(example.group(1)))
    assert record.type == record_type


def test_the_section_finder_and_the_checks_can_fail():
    text = "## A\n### `x`\n| `a` |\n### `y`\nnothing\n## B\n"
    assert "| `a` |" in section(text, "`x`") and "| `a` |" not in section(text, "`y`")
    assert section(text, "`z`") is None


# ---------------------------------------------------------------------------- links
@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves_inside_the_repository(page):
    broken = []
    for target in relative_links(page):
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.is_relative_to(ROOT) or not resolved.exists():
            broken.append(f"{target} (no such file in the repository)")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target} (no heading #{anchor} in {resolved.name})")
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {broken}"


def test_the_link_finder_sees_links_and_skips_web_addresses_and_code(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("[a](x.md#top) ![img](pic.png) [w](https://example.org)\n```\n[c](in-code.md)\n```\n")
    assert relative_links(page) == ["x.md#top", "pic.png"]
    assert slug("JSON Lines for `doxa ingest`") == "json-lines-for-doxa-ingest"
    assert slug("The organizer's records") == "the-organizers-records"


# ---------------------------------------------------------------------------- no outside pointers
_OUTSIDE = re.compile(r"\.\./shared|/work/|\bFORMATS\.md\b|\bDESIGN\.md\b")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_points_outside_the_repository(page):
    found = _OUTSIDE.findall(page.read_text(encoding="utf-8"))
    assert not found, f"{page.relative_to(ROOT)} points at {found}: point at docs/formats.md or docs/design.md"


def test_no_help_text_points_outside_the_repository():
    texts = [command_group().help or ""]
    for name, command in command_group().commands.items():
        texts += [command.help or ""] + [getattr(p, "help", None) or "" for p in command.params]
    found = [t for t in texts if _OUTSIDE.search(t)]
    assert not found, f"help texts point outside the repository: {found}"


# ---------------------------------------------------------------------------- examples
def test_the_maya_example_file_is_the_demo():
    lines = (ROOT / "examples" / "maya.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines if line.strip()] == demo_records(), (
        "examples/maya.jsonl differs from data/demo.py: regenerate it from demo_records()")
