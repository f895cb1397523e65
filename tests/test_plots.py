"""infra/plots.py: the picture a run writes (metrics.png) shows held-out pass@k first, at the
training steps behind each evaluation, and the noisy per-step metrics smoothed over their raw points."""

import json
import random

import config
from infra import plots
from infra.logger import MetricsLogger, read_metrics


def synthetic_run(path, steps: int = 40, every: int = 10) -> list[dict]:
    """A metrics.jsonl as train.py writes it: one row per step; the step that starts after `every`
    updates also logs the evaluation of the weights it samples with (eval/trained_steps = step - 1),
    and the last step that of the final weights."""
    rng, rows = random.Random(0), []
    for step in range(1, steps + 1):
        row = {"step": step, **{key: rng.random() for key in plots.DEFAULT_PLOT[1:]}}
        trained = step - 1 if (step - 1) % every == 0 and step < steps else steps if step == steps else None
        if trained is not None:
            row |= {"eval/trained_steps": trained, "eval/test/pass@1": 0.35 + trained / 400,
                    "eval/test/pass@2": 0.45 + trained / 400, "eval/test/pass@4": 0.55 + trained / 400,
                    "eval/test/len_mean": 12.0}
        rows.append(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def test_the_first_panel_is_held_out_pass_at_k_against_trained_steps(tmp_path):
    rows = synthetic_run(tmp_path / "metrics.jsonl")
    out = tmp_path / "metrics.png"
    fig = plots.plot_metrics({"run": read_metrics(tmp_path / "metrics.jsonl")}, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    first = fig.axes[0]
    lines = {line.get_label(): line for line in first.get_lines()}
    assert sorted(lines) == ["test pass@1", "test pass@4"]  # pass@1 and the largest k; not pass@2 or len_mean
    assert list(lines["test pass@1"].get_xdata()) == [0, 10, 20, 30, 40]  # eval/trained_steps, not the row's step
    assert list(lines["test pass@1"].get_ydata()) == [0.35 + s / 400 for s in (0, 10, 20, 30, 40)]
    assert lines["test pass@1"].get_linestyle() == "-" and lines["test pass@4"].get_linestyle() == "--"

    # Each per-step panel: the raw points, faint, under their trailing mean over plots.SMOOTH steps.
    for ax, key in zip(fig.axes[1:], plots.DEFAULT_PLOT[1:]):
        raw, smoothed = ax.get_lines()
        values = [r[key] for r in rows]
        assert raw.get_linestyle() == "None" and raw.get_alpha() < 1 and list(raw.get_ydata()) == values
        assert list(smoothed.get_ydata()) == plots.smooth(values, plots.SMOOTH) and ax.get_title() == key


def test_the_run_writes_its_metrics_png_with_the_held_out_panel(tmp_path):
    cfg = config.from_dict({}, [f"trainer.output_dir={tmp_path}"])
    logger = MetricsLogger(tmp_path, cfg, resume_step=None, enabled=True)
    for row in synthetic_run(tmp_path / "source.jsonl", steps=12, every=5):
        logger.log(row)
    logger.close()
    assert (tmp_path / "metrics.png").stat().st_size > 10_000


def test_without_evaluations_the_first_panel_says_so(tmp_path):
    rows = [{"step": s, "reward/mean": 0.1 * s} for s in range(1, 6)]
    fig = plots.plot_metrics({"run": rows}, tmp_path / "m.png", keys=(plots.HELD_OUT, "reward/mean"), window=1)
    assert not fig.axes[0].get_lines() and "no held-out evaluation" in fig.axes[0].texts[0].get_text()
    assert len(fig.axes[1].get_lines()) == 1  # window 1: the raw line alone
