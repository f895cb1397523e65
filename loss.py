"""Policy losses (DAPO's clip-higher, Clip-Cov, KL-Cov, GSPO), their aggregations, truncated importance sampling.

For response i, token t, with rho = exp(logp - old_logp) and the response's scalar advantage A_i, DAPO's loss
(arXiv 2503.14476, eq. 8; the QAE paper, arXiv 2509.22611, section 2, keeps it) is

    L = - sum_i w_i * sum_t min( rho*A_i, clip(rho, 1 - eps_low, 1 + eps_high)*A_i )

with eps_low = 0.2, eps_high = 0.28 ("clip-higher") and, for A_i < 0, the dual clip that bounds the term by c*A_i
(c = 10, verl `clip_ratio_c`). The normaliser w_i is `algorithm.loss_agg` (AGGREGATIONS): the paper's equation
divides by the token count of the prompt's group, verl's token-mean by all tokens of the mini-batch. Log-probs are
under the sampling temperature (infra/logprobs.py). The QAE paper stacks its baseline on other losses too (section
5.1, Table 2); `algorithm.policy_loss` picks one of POLICY_LOSSES:
    clip-higher  the loss above (the default)
    clip-cov     Cui et al. 2025 (arXiv 2505.22617, section 4): the ratio clip without dual clip, and a random
                 max(1, floor(r * N)) of the tokens with lb < cov_t < ub lose their gradient, where
                 cov_t = (A_t - mean A) * (logp_t - mean logp) over the mini-batch's N response tokens
    kl-cov       the same paper: -A*rho, no clip; the max(1, floor(k * N)) tokens of largest cov_t add beta*|log rho|
    gspo         Zheng et al. 2025 (arXiv 2507.18071, section 4): the sequence ratio s_i = exp(mean_t log rho_it)
                 clipped per sequence, -min(s_i A_i, clip(s_i, 1 - eps_low, 1 + eps_high) A_i), a mean per sequence
The settings' values come from the methods' authors (the Table 2 configs name each source: verl's defaults, the
Entropy-Mechanism 7B scripts, verl's GSPO recipe); docs/algorithm.md section 1.8 maps each loss to its tests.
Each entry says what it needs: its settings, the aggregations it admits, whether an A = 0 token can have a gradient
(train.py's sparse update asks) and the mini-batch statistic it selects tokens by.

Choices, numbered (a departure from the paper or verl says so; reasons in docs/algorithm.md, "Choices by module"):
1. No KL term and no entropy bonus (paper: "exclude both KL divergence and entropy losses"); entropy is
   only logged.
2. The normaliser's counts (MiniBatchCounts) are the whole mini-batch's, over micro-batches and ranks,
   zero-advantage responses included; verl at the time of the paper normalised per micro-batch.
3. `algorithm.loss_agg`: the configs use token-mean; group-token-mean, seq-mean-token-mean and
   seq-mean-token-sum are offered beside it, each with its source.
4. log(rho) is clamped to [-20, 20] before exp, as verl's clip-higher (its Clip-Cov and KL-Cov do not clamp; GSPO
   clamps the sequence log-ratio at 10, as verl).
5. The covariance, its means and N are the whole mini-batch's over every rank, from the old log-probs (verl: each
   micro-batch's, from the current ones), so packing and the number of GPUs change no selection.
6. Clip-Cov's random pick keys each token by (seed, step, epoch, mini-batch, its place in it): a resumed run repeats
   it and the number of ranks does not change it.
7. A setting a loss does not take is null (`check_settings`): Clip-Cov, KL-Cov and GSPO have no dual clip, KL-Cov
   no ratio clip, as verl's.

METRICS gives each metric a loss reports its reduction over micro-batches, mini-batches and ranks and its
denominator (infra/logger.py applies it), so a new loss and its metrics edit this file only.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch

# ----------------------------------------------------------------------------------------------
# Per-token surrogates: one pure function per loss, (logp, old_logp, adv (B, 1), mask, selected) and the
# settings its parameters name -> (loss (B, T), its own metrics as sums over the masked tokens).
# ----------------------------------------------------------------------------------------------

LOG_RATIO_MAX = 20.0  # choice 4: |log rho| <= 20 before exp, as verl


def log_ratio(logp: torch.Tensor, base_logp: torch.Tensor) -> torch.Tensor:
    """log(pi / pi_base) per token, clamped (choice 4): pi_base is the old policy, or the sampler in TIS."""
    return (logp - base_logp).clamp(-LOG_RATIO_MAX, LOG_RATIO_MAX)


def clip_higher_token_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, eps_low: float = 0.2,
                           eps_high: float = 0.28, clip_c: float = 10.0) -> torch.Tensor:
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
    loss = ratio_clip_loss(ratio, adv, eps_low, eps_high)  # (B, T)
    dual = torch.minimum(loss, -adv * clip_c)  # (B, T): for A < 0, bounded by c*|A|
    return torch.where(adv < 0, dual, loss)  # (B, T)


def ratio_clip_loss(ratio: torch.Tensor, adv: torch.Tensor, eps_low: float, eps_high: float) -> torch.Tensor:
    """PPO's pessimistic term max(-A*ratio, -A*clip(ratio, 1 - eps_low, 1 + eps_high)), (B, T)."""
    return torch.maximum(-adv * ratio, -adv * ratio.clamp(1.0 - eps_low, 1.0 + eps_high))  # (B, T)


