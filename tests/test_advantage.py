"""advantage.py against hand-computed numbers (QAE_SPEC section 2)."""

import math

import pytest
import torch

from advantage import (
    advantage_stats,
    compute_advantages,
    dynamic_sampling_keep,
    neg_mask,
    pos_mask,
    quantile_baseline_linear,
    quantile_baseline_right_continuous,
)


def group(num_correct: int, G: int = 16, low: float = -1.0, high: float = 1.0) -> torch.Tensor:
    """One prompt's rewards, successes first: (1, G)."""
    return torch.tensor([[high] * num_correct + [low] * (G - num_correct)])


def test_worked_numbers_hard_prompt():
    # 3/16 correct, K = 0.4: b_K = -1; std = sqrt(9.75 / 15) = 0.80623; success 2 / 0.80623.
    adv = compute_advantages(group(3), K=0.4)
    assert adv[0, :3] == pytest.approx([2.4807] * 3, abs=1e-4)
    assert torch.all(adv[0, 3:] == 0)


def test_worked_numbers_easy_prompt():
    # 12/16 correct, K = 0.4: b_K = +1; std = sqrt(12 / 15) = 0.89443; failure -2 / 0.89443.
    adv = compute_advantages(group(12), K=0.4)
    assert torch.all(adv[0, :12] == 0)
    assert adv[0, 12:] == pytest.approx([-2.2361] * 4, abs=1e-4)


def test_unnormalised_is_reward_minus_quantile():
    adv = compute_advantages(group(3), K=0.4, norm_by_std=False)
    assert adv[0].tolist() == [2.0] * 3 + [0.0] * 13


