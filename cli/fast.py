"""A start-up fast path for `doxa belief`, the command an agent calls once per question.

typer (with pydantic, which it uses to coerce arguments) costs ~0.2 s to import and
set up; `doxa belief` has a 0.5 s start-up budget. For the plain forms of `belief`
this parses the arguments with argparse and calls the very same function the typer
command calls; anything unusual (``--help``, a typo) goes to typer, which gives the
full help and error messages.
"""

from __future__ import annotations

import argparse


class _Refuse(Exception):
    pass


class _QuietParser(argparse.ArgumentParser):
    def error(self, message):  # hand every parse problem to typer, which explains it better
        raise _Refuse(message)


def try_fast_path(argv: list[str]) -> bool:
    if not argv or argv[0] != "belief" or any(a in ("--help", "-h") for a in argv):
        return False
    parser = _QuietParser(add_help=False)
    parser.add_argument("question")
    parser.add_argument("--at", default=None)
    parser.add_argument("--act-at", type=float, default=0.8)
    parser.add_argument("--db", default=None)
    parser.add_argument("--json", action="store_true", dest="as_json")
    try:
        args = parser.parse_args(argv[1:])
    except _Refuse:
        return False
    if not 0.0 <= args.act_at <= 1.0:
        return False
    from doxa.cli.common import set_json_mode, show_belief

    set_json_mode(args.as_json)
    show_belief(args.question, args.at, args.act_at, args.db, args.as_json)
    return True
