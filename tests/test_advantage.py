"""advantage.py against hand-computed numbers (paper v2: the K-quantile of section 3, the gate of Eq. 4,
and section 5.3, Eqs. 7-8)."""

import math

import pytest
import torch

import advantage
from advantage import (
    BASELINES,
    compute_advantages,
    group_std,
    hard_prompts,
    masked_baseline,
    quantile_baseline_linear,
    quantile_baseline_right_continuous,
)
from infra.diagnostics import advantage_stats, entropy_by_sign, entropy_sums_by_sign, gate_violations


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
            baseline = "mean" if K is None else "quantile"
            a01 = compute_advantages(group(c, low=0.0), K=K, baseline=baseline)
            apm = compute_advantages(group(c), K=K, baseline=baseline)
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
    torch.testing.assert_close(compute_advantages(r, K=None, baseline="mean"), expected)
    torch.testing.assert_close(compute_advantages(r, K=None, baseline="mean", norm_by_std=False), r - 3.0)


def test_shaped_rewards_follow_torch_quantile():
    # Overlong-penalised responses: the quantile interpolates, as in the authors' patch.
    r = torch.tensor([[1.0, 0.6, -1.0, -1.0, -1.4], [1.0, 1.0, 0.5, -1.0, -1.2]])
    K = 0.4
    # Linear at position 0.4 * 4 = 1.6: row 0 sorted [-1.4, -1, -1, .6, 1] -> -1 + 0.6*0 = -1.0;
    # row 1 sorted [-1.2, -1, .5, 1, 1] -> -1 + 0.6 * 1.5 = -0.1.
    b = torch.tensor([[-1.0], [-0.1]])
    expected = (r - b) / (r.std(dim=1, keepdim=True) + 1e-6)
    torch.testing.assert_close(compute_advantages(r, K=K), expected)
    torch.testing.assert_close(compute_advantages(r, K=K),
                               (r - torch.quantile(r, K, dim=1, keepdim=True)) / (r.std(dim=1, keepdim=True) + 1e-6))


def test_group_of_one_and_zero_variance():
    # As verl: a lone response has baseline 0 and std 1, so A = r / (1 + eps), or r without the std.
    r = torch.tensor([[0.7], [-1.0]])
    assert torch.equal(compute_advantages(r), r / (1.0 + 1e-6))
    assert torch.equal(compute_advantages(r, K=None, baseline="mean", norm_by_std=False), r)
    assert torch.all(compute_advantages(group(0)) == 0)
    assert torch.all(compute_advantages(group(16)) == 0)
    assert torch.all(compute_advantages(group(16), K=None, baseline="mean") == 0)


def test_bad_arguments():
    with pytest.raises(ValueError, match="K must be None or strictly between 0 and 1"):
        compute_advantages(group(3), K=1.5)
    with pytest.raises(ValueError, match="K must be None or strictly between 0 and 1"):
        compute_advantages(group(3), K=0.0)
    with pytest.raises(ValueError, match="quantile_rule"):
        compute_advantages(group(3), quantile_rule="nearest")
    with pytest.raises(ValueError, match=r"\(P, G\)"):
        compute_advantages(torch.ones(16))


# ----------------------------------------------------------------------------------------------
# POS-MASK / NEG-MASK (paper section 5.3, Eqs. 7-8).
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("low", [-1.0, 0.0])
def test_mask_worked_numbers_hard_prompt(low):
    # 3/16 correct, K = 0.4: hard. The kept term keeps QAE's magnitude (1 - (-1)) / 0.80623.
    r = group(3, low=low)
    pos = compute_advantages(r, K=0.4, mask="pos", acc=r > low)
    neg = compute_advantages(r, K=0.4, mask="neg", acc=r > low)
    assert pos[0, :3] == pytest.approx([2.4807] * 3, abs=1e-4)  # positives stay on hard prompts
    assert pos[0, 3:] == pytest.approx([-2.4807] * 13, abs=1e-4)  # negatives stay everywhere
    assert neg[0, :3] == pytest.approx([2.4807] * 3, abs=1e-4)
    assert torch.all(neg[0, 3:] == 0)  # negatives masked on hard prompts


