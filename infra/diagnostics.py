"""What the advantage and the policy did this step, as numbers for the logger: the advantage's
statistics and regime split, the responses on the wrong side of QAE's gate, and the entropy
diagnostics split by advantage sign, as sums that add up across ranks.

    advantage_stats(adv, reward, acc, hard)       # adv/* metrics, (P, G) inputs and (P,) hard prompts
    entropy_sums_by_sign(entropy, adv)            # -> entropy_by_sign after the ranks' sums
    covariance_sums(logp, adv)                    # -> entropy_covariance_from_sums likewise (Cov(logp, A))

The covariance is the entropy dynamics of Cui et al. 2025 (arXiv 2505.22617), which the paper's
section 4 builds on: to first order a policy-gradient step changes entropy by -lr * Cov(logp, A).
"""

from __future__ import annotations

import torch


def gate_violations(adv: torch.Tensor, acc: torch.Tensor) -> float:
    """Fraction of responses on the wrong side of QAE's gate: wrong ones with A > 0 plus correct
    ones with A < 0 (`algorithm.quantile_of`). (P, G) each -> float.

    >>> gate_violations(torch.tensor([[0.42, 0.], [2., -1.]]), torch.tensor([[0, 0], [1, 0]]))  # a wrong +0.42
    0.25
    """
    acc = acc.bool()  # (P, G)
    wrong_side = (~acc & (adv > 0)) | (acc & (adv < 0))  # (P, G)
    return wrong_side.float().mean().item()


def advantage_stats(adv: torch.Tensor, reward: torch.Tensor, acc: torch.Tensor, hard: torch.Tensor) -> dict[str, float]:
    """What the advantage did this step, all over the (P, G) batch:

    - zero_frac:       fraction of responses with advantage exactly 0 (paper, abstract: ~80% at
                       a tuned K)
    - hard_frac:       fraction of prompts in the hard regime (`hard`, (P,) bool: advantage.hard_prompts at
                       algorithm.regime_K, p <= 1 - K)
    - easy_frac:       fraction of the other prompts
    - zero_var_frac:   fraction of groups whose rewards are all equal (no signal under any baseline)
    - mean/min/max of the advantage over responses
    """
    return {
        "zero_frac": (adv == 0).float().mean().item(),
        "hard_frac": hard.float().mean().item(),
        "easy_frac": (~hard).float().mean().item(),
        "zero_var_frac": (reward.amax(dim=1) == reward.amin(dim=1)).float().mean().item(),
        "gate_violations": gate_violations(adv, acc),
        "mean": adv.mean().item(),
        "min": adv.min().item(),
        "max": adv.max().item(),
    }


# ----------------------------------------------------------------------------------------------
# Entropy diagnostics over response tokens, as sums that add up across ranks.
# ----------------------------------------------------------------------------------------------

SIGNS = ("pos", "neg", "zero")


def entropy_sums_by_sign(entropy: torch.Tensor, adv: torch.Tensor) -> torch.Tensor:
    """Policy entropy split by the sign of the token's advantage (paper Figs. 4a and 5b), as sums.

    entropy, adv: (N,) over response tokens (adv repeated per token of its response) -> (3, 2):
    rows A > 0 / A < 0 / A = 0 (SIGNS), columns sum of entropy, token count. Sum the result over
    ranks, then `entropy_by_sign`.

    >>> entropy_sums_by_sign(torch.tensor([1., 3., 2., 4.]), torch.tensor([2., 2., -1., 0.]))
    tensor([[4., 2.],
            [2., 1.],
            [4., 1.]], dtype=torch.float64)
    """
    h = entropy.double()  # (N,)
    rows = [adv > 0, adv < 0, adv == 0]  # (N,) bool each
    return torch.stack([torch.stack([h[m].sum(), m.sum().double()]) for m in rows])  # (3, 2)


def entropy_by_sign(sums: torch.Tensor) -> dict[str, float]:
    """Mean entropy of positive-, negative- and zero-advantage tokens from `entropy_sums_by_sign`
    (summed over ranks); nan for a sign with no tokens.

    >>> entropy_by_sign(torch.tensor([[4., 2.], [2., 1.], [0., 0.]], dtype=torch.float64))
    {'pos': 2.0, 'neg': 2.0, 'zero': nan}
    """
    means = sums[:, 0] / sums[:, 1]  # (3,); 0/0 = nan for an empty sign
    return {sign: means[i].item() for i, sign in enumerate(SIGNS)}


def covariance_sums(logp: torch.Tensor, adv: torch.Tensor) -> torch.Tensor:
    """Sufficient statistics of the covariance diagnostic that add up across ranks.

    logp, adv: (N,) -> (3, 4): rows all / positive-A / negative-A tokens, columns
    sum(logp * A), sum(logp), sum(A), count. Sum over ranks, then `entropy_covariance_from_sums`.
    """
    rows = [torch.ones_like(adv, dtype=torch.bool), adv > 0, adv < 0]
    lp, a = logp.double(), adv.double()
    return torch.stack([torch.stack([(lp * a)[m].sum(), lp[m].sum(), a[m].sum(), m.sum().double()]) for m in rows])


def entropy_covariance_from_sums(sums: torch.Tensor) -> dict[str, float]:
    """The covariance form of the entropy dynamics of Cui et al. 2025 (arXiv 2505.22617), which the
    paper's section 4 builds on (not one of the paper's plotted metrics): to first order a
    policy-gradient step changes entropy by -lr * Cov(logp, A), the covariance over sampled tokens
    of their log-probability and advantage; split into the parts of positive- and negative-advantage
    tokens (zero-advantage tokens add (logp - mean) * (0 - mean A) / N). From `covariance_sums`
    summed over ranks: over a token subset S, sum_S (l - mean l)(a - mean a) / N
    = (sum_S l*a - mean_a * sum_S l - mean_l * sum_S a + |S| * mean_l * mean_a) / N.

    >>> logp, adv = torch.tensor([-1., -3., -2., -2.]), torch.tensor([1., -1., 0., 0.])
    >>> d = entropy_covariance_from_sums(covariance_sums(logp, adv))
    >>> d["total"], d["pos"], d["neg"]
    (0.5, 0.25, 0.25)
    """
    n = sums[0, 3].clamp(min=1)
    mean_l, mean_a = sums[0, 1] / n, sums[0, 2] / n
    part = (sums[:, 0] - mean_a * sums[:, 1] - mean_l * sums[:, 2] + sums[:, 3] * mean_l * mean_a) / n  # (3,)
    return {"total": part[0].item(), "pos": part[1].item(), "neg": part[2].item()}