def clip_fractions(ratio: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, eps_low: float, eps_high: float) -> dict:
    """Token counts the ratio clip holds: A > 0 above 1 + eps_high, A < 0 below 1 - eps_low."""
    return {"clip_frac_high": ((adv > 0) & (ratio > 1 + eps_high) & mask.bool()).sum().float(),
            "clip_frac_low": ((adv < 0) & (ratio < 1 - eps_low) & mask.bool()).sum().float()}


def clip_higher(logp, old_logp, adv, mask, selected, clip_eps_low=0.2, clip_eps_high=0.28, clip_c=10.0):
    """DAPO's clip-higher with dual clip (clip_higher_token_loss) and its clip fractions."""
    ratio = torch.exp(log_ratio(logp, old_logp))  # (B, T)
    dual = ((adv < 0) & (ratio > clip_c) & mask.bool()).sum().float()
    return (clip_higher_token_loss(logp, old_logp, adv, clip_eps_low, clip_eps_high, clip_c),
            clip_fractions(ratio, adv, mask, clip_eps_low, clip_eps_high) | {"clip_frac_dual": dual})


def clip_cov(logp, old_logp, adv, mask, selected, clip_eps_low, clip_eps_high):
    """Clip-Cov: the ratio clip (no dual clip) times 0 at the selected tokens, their gradient detached.
    As verl core_algos.compute_policy_loss_clip_cov (`corr`); the selection is clip_cov_priority's.

    >>> logp, adv = torch.log(torch.tensor([[1.0, 1.5, 0.5]])), torch.tensor([[1.0]])
    >>> clip_cov(logp, torch.zeros(1, 3), adv, torch.ones(1, 3), torch.tensor([[0, 0, 1]]), 0.2, 0.28)[0]
    tensor([[-1.0000, -1.2800, -0.0000]])
    """
    ratio = torch.exp(log_ratio(logp, old_logp))  # (B, T)
    keep = 1.0 - (selected.to(ratio.dtype) if selected is not None else 0.0)  # (B, T)
    return ratio_clip_loss(ratio, adv, clip_eps_low, clip_eps_high) * keep, clip_fractions(
        ratio, adv, mask, clip_eps_low, clip_eps_high)


def kl_cov(logp, old_logp, adv, mask, selected, kl_cov_coef):
    """KL-Cov: -A*rho with no clip, plus kl_cov_coef * |log rho| at the selected tokens.
    As verl core_algos.compute_policy_loss_kl_cov (`ppo_kl_coef`); the selection is kl_cov_priority's.

    >>> logp = torch.log(torch.tensor([[2.0, 2.0]]))
    >>> kl_cov(logp, torch.zeros(1, 2), torch.tensor([[0.0]]), torch.ones(1, 2), torch.tensor([[0, 1]]), 1.0)[0]
    tensor([[0.0000, 0.6931]])
    """
    log_rho = log_ratio(logp, old_logp)  # (B, T)
    penalty = selected.to(logp.dtype) * log_rho.abs() if selected is not None else 0.0  # (B, T)
    return -adv * torch.exp(log_rho) + kl_cov_coef * penalty, {}