@pytest.mark.parametrize("low", [-1.0, 0.0])
def test_mask_worked_numbers_easy_prompt(low):
    # 12/16 correct, K = 0.4: easy. Magnitude 2 / 0.89443.
    r = group(12, low=low)
    pos = compute_advantages(r, K=0.4, mask="pos", acc=r > low)
    neg = compute_advantages(r, K=0.4, mask="neg", acc=r > low)
    assert torch.all(pos[0, :12] == 0)  # positives masked on easy prompts
    assert pos[0, 12:] == pytest.approx([-2.2361] * 4, abs=1e-4)
    assert neg[0, :12] == pytest.approx([2.2361] * 12, abs=1e-4)  # positives stay everywhere
    assert neg[0, 12:] == pytest.approx([-2.2361] * 4, abs=1e-4)  # negatives stay on easy prompts


@pytest.mark.parametrize("K", [0.2, 0.4, 0.6, 0.8])
def test_both_masks_are_qae_for_binary_rewards(K):
    rewards = torch.cat([group(c) for c in range(17)])  # (17, 16): every success count
    acc = rewards > 0
    hard = hard_prompts(acc, K)[:, None]  # (17, 1)
    b = masked_baseline(rewards, acc, hard, mask_pos_on_easy=True, mask_neg_on_hard=True)  # (17, 16)
    both = (rewards - b) / (group_std(rewards) + 1e-6)
    qae = compute_advantages(rewards, K=K)
    assert torch.equal(both, qae)
    # Per regime, the one mask that applies there already gives QAE.
    pos = compute_advantages(rewards, K=K, mask="pos", acc=acc)
    neg = compute_advantages(rewards, K=K, mask="neg", acc=acc)
    assert torch.equal(torch.where(hard, neg, pos), qae)


def test_masks_with_overlong_shaped_rewards():
    # Penalised success 0.7 / 0.4, penalised failure -1.3; K = 0.4, G = 5. Unnormalised, by hand:
    # a kept response minus the other class's best reward, a masked one minus its own class's.
    r = torch.tensor([[1.0, 0.7, -1.0, -1.3, -1.0],  # p = 0.4 <= 0.6: hard; b_fail = -1, b_succ = 1
                      [1.0, 0.7, 1.0, 0.4, -1.3]])  # p = 0.8 > 0.6: easy; b_fail = -1.3, b_succ = 1
    acc = torch.tensor([[1, 1, 0, 0, 0], [1, 1, 1, 1, 0]], dtype=torch.bool)
    pos = torch.tensor([[2.0, 1.7, -2.0, -2.3, -2.0], [0.0, -0.3, 0.0, -0.6, -2.3]])
    neg = torch.tensor([[2.0, 1.7, 0.0, -0.3, 0.0], [2.3, 2.0, 2.3, 1.7, -2.3]])
    kw = dict(K=0.4, norm_by_std=False, acc=acc)
    torch.testing.assert_close(compute_advantages(r, mask="pos", **kw), pos)
    torch.testing.assert_close(compute_advantages(r, mask="neg", **kw), neg)
    # Group means -0.32 and 0.36; squared deviations sum to 4.668 and 3.692; unbiased: / (G - 1).
    sigma = torch.tensor([[math.sqrt(4.668 / 4)], [math.sqrt(3.692 / 4)]])
    torch.testing.assert_close(compute_advantages(r, K=0.4, mask="pos", acc=acc), pos / (sigma + 1e-6))
    # Hard row: QAE's quantile lands on b_fail = -1 (position 1.6 of [-1.3, -1, -1, .7, 1]), so NEG-MASK
    # (the mask that applies on hard prompts) equals QAE there. Easy row: the quantile interpolates,
    # 0.4 + 0.6 * (0.7 - 0.4) = 0.58, where both masks use b_succ = 1 (POS-MASK's row).
    qae = compute_advantages(r, K=0.4, norm_by_std=False)
    torch.testing.assert_close(qae[0], neg[0])
    torch.testing.assert_close(qae[1], r[1] - 0.58)
    b = masked_baseline(r, acc, hard_prompts(acc, 0.4)[:, None], mask_pos_on_easy=True, mask_neg_on_hard=True)
    torch.testing.assert_close(r - b, torch.stack([neg[0], pos[1]]))


