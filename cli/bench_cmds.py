"""`doxa bench`: the generated-world benchmark, every system side by side.

Registered by cli/main.py; heavy libraries (matplotlib, pandas, crowd-kit, torch)
load inside the command only.
"""

from __future__ import annotations

from typing import Optional

import typer

from doxa.cli.common import emit_json, fail, markup_safe
from doxa.cli.options import db_option, flag, json_option


def register(app: typer.Typer) -> None:
    app.command(name="bench")(bench)


def bench(
    world: Optional[str] = typer.Option(None, "--world", help="World config JSON (default: the `default` preset; "
                                        "`quick`, `tiny`, `campaign`, `open` name presets too)."),
    quick: bool = flag(False, "--quick", "The small `quick` world and a light schedule (≈ 1 minute)."),
    out: str = typer.Option("bench-out", "--out", help="Folder for report.md, results.json and the plots."),
    systems: Optional[str] = typer.Option(None, "--systems", help="Comma-separated subset of systems to run."),
    checkpoints: Optional[int] = typer.Option(None, "--checkpoints", min=2, help="Evaluation times (default 10; 6 with --quick)."),
    train_steps: Optional[int] = typer.Option(None, "--train-steps", min=1, help="SVI steps per doxa-learned retraining."),
    retrain_every: Optional[int] = typer.Option(None, "--retrain-every", min=1,
                                                help="Retrain doxa-learned every N checkpoints (default: every checkpoint; once with --quick)."),
    folds: Optional[int] = typer.Option(None, "--folds", min=0,
                                        help="Held-out folds for each retraining's calibration map, as `doxa train "
                                        "--folds` (0: in-sample, twice as fast; default: the nightly job's rule, "
                                        "0 with --quick)."),
    db: Optional[str] = db_option("Keep the replayed store in this file (default: in memory; "
                                  "an existing file is refused)."),
    seed: Optional[int] = typer.Option(None, "--seed", min=0, help="Draw the world (and pick the attacked beliefs) "
                                       "with this seed instead of the config's."),
    as_json: bool = json_option("Machine-readable summary on standard output (an error is one JSON object on "
                                "standard error)."),
):
    """The generated-world benchmark: every system on the same stream, against the known truth."""
    from pathlib import Path

    from doxa.inference.evaluation.world import generate_world
    from doxa.inference.evaluation.world_config import WorldConfig, WorldConfigError
    from doxa.inference.evaluation import baselines
    from doxa.inference.evaluation import bench as harness
    from doxa.inference.evaluation.bench_report import write_report

    try:
        if world is None:
            config = WorldConfig.preset("quick" if quick else "default")
        elif Path(world).is_file():
            config = WorldConfig.load(world)
        else:
            config = WorldConfig.preset(world)
    except WorldConfigError as err:
        fail(f"--world: {err}", 2)
    if db is not None and db != ":memory:" and Path(db).exists():
        fail(f"--db {db} already exists: the bench replays a fresh world into it; pass a new path or delete it", 2)

    if seed is not None:
        config = config.with_overrides(seed=seed)
    settings = harness.BenchSettings.quick() if quick else harness.BenchSettings()
    if seed is not None:
        settings.seed = seed
    if systems:
        chosen = tuple(s.strip() for s in systems.split(",") if s.strip())
        unknown = [s for s in chosen if s not in baselines.ALL_SYSTEM_NAMES]
        if unknown:
            fail(f"--systems: unknown {unknown}; choose from {', '.join(baselines.ALL_SYSTEM_NAMES)}", 2)
        settings.systems = chosen
    if checkpoints is not None:
        settings.set_checkpoints(checkpoints)
    if retrain_every is not None:
        settings.retrain_at = tuple(range(retrain_every - 1, settings.checkpoints, retrain_every))
    if train_steps is not None:
        settings.train_steps = train_steps
    if folds is not None:
        settings.train_folds = folds

    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    err_console = Console(stderr=True)
    n_systems = len(settings.systems)
    if any(kind.open for kind in config.kinds) and settings.systems == baselines.SYSTEM_NAMES:
        n_systems += len(baselines.OPEN_SYSTEM_NAMES)  # the bench adds them on open questions
    total = 1 + 2 * settings.checkpoints + n_systems
    with Progress(TextColumn("[bold]bench[/]"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                  TimeElapsedColumn(), TextColumn("{task.description}"), console=err_console,
                  transient=True) as bar:
        task = bar.add_task(f"drawing world {config.name}", total=total)
        generated = generate_world(config)
        bar.advance(task)

        def tick(description: str, advance: float) -> None:
            bar.update(task, description=description, advance=advance)

        result = harness.run(generated, settings, db=db or ":memory:", progress=tick)
        tick("writing the report", 0)
        write_report(result, out)

    if as_json:
        emit_json(result.summary())
        return
    console = Console()
    if not console.is_terminal:  # piped: rich would squeeze the table into 80 columns
        console = Console(width=110)
    render_table(result, console)


def render_table(result, console) -> None:
    from rich.table import Table

    from doxa.inference.evaluation.bench_report import table_rows

    header, rows = table_rows(result)
    w = result.world
    table = Table(title=f"doxa bench — world {markup_safe(w['name'])}: {w['questions']} questions, "
                        f"{w['readings']} readings, "
                        f"{w['settlements']} settlements, {w['days']:.0f} days")
    for i, name in enumerate(header):
        table.add_column(name, justify="left" if i == 0 else "right", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    console.print(table)
    console.print("acc@80%: accuracy when the least certain 20% go to a person · AURC: area under the "
                  "risk–coverage curve (lower is better) · planted: median planted claims to flip a belief "
                  f"held at ≥ 0.9 (>{result.settings.get('planted_cap', 20)}: most held)", style="dim")
    render_open_table(result, console)
    converged = result.convergence_line()
    if converged:
        console.print(converged, style="dim" if result.convergence()["not_converged"] == 0 else "bold yellow")
    console.print(f"Report: {result.files[-2] if len(result.files) >= 2 else '(not written)'} "
                  f"({result.timings.get('total_s', 0):.0f} s)")


def render_open_table(result, console) -> None:
    """Open questions apart (a world with an open kind): each system on open and on closed questions."""
    from rich.table import Table

    from doxa.inference.evaluation.bench_report import open_table_rows

    table_data = open_table_rows(result)
    if table_data is None:
        return
    header, rows = table_data
    table = Table(title=f"open questions: {result.world.get('open_questions', 0)} questions, "
                        f"{result.world.get('values_added', 0)} values added over the run")
    for i, name in enumerate(header):
        table.add_column(name, justify="left" if i == 0 else "right", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    console.print(table)
    console.print("later value: the truth was listed after the question was created (fixed-options cannot name "
                  "it) · not yet named: the right top answer is `unlisted`", style="dim")
