"""infra.logger.step_metrics without a training run: every metric it logs is documented, and loss
metrics are combined generically (summed over ranks and mini-batches, divided by their declared
count), so a new loss metric needs one LOSS_METRICS line and no other change."""

import math

import pytest
import torch

import advantage
from infra import diagnostics
from infra.logger import LOSS_METRICS, METRICS, documented, entropy_sample, logprob_sums, step_metrics


def rank_sums(seed: int, extra_loss_metric: bool = False) -> dict:
    """One rank's raw sums, shaped as train.py step 7 gathers them (2 prompts x 4 responses)."""
    g = torch.Generator().manual_seed(seed)
    reward = torch.tensor([[1.0, -1.0, -1.0, -1.0], [1.0, 1.0, 1.0, -1.0]])
    acc = reward > 0
    adv = advantage.compute_advantages(reward, K=0.4)
    tok_adv, tok_logp = adv.flatten().repeat_interleave(3), -torch.rand(24, generator=g)
    entropy = torch.rand(24, generator=g)
    upd = {"policy": 0.5, "micro_batches": 2, "fillers": 1, "mini_tokens": 24.0, "seq_tokens": 60.0,
           "clip_frac_high": 2.0, "clip_frac_low": 1.0, "clip_frac_dual": 0.0, "ratio_mean": 7.5, "approx_kl": 0.3,
           "num_tokens": 6.0, "ratio_min": 0.8 + seed / 100, "ratio_max": 1.3 + seed / 100}
    if extra_loss_metric:
        upd["entropy_bonus"] = 3.0
    return {
        "seen": {"reward": reward.flatten().tolist(), "acc": acc.flatten().tolist(), "len": [3] * 8,
                 "truncated": [False] * 8, "timeouts": 0, "groups": 3, "kept": 2, "sizes": [6]},
        "reward": reward, "acc": acc, "adv": adv,
        "logp": {"ent_sum": entropy.sum().item(), "tokens": 24,
                 "ent_by_sign": diagnostics.entropy_sums_by_sign(entropy, tok_adv),
                 "cov": diagnostics.covariance_sums(tok_logp, tok_adv), "fillers": 0, "old_pass": 4, "covered": 24},
        "upd": [upd, dict(upd)],
        "times": {"rollout": 1.0, "reward": 0.1, "sync": 0.0, "old_logp": 0.2, "update": 0.5},
    }


def metrics(ranks):
    return step_metrics(ranks, step=1, gen_batches=1, norms=[1.0, 3.0], skipped=0, lr=1e-6, regime_K=0.4, step_time=2.0)


def test_every_logged_metric_is_documented():
    m = metrics([rank_sums(0), rank_sums(1)])
    assert not [k for k in m if not documented(k)], "undocumented metrics"
    assert all(documented(k) for k in LOSS_METRICS) and set(LOSS_METRICS) <= set(METRICS)


def test_loss_metrics_are_summed_over_ranks_and_mini_batches_then_divided_by_their_count():
    m = metrics([rank_sums(0), rank_sums(1)])
    assert m["loss/clip_frac_high"] == pytest.approx(4 * 2.0 / (4 * 24.0))  # per mini-batch token
    assert m["loss/ratio_mean"] == pytest.approx(4 * 7.5 / (4 * 6.0))  # per token in gradient passes
    assert m["loss/policy"] == pytest.approx(4 * 0.5 / 2)  # per optimizer step (2 here)
    assert m["loss/ratio_min"] == pytest.approx(0.8) and m["loss/ratio_max"] == pytest.approx(1.31)
    assert m["perf/filler_passes"] == 4 and m["perf/old_pass_frac"] == pytest.approx(8 / 16)
    by_sign = [m[f"policy/entropy_{s}"] for s in ("pos", "neg", "zero")]
    assert all(math.isfinite(x) for x in by_sign)


def test_a_new_loss_metric_is_one_declaration(monkeypatch):
    monkeypatch.setitem(LOSS_METRICS, "loss/entropy_bonus", ("num_tokens", "a fork's new term, per token"))
    monkeypatch.setitem(METRICS, "loss/entropy_bonus", "a fork's new term, per token")
    m = metrics([rank_sums(0, extra_loss_metric=True), rank_sums(1, extra_loss_metric=True)])
    assert m["loss/entropy_bonus"] == pytest.approx(4 * 3.0 / (4 * 6.0))


def test_entropy_sample_takes_a_fraction_or_a_count_per_step():
    ids = list(range(10, 50))
    assert entropy_sample(ids, 1.0, 4, (1, 2, 0)) == ids  # all, in order
    frac = entropy_sample(ids, 0.1, 4, (1, 2, 0))
    assert len(frac) == 4 and set(frac) <= set(ids) and frac == sorted(frac)
    assert entropy_sample(ids, 0.1, 4, (1, 2, 0)) == frac  # seeded by (seed, step, rank)
    assert entropy_sample(ids, 0.1, 4, (1, 3, 0)) != frac
    assert len(entropy_sample(ids, 12, 4, (1, 2, 0))) == 3  # a count per step, split over the ranks
    assert len(entropy_sample(ids, 12, 1, (1, 2, 0))) == 12
    assert entropy_sample(ids, 400, 2, (1, 2, 0)) == ids and entropy_sample([], 0.5, 1, (1, 2, 0)) == []


def test_a_sample_of_zero_advantage_responses_stands_for_all_of_them():
    """With every A = 0 response's forward, the sums are exact; with a sample of them, its tokens
    count (A = 0 tokens) / (sampled) times: equal sums when the sample's mean is the population's."""
    from types import SimpleNamespace

    adv = torch.tensor([1.0, 0.0, 0.0, -2.0, 0.0, 0.0])
    ent = {0: 0.5, 1: 1.0, 2: 3.0, 3: 0.25, 4: 1.0, 5: 3.0}  # zero-advantage entropies 1, 3, 1, 3: mean 2
    known = {i: (torch.full((2,), -float(i)), torch.full((2,), ent[i])) for i in range(6)}
    batch = SimpleNamespace(response_ids=[[7, 7]] * 6, rollout_logp=None)
    full = logprob_sums(batch, adv, known, from_sampler=False)
    assert full["covered"] == full["tokens"] == 12
    assert full["ent_sum"] == pytest.approx(2 * (0.5 + 1 + 3 + 0.25 + 1 + 3))
    sampled = logprob_sums(batch, adv, {i: known[i] for i in (0, 1, 2, 3)}, from_sampler=False)  # half the A = 0 ones
    assert sampled["covered"] == 8 and sampled["tokens"] == 12
    assert sampled["ent_sum"] == pytest.approx(full["ent_sum"])
    assert sampled["ent_by_sign"][2].tolist() == pytest.approx([16.0, 8.0])  # A = 0 row: 4 sampled tokens weighted x2
    m = metrics([rank_sums(0) | {"logp": {**sampled, "fillers": 0, "old_pass": 4}}])
    assert m["policy/entropy_coverage"] == pytest.approx(8 / 12) and m["policy/entropy_zero"] == pytest.approx(2.0)
