"""`doxa train` and `doxa calibration`.

Registered by :func:`register` from ``doxa.cli.main``. Importing this module costs
nothing: torch and pyro load inside `train` only, and `calibration` reads the
published report (numpy and matplotlib only).
"""

from __future__ import annotations

import sys
from typing import Optional

import typer

from doxa.cli.common import emit_json, fail, guarded, markup_safe, open_memory, parse_at
from doxa.cli.options import at_option, db_option, flag, json_option


def register(app: typer.Typer) -> None:
    app.command("train")(train)
    app.command("calibration")(calibration)


def train(
    db: Optional[str] = db_option(),
    as_json: bool = json_option(),
    at: Optional[str] = at_option("Train on evidence up to this time (ISO 8601)."),
    confusion: str = typer.Option("auto", "--confusion",
                                  help="Confusion matrices for biased sources: auto (fit both forms, keep the one "
                                       "that predicts held-out settlements better), on, off."),
    max_steps: int = typer.Option(3000, "--max-steps", min=10, help="Cap on SVI steps per fit."),
    learning_rate: float = typer.Option(0.05, "--learning-rate", min=1e-5, max=1.0, help="Adam step size."),
    folds: Optional[int] = typer.Option(
        None, "--folds", min=0,
        help="Held-out folds for the calibration predictions (0: in-sample; default 3, or 0 above 20,000 settlements)."),
    events_per_step: int = typer.Option(50_000, "--events-per-step", min=1000,
                                        help="Subsample questions so one step sees about this many events."),
    posterior_dir: Optional[str] = typer.Option(
        None, "--posterior-dir",
        help="Folder for v<N>.nc posterior draws, which several stores may share: each store writes into its own "
             "<stem>-<store id>/ subfolder of it (default: <db>.posterior/)."),
    seed: int = typer.Option(0, "--seed", help="Random seed."),
    dry_run: bool = flag(False, "--dry-run", "Fit and calibrate, but publish nothing."),
    progress: bool = flag(True, "--progress/--no-progress", "Progress bars on standard error."),
):
    """The nightly job: fit trust, base rates and change rates; calibrate; publish a new parameter version."""
    if confusion not in ("auto", "on", "off"):
        fail(f"--confusion must be auto, on or off, not {confusion!r}", 2)
    moment = parse_at(at)
    mem = open_memory(db)
    from doxa.inference.learn.fit import FitDiverged, NothingToFit
    from doxa.inference.learn.train import train as run_train

    options = {"confusion": confusion, "max_steps": max_steps, "learning_rate": learning_rate,
               "events_per_step": events_per_step}

    def loaded(evidence) -> None:
        # on standard error, also with --json: a person or a supervisor sees the store is free
        print(f"loaded {evidence.n_readings} readings and {len(evidence.settle_q)} settlements; fitting "
              "(the store stays free for reads and ingests until the version is published)",
              file=sys.stderr, flush=True)

    try:
        # guarded: the store is first opened here (a file that is not a doxa store is said so)
        result = guarded(lambda: run_train(mem.store, at=moment, fit_options=options, folds=folds,
                                           posterior_dir=posterior_dir, publish=not dry_run, seed=seed,
                                           progress=progress and not as_json, on_loaded=loaded))
    except NothingToFit as err:
        fail(str(err))
    except FitDiverged as err:
        fail(str(err))
    summary = result.summary()
    if as_json:
        emit_json(summary)
        return
    _print_train(summary, result)


def _print_train(summary: dict, result) -> None:
    from rich.console import Console

    from doxa.inference.learn.calibrate import markdown_table

    con = Console()
    version = f"published parameter version {summary['version']}" if summary["version"] else "dry run: nothing published"
    con.print(f"[bold]{version}[/] · {summary['n_readings']} readings, {summary['n_settlements']} settlements · "
              f"{summary['steps']} steps in {summary['fit_seconds']:.1f} s"
              + ("" if summary["converged"] else " [yellow](hit the step cap: not converged)[/]")
              + (" · confusion matrices on" if summary["confusion"] else ""))
    if summary.get("refit"):
        refit = summary["refit"]
        con.print(f"[yellow]the first fit diverged at step {refit['diverged_at_step']} ({refit['reason']}); "
                  f"fitted again from the start at learning rate {refit['learning_rate']:.3g}[/]")
    from doxa.inference.learn.choice import summary_line

    chosen = summary_line(summary.get("model_choice"))
    if chosen:
        con.print(chosen)
    report = result.document["diagnostics"]["calibration"]
    con.print(f"calibration map: {report['method']} (fitted on {report['n']} settlements, "
              f"{'held-out' if report.get('out_of_sample', True) else 'in-sample'} predictions)")
    if report.get("cv_log_loss"):
        se = report.get("cv_se") or {}
        con.print("  held-out log-loss (isotonic must win by more than one standard error): " + ", ".join(
            f"{m} {v:.4f}" + (f" (+{v - min(report['cv_log_loss'].values()):.4f} ± {se[m]:.4f})" if se.get(m) else "")
            for m, v in report["cv_log_loss"].items()))
    con.print(markdown_table(report))
    if summary["moved"]:
        con.print("moved most since the previous version:")
        for m in summary["moved"]:
            con.print(f"  {m['what']:<20} {markup_safe(m['name']):<48} {m['before']:.3g} → {m['after']:.3g}")
    if summary["posterior"]:
        con.print(f"posterior draws: {summary['posterior']}")
    kept = summary.get("kept_states")
    if kept:
        con.print(f"kept filter states: {kept['written']:,} written"
                  + (f", {kept['refreshed']:,} recomputed for evidence ingested during the fit" if kept["refreshed"]
                     else ""))


def calibration(
    db: Optional[str] = db_option(),
    as_json: bool = json_option(),
    version: Optional[int] = typer.Option(None, "--version", help="Parameter version (default: the newest)."),
    plot: Optional[str] = typer.Option(None, "--plot", help="Write the reliability diagram to this PNG file."),
):
    """Stated confidence against settled outcomes: ECE, Brier, log-loss and a reliability diagram."""
    mem = open_memory(db)
    store = mem.store
    if version is None:
        version, body = guarded(store.latest_params)  # the store is first opened here
        if body is None:
            fail("no parameter version yet: run `doxa train` first (it measures calibration on held-out settlements)")
    else:
        body = guarded(lambda: store.params_body(version))
    report = (body.get("diagnostics") or {}).get("calibration")
    if not report:
        fail(f"parameter version {version} has no calibration report: publish one with `doxa train`")
    from doxa.inference.learn.calibrate import markdown_table, plot_reliability, reliability_markdown

    if plot:
        plot_reliability(report, plot, title=f"doxa params v{version}")
    if as_json:
        emit_json({"version": version, **report, "plot": plot})
        return
    print(f"Calibration of parameter version {version}: {report['n']} settlements, each scored with the belief "
          f"just before it ({'held-out folds' if report.get('out_of_sample', True) else 'in-sample'}); "
          f"map: {report['method']}.")
    print(markdown_table(report))
    print()
    print(reliability_markdown(report))
    if plot:
        print(f"\nReliability diagram: {plot}")
