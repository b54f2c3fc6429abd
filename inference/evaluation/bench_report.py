"""The report of `doxa bench`: results.json, report.md and the plots, from one :class:`BenchResult`.

:func:`write_report` writes the files; :func:`table_rows` is the summary table the CLI
prints; :func:`render_markdown` is report.md (the table, the planted-claim resistance per
scenario, calibration, learning speed, convergence and time). Matplotlib loads only when
the plots are drawn.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from . import baselines
from .bench import BenchResult


def _calibration_folds_words(folds: int | None) -> str:
    if folds is None:
        return "held-out folds, the nightly job's rule"
    return "in-sample predictions" if folds < 2 else f"{folds} held-out folds"


def write_report(result: BenchResult, out_dir: str | Path) -> list[str]:
    """results.json, report.md and the plots into ``out_dir``; returns the paths written."""
    import matplotlib  # lazy: only the report's plots need it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def save(fig, name: str) -> None:
        fig.tight_layout()
        written.append(out / name)
        fig.savefig(written[-1], dpi=110)
        plt.close(fig)

    ok = [r for r in result.systems if r.get("status") == "ok"]
    names = [r["system"] for r in ok]
    colours = {n: plt.cm.tab10(i % 10) for i, n in enumerate(baselines.ALL_SYSTEM_NAMES)}

    # reliability diagram, one panel per system
    cols = 3
    rows_n = max(1, math.ceil(len(names) / cols))
    fig, axes = plt.subplots(rows_n, cols, figsize=(3.4 * cols, 3.2 * rows_n), squeeze=False)
    for ax, name in zip(axes.flat, names):
        rel = result.reliability[name]
        ax.plot([0, 1], [0, 1], color="0.7", lw=1)
        ax.plot(rel["confidence"], rel["accuracy"], "o-", color=colours[name], ms=3)
        ece = next(r["ece"] for r in ok if r["system"] == name)
        ax.set_title(f"{name} (ECE {ece:.3f})", fontsize=9)
        ax.set_xlim(0, 1.02)
        ax.set_ylim(0, 1.02)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    fig.supxlabel("stated probability of the top answer (15 equal-mass bins)", fontsize=9)
    fig.supylabel("share correct", fontsize=9)
    save(fig, "reliability.png")

    # risk–coverage
    fig, ax = plt.subplots(figsize=(6, 4))
    for name in names:
        rc = result.risk_coverage[name]
        ax.plot(rc["coverage"], rc["risk"], label=name, color=colours[name], lw=1.4)
    ax.set_xlabel("coverage (share answered without asking)")
    ax.set_ylabel("error rate on the answered")
    ax.legend(fontsize=7, ncol=2)
    save(fig, "risk_coverage.png")

    # accuracy over time
    fig, ax = plt.subplots(figsize=(6, 4))
    days = [c["day"] for c in result.checkpoints]
    for name in names:
        ax.plot(days, [c["accuracy"].get(name) for c in result.checkpoints], "o-", ms=3, label=name,
                color=colours[name], lw=1.2)
    ax.set_xlabel("world day")
    ax.set_ylabel("accuracy on the current true answer")
    ax.legend(fontsize=7, ncol=2)
    save(fig, "accuracy_over_time.png")

    # learning speed
    if result.learning:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.6))
        xs = [p["settlements"] for p in result.learning]
        a1.plot(xs, [p["accuracy"] for p in result.learning], "o-", color=colours["doxa-learned"], label="doxa-learned")
        oracle_acc = [c["accuracy"].get("oracle") for c in result.checkpoints]
        if any(v is not None for v in oracle_acc):
            a1.plot(xs, oracle_acc, "--", color=colours["oracle"], label="oracle")
        a1.set_xlabel("settlements seen")
        a1.set_ylabel("accuracy")
        a1.legend(fontsize=7)
        a2.plot(xs, [p["trust_error"]["nodes"] for p in result.learning], "o-", label="layers (mean)")
        a2.plot(xs, [p["trust_error"]["leaves"] for p in result.learning], "s-", label="sources (message-weighted)")
        a2.set_xlabel("settlements seen")
        a2.set_ylabel("|α used − α true|")
        a2.set_ylim(bottom=0)
        a2.legend(fontsize=7)
        save(fig, "learning.png")

    result.files = [str(p) for p in written] + [str(out / "report.md"), str(out / "results.json")]
    (out / "results.json").write_text(json.dumps(result.to_dict(), indent=1))
    (out / "report.md").write_text(render_markdown(result, [p.name for p in written]))
    return result.files


def _fmt(value, spec: str = ".3f") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return format(value, spec)


def table_rows(result: BenchResult) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the headline table (shared by the terminal and Markdown)."""
    cap = result.settings.get("planted_cap", 20)
    header = ["system", "accuracy", "log-loss", "ECE", "acc@80%", "AURC", "planted", "µs/read"]
    rows = []
    for r in result.systems:
        if r.get("status") != "ok":
            rows.append([r["system"], "missing", "", "", "", "", "", r.get("note", "")])
            continue
        flip = r.get("planted_to_flip")
        flip_s = "—" if flip is None else (f">{cap}" if flip > cap else f"{flip:g}")
        rows.append([r["system"], _fmt(r["accuracy"]), _fmt(r["log_loss"]), _fmt(r["ece"]),
                     _fmt(r["acc_at_80_coverage"]), _fmt(r["aurc"]), flip_s, _fmt(r["us_per_read"], ".2f")])
    return header, rows