GSPO_LOG_RATIO_MAX = 10.0  # choice 4: verl clamps the sequence log-ratio at 10 (above only)


def gspo(logp, old_logp, adv, mask, selected, clip_eps_low, clip_eps_high):
    """GSPO in its token form (verl core_algos.compute_policy_loss_gspo; GSPO-token, arXiv 2507.18071 section 4):
    s_it = sg[s_i] * pi(y_t) / sg[pi(y_t)], so every token of response i has the value s_i and the gradient
    s_i * grad log pi(y_t); the loss max(-A s_it, -A clip(s_it, 1 - eps_low, 1 + eps_high)) has no dual clip.

    >>> logp = torch.log(torch.tensor([[1.0, 4.0, 1.0], [2.0, 1.0, 1.0]]))  # s = 4^(1/3), 2^(1/2): row 2 has 2 tokens
    >>> loss, m = gspo(logp, torch.zeros(2, 3), torch.tensor([[1.0], [-1.0]]), torch.tensor([[1, 1, 1], [1, 1, 0]]),
    ...                None, 0.2, 0.28)
    >>> loss[:, 0], m["seq_clip_frac"].item()  # row 1 clipped at 1.28; row 2 (A < 0) at sqrt(2) is not
    (tensor([-1.2800,  1.4142]), 1.0)
    """
    n = mask.sum(-1).clamp(min=1)  # (B,) tokens of each response
    seq_log = ((logp - old_logp) * mask).sum(-1) / n  # (B,) log s_i, unclamped per token (as verl)
    log_s = (logp - logp.detach() + seq_log.detach()[:, None]).clamp(max=GSPO_LOG_RATIO_MAX)  # (B, T)
    s = torch.exp(log_s)  # (B, T): s_i in value
    with torch.no_grad():
        real = mask.bool().any(-1)  # (B,) rows holding a response
        s_i, a = torch.exp(seq_log.clamp(max=GSPO_LOG_RATIO_MAX))[real], adv[:, 0][real]  # (S,)
        clipped = ((a > 0) & (s_i > 1 + clip_eps_high)) | ((a < 0) & (s_i < 1 - clip_eps_low))  # (S,)
        s_i = s_i if s_i.numel() else torch.ones(1)
        metrics = {"seq_clip_frac": clipped.sum().float(), "num_sequences": real.sum().float(),
                   "seq_ratio_min": s_i.min(), "seq_ratio_max": s_i.max()}
    return ratio_clip_loss(s, adv, clip_eps_low, clip_eps_high), metrics


# ----------------------------------------------------------------------------------------------
# The covariance selection of Clip-Cov and KL-Cov (Cui et al. 2025, section 4): over the whole mini-batch's
# response tokens (choice 5), cov_t = (A_t - mean A) * (logp_t - mean logp); each loss orders the tokens by a
# priority (lowest first, inf never) and picks max(1, floor(fraction * N)) of them, over packed micro-batches and
# ranks (train.py; tests/test_loss_selection.py holds it to the plain computation on one flat mini-batch).
# ----------------------------------------------------------------------------------------------


def token_covariance(adv: torch.Tensor, logp: torch.Tensor, adv_mean: float, logp_mean: float) -> torch.Tensor:
    """cov_t = (A_t - mean A) * (logp_t - mean logp) per token, adv, logp (N,) -> (N,); the means are token means.

    >>> token_covariance(torch.tensor([2.0, 0.0]), torch.tensor([-1.0, -3.0]), 1.0, -2.0)
    tensor([1., 1.])
    """
    return (adv - adv_mean) * (logp - logp_mean)  # (N,)


