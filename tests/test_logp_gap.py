"""The engine-vs-trainer bands: `rollout.logp_gap_warn` and `rollout.logp_gap_max` resolved from `auto`
(infra/config_checks.py, LOGP_GAP_BANDS) and applied by infra.vllm_sampler.engine_gap_check.

In bf16 the published healthy gaps between a trainer and vLLM are 0.011 (mean |diff|, Qwen3-4B) to 0.041 (RMS,
which bounds the mean, Qwen2.5-0.5B/7B with bf16 heads; docs/gpu.md, "Self-checks"): a first run there must warn
at most, never stop, while a sync that loads nothing (whole nats) stops at step 1. The first GAP_CHECKED_STEPS
steps after a start or a resume stop and print the gap; later steps only warn.
"""

import pytest

from config import ConfigError, load
from infra.vllm_sampler import GAP_CHECKED_STEPS, engine_gap_check


def bands(*overrides: str) -> tuple:
    rollout = load("qwen3_8b_qae.yaml", list(overrides)).rollout
    return rollout.logp_gap_warn, rollout.logp_gap_max


def step_metrics(gap: float, padded: int = 0) -> dict:
    return {"rollout/logp_diff_mean": gap, "rollout/logp_diff_max": 40 * gap, "rollout/padded_ids": padded}


def test_auto_gives_each_dtype_a_warning_below_its_stop():
    assert bands() == (0.05, 0.2)  # the 8B config trains in bf16
    assert bands("model.dtype=float16") == (0.05, 0.2)
    assert bands("model.dtype=float32") == (1e-4, 1e-3)
    assert load("tiny_qae.yaml").rollout.logp_gap_max == 1e-3  # the CPU configs: fp32


def test_a_stop_set_by_hand_keeps_auto_warning_under_it_and_a_warning_above_it_is_refused():
    assert bands("rollout.logp_gap_max=0.03") == (0.03, 0.03)  # auto's 0.05 would be above the stop
    assert bands("rollout.logp_gap_max=0.5") == (0.05, 0.5)
    assert bands("rollout.logp_gap_max=null") == (0.05, None)  # no stop: the warning stays
    assert bands("rollout.logp_gap_warn=null", "rollout.logp_gap_max=null") == (None, None)
    with pytest.raises(ConfigError, match=r"`rollout.logp_gap_warn` \(0.3\) must not be above `rollout.logp_gap_max`"):
        bands("rollout.logp_gap_warn=0.3")
    with pytest.raises(ConfigError, match="`rollout.logp_gap_warn` must be > 0"):
        bands("rollout.logp_gap_warn=0")


def test_a_healthy_bf16_first_run_at_the_published_gaps_never_stops():
    cfg = load("qwen3_8b_qae.yaml").rollout
    for gap in (0.011, 0.041, 0.06, 0.19):  # vime's mean; the bf16-head RMS; above the old auto stop of 0.05
        for step in (1, 2):
            fatal, line = engine_gap_check(step_metrics(gap), step, 0, cfg)
            assert fatal is None and line.startswith(("vLLM against the trainer", "warning: vLLM against the trainer"))
            assert line.startswith("warning:") == (gap > 0.05)  # the warning band
            assert f"rollout/logp_diff_mean {gap:.3g}" in line and "rollout.logp_gap_max 0.2" in line


def test_above_the_stop_the_first_steps_after_a_start_or_resume_stop_and_later_ones_warn():
    cfg = load("qwen3_8b_qae.yaml").rollout
    for start in (0, 40):  # a start, a resume after step 40
        for step in range(start + 1, start + GAP_CHECKED_STEPS + 1):
            fatal, line = engine_gap_check(step_metrics(0.25), step, start, cfg, runner="V2")
            assert line is None and fatal.startswith(f"at step {step}, vLLM's log-probs are not the trainer's")
            assert "is above rollout.logp_gap_max 0.2" in fatal and "vLLM's model runner V2" in fatal
        fatal, line = engine_gap_check(step_metrics(0.25), start + GAP_CHECKED_STEPS + 1, start, cfg)
        assert fatal is None and line.startswith("warning: at step") and "above rollout.logp_gap_warn 0.05" in line


def test_a_sync_that_loads_nothing_stops_step_1_and_a_padded_id_stops_too():
    cfg = load("qwen3_8b_qae.yaml").rollout
    assert engine_gap_check(step_metrics(31.0), 1, 0, cfg)[0]  # the smoke's broken sync: whole nats
    fatal, _ = engine_gap_check(step_metrics(0.01, padded=3), 1, 0, cfg)
    assert "it sampled 3 token(s) with ids at or above len(tokenizer)" in fatal
    assert engine_gap_check(step_metrics(float("nan")), 2, 0, cfg)[0]  # a NaN gap fails too


def test_later_steps_are_quiet_under_the_warning_and_the_hf_sampler_is_never_checked():
    cfg = load("qwen3_8b_qae.yaml").rollout
    assert engine_gap_check(step_metrics(0.04), 3, 0, cfg) == (None, None)
    assert engine_gap_check({"rollout/padded_ids": 0}, 1, 0, cfg) == (None, None)  # no rollout log-probs
    off = load("qwen3_8b_qae.yaml", ["rollout.logp_gap_warn=null"]).rollout
    assert engine_gap_check(step_metrics(0.1), 3, 0, off) == (None, None)  # no warning band: the stop's value
    assert "above rollout.logp_gap_max 0.2" in engine_gap_check(step_metrics(0.3), 3, 0, off)[1]
