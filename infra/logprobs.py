"""Log-probabilities and entropy of the sampled tokens, in fp32, without a (B, T, V) fp32 tensor.

    logp, entropy = token_logprobs(logits, targets, T)                    # (B, T) each
    logp, entropy = token_logprobs_from_hidden(hidden, lm_head, targets, T)   # the output layer chunked too

logp = log softmax(z)[target] and entropy = lse(z) - sum softmax(z) z, with z = logits / T over the
whole vocabulary (the sampling temperature T, as the loss needs it).

Choices, numbered (a departure from the paper or verl says so; reasons in docs/algorithm.md, "Choices by module"):
1. No fp32 (B, T, V) tensor: each chunk of tokens is upcast on its own and recomputed in backward.
2. Under ZeRO-3 the chunk loop runs inside one module call, `infra.policy.OutputHead`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils.checkpoint import checkpoint

CHUNK_ELEMENTS = 1 << 25  # fp32 elements per chunk of logits (128 MiB): 220 tokens at V = 151,936


# ----------------------------------------------------------------------------------------------
# Log-probabilities and entropy of sampled tokens.
# ----------------------------------------------------------------------------------------------


def logprob_entropy(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0):
    """logits (..., V) in any dtype, targets (...) -> logp (...), entropy (...) in fp32: one chunk of
    the chunked paths below, or, given the whole (B, T, V) at once, the plain full-vocabulary version
    they equal (the tests' and the memory benchmark's reference).

    Uses H = logsumexp(z) - sum_v softmax(z)_v * z_v: no log-softmax tensor, and in fp32 it is
    ~10x more accurate at V = 151,936 than -sum p log p, whose V terms of size ~log V add up
    rounding errors of ~1e-5 (measured against fp64).
    """
    z = logits.float() / temperature  # (N, V) fp32 for one chunk of N tokens
    lse = torch.logsumexp(z, dim=-1)  # (N,)
    logp = z.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse  # (N,)
    entropy = lse - (torch.softmax(z, dim=-1) * z).sum(-1)  # (N,)
    return logp, entropy


def _chunked(fn: Callable, rows: torch.Tensor, targets: torch.Tensor, chunk_tokens: int):
    """Apply fn(rows_chunk, targets_chunk) -> (logp, entropy) over chunks of at most `chunk_tokens`
    rows of the first dim, checkpointing each chunk when autograd is recording, and concatenate."""
    use_ckpt = torch.is_grad_enabled() and rows.requires_grad
    logps, entropies = [], []
    for start in range(0, rows.shape[0], chunk_tokens):
        r, t = rows[start : start + chunk_tokens], targets[start : start + chunk_tokens]
        logp, entropy = checkpoint(fn, r, t, use_reentrant=False) if use_ckpt else fn(r, t)
        logps.append(logp)
        entropies.append(entropy)
    if not logps:  # no rows
        return rows.new_zeros(0, dtype=torch.float32), rows.new_zeros(0, dtype=torch.float32)
    return torch.cat(logps), torch.cat(entropies)


def token_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0, chunk_tokens: int | None = None
):
    """Log-probability and entropy of each target token, chunked over tokens.

    logits (B, T, V), targets (B, T) -> logp (B, T), entropy (B, T), both fp32.
    Equal to `logprob_entropy` of the whole (B, T, V) (to float rounding) without its (B, T, V) fp32 tensors.
    """
    B, T, V = logits.shape
    chunk_tokens = chunk_tokens or max(1, CHUNK_ELEMENTS // V)
    fn = lambda z, t: logprob_entropy(z, t, temperature)  # noqa: E731
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
    chunk of at most `chunk_tokens` rows at a time, so not even the model-dtype (B, T, V) logits exist.

    hidden (B, T, H), lm_head maps (N, H) -> (N, V), targets (B, T) -> logp (B, T), entropy (B, T).
    """
    B, T, H = hidden.shape
    if chunk_tokens is None:
        V = getattr(lm_head, "out_features", None) or lm_head(hidden[:1, :1].reshape(1, H)).shape[-1]
        chunk_tokens = max(1, CHUNK_ELEMENTS // V)
    fn = lambda h, t: logprob_entropy(lm_head(h), t, temperature)  # noqa: E731
    logp, entropy = _chunked(fn, hidden.reshape(B * T, H), targets.reshape(B * T), chunk_tokens)
    return logp.view(B, T), entropy.view(B, T)
