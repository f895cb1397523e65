"""Token log-probabilities, entropy, and DAPO's clip-higher policy loss.

For response i, token t, with rho = exp(logp - old_logp) and the response's scalar advantage A_i
(QAE_SPEC section 4; DAPO eq. 8):

    L = - 1/(sum_i |o_i|) * sum_i sum_t min( rho*A_i, clip(rho, 1 - eps_low, 1 + eps_high)*A_i )

with eps_low = 0.2, eps_high = 0.28 ("clip-higher") and, for A_i < 0, the dual clip that bounds
the term by c*A_i (c = 10, verl `clip_ratio_c`). Log-probabilities are taken under the sampling
temperature T: logits / T before the log-softmax.

Departures and choices, numbered:
1. No KL term and no entropy bonus (paper: "exclude both KL divergence and entropy losses").
   Entropy is computed for logging only.
2. Token-mean divides by a token count the CALLER passes: the trainer passes the number of
   response tokens in the whole mini-batch, summed over micro-batches and data-parallel ranks,
   so every token weighs the same. verl normalises per micro-batch and rescales; the global
   count is the DAPO-faithful choice. Zero-advantage responses count in it.
3. seq-mean-token-mean and seq-mean-token-sum are offered as alternatives; their denominator
   is the caller's (global) number of sequences.
4. log(rho) is clamped to [-20, 20] before exp, as verl, so one stale token cannot make inf.
5. Memory: Qwen's vocabulary is V = 151,936, so a (B, T, V) fp32 tensor for a whole batch is
   never built. Log-probabilities and entropy are computed over chunks of tokens, each chunk
   upcast to fp32 on its own and, when gradients are needed, recomputed in backward
   (activation checkpointing), so autograd keeps only the chunk inputs.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch.utils.checkpoint import checkpoint

CHUNK_ELEMENTS = 1 << 25  # fp32 elements per chunk of logits (128 MiB): 220 tokens at V = 151,936


# ----------------------------------------------------------------------------------------------
# Log-probabilities and entropy of sampled tokens.
# ----------------------------------------------------------------------------------------------


def naive_token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0):
    """The plain full-vocabulary version, for tests and the memory benchmark.

    logits (B, T, V), targets (B, T) -> logp (B, T), entropy (B, T), both fp32.
    """
    z = logits.float() / temperature  # (B, T, V) fp32
    lse = torch.logsumexp(z, dim=-1)  # (B, T)
    logp = z.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse  # (B, T)
    entropy = lse - (torch.softmax(z, dim=-1) * z).sum(-1)  # (B, T)
    return logp, entropy


def _chunk_logprob_entropy(logits: torch.Tensor, targets: torch.Tensor, temperature: float):
    """logits (N, V) in any dtype, targets (N,) -> logp (N,), entropy (N,) in fp32.

    Uses H = logsumexp(z) - sum_v softmax(z)_v * z_v: no log-softmax tensor, and in fp32 it is
    ~10x more accurate at V = 151,936 than -sum p log p, whose V terms of size ~log V add up
    rounding errors of ~1e-5 (measured against fp64).
    """
    z = logits.float() / temperature  # (N, V) fp32, one chunk only
    lse = torch.logsumexp(z, dim=-1)  # (N,)
    logp = z.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse  # (N,)
    entropy = lse - (torch.softmax(z, dim=-1) * z).sum(-1)  # (N,)
    return logp, entropy


def _chunked(fn: Callable, rows: torch.Tensor, targets: torch.Tensor, chunk_tokens: int):
    """Apply fn(rows_chunk, targets_chunk) -> (logp, entropy) over chunks of the first dim,
    checkpointing each chunk when autograd is recording, and concatenate."""
    use_ckpt = torch.is_grad_enabled() and rows.requires_grad
    logps, entropies = [], []
    for start in range(0, rows.shape[0], chunk_tokens):
        r, t = rows[start : start + chunk_tokens], targets[start : start + chunk_tokens]
        logp, entropy = checkpoint(fn, r, t, use_reentrant=False) if use_ckpt else fn(r, t)
        logps.append(logp)
        entropies.append(entropy)
    return torch.cat(logps), torch.cat(entropies)


def token_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0, chunk_tokens: int | None = None
):
    """Log-probability and entropy of each target token, chunked over tokens.

    logits (B, T, V), targets (B, T) -> logp (B, T), entropy (B, T), both fp32.
    Equal to `naive_token_logprobs` (to float rounding) without its (B, T, V) fp32 tensors.
    """
    B, T, V = logits.shape
    chunk_tokens = chunk_tokens or max(1, CHUNK_ELEMENTS // V)
    fn = lambda z, t: _chunk_logprob_entropy(z, t, temperature)  # noqa: E731
    logp, entropy = _chunked(fn, logits.reshape(B * T, V), targets.reshape(B * T), chunk_tokens)
    return logp.view(B, T), entropy.view(B, T)


def token_logprobs_from_hidden(
    hidden: torch.Tensor,
    lm_head: Callable[[torch.Tensor], torch.Tensor],
    targets: torch.Tensor,
    temperature: float = 1.0,
    chunk_tokens: int | None = None,
):
    """Same as `token_logprobs`, but from the last hidden states: the output projection runs one
    chunk at a time, so not even the model-dtype (B, T, V) logits exist.

    hidden (B, T, H), lm_head maps (N, H) -> (N, V), targets (B, T) -> logp (B, T), entropy (B, T).
    """
    B, T, H = hidden.shape
    if chunk_tokens is None:  # nn.Linear knows V even when ZeRO-3 has partitioned its weight
        V = getattr(lm_head, "out_features", None) or lm_head(hidden[:1, :1].reshape(1, H)).shape[-1]
        chunk_tokens = max(1, CHUNK_ELEMENTS // V)
    fn = lambda h, t: _chunk_logprob_entropy(lm_head(h), t, temperature)  # noqa: E731
    logp, entropy = _chunked(fn, hidden.reshape(B * T, H), targets.reshape(B * T), chunk_tokens)
    return logp.view(B, T), entropy.view(B, T)


# ----------------------------------------------------------------------------------------------
# The clip-higher surrogate with dual clip, per token.
# ----------------------------------------------------------------------------------------------


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
    ratio = torch.exp((logp - old_logp).clamp(-20.0, 20.0))  # (B, T); departure 4
    surr = -adv * ratio  # (B, T)
    surr_clipped = -adv * ratio.clamp(1.0 - eps_low, 1.0 + eps_high)  # (B, T)
    loss = torch.maximum(surr, surr_clipped)  # (B, T): the pessimistic (min of objectives) term
    dual = torch.minimum(loss, -adv * clip_c)  # (B, T): for A < 0, bounded by c*|A|
    return torch.where(adv < 0, dual, loss)  # (B, T)


# ----------------------------------------------------------------------------------------------
# Aggregations: (B, T) token losses -> scalar. `denom` is the caller's global count.
# ----------------------------------------------------------------------------------------------


def token_mean(loss: torch.Tensor, mask: torch.Tensor, denom: float | torch.Tensor) -> torch.Tensor:
    """DAPO token-level mean: sum of masked token losses / denom (the global token count)."""
    return (loss * mask).sum() / denom


def seq_mean_token_mean(loss: torch.Tensor, mask: torch.Tensor, denom: float | torch.Tensor) -> torch.Tensor:
    """GRPO's original: mean over each response's tokens, summed over responses / denom (sequences)."""
    per_seq = (loss * mask).sum(-1) / mask.sum(-1).clamp(min=1)  # (B,)
    return per_seq.sum() / denom


def seq_mean_token_sum(loss: torch.Tensor, mask: torch.Tensor, denom: float | torch.Tensor) -> torch.Tensor:
    """Dr. GRPO style: sum over each response's tokens, summed over responses / denom (sequences)."""
    return (loss * mask).sum() / denom


