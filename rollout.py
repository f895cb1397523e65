"""Group sampling: G responses for each prompt, from the current policy.

Every backend has the same shape; train.py drives it once per training step:

    engine = make_rollout(cfg.rollout, model, tokenizer, max_model_len)  # model: the HF model
    engine.sync_weights(model)                      # once per step: the policy's current weights
    out = engine.generate(prompt_ids, n=G, seed=s)  # -> Rollout, prompt-major; any number of calls
    engine.sleep()                                  # once per step, before the update
    engine.weight_syncs                             # weight copies so far (logged per step)

`Rollout` holds, for each of the P*G responses (response j of prompt i at index i*G + j), the
response token ids (ending in EOS unless cut at max_response_len), whether it was truncated,
and, where the sampler reports them, its log-probabilities of the sampled tokens. The HF backend
also reports the policy's own log-probs and entropies of the response (choice 4).

Backends:
- "hf" (here): transformers `generate` on the training model itself (CPU runs, tests, the
  demo). No weight copy exists, so `sync_weights` and `sleep` have nothing to do.
- "vllm" (`rollout_vllm.py`): a colocated vLLM engine, one per rank, holding its own copy of
  the weights, which `sync_weights` overwrites with the policy's; it reports `rollout_logp`.

Choices, numbered:
1. Token ids at or above len(tokenizer) are never sampled: Qwen pads its embedding past the
   tokenizer, and those rows are untrained (HF: `suppress_tokens`; vLLM: rollout_vllm.py
   choice 1).
2. Sampling is seeded per call from (trainer seed, step, global call index, generation batch),
   so a run is reproducible and a resumed run samples exactly what the uninterrupted one did.
3. HF: one prefill per prompt, not G. `shared_prefill` encodes the P left-padded prompts, all but
   their last column, once, and repeats that KV cache G times along the batch; `generate` then
   continues from it with the G-fold expanded prompts, so its first forward is one token per
   row. Every row sees the logits it would have seen with `num_return_sequences=G` (to float
   rounding), so the sampling distribution is unchanged; only the prompt's compute is shared.
4. HF: `policy_logp` and `policy_entropy`, one value per response token (EOS included, nothing
   after it), are the trainer's definitions (loss.token_logprobs): log softmax(z)[token] and
   lse(z) - sum softmax(z) z, with z = raw logits / T over the WHOLE vocabulary, in fp32. They
   are not the log-probs of the distribution actually sampled (after choice 1 and top-k/top-p).
   They equal a separate forward of the policy on prompt + response to the rounding of the
   model's dtype (fp32: ~1e-5; bf16 decode and full-sequence kernels differ more), so the
   trainer can reuse them instead of its own no-grad pass. They come from generate's raw logits
   (`output_logits=True`), read and freed one step at a time; but generate keeps all of them
   until it returns, T * P*G * V fp32 values (64 x 1,024 tokens at V = 151,936 is 40 GB): fine
   for the small runs this backend is for, not for long responses on a large vocabulary. Set
   `report_policy_logp = False` on the engine where nothing reads them (evaluation): generate
   then keeps no logits and both fields stay None. vLLM leaves them None.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

import loss


@dataclass
class Rollout:
    """P*G sampled responses, prompt-major: response k belongs to prompt k // G."""

    response_ids: list[list[int]]  # (P*G) token lists, EOS included when generated
    truncated: list[bool]  # (P*G) hit max_response_len before EOS
    rollout_logp: list[list[float]] | None = None  # (P*G) sampler's log-prob of each response token (EOS too), if reported
    policy_logp: list[list[float]] | None = None  # (P*G) HF only: log softmax(logits / T)[token] (choice 4)
    policy_entropy: list[list[float]] | None = None  # (P*G) HF only: entropy of softmax(logits / T) (choice 4)


def concat(parts: list[Rollout]) -> Rollout:
    """Several calls' rollouts as one, in order; an optional field is kept only if every part has it."""
    joined = {}
    for field in dataclasses.fields(Rollout):
        values = [getattr(p, field.name) for p in parts]
        joined[field.name] = None if any(v is None for v in values) else [x for v in values for x in v]
    return Rollout(**joined)


