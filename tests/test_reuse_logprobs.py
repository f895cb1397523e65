"""The fast path of step 5 (`trainer.reuse_logprobs`, passes.needs_old_pass) against the plain one: reusing the first
mini-batch's forward and the HF sampler's own logits for the old log-probs and the entropy
metrics must give the same update and the same metrics as one no-grad pass over every response.

Two 2-step runs of train.py on the tiny config in float64 (so the comparison is not lost in fp32
rounding), 2 mini-batches per step (the second mini-batch's old log-probs come from the no-grad
pass, the first's from its own forward), the HF sampler: `trainer.reuse_logprobs` true and false.
The fast run must also really skip work: its no-grad pass covers fewer responses.
"""

import subprocess
import sys
from pathlib import Path

import pytest

from infra.logger import read_metrics

REPO = Path(__file__).resolve().parents[1]
RUN = ["--config", "tiny_qae.yaml", "model.dtype=float64", "trainer.total_steps=2", "trainer.train_batch_size=8",
       "trainer.gen_batch_size=16", "trainer.mini_batch_size=4", "eval.every=0", "trainer.save_every=0",
       "optim.lr=1e-3"]


def train(out: Path, reuse: bool) -> list[dict]:
    proc = subprocess.run([sys.executable, "train.py", *RUN, f"trainer.reuse_logprobs={str(reuse).lower()}",
                           f"trainer.output_dir={out}"],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return read_metrics(out / "metrics.jsonl")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("reuse")
    return root, train(root / "plain", reuse=False), train(root / "fast", reuse=True)


def test_reusing_log_probs_changes_no_metric(runs):
    _, plain, fast = runs
    assert [r["step"] for r in fast] == [1, 2] and all(r["optim/updates"] == 2 for r in fast)
    assert all(r["perf/old_pass_frac"] == 1.0 for r in plain) and all(r["perf/old_pass_frac"] < 0.5 for r in fast)
    for a, b in zip(plain, fast):
        for k in a:
            if not k.startswith(("time/", "perf/")):  # timings, and how the work was cut into passes
                assert b[k] == pytest.approx(a[k], rel=1e-9, abs=1e-6), k


def test_reusing_log_probs_changes_no_weight(runs):
    from safetensors.torch import load_file

    root, _, _ = runs
    a, b = (load_file(root / name / "checkpoints" / "step_000002" / "model" / "model.safetensors")
            for name in ("plain", "fast"))
    init = load_file(REPO / "tiny" / "model" / "model.safetensors")
    moved = max((a[k] - init[k].double()).abs().max().item() for k in a)
    gap = max((a[k] - b[k]).abs().max().item() for k in a)
    assert moved > 1e-3 and gap < 1e-9, (moved, gap)
