"""The policy: loading the model and tokenizer, and the one forward the update runs through.

    hf = load_policy(cfg.model, path)          # an HF causal LM (partitioned as it loads under ZeRO-3)
    policy = Policy(hf)                        # what accelerator.prepare wraps (DeepSpeed engine, DDP)
    logp, entropy, mask = response_logprobs(policy, prompt_ids, response_ids, T, pad_id, num_chunks)
    passes = plan_passes(micro_batches, response_lens, chunk_tokens, accelerator, filler)

`Policy.forward` returns, for every response token, log pi(o_t | q, o_<t) under the sampling
temperature T (logits / T before the log-softmax, paper section 2 / verl) and the entropy of
that distribution, projecting hidden states to the vocabulary chunk by chunk
(loss.token_logprobs_from_hidden), so no (B, T, V) tensor exists.

Choices, numbered:
1. The log-prob forward is a module that accelerate prepares, so every micro-batch goes through
   `DeepSpeedEngine.forward`. ZeRO-3 counts micro-steps there: at micro-step 0 it copies a
   gradient into its partition, later it adds. A forward that bypassed the engine (calling the
   inner model) would overwrite each micro-batch's gradient with the next one's.
2. Equal collective counts on every rank. Under ZeRO-3 every module call all-gathers its
   parameters, a collective: ranks must make the same number of forward passes and, in each, the
   same number of output-layer calls. `plan_passes` agrees on the largest pass count (a rank
   with fewer runs zero-weighted filler passes) and, per pass, on the largest chunk count (a
   rank with fewer rows pads its rows with zeros, whose outputs are dropped). With one process
   the plan is exactly the local one.
3. Tokenizers without a pad token pad with EOS; padded positions are masked everywhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

import data
import loss


def load_tokenizer(path: str):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token  # choice 3
    return tokenizer


def load_policy(model_cfg, path: str):
    """The HF causal LM at `path` in `model.dtype`; under a ZeRO-3 accelerator it is partitioned as it loads."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=getattr(torch, model_cfg.dtype), attn_implementation=model_cfg.attn_implementation
    )
    if model_cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


class Policy(nn.Module):
    """The HF causal LM whose forward returns per-token log-probs and entropy of given tokens (choice 1)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, positions, targets, temperature: float, num_chunks: int | None = None):
        """input_ids, attention_mask (B, L); positions (B, R): the position whose hidden state predicts
        each target; targets (B, R) -> logp (B, R), entropy (B, R), both fp32."""
        hidden = self.model.base_model(input_ids=input_ids, attention_mask=attention_mask,
                                       use_cache=False).last_hidden_state  # (B, L, H), after the final norm
        h = hidden.gather(1, positions[..., None].expand(-1, -1, hidden.shape[-1]))  # (B, R, H)
        return loss.token_logprobs_from_hidden(h, self.model.get_output_embeddings(), targets, temperature,
                                               num_chunks=num_chunks)


def hf_model(model):
    """The HF model inside whatever wraps it: a DeepSpeed engine or DDP (`.module`), then `Policy`."""
    model = getattr(model, "module", model)
    return model.model if isinstance(model, Policy) else model


def response_logprobs(policy, prompt_ids, response_ids, temperature: float, pad_id: int, num_chunks: int | None = None):
    """Log-prob and entropy of every response token for one micro-batch, through `policy` (a
    `Policy`, or the engine that wraps it).

    Sequences are laid out [prompt][response][pad]. Returns logp (B, R), entropy (B, R), mask
    (B, R), R = the longest response.
    """
    input_ids, attention_mask = data.right_pad([p + r for p, r in zip(prompt_ids, response_ids)], pad_id)  # (B, L)
    device = next(hf_model(policy).parameters()).device
    R = max(len(r) for r in response_ids)
    start = torch.tensor([len(p) - 1 for p in prompt_ids])[:, None]  # (B, 1): predicts the first response token
    positions = (start + torch.arange(R)[None, :]).clamp(max=input_ids.shape[1] - 1)  # (B, R)
    targets, mask = data.right_pad(response_ids, pad_id)  # (B, R), (B, R)
    logp, entropy = policy(input_ids.to(device), attention_mask.to(device), positions.to(device), targets.to(device),
                           temperature, num_chunks)
    return logp, entropy, mask.to(device)


def chunk_tokens(model, configured: int | None) -> int:
    """Rows per output-layer chunk: the config's `trainer.logprob_chunk_tokens`, or loss.CHUNK_ELEMENTS / V."""
    return configured or max(1, loss.CHUNK_ELEMENTS // model.config.vocab_size)  # config: a ZeRO-3 shard is empty


@dataclass
class Pass:
    """One forward (and backward) pass of a plan."""

    ids: list[int]  # responses in the pass
    weight: float  # 1.0, or 0.0 for a filler pass that only keeps collective counts equal (choice 2)
    num_chunks: int  # output-layer calls, the same on every rank


def plan_passes(micro: list[list[int]], response_lens, chunk_size: int, accelerator, filler: int,
                at_least_one: bool = True) -> list[Pass]:
    """The passes this rank runs over its micro-batches `micro` (lists of response indices), with
    pass and chunk counts agreed over ranks (choice 2). `filler` is a response index a filler pass
    may use; `at_least_one` keeps one pass where no rank has work (a gradient pass: the optimizer
    then sees zero gradients, not none). Two small all-gathers under several processes; none with one."""
    rows = [len(ids) * max(response_lens[i] for i in ids) for ids in micro]  # (B * R) per pass
    chunks = [max(1, math.ceil(r / chunk_size)) for r in rows]
    if accelerator is None or accelerator.num_processes == 1:
        return [Pass(ids, 1.0, c) for ids, c in zip(micro, chunks)] or [Pass([filler], 0.0, 1)] * at_least_one
    device = accelerator.device
    n = int(accelerator.gather(torch.tensor([len(micro)], device=device)).max().clamp(min=int(at_least_one)))
    if n == 0:
        return []
    mine = torch.ones(n, dtype=torch.long, device=device)  # a filler pass: one response, one chunk at most
    mine[: len(chunks)] = torch.tensor(chunks, dtype=torch.long)
    agreed = accelerator.gather(mine[None]).view(-1, n).amax(0).tolist()  # (n,) the largest count of each pass
    passes = [Pass(ids, 1.0, c) for ids, c in zip(micro, agreed)]
    return passes + [Pass([filler], 0.0, c) for c in agreed[len(micro):]]