def open_table_rows(result: BenchResult) -> tuple[list[str], list[list[str]]] | None:
    """Header and rows of the open questions' table (the terminal's); None on a world without them."""
    ok = [r for r in result.systems if r.get("status") == "ok" and r.get("open")]
    if not ok:
        return None
    header = ["system", "acc, open", "log-loss, open", "acc, later value", "acc, not yet named", "acc, closed"]
    return header, [[r["system"], _fmt(r["open"].get("accuracy")), _fmt(r["open"].get("log_loss")),
                     _fmt(r["open"].get("accuracy_later_value")), _fmt(r["open"].get("accuracy_not_yet_named")),
                     _fmt((r.get("closed") or {}).get("accuracy"))] for r in ok]


def resistance_markdown(result: BenchResult) -> list[str]:
    """The resistance table: claims to flip per attack (median / 10th percentile), and the honest change."""
    cap = result.settings.get("planted_cap", 20)
    ok = [r for r in result.systems if r.get("status") == "ok" and r.get("resistance")]
    if not ok:
        return []

    def cell(value):
        return "—" if value is None else (f">{cap}" if value > cap else f"{value:g}")

    oracle = next((r["resistance"].get("honest_change", {}) for r in ok if r["system"] == "oracle"), {})
    lines = ["", "## Resistance", "",
             f"Claims to flip a belief held at ≥ 0.9 (median / 10th percentile; >{cap}: held against all "
             f"{cap}): one new source per claim; one new source repeating itself; new sources inside the "
             f"trusted layer `{'/'.join(result.world.get('trusted_layer', []))}`. Honest change: messages from "
             "sources that already spoke about the question, an hour apart, until the system follows (lower is "
             "better; × the oracle's median).", "",
             "| system | new sources | one source repeating | trusted-layer campaign | honest change followed | × oracle |",
             "|---|---|---|---|---|---|"]
    for r in ok:
        res = r["resistance"]
        cells = [f"{cell(res.get(k, {}).get('median'))} / {cell(res.get(k, {}).get('p10'))}"
                 for k in ("new_sources", "one_source", "trusted_layer")]
        honest = res.get("honest_change", {}).get("median")
        ratio = (honest / oracle["median"]) if honest is not None and oracle.get("median") else None
        lines.append(f"| {r['system']} | " + " | ".join(cells) + f" | {cell(honest)} | {_fmt(ratio, '.2f')} |")
    return lines


def open_questions_markdown(result: BenchResult) -> list[str]:
    """The open questions' table (worlds with an open kind): each system on open and closed questions
    apart, and on the open questions whose true value was listed after the question was created."""
    ok = [r for r in result.systems if r.get("status") == "ok" and r.get("open")]
    if not ok:
        return []
    w = result.world
    lines = ["", "## Open questions", "",
             f"{w.get('open_questions', 0)} open questions (answers that are values, listed as messages name "
             f"them: {w.get('values_added', 0)} values added over the run). An open question's states at a "
             "checkpoint are the values the store listed by then and `unlisted`; the truth is the current value "
             "where listed, else `unlisted`. Later value: the truth is a value listed after the question was "
             "created (a system confined to the creation options, `fixed-options`, scores it as wrong). "
             "Not yet named: no evidence has named the true value, the right top answer is `unlisted`.", "",
             "| system | accuracy, open | log-loss, open | ECE, open | accuracy, later value | "
             "accuracy, not yet named | accuracy, closed | log-loss, closed |",
             "|---|---|---|---|---|---|---|---|"]
    for r in ok:
        o, c = r["open"], r.get("closed") or {}
        lines.append(f"| {r['system']} | {_fmt(o.get('accuracy'))} | {_fmt(o.get('log_loss'))} | {_fmt(o.get('ece'))}"
                     f" | {_fmt(o.get('accuracy_later_value'))} | {_fmt(o.get('accuracy_not_yet_named'))}"
                     f" | {_fmt(c.get('accuracy'))} | {_fmt(c.get('log_loss'))} |")
    first = ok[0]["open"]
    lines += ["", f"Pairs evaluated: {first.get('n_evaluated', 0)} open ({first.get('n_later_value', 0)} with a "
              f"later value, {first.get('n_not_yet_named', 0)} not yet named), "
              f"{(ok[0].get('closed') or {}).get('n_evaluated', 0)} closed. Planted claims attack closed "
              "questions only."]
    return lines