def clip_cov_priority(cov: torch.Tensor, uniform: torch.Tensor, clip_cov_lb: float, clip_cov_ub: float):
    """Clip-Cov's candidates lb < cov < ub in a uniformly random order (`uniform` keys, choice 6); verl draws
    torch.randperm over them. At the old log-probs no token is clipped, so verl's exclusion of ratio-clipped tokens
    takes none here.

    >>> clip_cov_priority(torch.tensor([0.5, 2.0, 3.0, 6.0]), torch.tensor([0.1, 0.7, 0.2, 0.3]), 1.0, 5.0)
    tensor([   inf, 0.7000, 0.2000,    inf])
    """
    return torch.where((cov > clip_cov_lb) & (cov < clip_cov_ub), uniform, torch.full_like(uniform, float("inf")))


def kl_cov_priority(cov: torch.Tensor, uniform: torch.Tensor):
    """KL-Cov's order: the largest covariance first (verl: torch.topk), ties to the earlier token."""
    return -cov


def selection_count(fraction: float, tokens: float) -> int:
    """max(1, floor(fraction * N)), as verl (`int(ratio * N)`).

    >>> selection_count(2e-4, 4999), selection_count(2e-4, 10_000)
    (1, 2)
    """
    return max(1, int(fraction * tokens))


# ----------------------------------------------------------------------------------------------
# Loss normalisers (`algorithm.loss_agg`). The mini-batch loss is sum_i w_i * sum_t loss_it over its responses i;
# each variant gives the weights w_i from the response lengths |o_i|, the token count of each response's group, and
# the mini-batch's counts summed over micro-batches and ranks (so every rank weighs its tokens alike).
# ----------------------------------------------------------------------------------------------


@dataclass
class MiniBatchCounts:
    """What a mini-batch holds, over every micro-batch and rank (zero-advantage responses included)."""

    tokens: float  # response tokens
    sequences: float  # responses
    groups: float  # prompt groups


def token_mean_weights(lengths: torch.Tensor, group_tokens: torch.Tensor, counts: MiniBatchCounts) -> torch.Tensor:
    """w_i = 1 / (tokens in the mini-batch): every token weighs the same. verl's token-mean with a global token count
    (newer verl; at the paper's time verl averaged per micro-batch and rescaled, weighing tokens unequally).

    >>> token_mean_weights(torch.tensor([2., 4., 3.]), torch.tensor([6., 6., 3.]), MiniBatchCounts(9, 3, 2))
    tensor([0.1111, 0.1111, 0.1111])
    """
    return torch.full_like(lengths, 1.0 / counts.tokens)  # (B,)


