"""infra.logger.step_metrics without a training run: every metric it logs is documented, the
loss's metrics (loss.logged, which follows loss.METRICS) included, and per-rank records are combined
over ranks; the entropy sample's draw and weight."""

import math

import pytest
import torch

import advantage
import loss
from infra import diagnostics
from infra.logger import RankStep, StepTimes, documented, logprob_sums, loss_metrics, step_metrics
from infra.passes import entropy_sample
from rollout import Seen

CLIP_HIGHER = loss.COMMON_METRICS + loss.POLICY_LOSSES["clip-higher"].metrics  # what train.py logs for the default


def rank_sums(seed: int, logp: dict | None = None) -> RankStep:
    """One rank's record, as train.py step 7 gathers it (2 prompts x 4 responses)."""
    g = torch.Generator().manual_seed(seed)
    reward = torch.tensor([[1.0, -1.0, -1.0, -1.0], [1.0, 1.0, 1.0, -1.0]])
    acc = reward > 0
    adv = advantage.compute_advantages(reward, K=0.4)
    tok_adv, tok_logp = adv.flatten().repeat_interleave(3), -torch.rand(24, generator=g)
    entropy = torch.rand(24, generator=g)
    losses = {"policy": 0.5, "clip_frac_high": 2.0, "clip_frac_low": 1.0, "clip_frac_dual": 0.0, "ratio_mean": 7.5,
              "approx_kl": 0.3, "num_tokens": 6.0, "ratio_min": 0.8 + seed / 100, "ratio_max": 1.3 + seed / 100}
    logp = logp or {"ent_sum": entropy.sum().item(), "tokens": 24,
                    "ent_by_sign": diagnostics.entropy_sums_by_sign(entropy, tok_adv),
                    "cov": diagnostics.covariance_sums(tok_logp, tok_adv), "covered": 24}
    return RankStep(Seen(reward.flatten().tolist(), acc.flatten().tolist(), [3] * 8, [False] * 8, 0, 3, 2, [6]),
                    reward, acc, adv, advantage.hard_prompts(acc, 0.4), logp, [losses, dict(losses)], micro_batches=4,
                    fillers=2, seq_tokens=120,
                    mini_tokens=48.0, old_pass=4, times=StepTimes(0.0, 1.0, 0.1, 0.2, 0.5))


def metrics(ranks):
    m = step_metrics(ranks, step=1, gen_batches=1, norms=[1.0, 3.0], skipped=0, lr=1e-6, step_time=2.0)
    return m | loss_metrics([x for r in ranks for x in r.losses], loss.METRICS, CLIP_HIGHER,  # as train.py
                            sum(r.mini_tokens for r in ranks), 2)


def test_every_logged_metric_is_documented():
    m = metrics([rank_sums(0), rank_sums(1)])
    assert not [k for k in m if not documented(k)], "undocumented metrics"
    assert {k for k in m if k.startswith("loss/")} == {f"loss/{k}" for k in CLIP_HIGHER}


def test_rank_records_are_combined_over_ranks():
    m = metrics([rank_sums(0), rank_sums(1)])
    assert m["loss/clip_frac_high"] == pytest.approx(4 * 2.0 / (2 * 48.0))  # per mini-batch token
    assert m["loss/ratio_min"] == pytest.approx(0.8) and m["loss/ratio_max"] == pytest.approx(1.31)
    assert m["perf/filler_passes"] == 4 and m["perf/old_pass_frac"] == pytest.approx(8 / 16)
    assert m["perf/micro_batches"] == 8 and m["perf/train_tokens_per_s"] == pytest.approx(240 / 0.5)
    assert m["sampling/kept_frac"] == pytest.approx(4 / 6) and m["time/rollout"] == 1.0
    by_sign = [m[f"policy/entropy_{s}"] for s in ("pos", "neg", "zero")]
    assert all(math.isfinite(x) for x in by_sign)


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
    m = metrics([rank_sums(0, logp=sampled)])
    assert m["policy/entropy_coverage"] == pytest.approx(8 / 12) and m["policy/entropy_zero"] == pytest.approx(2.0)
