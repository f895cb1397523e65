"""The paper's two-sided entropy safety (section 4) on a softmax bandit.

A whole response is one action y of 8; pi = softmax(z); the first-order policy-gradient update
is dz_y = eta * pi(y) * (r(y) - b). Cui et al. (2025, arXiv 2505.22617) give

    dH ~= -Cov_{y~pi}(log pi(y), dz_y) = -eta * (F(0) - b*C),
    F(0) = Cov_pi(log pi, pi*r),  C = Cov_pi(log pi, pi) > 0,

so dH increases with the baseline b, and the quantile baseline (0 on hard prompts, 1 on easy
ones) gives the smallest entropy increase on hard prompts and the largest on easy ones.
"""

import pytest
import torch

from advantage import quantile_baseline_linear

ETA = 1e-4


def entropy(z: torch.Tensor) -> torch.Tensor:
    logp = torch.log_softmax(z, dim=-1)
    return -(logp.exp() * logp).sum()


def exact_dH(z, r, b, eta=ETA):
    pi = torch.softmax(z, dim=-1)
    return (entropy(z + eta * pi * (r - b)) - entropy(z)).item()


def cov(pi, x, y):
    return (pi * (x - (pi * x).sum()) * (y - (pi * y).sum())).sum()


def formula_dH(z, r, b, eta=ETA):
    pi = torch.softmax(z, dim=-1)
    logpi = pi.log()
    F0, C = cov(pi, logpi, pi * r), cov(pi, logpi, pi)
    return (-eta * (F0 - b * C)).item()


def bandit(success_actions):
    z = torch.tensor([2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, -1.5], dtype=torch.float64)
    r = torch.zeros(8, dtype=torch.float64)
    r[list(success_actions)] = 1.0
    return z, r


@pytest.mark.parametrize("successes", [(6, 7), (0, 1, 2), (5,), (0, 1, 2, 3, 4)])
@pytest.mark.parametrize("b", [0.0, 0.3, 1.0])
def test_formula_matches_exact_to_second_order(successes, b):
    z, r = bandit(successes)
    err1 = abs(exact_dH(z, r, b, ETA) - formula_dH(z, r, b, ETA))
    err2 = abs(exact_dH(z, r, b, ETA / 2) - formula_dH(z, r, b, ETA / 2))
    assert err1 < 1e-3 * abs(formula_dH(z, r, b, ETA)) + 1e-12  # first order is right
    assert err1 < 50 * ETA**2  # the remainder is O(eta^2) ...
    assert err2 == pytest.approx(err1 / 4, rel=0.05) or err1 < 1e-15  # ... and halves twice per halving of eta


def test_C_is_positive_and_dH_increases_with_baseline():
    z, r = bandit((1, 6))
    pi = torch.softmax(z, dim=-1)
    assert cov(pi, pi.log(), pi) > 0
    dHs = [exact_dH(z, r, b) for b in torch.linspace(0, 1, 21).tolist()]
    assert all(a < b for a, b in zip(dHs, dHs[1:]))


def quantile_baseline_of(z, r, K=0.4, G=16):
    """b_K of a group of G responses whose success count matches the expected rate p = pi(S)."""
    p = (torch.softmax(z, dim=-1) * r).sum().item()
    c = round(p * G)
    group = torch.tensor([[1.0] * c + [0.0] * (G - c)])  # (1, G), rewards in {0, 1}
    return p, quantile_baseline_linear(group, K).item()


def test_quantile_baseline_is_two_sided_entropy_safe():
    grid = torch.linspace(0, 1, 101).tolist()
    hard_z, hard_r = bandit((6, 7))  # the two least likely actions succeed
    easy_z, easy_r = bandit((0, 1, 2))  # the three most likely succeed
    p_hard, b_hard = quantile_baseline_of(hard_z, hard_r)
    p_easy, b_easy = quantile_baseline_of(easy_z, easy_r)
    assert p_hard <= 1 - 0.4 < p_easy
    assert (b_hard, b_easy) == (0.0, 1.0)
    # Hard prompt: the smallest entropy increase of any baseline in [0, 1] (no explosion).
    assert exact_dH(hard_z, hard_r, b_hard) <= min(exact_dH(hard_z, hard_r, b) for b in grid)
    # Easy prompt: the largest (no collapse).
    assert exact_dH(easy_z, easy_r, b_easy) >= max(exact_dH(easy_z, easy_r, b) for b in grid)
    # The mean baseline b = p sits strictly inside on both.
    assert exact_dH(hard_z, hard_r, b_hard) < exact_dH(hard_z, hard_r, p_hard)
    assert exact_dH(easy_z, easy_r, b_easy) > exact_dH(easy_z, easy_r, p_easy)
