"""DAPO's clip-higher policy loss, its aggregations, and truncated importance sampling.

For response i, token t, with rho = exp(logp - old_logp) and the response's scalar advantage A_i
(DAPO, arXiv 2503.14476, eq. 8; the QAE paper, arXiv 2509.22611, section 2, keeps it):

    L = - sum_i w_i * sum_t min( rho*A_i, clip(rho, 1 - eps_low, 1 + eps_high)*A_i )

with eps_low = 0.2, eps_high = 0.28 ("clip-higher") and, for A_i < 0, the dual clip that bounds
the term by c*A_i (c = 10, verl `clip_ratio_c`). The normaliser w_i is a stated choice
(`algorithm.loss_agg`, the AGGREGATIONS below): the paper's equation divides by the token count
Z_g of the prompt's group (group-token-mean); verl's token-mean divides by all tokens of the
mini-batch. Log-probabilities are taken under the sampling temperature T: logits / T before the
log-softmax.

The log-probabilities the loss reads (fp32, chunked over the vocabulary, never a (B, T, V) tensor)
come from infra/logprobs.py.

Choices, numbered (a departure from the paper or verl says so; reasons in docs/algorithm.md, "Choices by module"):
1. No KL term and no entropy bonus (paper: "exclude both KL divergence and entropy losses"); entropy is
   only logged.
2. The normaliser's counts (MiniBatchCounts) are the whole mini-batch's, over micro-batches and ranks,
   zero-advantage responses included; verl at the time of the paper normalised per micro-batch.
3. `algorithm.loss_agg`: the configs use token-mean; group-token-mean, seq-mean-token-mean and
   seq-mean-token-sum are offered beside it, each with its source.
4. log(rho) is clamped to [-20, 20] before exp, as verl, so one stale token cannot make inf.

Its metrics are this module's too: METRICS gives each one policy_loss reports its reduction over
micro-batches, mini-batches and ranks and its denominator; `combine` and `logged` apply them, and
train.py and the logger follow that table, so a new loss term and its metric edit this file only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# ----------------------------------------------------------------------------------------------
# The clip-higher surrogate with dual clip, per token.
# ----------------------------------------------------------------------------------------------

LOG_RATIO_MAX = 20.0  # choice 4: |log rho| <= 20 before exp, as verl


def log_ratio(logp: torch.Tensor, base_logp: torch.Tensor) -> torch.Tensor:
    """log(pi / pi_base) per token, clamped to [-LOG_RATIO_MAX, LOG_RATIO_MAX] (choice 4): pi_base is the old
    policy in the loss, the sampler in truncated importance sampling."""
    return (logp - base_logp).clamp(-LOG_RATIO_MAX, LOG_RATIO_MAX)


def clip_higher_token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    clip_c: float = 10.0,
) -> torch.Tensor:
    """Per-token loss -min(rho*A, clip(rho, 1-eps_low, 1+eps_high)*A), dual-clipped at c*A for A < 0.

    logp, old_logp (B, T); adv (B,) per response or (B, T) per token -> loss (B, T).
    As verl core_algos.compute_policy_loss (vanilla) with clip_ratio_low/high/c.

    >>> logp = torch.log(torch.tensor([[1.0, 1.5, 0.5, 20.0]]))
    >>> clip_higher_token_loss(logp, torch.zeros(1, 4), torch.tensor([[1.0, 1.0, -1.0, -1.0]]))
    tensor([[-1.0000, -1.2800,  0.8000, 10.0000]])
    """
    if adv.dim() == 1:
        adv = adv.unsqueeze(-1)  # (B, 1): every token gets its response's advantage
    ratio = torch.exp(log_ratio(logp, old_logp))  # (B, T)
    surr = -adv * ratio  # (B, T)
    surr_clipped = -adv * ratio.clamp(1.0 - eps_low, 1.0 + eps_high)  # (B, T)
    loss = torch.maximum(surr, surr_clipped)  # (B, T): the pessimistic (min of objectives) term
    dual = torch.minimum(loss, -adv * clip_c)  # (B, T): for A < 0, bounded by c*|A|
    return torch.where(adv < 0, dual, loss)  # (B, T)


# ----------------------------------------------------------------------------------------------
# Loss normalisers (`algorithm.loss_agg`). The mini-batch loss is sum_i w_i * sum_t loss_it over
# its responses i; each variant is one function giving the per-response weights w_i from the
# response lengths |o_i|, the token count of each response's prompt group, and the mini-batch's
# counts summed over micro-batches and ranks (so every rank weighs its tokens alike).
# ----------------------------------------------------------------------------------------------


@dataclass
class MiniBatchCounts:
    """What a mini-batch holds, over every micro-batch and rank (zero-advantage responses included)."""

    tokens: float  # response tokens
    sequences: float  # responses
    groups: float  # prompt groups


def token_mean_weights(lengths: torch.Tensor, group_tokens: torch.Tensor, counts: MiniBatchCounts) -> torch.Tensor:
    """w_i = 1 / (tokens in the mini-batch): every token weighs the same. verl's token-mean with a
    global token count (newer verl; at the time of the paper verl averaged per micro-batch and
    rescaled by micro/mini-batch size, which weighs tokens unequally when micro-batches differ).

    >>> token_mean_weights(torch.tensor([2., 4., 3.]), torch.tensor([6., 6., 3.]), MiniBatchCounts(9, 3, 2))
    tensor([0.1111, 0.1111, 0.1111])
    """
    return torch.full_like(lengths, 1.0 / counts.tokens)  # (B,)


def group_token_mean_weights(lengths: torch.Tensor, group_tokens: torch.Tensor,
                             counts: MiniBatchCounts) -> torch.Tensor:
    """w_i = 1 / (groups in the mini-batch * tokens of i's group): the paper's equation (copied from
    DAPO's): Z = the total token count of the prompt's group of G responses, inside the mean over
    prompts. A token of a group of short responses weighs more than one of a group of long ones.

    >>> group_token_mean_weights(torch.tensor([2., 4., 3.]), torch.tensor([6., 6., 3.]), MiniBatchCounts(9, 3, 2))
    tensor([0.0833, 0.0833, 0.1667])
    """
    return 1.0 / (counts.groups * group_tokens)  # (B,)


def seq_mean_token_mean_weights(lengths: torch.Tensor, group_tokens: torch.Tensor,
                                counts: MiniBatchCounts) -> torch.Tensor:
    """w_i = 1 / (responses * |o_i|): GRPO's original mean over each response's tokens, then over responses.

    >>> seq_mean_token_mean_weights(torch.tensor([2., 4., 3.]), torch.tensor([6., 6., 3.]), MiniBatchCounts(9, 3, 2))
    tensor([0.1667, 0.0833, 0.1111])
    """
    return 1.0 / (counts.sequences * lengths.clamp(min=1))  # (B,)


def seq_mean_token_sum_weights(lengths: torch.Tensor, group_tokens: torch.Tensor,
                               counts: MiniBatchCounts) -> torch.Tensor:
    """w_i = 1 / responses: each response's token sum, averaged over responses (Dr. GRPO style).

    >>> seq_mean_token_sum_weights(torch.tensor([2., 4., 3.]), torch.tensor([6., 6., 3.]), MiniBatchCounts(9, 3, 2))
    tensor([0.3333, 0.3333, 0.3333])
    """
    return torch.full_like(lengths, 1.0 / counts.sequences)  # (B,)


AGGREGATIONS = {
    "token-mean": token_mean_weights,
    "group-token-mean": group_token_mean_weights,
    "seq-mean-token-mean": seq_mean_token_mean_weights,
    "seq-mean-token-sum": seq_mean_token_sum_weights,
}


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    weight: torch.Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    clip_c: float = 10.0,
    is_weight: torch.Tensor | None = None,
):
    """The DAPO policy loss of one micro-batch and what it did.

    logp, old_logp, mask (B, T); adv (B,) or (B, T); weight (B,): each response's normaliser
    weight from AGGREGATIONS; is_weight (B, T), optional: a constant per-token weight on the loss
    (truncated importance sampling, `tis_weights`). Loss = sum_i weight_i sum_t mask * loss_it.

    Returns (loss, metrics); metrics are detached 0-d tensors, one per METRICS entry: the loss itself,
    sums over this micro-batch's tokens (they add up over micro-batches and ranks), and the smallest
    and largest ratio. `combine` reduces them and `logged` divides each by its denominator (METRICS).
    """
    loss_tok = clip_higher_token_loss(logp, old_logp, adv, eps_low, eps_high, clip_c)  # (B, T)
    if is_weight is not None:
        loss_tok = loss_tok * is_weight
    loss = (loss_tok * mask * weight[:, None]).sum()
    with torch.no_grad():
        m = mask.bool()  # (B, T)
        a = (adv.unsqueeze(-1) if adv.dim() == 1 else adv).expand_as(logp)[m]  # (N,) over tokens
        log_rho = log_ratio(logp, old_logp)[m]  # (N,)
        ratio = log_rho.exp()  # (N,)
        metrics = {
            "policy": loss.detach(),
            "clip_frac_high": ((a > 0) & (ratio > 1 + eps_high)).sum().float(),
            "clip_frac_low": ((a < 0) & (ratio < 1 - eps_low)).sum().float(),
            "clip_frac_dual": ((a < 0) & (ratio > clip_c)).sum().float(),
            "ratio_mean": ratio.sum(),
            "approx_kl": ((ratio - 1) - log_rho).sum(),
            "num_tokens": m.sum().float(),
            "ratio_min": ratio.min() if ratio.numel() else torch.tensor(1.0),
            "ratio_max": ratio.max() if ratio.numel() else torch.tensor(1.0),
        }
    return loss, metrics


def tis_weights(old_logp: torch.Tensor, rollout_logp: torch.Tensor, cap: float) -> torch.Tensor:
    """Truncated importance sampling: min(pi_old / pi_rollout, cap) per token, a constant.

    The responses were sampled by the rollout engine, whose numerics differ from the trainer's;
    this reweights the loss from the sampler's distribution to the trainer's old policy, truncated
    at `cap` to bound the variance (Yao et al. 2025, "Your efficient RL framework secretly brings
    you off-policy RL training"). old_logp, rollout_logp (B, T) -> (B, T).

    >>> tis_weights(torch.tensor([[0.0, -1.0]]), torch.tensor([[-1.0, 0.0]]), cap=2.0)
    tensor([[2.0000, 0.3679]])
    """
    return torch.exp(log_ratio(old_logp, rollout_logp)).clamp(max=cap).detach()


# ----------------------------------------------------------------------------------------------
# The loss's metrics: what policy_loss reports for one micro-batch, how the reports of micro-batches,
# mini-batches and ranks combine (reduction), and what the step's total is divided by (denominator).
# A new metric is one entry here and one value in policy_loss; train.py and the logger follow this table.
# ----------------------------------------------------------------------------------------------

# Denominators: "num_tokens", the tokens in gradient passes (its own entry below); "mini_tokens", every response
# token of the step's mini-batches, A = 0 ones included (the update's MiniBatchCounts.tokens); "updates", the
# optimizer steps; None, logged as combined. An entry whose meaning is None is not logged.
METRICS = {  # name: (reduction, denominator, meaning), logged as loss/<name>
    "policy": ("sum", "updates", "clip-higher policy loss, mean over the step's optimizer steps"),
    "clip_frac_high": ("sum", "mini_tokens", "fraction of mini-batch tokens with A > 0 and ratio > 1 + eps_high "
                                             "(gradient clipped)"),
    "clip_frac_low": ("sum", "mini_tokens", "fraction of mini-batch tokens with A < 0 and ratio < 1 - eps_low"),
    "clip_frac_dual": ("sum", "mini_tokens", "fraction of mini-batch tokens with A < 0 and ratio > clip_c (dual clip)"),
    "ratio_mean": ("sum", "num_tokens", "mean importance ratio over tokens in gradient passes"),
    "approx_kl": ("sum", "num_tokens", "mean (ratio - 1) - log ratio over tokens in gradient passes (k3 estimate "
                                       "of KL)"),
    "ratio_min": ("min", None, "smallest importance ratio"),
    "ratio_max": ("max", None, "largest importance ratio"),
    "num_tokens": ("sum", None, None),  # tokens in gradient passes: a denominator, not logged
}
REDUCTIONS = {"sum": lambda a, b: a + b, "min": min, "max": max}


def combine(reports: list[dict]) -> dict:
    """Several passes', mini-batches' or ranks' metrics as one, each by its reduction in METRICS.

    >>> combine([{"ratio_min": 0.9, "num_tokens": 3.0}, {"ratio_min": 0.7, "num_tokens": 2.0}])
    {'ratio_min': 0.7, 'num_tokens': 5.0}
    """
    out = {}
    for report in reports:
        for name, value in report.items():
            value = float(value)
            out[name] = REDUCTIONS[METRICS[name][0]](out[name], value) if name in out else value
    return out


def logged(reports: list[dict], mini_tokens: float, updates: int) -> dict:
    """The step's loss/<name> metrics: every report (of each pass, mini-batch and rank) combined, each divided
    by its denominator in METRICS; without a report a sum is 0, a min or max 1.

    >>> logged([{"policy": 0.5, "clip_frac_high": 2.0, "num_tokens": 4.0}], mini_tokens=8.0, updates=2)["loss/policy"]
    0.25
    """
    total = combine(reports)
    counts = {"num_tokens": total.get("num_tokens", 0.0), "mini_tokens": mini_tokens, "updates": updates}
    value = lambda name, reduce: total.get(name, 0.0 if reduce == "sum" else 1.0)  # noqa: E731
    return {f"loss/{name}": value(name, reduce) / (max(counts[per], 1) if per else 1)
            for name, (reduce, per, meaning) in METRICS.items() if meaning is not None}
