"""vLLM's share of a GPU for `rollout.gpu_memory_utilization: auto`, from the card's memory and the
training state that stays resident next to the engine (docs/gpu.md, "Memory: Qwen3-8B on 8 x 80 GiB").

vLLM's budget is a fraction of the card's total memory, counted over what its engine allocates
(weights, activations, CUDA graphs, KV cache); the training side's memory comes on top. So

    fraction = (card - resident - margin) / card,  rounded down to 0.01, at most 0.92
    resident = training state + DeepSpeed's gradient reduce bucket + CUDA context
    training state per GPU, ZeRO-3 over W GPUs, N parameters of b bytes (b = 2 in bf16):
             = (b parameters + g gradient accumulation + 4 fp32 master + 8 Adam m, v) x N / W,
               g = 4 with deepspeed.grad_accum_fp32, else b
    N counts every parameter the model holds (`model_size`): for a mixture of experts every expert, since all are
    trained and all are in vLLM's copy (Qwen3-30B-A3B: 30.5B, of which 3.3B run per token; docs/gpu.md)

Choices, numbered (a departure from the paper or verl says so; reasons in docs/algorithm.md, "Choices by module"):
1. `MARGIN` 3.5 GiB, `CONTEXT` 2 GiB and `REDUCE_BUCKET` 5e8 elements x b (DeepSpeed's default
   reduce_bucket_size) are docs/gpu.md's assumptions, not measured.
2. `deepspeed.offload_optimizer: cpu` moves the master weights, Adam state and gradient buffer to host
   memory (b x N / W stays); `deepspeed.offload_param: cpu` moves the parameter shard too.
3. `deepspeed.zero_stage: 0`: every GPU holds the whole model, its gradient and torch's AdamW state
   in the parameters' dtype, 4 b x N, and no reduce bucket.
4. Evaluation (eval.py, `training=False`) counts no training state: the policy stays on the CPU next to vLLM.
5. At most 0.92 (vLLM's default); a fraction too small for the weights and one full sequence is a ConfigError.
"""

from __future__ import annotations

import math
import os
import sys

import config
from config import ConfigError

GiB = 2**30
MARGIN, CONTEXT, ENGINE_EXTRA = 3.5 * GiB, 2 * GiB, 3 * GiB  # choice 1; ENGINE_EXTRA: vLLM's activations, graphs
REDUCE_BUCKET = 5e8  # DeepSpeed reduce_bucket_size default, elements (choice 1)
MAX_FRACTION = 0.92  # choice 5: vLLM 0.32's and 0.33's CacheConfig.gpu_memory_utilization
BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float64": 8}


def resident_bytes(n_params: int, world: int, cfg: config.Config, training: bool = True) -> float:
    """Memory the training side holds on each GPU while vLLM generates (choices 1-4)."""
    if not training:
        return CONTEXT
    b, ds = BYTES[cfg.model.dtype], cfg.deepspeed
    if not ds.zero_stage:
        return 4 * b * n_params + CONTEXT  # choice 3
    grad = 4 if ds.grad_accum_fp32 else b
    per_param = b + (0 if ds.offload_optimizer == "cpu" else grad + 4 + 8)  # choice 2
    if ds.offload_param == "cpu":
        per_param -= b
    return per_param * n_params / world + REDUCE_BUCKET * b + CONTEXT


def fraction(total_bytes: int, n_params: int, world: int, cfg: config.Config, training: bool = True) -> float:
    """(card - resident - margin) / card, rounded down to 0.01, at most 0.92."""
    free = total_bytes - resident_bytes(n_params, world, cfg, training) - MARGIN
    return min(MAX_FRACTION, math.floor(100 * free / total_bytes + 1e-9) / 100)


def kv_bytes_per_token(hf_config, dtype: str) -> int:
    """K and V of every layer for one token; 0 for a config without the usual attention fields."""
    heads = getattr(hf_config, "num_attention_heads", None)
    head_dim = getattr(hf_config, "head_dim", None) or (hf_config.hidden_size // heads if heads else 0)
    kv_heads = getattr(hf_config, "num_key_value_heads", None) or heads or 0
    return getattr(hf_config, "num_hidden_layers", 0) * kv_heads * head_dim * 2 * BYTES[dtype]


def model_size(model_path: str):
    """(parameter count, HF config) of the model at `model_path`, built on the meta device (no weights read)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    hf_config = AutoConfig.from_pretrained(model_path)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config)
    return sum(p.numel() for p in model.parameters()), hf_config  # tied weights counted once


def card_bytes() -> int | None:
    """Total memory of this process's GPU, or None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(int(os.environ.get("LOCAL_RANK", "0"))).total_memory


def resolve(cfg: config.Config, model_path: str, world: int | None = None, training: bool = True,
            total_bytes: int | None = None, size=None) -> float | str:
    """`rollout.gpu_memory_utilization` as vLLM gets it: a number as given, `auto` computed here and
    printed (rank 0). `total_bytes` and `size` ((parameters, HF config)) stand in for the card and the model."""
    value, key = cfg.rollout.gpu_memory_utilization, "rollout.gpu_memory_utilization"
    if value != "auto" or cfg.rollout.backend != "vllm":
        return value
    total_bytes = total_bytes or card_bytes()
    if total_bytes is None:
        raise ConfigError(f"config key `{key}` is auto, which sizes vLLM from the GPU's memory, and this machine has "
                          "no CUDA GPU; give a number (vLLM's CPU build: its share of host memory)")
    world = world or int(os.environ.get("WORLD_SIZE", "1"))
    n_params, hf_config = size or model_size(model_path)
    result = fraction(total_bytes, n_params, world, cfg, training)
    resident = resident_bytes(n_params, world, cfg, training)
    weights = BYTES[cfg.model.dtype] * n_params
    max_model_len = cfg.data.max_prompt_len + cfg.rollout.max_response_len
    one_sequence = kv_bytes_per_token(hf_config, cfg.model.dtype) * max_model_len
    need = weights + ENGINE_EXTRA + one_sequence
    if result * total_bytes < need:
        raise ConfigError(
            f"config key `{key}` is auto: this {total_bytes / GiB:.1f} GiB GPU leaves vLLM {max(result, 0):.2f} x "
            f"{total_bytes / GiB:.1f} GiB next to {resident / GiB:.1f} GiB of training state, less than its "
            f"{weights / GiB:.1f} GiB of weights + ~3 GiB + one full-length sequence of KV cache "
            f"({one_sequence / GiB:.2f} GiB); "
            "use more GPUs (ZeRO-3 shards the state), deepspeed.offload_optimizer=cpu, or shorter sequences")
    if os.environ.get("RANK", "0") == "0":
        print(f"{key}: auto = {result:.2f} = ({total_bytes / GiB:.1f} GiB card - {resident / GiB:.1f} GiB "
              f"{'training state resident' if training else 'CUDA context'} - {MARGIN / GiB:g} GiB margin) / "
              f"{total_bytes / GiB:.1f} GiB, rounded down (docs/gpu.md); vLLM's KV cache gets about "
              f"{(result * total_bytes - weights - ENGINE_EXTRA) / GiB:.1f} GiB", file=sys.stderr)
    return result