def test_mask_regime_boundary_is_inclusive():
    # p = 1 - K exactly (6/10 correct at K = 0.4) is hard: POS-MASK keeps its positives.
    r = torch.tensor([[1.0] * 6 + [-1.0] * 4])
    adv = compute_advantages(r, K=0.4, norm_by_std=False, mask="pos", acc=r > 0)
    assert adv[0].tolist() == [2.0] * 6 + [-2.0] * 4


def test_mask_groups_without_one_class():
    # All correct / all wrong: the missing class's best reward is the present one's; no signal.
    r = torch.cat([group(8, G=8), group(0, G=8)])
    for mask in ("pos", "neg"):
        assert torch.all(compute_advantages(r, mask=mask, acc=r > 0) == 0)


def test_mask_bad_arguments():
    r = group(3)
    with pytest.raises(ValueError, match=r"K must be set \(0 < K < 1\) for the quantile baseline"):
        compute_advantages(r, K=None, mask="pos", acc=r > 0)
    with pytest.raises(ValueError, match="needs acc"):
        compute_advantages(r, mask="neg")
    with pytest.raises(ValueError, match="acc must have the shape"):
        compute_advantages(r, mask="neg", acc=torch.ones(1, 8, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask must be one of"):
        compute_advantages(r, mask="both", acc=r > 0)
    with pytest.raises(ValueError, match="masks the quantile baseline's regimes"):
        compute_advantages(r, K=None, mask="pos", acc=r > 0, baseline="mean")
    with pytest.raises(ValueError, match=r"penalty \(the baseline over the verdicts\) cannot go with mask"):
        compute_advantages(r, mask="pos", acc=r > 0, penalty=torch.zeros_like(r))


# ----------------------------------------------------------------------------------------------
# The baseline registry.
# ----------------------------------------------------------------------------------------------


def test_baseline_names_and_defaults():
    # The baseline is its name alone; K is set exactly when the baseline takes it.
    r = torch.cat([group(3), group(12)])
    assert torch.equal(compute_advantages(r, K=0.4, baseline="quantile"), compute_advantages(r))  # the default
    assert advantage.settings_of("quantile") == ["K", "quantile_rule"] and advantage.settings_of("mean") == []
    with pytest.raises(ValueError, match=r"must be one of \['mean', 'quantile'\], got 'median'"):
        compute_advantages(r, baseline="median")
    with pytest.raises(ValueError, match=r"K must be set \(0 < K < 1\) for the quantile baseline, got None"):
        compute_advantages(r, K=None)  # no longer the mean: the baseline is not chosen by K
    with pytest.raises(ValueError, match=r"K \(0.4\) is not used by the mean baseline, which takes no K"):
        compute_advantages(r, baseline="mean")


def test_a_fork_adds_the_median_baseline(monkeypatch):
    # A baseline without K: one function and one registry entry, called with the reward alone.
    def median_baseline(reward: torch.Tensor) -> torch.Tensor:
        return reward.median(dim=1, keepdim=True).values  # (P, 1); the lower middle for even G

    monkeypatch.setitem(BASELINES, "median", median_baseline)
    r = torch.tensor([[1.0, -1.0, -1.0, 1.0], [1.0, 1.0, 1.0, -1.0], [3.0, 0.0, 1.0, 2.0]])
    # Medians -1, 1, 1; unbiased stds sqrt(4/3), 1, sqrt(5/3).
    adv = compute_advantages(r, K=None, baseline="median")
    assert adv[0].tolist() == pytest.approx([1.7321, 0, 0, 1.7321], abs=1e-4)
    assert adv[1].tolist() == pytest.approx([0, 0, 0, -2.0], abs=1e-4)
    assert adv[2].tolist() == pytest.approx([1.5492, -0.7746, 0, 0.7746], abs=1e-4)
    assert compute_advantages(r, K=None, baseline="median", norm_by_std=False)[2].tolist() == [2.0, -1.0, 0.0, 1.0]
    assert "median" in BASELINES and advantage.BASELINES is BASELINES
    with pytest.raises(ValueError, match="not used by the median baseline"):
        compute_advantages(r, K=0.4, baseline="median")


def test_a_forked_baseline_gets_K_and_the_rule_it_names(monkeypatch):
    seen = []

    def spy(reward, K):  # takes K, not quantile_rule
        seen.append(K)
        return reward.amin(dim=1, keepdim=True)  # (P, 1)

    monkeypatch.setitem(BASELINES, "spy", spy)
    assert advantage.settings_of("spy") == ["K"]
    compute_advantages(group(3), K=0.3, baseline="spy", quantile_rule="right_continuous")
    assert seen == [0.3]
    with pytest.raises(ValueError, match="K must be set"):
        compute_advantages(group(3), K=None, baseline="spy")


def test_advantage_stats():
    rewards = torch.cat([group(3), group(12), group(0), group(16)])  # (4, 16)
    acc = rewards > 0
    adv = compute_advantages(rewards, K=0.4)
    s = advantage_stats(adv, rewards, acc, hard=hard_prompts(acc, 0.4))
    # Non-zero: 3 successes in group 1, 4 failures in group 2 -> 7 of 64.
    assert s["zero_frac"] == pytest.approx(57 / 64)
    assert s["hard_frac"] == pytest.approx(0.5) and s["easy_frac"] == pytest.approx(0.5)
    assert s["zero_var_frac"] == pytest.approx(0.5)
    assert s["gate_violations"] == 0.0  # binary rewards at G = 16, K = 0.4: the gate holds
    assert s["max"] == pytest.approx(2.4807, abs=1e-4)
    assert s["min"] == pytest.approx(-2.2361, abs=1e-4)
    assert s["mean"] == pytest.approx((3 * 2.48069 - 4 * 2.23607) / 64, abs=1e-4)


def entropy_covariance(logp: torch.Tensor, adv: torch.Tensor) -> dict[str, float]:
    """The plain covariance diagnostic over one set of tokens: Cov(logp, A) and its parts from A > 0
    and A < 0 tokens. logp, adv: (N,)."""
    dl, da = logp - logp.mean(), adv - adv.mean()  # (N,), (N,)
    prod = dl * da / logp.numel()  # (N,)
    return {"total": prod.sum().item(), "pos": prod[adv > 0].sum().item(), "neg": prod[adv < 0].sum().item()}


def test_entropy_covariance_from_rank_sums_equals_plain():
    from infra.diagnostics import covariance_sums, entropy_covariance_from_sums

    hand = entropy_covariance(torch.tensor([-1.0, -3.0, -2.0, -2.0]), torch.tensor([1.0, -1.0, 0.0, 0.0]))
    assert hand == {"total": 0.5, "pos": 0.25, "neg": 0.25}  # mean logp -2, mean A 0: (1*1 + 1*1) / 4

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


def test_entropy_by_sign_hand_example_and_empty_sign():
    h = torch.tensor([0.5, 1.5, 2.0, 0.25, 0.75])
    adv = torch.tensor([1.0, 1.0, -2.0, 0.0, 0.0])
    sums = entropy_sums_by_sign(h, adv)
    assert sums.tolist() == [[2.0, 2.0], [2.0, 1.0], [1.0, 2.0]]
    assert entropy_by_sign(sums) == {"pos": 1.0, "neg": 2.0, "zero": 0.5}
    assert math.isnan(entropy_by_sign(entropy_sums_by_sign(h[:3], adv[:3]))["zero"])


def test_entropy_by_sign_weighted_means_give_overall_mean_and_ranks_add():
    g = torch.Generator().manual_seed(1)
    h = torch.rand(1000, generator=g, dtype=torch.float64) * 3
    adv = torch.randn(1000, generator=g, dtype=torch.float64)
    adv[torch.rand(1000, generator=g) < 0.7] = 0.0
    sums = entropy_sums_by_sign(h[:400], adv[:400]) + entropy_sums_by_sign(h[400:], adv[400:])  # two "ranks"
    torch.testing.assert_close(sums, entropy_sums_by_sign(h, adv), rtol=1e-14, atol=0)
    means, counts = entropy_by_sign(sums), sums[:, 1].tolist()
    assert sum(counts) == 1000 and min(counts) > 0
    weighted = sum(means[s] * n for s, n in zip(("pos", "neg", "zero"), counts)) / sum(counts)
    assert weighted == pytest.approx(h.mean().item(), rel=1e-14, abs=0)


# ----------------------------------------------------------------------------------------------
# The gate: where the quantile is taken (algorithm.quantile_of) and the responses on its wrong side.
# ----------------------------------------------------------------------------------------------


def overlong_group():
    """G = 16: 7 overlong failures (score -1, penalty -0.5), 3 plain failures, 6 successes."""
    score = torch.tensor([[-1.0] * 10 + [1.0] * 6])  # (1, 16)
    penalty = torch.tensor([[-0.5] * 7 + [0.0] * 9])  # (1, 16)
    return score + penalty, penalty, score > 0


def test_shaped_quantile_gives_a_wrong_answer_a_positive_advantage_and_verdict_does_not():
    reward, penalty, acc = overlong_group()
    shaped = advantage.compute_advantages(reward, K=0.4)  # b = the 7th smallest of the shaped rewards, -1.5
    # mean -7.5/16; sum of squared deviations 21.234375; std sqrt(21.234375 / 15) = 1.18981
    std = math.sqrt(21.234375 / 15)
    assert shaped[0, 7:10].tolist() == pytest.approx([0.5 / (std + 1e-6)] * 3, abs=1e-6)
    assert shaped[0, 7].item() == pytest.approx(0.42, abs=5e-3)
    assert gate_violations(shaped, acc) == pytest.approx(3 / 16)
    verdict = advantage.compute_advantages(reward, K=0.4, penalty=penalty)  # b over the scores: -1
    assert verdict[0, 7:10].tolist() == [0.0, 0.0, 0.0]
    assert verdict[0, :7].tolist() == pytest.approx([-0.5 / (std + 1e-6)] * 7, abs=1e-6)  # the penalty stays
    assert verdict[0, 10:].tolist() == pytest.approx([2.0 / (std + 1e-6)] * 6, abs=1e-6)
    assert gate_violations(verdict, acc) == 0.0


@pytest.mark.parametrize("K", [0.2, 0.4, 0.6, 0.8])
def test_the_gate_at_G8_holds_for_right_continuous_and_breaks_for_linear(K):
    """tiny_qae.yaml's G = 8: K * 7 is not whole, so at one success count the linear rule lands between
    -1 and +1 and both classes move (two regimes at once); the right-continuous rule always lands on a
    reward, so one class keeps A = 0, on the side p <= 1 - K says. Neither puts a sign on the wrong side."""
    both_move = []
    for correct in range(1, 8):
        reward = torch.tensor([[1.0] * correct + [-1.0] * (8 - correct)])
        acc = reward > 0
        right = advantage.compute_advantages(reward, K=K, quantile_rule="right_continuous")  # (1, 8)
        hard = bool(advantage.hard_prompts(acc, K))
        assert (right[~acc] == 0).all() if hard else (right[acc] == 0).all()
        linear = advantage.compute_advantages(reward, K=K)
        assert gate_violations(right, acc) == gate_violations(linear, acc) == 0.0
        if (linear != 0).all():
            both_move.append(correct)
    assert both_move == [8 - (math.floor(K * 7) + 1)]  # K = 0.4: 5 of 8 correct, b = -1 + 0.8 * 2 = 0.6


def test_penalty_shape_is_checked():
    with pytest.raises(ValueError, match="penalty must have the shape"):
        advantage.compute_advantages(torch.zeros(2, 4), K=0.4, penalty=torch.zeros(2, 3))
