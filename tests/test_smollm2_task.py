"""The real-model entropy experiment's pieces (docs/smollm2_experiment.md), without its runs: the two
configs load and differ only in the baseline, the problems are a function of the seed, the probe
prompts are not trained on, the pre-registered rule decides as written, and the probe measure runs
on a model (the tiny one, for time; the runs themselves take minutes per step and are not in CI).
"""

import doctest
import json
import subprocess
import sys
from pathlib import Path

import config

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import arith_task  # noqa: E402
import probe_entropy  # noqa: E402
import smollm2_report  # noqa: E402


def test_the_scripts_worked_examples():
    for module in (arith_task, probe_entropy, smollm2_report):
        failed, tried = doctest.testmod(module)
        assert tried and not failed, module.__name__


def flat(d: dict, prefix: str = "") -> dict:
    return {k2: v2 for k, v in d.items()
            for k2, v2 in (flat(v, f"{prefix}{k}.").items() if isinstance(v, dict) else {f"{prefix}{k}": v}.items())}


def test_the_two_arms_differ_only_in_the_baseline():
    qae, dapo = (flat(config.as_dict(config.load(f"smollm2_{arm}.yaml"))) for arm in ("qae", "dapo"))
    differ = {k for k in qae if qae[k] != dapo[k]}
    assert differ == {"algorithm.baseline", "algorithm.K", "algorithm.quantile_of", "trainer.output_dir"}, differ
    assert (qae["algorithm.baseline"], qae["algorithm.K"], dapo["algorithm.baseline"]) == ("quantile", 0.4, "mean")
    assert qae["optim.lr"] == 5e-5 and qae["rollout.n"] == 8 and qae["trainer.train_batch_size"] == 8
    assert qae["trainer.total_steps"] // qae["trainer.save_every"] <= qae["trainer.keep_last"]  # every checkpoint kept


def pairs(path: Path) -> list[tuple[int, int]]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert all(r["problem"][0]["role"] == "system" and len(r["problem"]) == 4 for r in rows)
    out = [tuple(int(x) for x in r["problem"][-1]["content"][len("What is "):-1].split(" + ")) for r in rows]
    assert all(int(r["answer"]) == a + b for r, (a, b) in zip(rows, out))
    return out


def test_the_problems_are_a_function_of_the_seed(tmp_path):
    for d, seed in (("a", 0), ("b", 0), ("c", 1)):
        subprocess.run([sys.executable, "scripts/arith_task.py", str(tmp_path / d), "--seed", str(seed)], cwd=REPO,
                       check=True, capture_output=True)
    for name in ("train.jsonl", "probe.jsonl"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
        assert (tmp_path / "a" / name).read_bytes() != (tmp_path / "c" / name).read_bytes()
    train, probe = pairs(tmp_path / "a" / "train.jsonl"), pairs(tmp_path / "a" / "probe.jsonl")
    assert len(train) == 2000 and len(probe) == 64 and not set(train) & set(probe)
    one_digit = [p for p in train if max(p) < 10]
    assert len(one_digit) == 667 and len(set(one_digit)) < 100  # a third, from the 100 one-digit pairs
    assert sum(10 <= a and b < 10 for a, b in train) == 667 and len(set(train) - set(one_digit)) == 1333


def test_the_probe_measure_runs_and_resumes(tmp_path):
    probe = tmp_path / "probe.jsonl"
    probe.write_text("".join(json.dumps({"problem": [{"role": "user", "content": f"{a}+{a}="}], "answer": str(2 * a)})
                             + "\n" for a in (1, 2, 3)))
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    cmd = [sys.executable, "scripts/probe_entropy.py", str(run), "--probe", str(probe), "--base", "tiny/model",
           "--n", "2", "--max-tokens", "8"]
    first = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    rows = [json.loads(line) for line in (run / "probe.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["step"] == 0 and rows[0]["entropy"] > 0 and 0 <= rows[0]["unclean"] <= 1
    again = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and again.stdout == ""  # measured once


def test_the_report_applies_the_rule_and_reads_the_training_time(tmp_path):
    runs = {"mean_seed1": ([0.2, 0.5], [100.0, 300.0]), "qae_seed1": ([0.2, 0.15], [50.0, 70.0, 60.0])}
    for name, (entropy, step_s) in runs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "probe.jsonl").write_text("".join(
            json.dumps({"step": 5 * i, "entropy": e, "unclean": 0.0, "acc": 0.5}) + "\n"
            for i, e in enumerate(entropy)))
        (tmp_path / name / "metrics.jsonl").write_text("".join(
            json.dumps({"step": 4 * i + 1, "time/step": t, "policy/entropy": t / 100, "entropy_cov/pos": 0.1 * i,
                        "entropy_cov/neg": -0.1, "response/len_mean": 6.0 + i}) + "\n" for i, t in enumerate(step_s)))
    text, probes, metrics = smollm2_report.tables(tmp_path, [1])
    # ceiling max(2 * 0.2, 0.2 + 0.2) = 0.4: the mean arm's 0.5 surges, K = 0.4's 0.15 >= 0.1 stays in the band
    assert "| 1 | mean baseline (DAPO) | 0.200, 0.500 | surges |" in text
    assert "| 1 | K = 0.4 (QAE) | 0.200, 0.150 | band |" in text
    assert "seed 1: supports" in text and "rule fixed above: **mixed**." in text  # one supporting seed of the 2 needed
    assert "mean baseline (DAPO): median 200 s per step, 6.7 min over 2 steps" in text
    assert "K = 0.4 (QAE): median 60 s per step, 3.0 min over 3 steps" in text
    # steps 1, 5, 9: the peak from step 5 on skips step 1; cov/pos averages 0.0 and 0.1 to 0.050
    assert "| 1 | mean baseline (DAPO) | 1.00, 3.00 (step 5), 3.00 | 0.050 / -0.100 | 6.0 -> 7.0 |" in text
    assert "| 1 | K = 0.4 (QAE) | 0.50, 0.70 (step 5), 0.60 | 0.100 / -0.100 | 6.0 -> 8.0 |" in text
    smollm2_report.figure(probes, metrics, tmp_path / "figure.png")
    assert (tmp_path / "figure.png").stat().st_size > 10_000
    (tmp_path / "qae_seed1" / "probe.jsonl").unlink()  # seed 1 incomplete, seed 2 complete: no verdict yet
    for arm in ("mean", "qae"):
        (tmp_path / f"{arm}_seed2").mkdir()
        (tmp_path / f"{arm}_seed2" / "probe.jsonl").write_text(
            "".join(json.dumps({"step": 5 * i, "entropy": e, "unclean": 0.0, "acc": 0.5}) + "\n"
                    for i, e in enumerate([0.2, 0.05])))
    text, _, _ = smollm2_report.tables(tmp_path, [1, 2])
    assert "Per seed: seed 2: neither." in text and "not yet decided, 1 of 2 seeds complete" in text
    assert "**" not in text.split("Verdict")[1]