class HFRollout:
    """Sampling with transformers `generate` on the training model (left-padded prompts)."""

    def __init__(self, model, tokenizer, rollout_cfg):
        self.model, self.tokenizer, self.cfg = model, tokenizer, rollout_cfg
        self.eos_ids = eos_token_ids(tokenizer, model)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_ids[0]
        vocab = model.config.vocab_size  # not the weight's shape: a ZeRO-3 shard is empty
        self.suppress = list(range(len(tokenizer), vocab)) or None  # choice 1

    weight_syncs = 0  # `generate` runs on the training model itself: nothing is ever copied
    report_policy_logp = True  # fill policy_logp / policy_entropy (choice 4); False keeps no logits

    def sync_weights(self, model) -> None:
        """Nothing to copy: `generate` runs on the training model (the HF model) itself."""
        self.model = model

    def sleep(self) -> None:
        """Nothing to free: there is no second copy of the weights."""

    @torch.no_grad()
    def generate(self, prompt_ids: list[list[int]], n: int, seed: int) -> Rollout:
        torch.manual_seed(seed)  # choice 2
        device = next(self.model.parameters()).device
        input_ids, attention_mask = left_pad(prompt_ids, self.pad_id)  # (P, L) each
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
        L = input_ids.shape[1]
        was_training = self.model.training
        self.model.eval()
        out = self.model.generate(
            input_ids=input_ids.repeat_interleave(n, dim=0),  # (P*n, L) prompt-major: row i*n + j
            attention_mask=attention_mask.repeat_interleave(n, dim=0),  # (P*n, L)
            past_key_values=shared_prefill(self.model, input_ids, attention_mask, n),  # choice 3
            do_sample=True,
            temperature=self.cfg.temperature,
            top_p=self.cfg.top_p,
            top_k=self.cfg.top_k if self.cfg.top_k > 0 else None,
            max_new_tokens=self.cfg.max_response_len,
            eos_token_id=self.eos_ids,
            pad_token_id=self.pad_id,
            suppress_tokens=self.suppress,
            use_cache=True,
            output_logits=self.report_policy_logp,  # choice 4: raw logits, before suppression and T
            return_dict_in_generate=True,
        )
        self.model.train(was_training)
        tokens = out.sequences[:, L:]  # (P*n, T)
        step_logits = list(out.logits or ())  # T tensors (P*n, V) fp32, or none
        del out
        result = split_responses(tokens.tolist(), self.eos_ids)
        if not step_logits:
            return result
        logp, entropy = logprobs_of_steps(step_logits, tokens, self.cfg.temperature)  # (P*n, T) each
        lengths = [len(r) for r in result.response_ids]
        result.policy_logp = [row[:k] for row, k in zip(logp.tolist(), lengths)]  # choice 4
        result.policy_entropy = [row[:k] for row, k in zip(entropy.tolist(), lengths)]
        return result


def left_pad(prompt_ids: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts left-padded to one length, at least 2 so every row has a column to prefill.

    >>> left_pad([[5, 6, 7], [8]], pad_id=0)
    (tensor([[5, 6, 7],
            [0, 0, 8]]), tensor([[1, 1, 1],
            [0, 0, 1]]))
    """
    L = max(2, *(len(p) for p in prompt_ids))
    input_ids = torch.full((len(prompt_ids), L), pad_id, dtype=torch.long)  # (P, L)
    attention_mask = torch.zeros_like(input_ids)  # (P, L)
    for i, p in enumerate(prompt_ids):
        input_ids[i, L - len(p) :] = torch.tensor(p, dtype=torch.long)
        attention_mask[i, L - len(p) :] = 1
    return input_ids, attention_mask


def shared_prefill(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, n: int):
    """KV cache of each prompt without its last column, computed once and repeated n times along
    the batch (row i*n + j holds prompt i), for `generate` to continue from (choice 3).

    input_ids, attention_mask (P, L) left-padded -> a transformers Cache of P*n rows, L - 1 columns.
    Positions are numbered as `generate` numbers them: cumsum of the mask - 1, 0 on padding.
    Always one forward, even for one-token prompts (left_pad), so ZeRO-3 ranks stay in step.
    """
    position_ids = (attention_mask.cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)  # (P, L)
    out = model(input_ids=input_ids[:, :-1], attention_mask=attention_mask[:, :-1],
                position_ids=position_ids[:, :-1], use_cache=True, logits_to_keep=1)  # prompt logits unused
    cache = out.past_key_values
    cache.batch_repeat_interleave(n)  # (P, L-1) -> (P*n, L-1) keys and values per layer
    return cache


def logprobs_of_steps(step_logits: list[torch.Tensor], tokens: torch.Tensor, temperature: float):
    """Log-prob and entropy of each generated token under softmax(logits / T), over the whole
    vocabulary, one step at a time (loss.token_logprobs: the trainer's definition, choice 4).

    step_logits: T tensors (B, V), the raw logits that chose tokens[:, t]; tokens (B, T) ->
    logp (B, T), entropy (B, T) fp32. Each step's logits are released once used.
    """
    logps, entropies = [], []
    for t in range(len(step_logits)):
        logp, entropy = loss.token_logprobs(step_logits[t][:, None], tokens[:, t : t + 1], temperature)  # (B, 1)
        step_logits[t] = None  # free this step's (B, V) before the next
        logps.append(logp)
        entropies.append(entropy)
    return torch.cat(logps, dim=1), torch.cat(entropies, dim=1)  # (B, T)


def split_responses(new_tokens: list[list[int]], eos_ids: list[int]) -> Rollout:
    """Cut each generated row after its first EOS; a row without one is truncated.

    >>> split_responses([[5, 6, 2, 0, 0], [7, 8, 9]], eos_ids=[2]).response_ids
    [[5, 6, 2], [7, 8, 9]]
    """
    responses, truncated = [], []
    eos = set(eos_ids)
    for row in new_tokens:
        end = next((t + 1 for t, tok in enumerate(row) if tok in eos), None)
        responses.append(row[:end] if end is not None else row)
        truncated.append(end is None)
    return Rollout(response_ids=responses, truncated=truncated)


def eos_token_ids(tokenizer, model) -> list[int]:
    """Every id that ends a response: the generation config's EOS ids and the tokenizer's."""
    ids = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    if not ids:
        raise ValueError("the tokenizer and the model's generation config name no EOS token")
    return ids


def make_rollout(rollout_cfg, model, tokenizer, max_model_len: int):
    """The sampler named by `rollout.backend`; `model` is the HF model, `max_model_len` the longest
    prompt plus response it must hold (vLLM sizes its KV cache by it)."""
    if rollout_cfg.backend == "hf":
        return HFRollout(model, tokenizer, rollout_cfg)
    from rollout_vllm import VLLMRollout  # vLLM is imported only where its engine is built

    return VLLMRollout(model, tokenizer, rollout_cfg, max_model_len)
