"""Group-relative advantages: the mean baseline (GRPO/DAPO), the K-quantile baseline (QAE) and the
paper's POS-MASK / NEG-MASK ablations; DAPO's dynamic-sampling filter is rollout.dynamic_sampling_keep.
The per-step advantage and entropy diagnostics are infra/diagnostics.py's.

For one prompt with G sampled responses and scalar rewards r_1..r_G (after overlong shaping):

    b      = mean(r_1..r_G)                 # GRPO / DAPO
    b_K    = Quantile_K(r_1..r_G)           # QAE (v2 section 4.1, defined above Eq. 3), K = 0.4
    sigma  = std(r_1..r_G)                  # unbiased (G-1), about the MEAN, even under QAE (choice 7)
    A_i    = (r_i - b) / (sigma + eps)      # norm_by_std=True (verl default)
    A_i    = r_i - b                        # norm_by_std=False (Dr. GRPO style)

With binary rewards the quantile baseline is a two-regime gate on the prompt's success rate p:
hard prompts (p <= 1 - K) get b_K = low reward, so failures get A = 0 and the rare successes a
positive advantage; easy prompts (p > 1 - K) get b_K = high reward, so successes get A = 0 and
the remaining failures a negative advantage. Every token of a response later receives its
response's scalar advantage.

The paper reads this gate as masking (section 5.3, Eqs. 7-8): start from the two-sided signal in
which every success gets +(r_succ - r_fail)/sigma and every failure -(r_succ - r_fail)/sigma;
QAE masks the positives on easy prompts and the negatives on hard prompts. The ablations apply
one mask each: POS-MASK masks only the positives on easy prompts (negatives stay on every
prompt), NEG-MASK masks only the negatives on hard prompts (positives stay on every prompt).

Baselines are looked up by name in BASELINES, so a fork adds one with a function and an entry there; an entry
gets the settings its parameters name (`K`, `quantile_rule`), and `check_settings` holds the rules on
them for compute_advantages and the config alike.

Choices, numbered (a departure from the paper or verl says so; reasons in docs/algorithm.md, "Choices by module"):
1. `algorithm.quantile_rule`: "linear" is torch.quantile's interpolation at K*(G-1), what the authors' verl
   patch runs; "right_continuous" is the paper's inf{x : F(x) >= K}, the ceil(K*G)-th smallest reward.
2. K <= 0 or K >= 1 is an error, where the authors' code silently falls back to the mean: the mean baseline
   is asked for by name (baseline="mean", K=None); the baseline is never chosen by K.
3. With shaped (non-binary) rewards the quantile interpolates between reward values, as the reference code
   does, so the clean gate holds only for unpenalised responses.
4. A group of size 1 gets baseline 0 and std 1, as verl: its advantage is r / (1 + eps), or r without the std.
5. The masks (`algorithm.adv_mask`, masked_baseline) give each response its own baseline: a kept response the
   best reward of the other class (by the verdicts `acc`), a masked one that of its own; sigma is QAE's.
6. The masks' regime is the paper's p <= 1 - K on the verdicts, whatever `quantile_rule` is.
7. group_std is the unbiased std (divides by G - 1), as verl and the authors' patch; the paper's appendix
   analysis writes the population variance p(1 - p).
8. `algorithm.quantile_of`: b over the shaped rewards (`shaped`, default, as verl) or the verifier's scores.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable

import torch

# ----------------------------------------------------------------------------------------------
# Baselines: one pure function per variant, each (P, G) -> (P, 1).
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


QUANTILE_RULES = {"linear": quantile_baseline_linear, "right_continuous": quantile_baseline_right_continuous}


def quantile_baseline(reward: torch.Tensor, K: float, quantile_rule: str = "linear") -> torch.Tensor:
    """QAE baseline b_K under `quantile_rule` (choice 1), (P, G) -> (P, 1)."""
    return QUANTILE_RULES[quantile_rule](reward, K)  # (P, 1)


# The registry compute_advantages looks baselines up in: name -> fn(reward, ...) with reward (P, G),
# returning (P, 1). An entry is called with the settings its parameters name, out of `K` and
# `quantile_rule`: `mean_baseline(reward)` gets neither, `quantile_baseline(reward, K, quantile_rule)`
# both. A fork adds a baseline with one function and one entry here.
BASELINES: dict[str, Callable[..., torch.Tensor]] = {"mean": mean_baseline, "quantile": quantile_baseline}


def settings_of(baseline: str) -> list[str]:
    """The settings the registered baseline takes, out of K and quantile_rule: its parameters' names.

    >>> settings_of("quantile"), settings_of("mean")
    (['K', 'quantile_rule'], [])
    """
    return [name for name in ("K", "quantile_rule") if name in inspect.signature(BASELINES[baseline]).parameters]


def group_std(reward: torch.Tensor) -> torch.Tensor:
    """Unbiased (G-1) std of each group about its mean, as torch.std; also used under QAE."""
    return reward.std(dim=1, keepdim=True)  # (P, 1)


# ----------------------------------------------------------------------------------------------
# Regimes and the masks of the paper's ablation (section 5.3, Eqs. 7-8).
# ----------------------------------------------------------------------------------------------


def success_rate(acc: torch.Tensor) -> torch.Tensor:
    """Per-prompt success rate p from per-response correctness, (P, G) -> (P,)."""
    return acc.float().mean(dim=1)  # (P,)


def hard_prompts(acc: torch.Tensor, K: float) -> torch.Tensor:
    """Prompts in the hard regime, p <= 1 - K, where b_K is the low reward. (P, G) -> (P,) bool."""
    return success_rate(acc) <= 1.0 - K + 1e-9  # (P,); the 1e-9 absorbs float error in 1 - K


def class_best_rewards(reward: torch.Tensor, acc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """b_fail and b_succ: the highest failure and the highest success reward of each group,
    (P, G) -> (P, 1) each. A group without failures (successes) uses its b_succ (b_fail).

    >>> r = torch.tensor([[1., .7, -1.3, -1.], [1., 1., 1., 1.]])  # overlong-penalised 0.7 and -1.3
    >>> b_fail, b_succ = class_best_rewards(r, acc=r > 0)
    >>> b_fail.flatten().tolist(), b_succ.flatten().tolist()  # the all-success group: b_fail = b_succ
    ([-1.0, 1.0], [1.0, 1.0])
    """
    acc = acc.bool()  # (P, G)
    b_fail = reward.masked_fill(acc, -math.inf).amax(dim=1, keepdim=True)  # (P, 1); -inf if no failure
    b_succ = reward.masked_fill(~acc, -math.inf).amax(dim=1, keepdim=True)  # (P, 1); -inf if no success
    has_fail, has_succ = (~acc).any(dim=1, keepdim=True), acc.any(dim=1, keepdim=True)  # (P, 1), (P, 1)
    return torch.where(has_fail, b_fail, b_succ), torch.where(has_succ, b_succ, b_fail)  # (P, 1), (P, 1)


def masked_baseline(reward: torch.Tensor, acc: torch.Tensor, hard: torch.Tensor, *,
                    mask_pos_on_easy: bool, mask_neg_on_hard: bool) -> torch.Tensor:
    """Per-response baseline of the masked two-sided signal (module docstring, choice 5).

    A kept response is compared with the other class's best reward, a masked one with its own
    class's. POS-MASK: mask_pos_on_easy only; NEG-MASK: mask_neg_on_hard only; both: QAE's gate.

    reward, acc: (P, G); hard: (P, 1) bool. Returns (P, G).

    >>> r = torch.tensor([[1., -1., -1., -1.], [1., 1., 1., -1.]]); hard = torch.tensor([[True], [False]])
    >>> masked_baseline(r, r > 0, hard, mask_pos_on_easy=True, mask_neg_on_hard=True)  # = b_K
    tensor([[-1., -1., -1., -1.],
            [ 1.,  1.,  1.,  1.]])
    """
    acc = acc.bool()  # (P, G)
    b_fail, b_succ = class_best_rewards(reward, acc)  # (P, 1), (P, 1)
    masked = (acc & ~hard & mask_pos_on_easy) | (~acc & hard & mask_neg_on_hard)  # (P, G)
    own = torch.where(acc, b_succ, b_fail)  # (P, G): the best reward of the response's own class
    other = torch.where(acc, b_fail, b_succ)  # (P, G): ... of the other class
    return torch.where(masked, own, other)  # (P, G)


# ----------------------------------------------------------------------------------------------
# The advantage itself (public API: forks and external checks call exactly this signature).
# ----------------------------------------------------------------------------------------------

MASKS = (None, "pos", "neg")


def compute_advantages(
    rewards: torch.Tensor,
    K: float | None = 0.4,
    norm_by_std: bool = True,
    eps: float = 1e-6,
    quantile_rule: str = "linear",
    mask: str | None = None,
    acc: torch.Tensor | None = None,
    baseline: str = "quantile",
    penalty: torch.Tensor | None = None,
) -> torch.Tensor:
    """Group-relative advantages A = (r - b) / (sigma + eps), shape (P, G) -> (P, G).

    Args:
        rewards: (P, G) scalar rewards, P prompts with G responses each.
        K: level strictly between 0 and 1, for a baseline that takes K (the quantile baseline; the
            paper uses 0.4) and, with a mask, to split prompts into hard (p <= 1 - K) and easy;
            None for a baseline without K (`baseline="mean", K=None` is GRPO/DAPO).
        norm_by_std: divide by the group std (verl `norm_adv_by_std_in_grpo`, default on).
        eps: added to the std, as in verl (1e-6).
        quantile_rule: "linear" (torch.quantile, the authors' code) or "right_continuous"
            (the paper's inf{x : F(x) >= K}); read only by a baseline that takes it.
        mask: None, "pos" (POS-MASK) or "neg" (NEG-MASK), the paper's ablations (section 5.3);
            the mask defines each response's baseline (module docstring, choice 5).
        acc: (P, G) bool, the verifier's verdicts; needed by a mask (success/failure and p).
        baseline: a name in BASELINES, chosen by this argument alone (the config's `algorithm.baseline`);
            the default is the config's, QAE's quantile baseline.
        penalty: (P, G) the overlong penalty included in `rewards`, or None. Given, the baseline (of
            any name) is taken over the verdict scores `rewards - penalty` and the penalty stays in r
            (`algorithm.quantile_of: verdict`, choice 8); None takes it over `rewards` (`shaped`).
            Not with a mask, which takes its baselines from the class rewards.

    The settings follow `check_settings`, the rules the config is checked with.

    >>> r = torch.tensor([[1., -1., -1., -1.], [1., 1., 1., -1.]])
    >>> compute_advantages(r, K=0.4)  # hard prompt: success rewarded; easy: failure penalised
    tensor([[ 2.0000,  0.0000,  0.0000,  0.0000],
            [ 0.0000,  0.0000,  0.0000, -2.0000]])
    >>> compute_advantages(r, K=0.4, mask="pos", acc=r > 0)  # failures penalised on the hard one too
    tensor([[ 2.0000, -2.0000, -2.0000, -2.0000],
            [ 0.0000,  0.0000,  0.0000, -2.0000]])
    """
    check_settings(baseline, K, quantile_rule, mask, over_verdicts=penalty is not None)
    check_tensors(rewards, mask, acc, penalty)
    reward = rewards.float()  # (P, G)
    P, G = reward.shape

    sigma = group_std(reward) if G > 1 else torch.ones_like(reward)  # (P, 1); as verl, std 1 for a lone response
    if G == 1:  # ... and baseline 0 (verl compute_grpo_outcome_advantage)
        b = torch.zeros_like(reward)  # (P, 1)
    elif mask is None:
        scored = reward if penalty is None else reward - penalty.to(reward)  # (P, G); what b is taken over
        settings = {"K": K, "quantile_rule": quantile_rule}
        b = BASELINES[baseline](scored, **{k: settings[k] for k in settings_of(baseline)})  # (P, 1)
    else:  # paper section 5.3, Eqs. 7-8: POS-MASK / NEG-MASK
        acc = acc.to(reward.device).bool()  # (P, G)
        hard = hard_prompts(acc, K)[:, None]  # (P, 1)
        b = masked_baseline(reward, acc, hard, mask_pos_on_easy=mask == "pos", mask_neg_on_hard=mask == "neg")  # (P, G)

    adv = reward - b  # (P, G)
    if norm_by_std:
        adv = adv / (sigma + eps)  # (P, G); sigma about the mean, as the reference code
    return adv


# How check_settings names each setting, and an unset one, in its errors: compute_advantages' arguments
# here; config.py passes its keys instead.
ARGUMENT_NAMES = {"baseline": "baseline", "K": "K", "quantile_rule": "quantile_rule", "mask": "mask",
                  "over_verdicts": "penalty (the baseline over the verdicts)", "unset": "None"}


def check_settings(baseline: str, K: float | None, quantile_rule: str = "linear", mask: str | None = None,
                   over_verdicts: bool = False, names: dict[str, str] = ARGUMENT_NAMES) -> None:
    """The rules on the advantage's settings, the one place they are written: compute_advantages
    checks its arguments with them and config.py a run's `algorithm` section (with `names`, the
    config keys). `over_verdicts`: the baseline is taken over the verifier's scores (`penalty` given).
    K is set exactly when the baseline takes it (settings_of). Raises ValueError naming the setting.

    >>> check_settings("mean", K=0.4)
    Traceback (most recent call last):
    ...
    ValueError: K (0.4) is not used by the mean baseline, which takes no K; set it to None
    """
    unset = names["unset"]
    if baseline not in BASELINES:
        raise ValueError(f"{names['baseline']} must be one of {sorted(BASELINES)}, got {baseline!r} "
                         "(the names in advantage.BASELINES)")
    if K is not None and not 0.0 < K < 1.0:
        raise ValueError(f"{names['K']} must be {unset} or strictly between 0 and 1, got {K}")
    if quantile_rule not in QUANTILE_RULES:
        raise ValueError(f"{names['quantile_rule']} must be one of {list(QUANTILE_RULES)}, got {quantile_rule!r}")
    if mask not in MASKS:
        raise ValueError(f"{names['mask']} must be one of {MASKS}, got {mask!r}")
    if mask is not None and baseline != "quantile":
        raise ValueError(f"{names['mask']} = {mask!r} masks the quantile baseline's regimes (paper section 5.3); "
                         f"it needs {names['baseline']} = 'quantile', got {baseline!r}")
    if mask is not None and over_verdicts:
        raise ValueError(f"{names['over_verdicts']} cannot go with {names['mask']} = {mask!r}, which sets each "
                         "response's baseline from the class rewards itself; use one of the two")
    if "K" in settings_of(baseline) and K is None:
        raise ValueError(f"{names['K']} must be set (0 < K < 1) for the {baseline} baseline, got {unset}")
    if "K" not in settings_of(baseline) and K is not None:
        raise ValueError(f"{names['K']} ({K}) is not used by the {baseline} baseline, which takes no K; "
                         f"set it to {unset}")


def check_tensors(rewards, mask, acc, penalty) -> None:
    """compute_advantages' checks on the tensors it is given (shapes; the verdicts a mask needs)."""
    if rewards.dim() != 2:
        raise ValueError(f"rewards must have shape (P, G), got {tuple(rewards.shape)}")
    if mask is not None and acc is None:
        raise ValueError(f"mask={mask!r} needs acc, the (P, G) bool verifier verdicts; got acc=None")
    if acc is not None and mask is not None and acc.shape != rewards.shape:
        raise ValueError(f"acc must have the shape of rewards {tuple(rewards.shape)}, got {tuple(acc.shape)}")
    if penalty is not None and penalty.shape != rewards.shape:
        raise ValueError(f"penalty must have the shape of rewards {tuple(rewards.shape)}, got {tuple(penalty.shape)}")