AGGREGATIONS = {"token-mean": token_mean, "seq-mean-token-mean": seq_mean_token_mean, "seq-mean-token-sum": seq_mean_token_sum}


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    denom: float | torch.Tensor,
    aggregate: Callable = token_mean,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    clip_c: float = 10.0,
    is_weight: torch.Tensor | None = None,
):
    """The DAPO policy loss of one micro-batch and what it did.

    logp, old_logp, mask (B, T); adv (B,) or (B, T); denom: the global token count for
    token-mean, the global sequence count for the seq-mean variants; is_weight (B, T), optional:
    a constant per-token weight on the loss (truncated importance sampling, `tis_weights`).

    Returns (loss, metrics); metrics are detached 0-d tensors over this micro-batch's tokens:
      clip_frac_high:  A > 0 and rho > 1 + eps_high (the clip-higher bound stopped the gradient)
      clip_frac_low:   A < 0 and rho < 1 - eps_low
      clip_frac_dual:  A < 0 and rho > c (dual clip)
      ratio_mean/min/max: rho over tokens
      approx_kl:       mean of (rho - 1) - log(rho), the k3 estimator of KL(old || new)
      num_tokens:      tokens in this micro-batch, to weight the means when combining
    """
    loss_tok = clip_higher_token_loss(logp, old_logp, adv, eps_low, eps_high, clip_c)  # (B, T)
    if is_weight is not None:
        loss_tok = loss_tok * is_weight
    loss = aggregate(loss_tok, mask, denom)
    with torch.no_grad():
        m = mask.bool()  # (B, T)
        a = (adv.unsqueeze(-1) if adv.dim() == 1 else adv).expand_as(logp)[m]  # (N,) over tokens
        log_ratio = (logp - old_logp).clamp(-20.0, 20.0)[m]  # (N,)
        ratio = log_ratio.exp()  # (N,)
        n = max(int(m.sum()), 1)
        metrics = {
            "clip_frac_high": ((a > 0) & (ratio > 1 + eps_high)).sum() / n,
            "clip_frac_low": ((a < 0) & (ratio < 1 - eps_low)).sum() / n,
            "clip_frac_dual": ((a < 0) & (ratio > clip_c)).sum() / n,
            "ratio_mean": ratio.sum() / n,
            "ratio_min": ratio.min() if ratio.numel() else torch.tensor(1.0),
            "ratio_max": ratio.max() if ratio.numel() else torch.tensor(1.0),
            "approx_kl": ((ratio - 1) - log_ratio).sum() / n,
            "num_tokens": torch.tensor(float(m.sum())),
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
    return torch.exp((old_logp - rollout_logp).clamp(-20.0, 20.0)).clamp(max=cap).detach()