def render_markdown(result: BenchResult, images: list[str]) -> str:
    w = result.world
    s = result.settings
    header, rows = table_rows(result)
    lines = [f"# doxa bench — world `{w['name']}` (seed {w['seed']})", ""]
    lines.append(f"{w['people']} people, {w['questions']} questions, {w['messages']} messages, "
                 f"{w['readings']} readings ({w['counted_readings']} counted), {w['settlements']} settlements, "
                 f"{w['planted_campaigns']} planted campaigns over {w['days']:.0f} days. "
                 f"{s['checkpoints']} checkpoints; doxa-learned retrained at checkpoints "
                 f"{list(s['retrain_at'])} ({s['train_steps']} SVI steps max; calibration map on "
                 f"{_calibration_folds_words(s.get('train_folds'))}).")
    lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lines += ["", "Metrics pool every (checkpoint, question with evidence) pair. `acc @80%`: accuracy on the "
              "80 % most confident answers (the other 20 % handed to a person). AURC: area under the "
              "risk–coverage curve (lower is better). Planted to flip: median number of planted claims "
              f"(new throwaway sources) that turn a belief held at ≥ 0.9 to the planted answer; >{s['planted_cap']} "
              "means most held. µs/read: time to score one question within the batch."]
    more = [r for r in result.systems if r.get("status") == "ok"]
    if more:
        lines += ["", "| system | acc @90% | acc @70% | accuracy, never-settled questions | mean confidence | "
                  f"planted: beliefs tested | held all {s['planted_cap']} |", "|---|---|---|---|---|---|---|"]
        for r in more:
            lines.append(f"| {r['system']} | {_fmt(r.get('acc_at_90_coverage'))} | {_fmt(r.get('acc_at_70_coverage'))}"
                         f" | {_fmt(r.get('accuracy_unsettled'))} | {_fmt(r.get('mean_confidence'))}"
                         f" | {r.get('planted_tested', 0)} | {_fmt(r.get('planted_held_share'), '.2f')} |")
    notes = [r for r in result.systems if r.get("note")]
    if notes:
        lines += [""] + [f"- **{r['system']}**: {r['note']}" for r in notes]
    lines += open_questions_markdown(result)
    lines += resistance_markdown(result)
    converged = result.convergence_line()
    if converged:
        lines += ["", "## Convergence", "", converged]
    if result.learning:
        lines += ["", "## Learning speed (doxa-learned)", "",
                  "| checkpoint | day | settlements seen | retrained | accuracy | trust error, layers | "
                  "trust error, sources |", "|---|---|---|---|---|---|---|"]
        for p in result.learning:
            lines.append(f"| {p['checkpoint']} | {p['day']:.0f} | {p['settlements']} | {'yes' if p['trained'] else ''}"
                         f" | {_fmt(p['accuracy'])} | {_fmt(p['trust_error']['nodes'])} | "
                         f"{_fmt(p['trust_error']['leaves'])} |")
    if result.trust_nodes:
        lines += ["", "Layers of the source tree after the last retraining (busiest first): true reliability "
                  "against the one doxa-learned reads.", "",
                  "| layer | messages | true α | learned α | from |", "|---|---|---|---|---|"]
        for r in result.trust_nodes:
            lines.append(f"| `{r['node']}` | {r['messages']} | {r['true']:.3f} | {r['used']:.3f} | {r['from']} |")
    lines += ["", "## Accuracy at each checkpoint", ""]
    names = [r["system"] for r in more]
    lines += ["| day | evaluated | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for c in result.checkpoints:
        lines.append(f"| {c['day']:.0f} | {c['evaluated']} | "
                     + " | ".join(_fmt(c["accuracy"].get(n)) for n in names) + " |")
    lines += ["", "## Plots", ""] + [f"![{img}]({img})" for img in images]
    t = result.timings
    lines += ["", "## Time", "", f"total {t.get('total_s', 0):.1f} s: ingest {t.get('ingest_s', 0):.1f} s, "
              f"load {t.get('load_s', 0):.1f} s, training {t.get('train_s', 0):.1f} s, "
              f"planted claims {t.get('planted_s', 0):.1f} s."]
    return "\n".join(lines) + "\n"