def group_token_mean_weights(lengths: torch.Tensor, group_tokens: torch.Tensor,
                             counts: MiniBatchCounts) -> torch.Tensor:
    """w_i = 1 / (groups in the mini-batch * tokens of i's group): the paper's (and DAPO's) equation, Z = the token
    count of the prompt's group inside the mean over prompts: a token of short responses weighs more.

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

# ----------------------------------------------------------------------------------------------
# The registry of policy losses (`algorithm.policy_loss`), and the one call train.py makes per micro-batch.
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyLoss:
    """One policy loss: its per-token terms, what it reads of the batch, and what it admits and reports."""

    terms: Callable  # (logp, old_logp, adv (B, 1), mask, selected, **settings) -> (loss (B, T), metric sums)
    reads_zero_adv: str  # can an A = 0 token have a gradient: "no", "selected" (where `priority` picked it), "all"
    priority: Callable | None = None  # the covariance selection's order (cov, uniform, **settings) -> (N,); it reads
    fraction: str | None = None  # every token's old logp, and picks max(1, floor(N * this setting)) tokens
    aggregations: tuple = tuple(AGGREGATIONS)  # the `algorithm.loss_agg` values it admits
    metrics: tuple = ()  # its own METRICS names, logged beside COMMON_METRICS


POLICY_LOSSES = {
    "clip-higher": PolicyLoss(clip_higher, "no", metrics=("clip_frac_high", "clip_frac_low", "clip_frac_dual")),
    "clip-cov": PolicyLoss(clip_cov, "no", clip_cov_priority, "clip_cov_ratio",
                           metrics=("clip_frac_high", "clip_frac_low", "cov_selected", "cov_candidates")),
    "kl-cov": PolicyLoss(kl_cov, "selected", kl_cov_priority, "kl_cov_ratio", metrics=("cov_selected",)),
    "gspo": PolicyLoss(gspo, "no", aggregations=("seq-mean-token-mean",),  # GSPO's own per-sequence mean, as verl
                       metrics=("seq_clip_frac", "seq_ratio_min", "seq_ratio_max")),
}

# Every loss setting, an `algorithm` config key (their ranges: infra/config_checks.py). A loss takes those its terms'
# and priority's parameters name, and its fraction; the others are null (choice 7).
SETTINGS = ("clip_eps_low", "clip_eps_high", "clip_c", "clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio",
            "kl_cov_coef")


def settings_of(name: str) -> list[str]:
    """The settings loss `name` takes, in SETTINGS order.

    >>> settings_of("gspo"), settings_of("kl-cov")
    (['clip_eps_low', 'clip_eps_high'], ['kl_cov_ratio', 'kl_cov_coef'])
    """
    entry = POLICY_LOSSES[name]
    named = set(inspect.signature(entry.terms).parameters) | {entry.fraction}
    named |= set(inspect.signature(entry.priority).parameters) if entry.priority else set()
    return [k for k in SETTINGS if k in named]


def taking(fn: Callable, settings: dict) -> dict:
    """The settings `fn`'s parameters name."""
    return {k: v for k, v in settings.items() if k in inspect.signature(fn).parameters}


def check_settings(name: str, settings: dict, loss_agg: str, key=lambda k: f"`{k}`") -> None:
    """The rules on a loss's settings, for the config and any caller: a known name, every setting it takes set, every
    other one None, an aggregation it admits. Raises ValueError naming the setting (`key` spells it)."""
    if name not in POLICY_LOSSES:
        raise ValueError(f"{key('policy_loss')} must be one of {sorted(POLICY_LOSSES)}, got {name!r}")
    takes, entry = settings_of(name), POLICY_LOSSES[name]
    for k, value in settings.items():
        if k in takes and value is None:
            raise ValueError(f"{key(k)} must be set for policy loss {name}, which takes {', '.join(takes)}")
        if k not in takes and value is not None:
            raise ValueError(f"{key(k)} must be null for policy loss {name}, which takes only {', '.join(takes)}; "
                             f"got {value}")
    if loss_agg not in entry.aggregations:
        raise ValueError(f"{key('loss_agg')} must be {' or '.join(entry.aggregations)} for policy loss {name}, "
                         f"got {loss_agg}")


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
                weight: torch.Tensor, is_weight: torch.Tensor | None = None, name: str = "clip-higher",
                selected: torch.Tensor | None = None, **settings):
    """The policy loss `name` (POLICY_LOSSES) of one micro-batch and what it did: sum_i weight_i sum_t mask * loss_it.

    logp, old_logp, mask (B, T); adv (B,) or (B, T); weight (B,): each response's normaliser weight (AGGREGATIONS);
    is_weight (B, T), optional: a constant per-token weight (truncated importance sampling, `tis_weights`); selected
    (B, T) bool: the tokens the loss's priority picked; settings: those it takes (settings_of; clip-higher's default
    to 0.2, 0.28, 10). Returns (loss, metrics): detached 0-d tensors, one per METRICS entry (sums over this
    micro-batch's tokens, the smallest and largest ratio, the loss's own), reduced and divided as METRICS says.
    """
    adv = adv.unsqueeze(-1) if adv.dim() == 1 else adv  # (B, 1): every token gets its response's advantage
    terms = POLICY_LOSSES[name].terms
    loss_tok, own = terms(logp, old_logp, adv, mask, selected, **taking(terms, settings))  # (B, T)
    if is_weight is not None:
        loss_tok = loss_tok * is_weight
    loss = (loss_tok * mask * weight[:, None]).sum()
    with torch.no_grad():
        m = mask.bool()  # (B, T)
        log_rho = log_ratio(logp, old_logp)[m]  # (N,)
        ratio = log_rho.exp()  # (N,)
        metrics = {"policy": loss.detach(), "ratio_mean": ratio.sum(), "approx_kl": ((ratio - 1) - log_rho).sum(),
                   "num_tokens": m.sum().float(), "ratio_min": ratio.min() if ratio.numel() else torch.tensor(1.0),
                   "ratio_max": ratio.max() if ratio.numel() else torch.tensor(1.0)}
    return loss, metrics | {k: v.detach() for k, v in own.items()}


