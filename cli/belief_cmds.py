"""The memory's own verbs: `init`, `ingest` (records in), `belief`, `beliefs`, `explain` (beliefs out), `demo`.

Registered by cli/main.py through :func:`register`; `doxa belief` itself usually runs through the
start-up fast path (cli/fast.py), which calls the same :func:`~doxa.cli.common.show_belief`.
"""

from __future__ import annotations

from typing import Optional

import typer

from doxa.cli import feedback_cmds
from doxa.cli.common import emit_json, guarded, markup_safe as _e, memory_at, open_memory, show_belief, utf8_input, \
    warn
from doxa.cli.console import console
from doxa.cli.options import AtOption, DbOption, JsonOption, act_at_option, db_option, flag, limit_option
from doxa.cli.terminal import printable


def register(app: typer.Typer) -> None:
    for command in (init, ingest, belief, beliefs, explain, demo):
        app.command()(command)


def _fmt_p(p: float) -> str:
    return f"{p:.2f}"


def init(db: Optional[str] = DbOption, as_json: bool = JsonOption):
    """Create an empty store (nothing happens to an existing one)."""
    mem = open_memory(db, must_exist=False)
    counts = mem.store.counts()
    if as_json:
        emit_json({"db": mem.store.path, "created": True, "counts": counts})
    else:
        typer.echo(f"Store ready at {printable(mem.store.path)}")


def ingest(
    file: str = typer.Argument(..., help="JSON Lines file (records: docs/formats.md), or - for standard input."),
    db: Optional[str] = DbOption,
    as_json: bool = JsonOption,
):
    """Ingest JSON Lines records: the whole file or nothing."""
    mem = open_memory(db, must_exist=False)
    with utf8_input(file):
        added = guarded(lambda: mem.ingest_file(file))
    warnings = mem.store.last_ingest_warnings
    if as_json:
        emit_json({"file": file, "added": added, **({"warnings": warnings} if warnings else {})})
        return
    for warning in warnings:
        warn(warning)
    if not added:
        typer.echo("Nothing new: every record was already stored.")
        return
    updated = added.pop("subjects_updated", 0)
    parts = [f"{n} {table}" for table, n in added.items()]
    if updated:
        parts.append(f"{updated} subject(s) updated (aliases added)")
    typer.echo("Ingested: " + ", ".join(parts))


def _belief_table(beliefs, title: str):
    from rich.table import Table

    table = Table(title=title, show_lines=False)
    table.add_column("question")
    table.add_column("answers")
    table.add_column("top")
    table.add_column("act?")
    for b in beliefs:
        answers = "  ".join(f"{_e(o)} {_fmt_p(p)}" for o, p in sorted(b.answers.items(), key=lambda kv: -kv[1]))
        verdict = "[green]act[/]" if b.act else "[yellow]ask[/]"
        table.add_row(_e(b.question), answers, f"{_e(b.top)} ({_fmt_p(b.p_top)})" if b.top else "—", verdict)
    return table


def belief(
    question: str = typer.Argument(..., help="Question id, e.g. maya.diet."),
    at: Optional[str] = AtOption,
    act_at: float = act_at_option(),
    db: Optional[str] = DbOption,
    as_json: bool = JsonOption,
):
    """The probability of every answer, flagged when too uncertain to act on."""
    show_belief(question, at, act_at, db, as_json)


def beliefs(
    subject: Optional[str] = typer.Option(None, "--subject", help="Only this subject's questions."),
    at: Optional[str] = AtOption,
    act_at: float = act_at_option("Act threshold."),
    limit: int = limit_option(0, min=0, help="Show at most this many (0: all)."),
    uncertain: bool = flag(False, "--uncertain",
                           help="Only beliefs to ask about before acting (below --act-at, or an instruction "
                                "resting on another answer), most useful first."),
    db: Optional[str] = DbOption,
    as_json: bool = JsonOption,
):
    """Every belief (or one subject's); --json prints a list of `belief --json` objects."""
    from doxa.inference.agent import tools

    mem, moment = memory_at(db, at)
    if uncertain:
        feedback_cmds.show_uncertain(guarded(lambda: tools.uncertain(mem, subject, moment, act_at, limit)), as_json)
        return
    if as_json:
        emit_json(guarded(lambda: tools.beliefs(mem, subject, moment, act_at, limit)))
        return
    found = guarded(lambda: mem.beliefs(subject, moment, act_at=act_at))
    if limit:
        found = found[:limit]
    console().print(_belief_table(found, f"{len(found)} belief(s)" + (f" about {_e(subject)}" if subject else "")))


