"""Group-relative advantages: the mean baseline (GRPO/DAPO) and the K-quantile baseline (QAE).

For one prompt with G sampled responses and scalar rewards r_1..r_G (after overlong shaping):

    b      = mean(r_1..r_G)                 # GRPO / DAPO
    b_K    = Quantile_K(r_1..r_G)           # QAE (paper eq. 4), K = 0.4 in all main experiments
    sigma  = std(r_1..r_G)                  # unbiased (N-1), about the MEAN, even under QAE
    A_i    = (r_i - b) / (sigma + eps)      # norm_by_std=True (verl default)
    A_i    = r_i - b                        # norm_by_std=False (Dr. GRPO style)

With binary rewards the quantile baseline is a two-regime gate on the prompt's success rate p:
hard prompts (p <= 1 - K) get b_K = low reward, so failures get A = 0 and the rare successes a
positive advantage; easy prompts (p > 1 - K) get b_K = high reward, so successes get A = 0 and
the remaining failures a negative advantage. Every token of a response later receives its
response's scalar advantage.

Departures and choices, numbered:
1. Two quantile rules. "linear" is `torch.quantile`'s default (position K*(G-1), interpolating),
   which is what the authors' patch on verl runs. "right_continuous" is the paper's text,
   inf{x : F(x) >= K} = the ceil(K*G)-th smallest reward. They agree for G = 16 and
   K in {0.2, 0.4, 0.6, 0.8}; they differ e.g. at G = 16, K = 0.5 with 8/16 correct, where
   "linear" takes the midpoint of -1 and +1 and every response gets a non-zero advantage.
2. The authors' code silently falls back to the mean when K <= 0 or K >= 1. Here such a K is
   an error: the mean baseline is asked for explicitly with K=None.
3. With shaped (non-binary) rewards the quantile interpolates between reward values and the
   clean gate holds only for unpenalised responses. That is what the reference code does; it
   is kept.
4. A group of size 1 gets baseline 0 and std 1 (as verl), so its advantage is its reward.
"""

from __future__ import annotations

import math

import torch

QUANTILE_RULES = ("linear", "right_continuous")


# ----------------------------------------------------------------------------------------------
# Baselines: one function per variant, each (P, G) -> (P, 1).
# ----------------------------------------------------------------------------------------------


def mean_baseline(reward: torch.Tensor) -> torch.Tensor:
    """GRPO/DAPO baseline: the group mean (verl core_algos.compute_grpo_outcome_advantage).

    >>> mean_baseline(torch.tensor([[1., -1., -1., -1.]]))
    tensor([[-0.5000]])
    """
    return reward.mean(dim=1, keepdim=True)  # (P, 1)


def quantile_baseline_linear(reward: torch.Tensor, K: float) -> torch.Tensor:
    """QAE baseline as the authors' code computes it: `torch.quantile(scores, K)`, i.e. linear
    interpolation between the order statistics at position K*(G-1).

    >>> quantile_baseline_linear(torch.tensor([[-1., -1., 1., 1.]]), 0.5)  # midpoint of -1 and 1
    tensor([[0.]])
    """
    return torch.quantile(reward, K, dim=1, keepdim=True)  # (P, 1)


def quantile_baseline_right_continuous(reward: torch.Tensor, K: float) -> torch.Tensor:
    """QAE baseline as the paper defines it: inf{x : F(x) >= K}, F the empirical CDF of the
    group, i.e. the ceil(K*G)-th smallest reward (1-based).

    >>> quantile_baseline_right_continuous(torch.tensor([[-1., -1., 1., 1.]]), 0.5)
    tensor([[-1.]])
    """
    G = reward.shape[1]
    # The 1e-9 keeps K*G = 3.0000000000000004 (K=0.3, G=10) from rounding up to the 4th value.
    j = max(1, math.ceil(K * G - 1e-9))  # 1-based rank of the quantile
    return reward.sort(dim=1).values[:, j - 1 : j]  # (P, 1)


def group_std(reward: torch.Tensor) -> torch.Tensor:
    """Unbiased (N-1) std of each group about its mean, as torch.std; also used under QAE."""
    return reward.std(dim=1, keepdim=True)  # (P, 1)


# ----------------------------------------------------------------------------------------------
# The advantage itself (public API: forks and external checks call exactly this signature).
# ----------------------------------------------------------------------------------------------


