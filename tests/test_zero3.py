"""The GPU path's CPU twin: train.py under `accelerate launch` with DeepSpeed ZeRO-3 over gloo.

Two processes with configs/accelerate/zero3.yaml must train exactly what one process trains:
the same samples (generation calls are seeded by their global index, rollout.prompts_per_call
= the per-rank share), the same metrics (gathered over ranks), and weights gathered from the
ZeRO-3 shards equal to the single process's within float tolerance. The consolidated checkpoint
reloads with transformers, and a resume from the per-rank optimizer shards continues exactly.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from logger import read_metrics

REPO = Path(__file__).resolve().parents[1]
LAUNCH = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(REPO / "configs" / "accelerate" / "zero3.yaml"),
          "--mixed_precision", "no"]  # the tiny model trains in fp32, as the single process does
TWIN = ["--config", "tiny_qae.yaml", "trainer.train_batch_size=4", "trainer.mini_batch_size=4", "rollout.n=4",
        "algorithm.dynamic_sampling=false", "trainer.gen_batch_size=null", "rollout.prompts_per_call=2",
        "optim.lr=1e-3", "trainer.total_steps=2", "trainer.save_every=1", "trainer.keep_last=2"]
ENV = {**os.environ, "WANDB_SILENT": "true", "OMP_NUM_THREADS": "1"}


def run(cmd, out_dir, *extra):
    proc = subprocess.run([*cmd, *TWIN, f"trainer.output_dir={out_dir}", *extra], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=900)
    return proc, proc.stdout + proc.stderr


def weights(run_dir: Path, step: int) -> dict:
    from safetensors.torch import load_file

    return load_file(run_dir / "checkpoints" / f"step_{step:06d}" / "model" / "model.safetensors")


def comparable(rows):
    """Metrics that must agree. Periodic evaluation (at the last step) runs under ZeRO-3 too, but HF
    `generate` seeds once per call, so its samples depend on how problems split over processes."""
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "perf/gen_tokens", "perf/train_tokens", "perf/peak_mem", "eval/"))}
            for r in rows]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("zero3")
    single, single_log = run([sys.executable, "train.py"], root / "single")
    assert single.returncode == 0, single_log[-3000:]
    t0 = time.perf_counter()
    zero3, zero3_log = run([*LAUNCH, "--num_processes", "2", "train.py"], root / "zero3")
    print(f"2-process ZeRO-3 run: {time.perf_counter() - t0:.0f} s")
    return root, zero3, zero3_log


def test_two_zero3_processes_train_what_one_process_trains(runs):
    root, zero3, log = runs
    assert zero3.returncode == 0, log[-3000:]
    assert "rank 0: done" in log and "rank 1: done" in log  # every rank finished its work
    a, b = read_metrics(root / "single" / "metrics.jsonl"), read_metrics(root / "zero3" / "metrics.jsonl")
    assert [r["step"] for r in b] == [1, 2] and all(r["optim/updates"] == 1 for r in b)
    assert 0 <= b[1]["eval/test/pass@1"] <= 1  # evaluation ran across both ranks
    for x, y in zip(comparable(a), comparable(b)):
        assert x.keys() == y.keys()
        for k in x:  # same samples, rewards, advantages, losses and gradient norm
            assert y[k] == pytest.approx(x[k], rel=1e-5, abs=1e-6), k
    base = weights(root / "single", 1).keys()
    wa, wb = weights(root / "single", 2), weights(root / "zero3", 2)
    assert wa.keys() == wb.keys() == base
    from safetensors.torch import load_file

    init = load_file(REPO / "tiny" / "model" / "model.safetensors")
    moved = max((wa[k] - init[k]).abs().max().item() for k in wa)
    gap = max((wa[k] - wb[k]).abs().max().item() for k in wa)
    assert moved > 1e-3 and gap < 1e-5, (moved, gap)  # the shards trained, and gathered to the same model


def test_zero3_checkpoint_reloads_and_resumes_exactly(runs):
    root, zero3, log = runs
    assert zero3.returncode == 0, log[-3000:]
    from transformers import AutoModelForCausalLM

    ckpt = root / "zero3" / "checkpoints" / "step_000001"
    model = AutoModelForCausalLM.from_pretrained(ckpt / "model")  # consolidated: whole tensors, not shards
    assert sum(p.numel() for p in model.parameters()) > 500_000
    assert sorted(p.name for p in ckpt.glob("rank_*.pt")) == ["rank_00000.pt", "rank_00001.pt"]

    # One process cannot resume two ranks' optimizer shards: a one-line error before the model loads.
    proc, out = run([sys.executable, "train.py"], root / "one", "--resume", str(ckpt))
    assert proc.returncode == 2 and "written by 2 processes" in out

    resumed, out = run([*LAUNCH, "--num_processes", "2", "train.py"], root / "resumed", "--resume", str(ckpt))
    assert resumed.returncode == 0, out[-3000:]
    assert "rank 0: done" in out and "rank 1: done" in out
    a, b = weights(root / "zero3", 2), weights(root / "resumed", 2)
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-6
    assert comparable(read_metrics(root / "zero3" / "metrics.jsonl"))[1] == comparable(read_metrics(root / "resumed" / "metrics.jsonl"))[0]


def test_gpu_command_fails_fast_on_a_cpu_machine(tmp_path):
    """The README's GPU launch, on a machine without CUDA: a clear message within seconds, not a traceback deep in a run."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    t0 = time.perf_counter()
    proc = subprocess.run([*LAUNCH, "--num_processes", "2", "train.py", "--config", "qwen3_8b_qae.yaml",
                           f"trainer.output_dir={tmp_path / 'gpu'}"], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "error: this config is sized for CUDA GPUs" in proc.stderr
    assert "Traceback" not in proc.stderr.split("error: this config")[0]  # the message comes first
    assert time.perf_counter() - t0 < 120