def explain(
    question: str = typer.Argument(..., help="Question id."),
    at: Optional[str] = AtOption,
    db: Optional[str] = DbOption,
    as_json: bool = JsonOption,
):
    """The belief term by term: each message, its source and trust, its weight left after decay."""
    mem, moment = memory_at(db, at)
    if as_json:
        from doxa.inference.agent import tools

        emit_json(guarded(lambda: tools.explain(mem, question, moment)))
        return
    render_explanation(guarded(lambda: mem.explain(question, moment)))


def render_explanation(ex) -> None:
    b = ex.belief
    con = console()
    con.print(f"[bold]{_e(b.question)}[/]: {_e(b.text)}")
    con.print("  " + "  ".join(f"{_e(o)} [bold]{_fmt_p(p)}[/]"
                               for o, p in sorted(b.answers.items(), key=lambda kv: -kv[1]))
              + ("   [green]act[/]" if b.act else "   [yellow]too uncertain: ask[/]"))
    half = f"half-life {ex.half_life_days:.0f} days" if ex.half_life_days else "no change"
    con.print("  prior: " + ", ".join(f"{_e(o)} {_fmt_p(p)}" for o, p in ex.prior.items()) + f" · {half}")
    con.print(f"  evidence, scored for [bold]{_e(b.top)}[/]:")
    for t in ex.terms:
        reader = ", ".join(f"{_e(o)} {p:.2f}" for o, p in t.reader_probs.items() if p >= 0.05) or "nothing"
        extras = [f"{name} {v:.2f}" for name, v in (("unclear", t.unclear), ("unrelated", t.unrelated),
                                                    ("one-off", t.one_off), ("changed", t.changed)) if v >= 0.2]
        text = t.text if len(t.text) <= 70 else t.text[:69] + "…"
        trust = f"trust {t.trust:.2f} ({_e(t.trust_from)})" if t.trust is not None else ""
        style = "dim" if t.ignored else ""
        con.print(f"  [{style or 'bold'}]{t.sent_at[:10]}[/] {_e(t.source)} [dim]{_e(t.source_path)}[/] {trust}")
        con.print(f"      [{style or 'italic'}]\"{_e(text)}\"[/]")
        if t.ignored:
            con.print(f"      [dim]ignored: {_e(t.ignored)}[/]")
        else:
            con.print(f"      reader: {reader}" + (f" · {', '.join(extras)}" if extras else "")
                      + f" → LLR {t.llr_top:+.2f} at its time, weight now {t.weight_left:.2f}")
    for s in ex.settlements:
        con.print(f"  settled: {_e(s['answer'])} at {s['settled_at']:%Y-%m-%d} ({s['how']})")
    for r in ex.rejections:
        con.print(f"  rejected by the user: {_e(r['answer'])} (reads 0)")
    con.print("  [dim]LLR: log-likelihood ratio of the message for the top answer against the others, at its time;"
              " weight now: exp(-λ·age), how much of it is left after decay.[/]")


def demo(
    db: Optional[str] = db_option("Where to write the demo store (default: ./doxa-demo.duckdb; "
                                  "only a store the demo made is replaced)."),
    as_json: bool = JsonOption,
):
    """The Maya example end to end, in its own store (never one of yours)."""
    from doxa.data.demo import DEMO_NOW, demo_records, open_demo_store
    from doxa.data.times import parse_time
    from doxa.inference.read.memory import Memory

    mem = Memory(guarded(lambda: open_demo_store(db)))
    path = mem.store.path
    added = mem.ingest(demo_records())
    now = parse_time(DEMO_NOW)
    found = mem.beliefs(at=now)
    explanations = [mem.explain(q, now) for q in ("maya.diet", "maya.favourite_flower", "maya.home",
                                                   "maya.likes_loud_places")]
    instructions = mem.store.instructions(["maya"])
    if as_json:
        emit_json({"db": path, "at": now, "added": added, "beliefs": [b.to_dict() for b in found],
                   "explanations": [e.to_dict() for e in explanations], "instructions": instructions})
        return
    con = console()
    con.rule("[bold]doxa demo[/]: what the assistant knows about Maya")
    con.print(f"Fresh store at {_e(path)}: " + ", ".join(f"{n} {t}" for t, n in added.items()))
    con.print(f"Beliefs as of {now:%Y-%m-%d} (default parameters: nothing trained yet)\n")
    con.print(_belief_table(found, "every belief"))
    for ex in explanations:
        con.print()
        render_explanation(ex)
    con.print()
    for ins in instructions:
        con.print(f"[bold]Instruction[/] (from you, {ins['given_at']:%Y-%m-%d}): {_e(ins['text'])} — it stands;"
                  " evidence never outranks you.")
    con.print(f"\n[dim]Next, on this store: `doxa context \"book Maya's birthday dinner\" --at 2026-12-01 --db {_e(path)}`, "
              f"`doxa search peanut --db {_e(path)}`; on your own records: `doxa ingest FILE` (docs/formats.md).[/]")
