"""scripts/k_sweep_report.py on a hand-made sweep: the tables' numbers (second-half means, the
spread over seeds, Spearman's rho with ties, the held-out pass@k) against hand computation, and
the doc's marked block replaced with everything outside it kept."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("k_sweep_report", ROOT / "scripts" / "k_sweep_report.py")
report = importlib.util.module_from_spec(spec)
sys.modules["k_sweep_report"] = report  # its dataclass looks its module up there
spec.loader.exec_module(report)

# Second-half (steps 3-4 of 4) entropies: seed 1: K 0.2 -> 0.11, K 0.4 -> 0.13, K 0.8 -> 0.12, mean -> 0.21;
# seed 2: 0.10, 0.11, 0.12 and 0.15. Steps 1-2 are a transient the second half must ignore.
ENTROPY = {(0.2, 1): [0.10, 0.12], (0.4, 1): [0.13, 0.13], (0.8, 1): [0.11, 0.13], (None, 1): [0.20, 0.22],
           (0.2, 2): [0.09, 0.11], (0.4, 2): [0.11, 0.11], (0.8, 2): [0.12, 0.12], (None, 2): [0.14, 0.16]}
PASS = {(None, 1): (0.4, 0.6), (None, 2): (0.5, 0.8)}  # (pass@1, pass@8); the rest 0.3, 0.5


def results(p1: float, p8: float) -> dict:
    return {"benchmarks": {"tiny/test.jsonl": {"metrics": {"pass@1": p1, "pass@8": p8, "n": 8}}}}


def make_sweep(root: Path) -> None:
    for (K, seed), late in ENTROPY.items():
        run = root / (f"mean_seed{seed}" if K is None else f"K{K}_seed{seed}")
        (run / "eval_final").mkdir(parents=True)
        cfg = {"algorithm": {"baseline": "mean" if K is None else "quantile", "K": K}, "trainer": {"seed": seed}}
        (run / "config.yaml").write_text(yaml.safe_dump(cfg))
        rows = [{"step": step + 1, "policy/entropy": h, "policy/entropy_pos": h - 0.01, "policy/entropy_neg": h + 0.01,
                 "policy/entropy_zero": math.nan if K is None else h, "adv/zero_frac": 0.0 if K is None else 0.75,
                 "adv/hard_frac": 0.5, "entropy_cov/pos": 0.01, "entropy_cov/neg": 0.02,
                 "reward/acc": 0.25 * (step + 1), "response/len_mean": 14.0}
                for step, h in enumerate([0.5, 0.4, *late])]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))  # NaN written as json does
        (run / "eval_final" / "results.json").write_text(json.dumps(results(*PASS.get((K, seed), (0.3, 0.5)))))
    (root / "eval_start").mkdir()
    (root / "eval_start" / "results.json").write_text(json.dumps(results(0.25, 0.45)))


def rows_of(table: str) -> dict[str, list[str]]:
    """First cell -> the other cells, for every body row of the markdown tables in `table`."""
    out = {}
    for line in table.splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            out[cells[0]] = cells[1:]
    return out


def test_spearman_by_hand():
    assert report.spearman([0.2, 0.4, 0.8], [0.11, 0.13, 0.12]) == 0.5  # 1 - 6 * (0 + 1 + 1) / (3 * 8)
    assert report.spearman([1, 2, 3], [3, 2, 1]) == -1.0
    assert report.ranks([0.105, 0.12, 0.12]) == [1.0, 2.5, 2.5]  # a tie shares the mean rank
    assert math.isnan(report.spearman([0.2, 0.4], [0.1, 0.1]))  # constant entropy: no ranking


def test_report_tables_figure_and_doc_block(tmp_path):
    sweep, doc = tmp_path / "sweep", tmp_path / "doc.md"
    make_sweep(sweep)
    doc.write_text(f"# Title\n\nkept above\n{report.BEGIN}\nstale table\n{report.END}\nkept below\n")
    report.main([str(sweep), "--doc", str(doc), "--figure", str(tmp_path / "fig.png"), "--wall-s", "600"])

    text = doc.read_text()
    assert text.startswith("# Title\n\nkept above\n") and text.endswith(f"{report.END}\nkept below\n")
    assert "stale table" not in text and text.count(report.BEGIN) == 1
    rows = rows_of(text)

    # Table 1: K 0.2 | K 0.4 | K 0.8 | rho | mean | mean - K 0.4
    assert rows["1"] == ["0.1100", "0.1300", "0.1200", "+0.50", "0.2100", "+0.0800"]
    assert rows["2"] == ["0.1000", "0.1100", "0.1200", "+1.00", "0.1500", "+0.0400"]
    # seed means 0.105, 0.12, 0.12: ranks 1, 2.5, 2.5 -> r = 1.5 / sqrt(2 * 1.5) = 0.866
    assert rows["mean over seeds"] == ["0.1050", "0.1200", "0.1200", "+0.87", "0.1800", "+0.0600"]
    assert "Per-seed ρ: +0.50, +1.00; mean +0.75" in text

    # Table 2, mean baseline: entropy 0.21 and 0.15 -> 0.18 ± sqrt(2 * 0.03^2 / 1) = 0.0424
    mean = rows["mean (DAPO)"]
    assert mean[0] == "1,2" and mean[1] == "0.1800 ± 0.0424"
    assert mean[3] == "0.170 ± 0.042 / 0.190 ± 0.042"  # by sign: entropy -+ 0.01
    assert mean[4] == "0.00 ± 0.00" and mean[6] == "0.010 ± 0.000 / 0.020 ± 0.000"
    assert mean[7] == "0.875 ± 0.000"  # acc 0.75, 1.0 in steps 3-4
    assert mean[9:] == ["0.450 ± 0.071", "0.700 ± 0.141"]
    assert rows["K = 0.4"][4] == "0.75 ± 0.00" and rows["K = 0.4"][9:] == ["0.300 ± 0.000", "0.500 ± 0.000"]
    assert rows["starting policy"][-2:] == ["0.250", "0.450"]
    # peak after the first fifth (steps > 0): trailing 5-step mean of 0.5, 0.4, 0.2, 0.22 -> 0.5 at step 1
    assert mean[2] == "0.500 ± 0.000"
    assert "took 10.0 min" in text
    assert (tmp_path / "fig.png").stat().st_size > 1000 and (sweep / "k_sweep.md").is_file()


def test_missing_markers_fail_before_any_output(tmp_path):
    sweep, doc = tmp_path / "sweep", tmp_path / "doc.md"
    make_sweep(sweep)
    doc.write_text("# no markers\n")
    with pytest.raises(SystemExit, match="k_sweep:begin"):
        report.main([str(sweep), "--doc", str(doc), "--figure", str(tmp_path / "fig.png")])
    assert not (tmp_path / "fig.png").exists() and doc.read_text() == "# no markers\n"
