"""A start-up fast path for `doxa belief`, the command an agent calls once per question.

typer (with pydantic, which it uses to coerce arguments) costs more to import and set up
than the whole read, and even argparse a tenth of what a belief kept beside the store costs
to compute (docs/measurements/2026-12-code-choices.md); `doxa belief` has a start-up budget measured against a bare
`python -c "import duckdb, numpy"`. So the plain forms of `belief` (one question, and
``--at``, ``--act-at``, ``--db``, ``--json``, as ``--opt value`` or ``--opt=value``) are read here
and go to the very same function the typer command calls; anything else (``--help``, a typo,
an option given twice, a value that is no number, an argument that is not UTF-8) goes to typer,
which gives the full help and error messages.
"""

from __future__ import annotations

from doxa.inference.read.params import DEFAULT_ACT_AT

_VALUED = ("--at", "--act-at", "--db")


def parse_belief_args(args: list[str]) -> dict | None:
    """``{"question", "at", "act_at", "db", "as_json"}`` for the plain forms, else None (typer's)."""
    found: dict = {}
    question = None
    if not all(_utf8(arg) for arg in args):
        return None
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, value = arg.partition("=")
        if arg == "--json":
            if "as_json" in found:
                return None
            found["as_json"] = True
        elif name in _VALUED:
            if not eq:
                if i + 1 >= len(args):
                    return None
                i += 1
                value = args[i]
            if name in found:
                return None
            found[name] = value
        elif arg.startswith("-") or question is not None:
            return None
        else:
            question = arg
        i += 1
    if question is None:
        return None
    try:
        act_at = float(found.get("--act-at", DEFAULT_ACT_AT))
    except ValueError:
        return None
    if not 0.0 <= act_at <= 1.0:
        return None
    return {"question": question, "at": found.get("--at"), "act_at": act_at, "db": found.get("--db"),
            "as_json": found.get("as_json", False)}


def _utf8(arg: str) -> bool:
    try:
        arg.encode("utf-8")
    except UnicodeEncodeError:  # a byte that is not UTF-8, kept by Python as a lone surrogate
        return False
    return True


def try_fast_path(argv: list[str]) -> bool:
    if not argv or argv[0] != "belief":
        return False
    args = parse_belief_args(argv[1:])
    if args is None:
        return False
    from doxa.cli.common import set_json_mode, show_belief

    set_json_mode(args["as_json"])
    show_belief(args["question"], args["at"], args["act_at"], args["db"], args["as_json"])
    return True
