"""train.py end to end on the embedded tiny config: a 2-step smoke run, and resume after SIGKILL."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from infra.logger import documented, read_metrics

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # runs of train.py: the file is scheduled first (conftest.py)
# Small and fast, still the real tiny model, data and loop.
FAST = ["trainer.train_batch_size=4", "trainer.gen_batch_size=8", "trainer.mini_batch_size=2", "rollout.n=4"]


def train_cmd(out_dir, *overrides, resume=False):
    cmd = [sys.executable, str(REPO / "train.py"), "--config", "tiny_qae.yaml", f"trainer.output_dir={out_dir}",
           *FAST, *overrides]
    return cmd + (["--resume"] if resume else [])


def test_two_step_smoke_run(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "WANDB_API_KEY": "", "WANDB_SILENT": "true"}
    proc = subprocess.run(train_cmd(out, "trainer.total_steps=2", "logging.wandb=true", "eval.every=2", "eval.limit=3",
                                    "eval.n=2"),
                          capture_output=True, text=True, cwd=REPO, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert all(documented(k) for k in r), f"undocumented metrics: {[k for k in r if not documented(k)]}"
        assert -2.0 <= r["reward/mean"] <= 1.0 and 0.0 <= r["reward/acc"] <= 1.0
        assert r["optim/updates"] == 2 and r["policy/entropy"] > 0
    # periodic evaluation: the starting policy at step 1 (on the weights that sample it), the final one after step 2
    assert [r["eval/trained_steps"] for r in rows] == [0, 2] and 0 <= rows[1]["eval/test/pass@2"] <= 1
    assert all(r["rollout/weight_syncs"] == 0 for r in rows)  # the HF sampler is the policy: nothing is copied
    assert rows[1]["eval/test/pass@1"] <= rows[1]["eval/test/pass@2"]
    assert "step 2/2" in proc.stderr + proc.stdout
    assert (out / "metrics.png").stat().st_size > 1000
    samples = [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]
    assert {"prompt", "response", "answer", "reward", "adv"} <= set(samples[0])
    assert any((out / "wandb").glob("offline-run-*"))  # offline: no key, no prompt
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ckpt = out / "checkpoints" / "step_000002"
    model = AutoModelForCausalLM.from_pretrained(ckpt / "model")
    assert AutoTokenizer.from_pretrained(ckpt / "model").chat_template
    assert (ckpt / "trainer_state.pt").is_file() and not list((out / "checkpoints").glob(".tmp-*"))
    base = AutoModelForCausalLM.from_pretrained(REPO / "tiny" / "model")
    assert any(not torch.equal(a, b) for a, b in zip(model.state_dict().values(), base.state_dict().values()))


def comparable(rows):
    return [{k: v for k, v in r.items()
             if not k.startswith(("time/", "perf/gen_tokens", "perf/train_tokens", "perf/peak_mem"))}
            for r in rows]


def test_resume_after_sigkill_matches_uninterrupted(tmp_path):
    steps = ["trainer.total_steps=4", "trainer.save_every=2", "trainer.keep_last=1"]
    straight = tmp_path / "straight"
    subprocess.run(train_cmd(straight, *steps), cwd=REPO, check=True, capture_output=True, timeout=600)

    killed = tmp_path / "killed"
    proc = subprocess.Popen(train_cmd(killed, *steps), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:  # kill once step 3 is logged: after checkpoint 2
        if (killed / "metrics.jsonl").exists() and any(r["step"] == 3 for r in read_metrics(killed / "metrics.jsonl")):
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.02)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed mid-way"
    assert [p.name for p in (killed / "checkpoints").glob("step_*")] == ["step_000002"]
    subprocess.run(train_cmd(killed, *steps, resume=True), cwd=REPO, check=True, capture_output=True, timeout=600)

    a, b = read_metrics(straight / "metrics.jsonl"), read_metrics(killed / "metrics.jsonl")
    assert [r["step"] for r in b] == [1, 2, 3, 4]
    assert comparable(a) == comparable(b)
    from safetensors.torch import load_file

    wa = load_file(straight / "checkpoints" / "step_000004" / "model" / "model.safetensors")
    wb = load_file(killed / "checkpoints" / "step_000004" / "model" / "model.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def method_overrides(config_name: str) -> list[str]:
    """The policy loss and its settings of a Table 2 config, as overrides of the tiny config (as
    scripts/tiny_methods.py trains docs/tiny_methods.md's runs)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("tiny_methods", REPO / "scripts" / "tiny_methods.py")
    tiny_methods = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tiny_methods)
    return tiny_methods.policy_loss_overrides(config_name)


@pytest.mark.parametrize("method, own", [
    ("qwen3_8b_clip_cov_qae.yaml", ["loss/cov_selected", "loss/cov_candidates", "loss/clip_frac_low"]),
    ("qwen3_8b_kl_cov_qae.yaml", ["loss/cov_selected"]),
    ("qwen3_30b_a3b_gspo_qae.yaml", ["loss/seq_clip_frac", "loss/seq_ratio_min", "loss/seq_ratio_max"]),
])
def test_each_table2_method_trains_the_tiny_task_and_logs_its_metrics(tmp_path, method, own):
    if not (REPO / "configs" / method).exists():
        pytest.skip(f"{method} is not shipped yet")
    out = tmp_path / "run"
    proc = subprocess.run(train_cmd(out, "trainer.total_steps=2", "eval.every=0", *method_overrides(method)),
                          capture_output=True, text=True, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert all(k in r for k in own) and "loss/clip_frac_dual" not in r  # its own metrics, not clip-higher's
        assert all(documented(k) for k in r) and r["optim/updates"] == 2
    if "loss/cov_selected" in own and "kl_cov" in method:
        assert all(r["loss/cov_selected"] > 0 for r in rows)  # KL-Cov always picks max(1, floor(k N)) >= 1 tokens