def compute_advantages(
    rewards: torch.Tensor,
    K: float | None = 0.4,
    norm_by_std: bool = True,
    eps: float = 1e-6,
    quantile_rule: str = "linear",
) -> torch.Tensor:
    """Group-relative advantages A = (r - b) / (sigma + eps), shape (P, G) -> (P, G).

    Args:
        rewards: (P, G) scalar rewards, P prompts with G responses each.
        K: quantile level of the baseline, strictly between 0 and 1 (QAE; the paper uses 0.4),
            or None for the group mean (GRPO/DAPO).
        norm_by_std: divide by the group std (verl `norm_adv_by_std_in_grpo`, default on).
        eps: added to the std, as in verl (1e-6).
        quantile_rule: "linear" (torch.quantile, the authors' code) or "right_continuous"
            (the paper's inf{x : F(x) >= K}).

    >>> r = torch.tensor([[1., -1., -1., -1.], [1., 1., 1., -1.]])
    >>> compute_advantages(r, K=0.4)  # hard prompt: success rewarded; easy: failure penalised
    tensor([[ 2.0000,  0.0000,  0.0000,  0.0000],
            [ 0.0000,  0.0000,  0.0000, -2.0000]])
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must have shape (P, G), got {tuple(rewards.shape)}")
    if quantile_rule not in QUANTILE_RULES:
        raise ValueError(f"quantile_rule must be one of {QUANTILE_RULES}, got {quantile_rule!r}")
    if K is not None and not 0.0 < K < 1.0:
        raise ValueError(f"K must be strictly between 0 and 1 (or None for the mean baseline), got {K}")
    reward = rewards.float()  # (P, G)
    P, G = reward.shape
    if G == 1:  # as verl: a lone response has baseline 0 and std 1
        return reward.clone()  # (P, 1)

    if K is None:
        baseline = mean_baseline(reward)  # (P, 1)
    elif quantile_rule == "linear":
        baseline = quantile_baseline_linear(reward, K)  # (P, 1)
    else:
        baseline = quantile_baseline_right_continuous(reward, K)  # (P, 1)

    adv = reward - baseline  # (P, G)
    if norm_by_std:
        adv = adv / (group_std(reward) + eps)  # (P, G); sigma about the mean, as the reference code
    return adv


# ----------------------------------------------------------------------------------------------
# Regimes and the paper's ablations (POS-MASK / NEG-MASK).
# ----------------------------------------------------------------------------------------------


def success_rate(acc: torch.Tensor) -> torch.Tensor:
    """Per-prompt success rate p from per-response correctness, (P, G) -> (P,)."""
    return acc.float().mean(dim=1)  # (P,)


def hard_prompts(acc: torch.Tensor, K: float) -> torch.Tensor:
    """Prompts in the hard regime, p <= 1 - K, where b_K is the low reward. (P, G) -> (P,) bool."""
    return success_rate(acc) <= 1.0 - K + 1e-9  # (P,); the 1e-9 absorbs float error in 1 - K


def pos_mask(adv: torch.Tensor, acc: torch.Tensor, K: float) -> torch.Tensor:
    """POS-MASK ablation: keep positive advantages only on hard prompts, negative ones everywhere.

    >>> adv = torch.tensor([[1., -1.], [1., -1.]]); acc = torch.tensor([[1, 0], [1, 1]])
    >>> pos_mask(adv, acc, K=0.4)  # prompt 2 is easy (p = 1 > 0.6): its +1 is masked
    tensor([[ 1., -1.],
            [ 0., -1.]])
    """
    hard = hard_prompts(acc, K)[:, None]  # (P, 1)
    return torch.where((adv > 0) & ~hard, torch.zeros_like(adv), adv)  # (P, G)


def neg_mask(adv: torch.Tensor, acc: torch.Tensor, K: float) -> torch.Tensor:
    """NEG-MASK ablation: keep negative advantages only on easy prompts, positive ones everywhere."""
    easy = ~hard_prompts(acc, K)[:, None]  # (P, 1)
    return torch.where((adv < 0) & ~easy, torch.zeros_like(adv), adv)  # (P, G)


# ----------------------------------------------------------------------------------------------
# DAPO dynamic sampling and per-step statistics.
# ----------------------------------------------------------------------------------------------


def dynamic_sampling_keep(acc: torch.Tensor) -> torch.Tensor:
    """DAPO dynamic sampling: keep a prompt only if its responses' correctness is not all equal
    (std > 0). Uses `acc`, not the shaped score, as DAPO's `metric: acc`. (P, G) -> (P,) bool.

    >>> dynamic_sampling_keep(torch.tensor([[1, 0, 0], [1, 1, 1], [0, 0, 0]]))
    tensor([ True, False, False])
    """
    acc = acc.bool()  # (P, G)
    return acc.any(dim=1) & ~acc.all(dim=1)  # (P,)


def advantage_stats(adv: torch.Tensor, reward: torch.Tensor, acc: torch.Tensor, regime_K: float) -> dict[str, float]:
    """What the advantage did this step (QAE_SPEC section 2), all over the (P, G) batch:

    - zero_frac:       fraction of responses with advantage exactly 0 (paper: ~80% at K = 0.4)
    - hard_frac:       fraction of prompts with success rate p <= 1 - regime_K
    - easy_frac:       fraction of prompts with p > 1 - regime_K
    - zero_var_frac:   fraction of groups whose rewards are all equal (no signal under any baseline)
    - mean/min/max of the advantage over responses
    """
    hard = hard_prompts(acc, regime_K)  # (P,)
    return {
        "zero_frac": (adv == 0).float().mean().item(),
        "hard_frac": hard.float().mean().item(),
        "easy_frac": (~hard).float().mean().item(),
        "zero_var_frac": (reward.amax(dim=1) == reward.amin(dim=1)).float().mean().item(),
        "mean": adv.mean().item(),
        "min": adv.min().item(),
        "max": adv.max().item(),
    }


def entropy_covariance(logp: torch.Tensor, adv: torch.Tensor) -> dict[str, float]:
    """The paper's entropy diagnostic (QAE_SPEC section 6; Cui et al. 2025): to first order a
    policy-gradient step changes entropy by -lr * Cov(logp, A), the covariance over sampled
    tokens of their log-probability and advantage. Split into the parts contributed by positive-
    and negative-advantage tokens (zero-advantage tokens add (logp - mean) * (0 - mean A) / N).

    logp, adv: (N,) over response tokens (adv repeated per token of its response).

    >>> d = entropy_covariance(torch.tensor([-1., -3., -2., -2.]), torch.tensor([1., -1., 0., 0.]))
    >>> d["total"], d["pos"], d["neg"]
    (0.5, 0.25, 0.25)
    """
    dl, da = logp - logp.mean(), adv - adv.mean()  # (N,), (N,)
    prod = dl * da / logp.numel()  # (N,)
    return {"total": prod.sum().item(), "pos": prod[adv > 0].sum().item(), "neg": prod[adv < 0].sum().item()}


def covariance_sums(logp: torch.Tensor, adv: torch.Tensor) -> torch.Tensor:
    """Sufficient statistics of `entropy_covariance` that add up across ranks.

    logp, adv: (N,) -> (3, 4): rows all / positive-A / negative-A tokens, columns
    sum(logp * A), sum(logp), sum(A), count. `entropy_covariance_from_sums` of the sum over ranks
    equals `entropy_covariance` of the concatenated tokens.
    """
    rows = [torch.ones_like(adv, dtype=torch.bool), adv > 0, adv < 0]
    l, a = logp.double(), adv.double()
    return torch.stack([torch.stack([(l * a)[m].sum(), l[m].sum(), a[m].sum(), m.sum().double()]) for m in rows])


def entropy_covariance_from_sums(sums: torch.Tensor) -> dict[str, float]:
    """`entropy_covariance` from `covariance_sums` (summed over ranks).

    Over a token subset S, sum_S (l - mean l)(a - mean a) / N
    = (sum_S l*a - mean_a * sum_S l - mean_l * sum_S a + |S| * mean_l * mean_a) / N.
    """
    n = sums[0, 3].clamp(min=1)
    mean_l, mean_a = sums[0, 1] / n, sums[0, 2] / n
    part = (sums[:, 0] - mean_a * sums[:, 1] - mean_l * sums[:, 2] + sums[:, 3] * mean_l * mean_a) / n  # (3,)
    return {"total": part[0].item(), "pos": part[1].item(), "neg": part[2].item()}