def test_binary_reward_scales_give_same_advantages():
    for c in range(1, 16):
        for K in (None, 0.2, 0.4, 0.6, 0.8):
            a01 = compute_advantages(group(c, low=0.0), K=K)
            apm = compute_advantages(group(c), K=K)
            torch.testing.assert_close(a01, apm, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("K", [0.2, 0.4, 0.6, 0.8])
def test_quantile_rules_agree_at_G16(K):
    rewards = torch.cat([group(c) for c in range(17)])  # (17, 16): every success count
    lin = compute_advantages(rewards, K=K, quantile_rule="linear")
    rc = compute_advantages(rewards, K=K, quantile_rule="right_continuous")
    assert torch.equal(lin, rc)


def test_quantile_rules_differ_at_half():
    r = group(8)
    assert quantile_baseline_linear(r, 0.5).item() == 0.0  # midpoint of -1 and +1
    assert quantile_baseline_right_continuous(r, 0.5).item() == -1.0
    assert torch.all(compute_advantages(r, K=0.5, quantile_rule="linear") != 0)
    assert torch.all(compute_advantages(r, K=0.5, quantile_rule="right_continuous")[0, 8:] == 0)


def test_right_continuous_definition_by_brute_force():
    # inf{x : F(x) >= K} straight from the definition, over several K and a shaped group.
    r = torch.tensor([[0.3, -1.0, 0.7, 1.0, -0.2, 0.7, -1.0, 0.1, 0.9, 1.0]])
    for K in (0.05, 0.1, 0.25, 0.3, 0.5, 0.7, 0.95):
        xs = sorted(r[0].tolist())
        expected = min(x for x in xs if sum(v <= x for v in xs) / len(xs) >= K)
        assert quantile_baseline_right_continuous(r, K).item() == pytest.approx(expected)


def test_mean_baseline():
    r = torch.tensor([[1.0, 2.0, 3.0, 6.0]])
    # mean 3, unbiased std sqrt((4 + 1 + 0 + 9) / 3) = sqrt(14 / 3)
    expected = (r - 3.0) / (math.sqrt(14 / 3) + 1e-6)
    torch.testing.assert_close(compute_advantages(r, K=None), expected)
    torch.testing.assert_close(compute_advantages(r, K=None, norm_by_std=False), r - 3.0)


def test_shaped_rewards_follow_torch_quantile():
    # Overlong-penalised responses: the quantile interpolates, as in the authors' patch.
    r = torch.tensor([[1.0, 0.6, -1.0, -1.0, -1.4], [1.0, 1.0, 0.5, -1.0, -1.2]])
    K = 0.4
    # Linear at position 0.4 * 4 = 1.6: row 0 sorted [-1.4, -1, -1, .6, 1] -> -1 + 0.6*0 = -1.0;
    # row 1 sorted [-1.2, -1, .5, 1, 1] -> -1 + 0.6 * 1.5 = -0.1.
    b = torch.tensor([[-1.0], [-0.1]])
    expected = (r - b) / (r.std(dim=1, keepdim=True) + 1e-6)
    torch.testing.assert_close(compute_advantages(r, K=K), expected)
    torch.testing.assert_close(compute_advantages(r, K=K), (r - torch.quantile(r, K, dim=1, keepdim=True)) / (r.std(dim=1, keepdim=True) + 1e-6))


def test_group_of_one_and_zero_variance():
    torch.testing.assert_close(compute_advantages(torch.tensor([[0.7], [-1.0]])), torch.tensor([[0.7], [-1.0]]))
    assert torch.all(compute_advantages(group(0)) == 0)
    assert torch.all(compute_advantages(group(16)) == 0)
    assert torch.all(compute_advantages(group(16), K=None) == 0)


def test_bad_arguments():
    with pytest.raises(ValueError, match="K must be strictly between 0 and 1"):
        compute_advantages(group(3), K=1.5)
    with pytest.raises(ValueError, match="K must be strictly between 0 and 1"):
        compute_advantages(group(3), K=0.0)
    with pytest.raises(ValueError, match="quantile_rule"):
        compute_advantages(group(3), quantile_rule="nearest")
    with pytest.raises(ValueError, match=r"\(P, G\)"):
        compute_advantages(torch.ones(16))


def test_pos_and_neg_mask():
    # Mean baseline: every prompt has positive and negative advantages.
    rewards = torch.cat([group(2, G=8), group(7, G=8)])  # hard (p = .25) and easy (p = .875) at K = .4
    acc = rewards > 0
    adv = compute_advantages(rewards, K=None)
    pm = pos_mask(adv, acc, K=0.4)
    assert torch.equal(pm[0], adv[0])  # hard: untouched
    assert torch.all(pm[1, :7] == 0) and torch.equal(pm[1, 7:], adv[1, 7:])  # easy: positives masked
    nm = neg_mask(adv, acc, K=0.4)
    assert torch.equal(nm[1], adv[1])  # easy: untouched
    assert torch.equal(nm[0, :2], adv[0, :2]) and torch.all(nm[0, 2:] == 0)  # hard: negatives masked


def test_regime_boundary_is_inclusive():
    # p = 1 - K exactly (6/10 failures at K = .4 -> p = .6) is hard.
    acc = torch.tensor([[1] * 6 + [0] * 4])
    adv = torch.tensor([[1.0] * 6 + [-1.0] * 4])
    assert torch.equal(pos_mask(adv, acc, K=0.4), adv)


def test_dynamic_sampling_keep():
    acc = torch.tensor([[1, 0, 1, 1], [1, 1, 1, 1], [0, 0, 0, 0], [0, 0, 0, 1]])
    assert dynamic_sampling_keep(acc).tolist() == [True, False, False, True]
    assert dynamic_sampling_keep(torch.tensor([[True]])).tolist() == [False]


def test_advantage_stats():
    rewards = torch.cat([group(3), group(12), group(0), group(16)])  # (4, 16)
    acc = rewards > 0
    adv = compute_advantages(rewards, K=0.4)
    s = advantage_stats(adv, rewards, acc, regime_K=0.4)
    # Non-zero: 3 successes in group 1, 4 failures in group 2 -> 7 of 64.
    assert s["zero_frac"] == pytest.approx(57 / 64)
    assert s["hard_frac"] == pytest.approx(0.5) and s["easy_frac"] == pytest.approx(0.5)
    assert s["zero_var_frac"] == pytest.approx(0.5)
    assert s["max"] == pytest.approx(2.4807, abs=1e-4)
    assert s["min"] == pytest.approx(-2.2361, abs=1e-4)
    assert s["mean"] == pytest.approx((3 * 2.48069 - 4 * 2.23607) / 64, abs=1e-4)


def test_entropy_covariance_from_rank_sums_equals_plain():
    from advantage import covariance_sums, entropy_covariance, entropy_covariance_from_sums

    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(1000, generator=g) * 5
    adv = torch.randn(1000, generator=g)
    adv[torch.rand(1000, generator=g) < 0.8] = 0.0
    plain = entropy_covariance(logp, adv)
    parts = covariance_sums(logp[:300], adv[:300]) + covariance_sums(logp[300:], adv[300:])  # two "ranks"
    fast = entropy_covariance_from_sums(parts)
    for key in ("total", "pos", "neg"):
        assert abs(fast[key] - plain[key]) <= 1e-5 * max(1.0, abs(plain[key])), key
    assert abs(plain["pos"]) > 1e-3 and abs(plain["neg"]) > 1e-3  # both parts exercised