def tis_weights(old_logp: torch.Tensor, rollout_logp: torch.Tensor, cap: float) -> torch.Tensor:
    """Truncated importance sampling: min(pi_old / pi_rollout, cap) per token, a constant.

    The rollout engine's numerics differ from the trainer's; this reweights the loss from the sampler's distribution
    to the trainer's old policy, truncated at `cap` to bound the variance (Yao et al. 2025, "Your efficient RL
    framework secretly brings you off-policy RL training"). old_logp, rollout_logp (B, T) -> (B, T).

    >>> tis_weights(torch.tensor([[0.0, -1.0]]), torch.tensor([[-1.0, 0.0]]), cap=2.0)
    tensor([[2.0000, 0.3679]])
    """
    return torch.exp(log_ratio(old_logp, rollout_logp)).clamp(max=cap).detach()


# ----------------------------------------------------------------------------------------------
# The losses' metrics: what a loss reports for one micro-batch (and the selection for one mini-batch), how the
# reports of micro-batches, mini-batches and ranks combine (reduction), and what the step's total is divided by
# (denominator). A new metric is one entry here and one value a loss returns; infra/logger.py applies the table.
# ----------------------------------------------------------------------------------------------

# Denominators: "num_tokens" and "num_sequences", the tokens and responses in gradient passes (entries below);
# "mini_tokens", every response token of the step's mini-batches, A = 0 ones included (MiniBatchCounts.tokens);
# "updates", the optimizer steps; None, logged as combined. An entry whose meaning is None is not logged.
METRICS = {  # name: (reduction, denominator, meaning), logged as loss/<name>
    "policy": ("sum", "updates", "policy loss (algorithm.policy_loss), mean over the step's optimizer steps"),
    "clip_frac_high": ("sum", "mini_tokens", "fraction of mini-batch tokens with A > 0 and ratio > 1 + eps_high"),
    "clip_frac_low": ("sum", "mini_tokens", "fraction of mini-batch tokens with A < 0 and ratio < 1 - eps_low"),
    "clip_frac_dual": ("sum", "mini_tokens", "fraction of mini-batch tokens with A < 0 and ratio > clip_c (dual clip)"),
    "cov_selected": ("sum", "mini_tokens", "fraction of mini-batch tokens picked by covariance (detached; penalised)"),
    "cov_candidates": ("sum", "mini_tokens", "fraction of mini-batch tokens with clip_cov_lb < cov < clip_cov_ub"),
    "seq_clip_frac": ("sum", "num_sequences", "fraction of responses in gradient passes with a clipped sequence ratio"),
    "seq_ratio_min": ("min", None, "smallest sequence ratio s_i (gspo)"),
    "seq_ratio_max": ("max", None, "largest sequence ratio s_i (gspo)"),
    "ratio_mean": ("sum", "num_tokens", "mean importance ratio over tokens in gradient passes"),
    "approx_kl": ("sum", "num_tokens", "mean (ratio - 1) - log ratio over tokens in gradient passes (k3 of KL)"),
    "ratio_min": ("min", None, "smallest importance ratio"),
    "ratio_max": ("max", None, "largest importance ratio"),
    "num_tokens": ("sum", None, None),  # tokens in gradient passes: a denominator, not logged
    "num_sequences": ("sum", None, None),  # responses in gradient passes (gspo): a denominator, not logged
}
COMMON_METRICS = ("policy", "ratio_mean", "approx_kl", "ratio_min", "ratio_max")  # every loss's
