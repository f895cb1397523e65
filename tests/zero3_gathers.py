"""Worker of tests/test_zero3_gathers.py, started on 2 ranks by `accelerate launch`: counts ZeRO-3's
all-gathers of the output layer and of the embedding during train.py's no-grad log-prob passes and
gradient passes, and writes them as JSON.

    accelerate launch --multi_gpu --num_processes 2 tests/zero3_gathers.py MODEL_DIR CHUNK_TOKENS OUT.json

Under DeepSpeed ZeRO-3 with `stage3_param_persistence_threshold` 0 every parameter is partitioned
(as an 8B model's output layer is: far above the default threshold of 1e5 elements), so each use
that finds a parameter released all-gathers it. The count is taken in DeepSpeed's parameter
coordinator, which issues every fetch and prefetch of a module's parameters.
"""

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import config  # noqa: E402
import rollout as batching  # noqa: E402
import train  # noqa: E402
from infra import launch  # noqa: E402
from infra.model import load_policy  # noqa: E402
from infra.policy import Policy  # noqa: E402


def counting_coordinator(watched: dict) -> dict:
    """Count, per watched parameter name, the parameters DeepSpeed's coordinator all-gathers."""
    from deepspeed.runtime.zero.partitioned_param_coordinator import PartitionedParameterCoordinator as C

    counts = {name: 0 for name in watched}
    name = "_PartitionedParameterCoordinator__all_gather_params"
    original = getattr(C, name)

    def all_gather(self, params, forward):
        for key, p in watched.items():
            counts[key] += any(q is p for q in params)
        return original(self, params, forward)

    setattr(C, name, all_gather)
    return counts


def zero_persistence(plugin_fn):
    """infra.launch.deepspeed_plugin with every parameter partitioned (persistence threshold 0)."""

    def plugin(cfg):
        p = plugin_fn(cfg)
        p.hf_ds_config.config["zero_optimization"]["stage3_param_persistence_threshold"] = 0
        return p

    return plugin


def synthetic_batch(rank: int, P: int = 4, G: int = 4):
    """P prompts x G responses of unequal lengths (rank-dependent), about half with advantage 0."""
    g = torch.Generator().manual_seed(100 + rank)
    length = lambda lo, hi: int(torch.randint(lo, hi, (1,), generator=g))  # noqa: E731
    prompts = [torch.randint(3, 300, (length(8, 20),), generator=g).tolist() for _ in range(P)]
    responses = [torch.randint(3, 300, (length(4, 24),), generator=g).tolist() for _ in range(P * G)]
    adv = torch.randn(P * G, generator=g)
    adv[torch.rand(P * G, generator=g) < 0.5] = 0.0
    batch = batching.Batch([prompts[k // G] for k in range(P * G)], responses, [""] * (P * G),
                           torch.zeros(P, G), torch.zeros(P, G, dtype=torch.bool), torch.zeros(P, G))
    return batch, adv


def main(model_dir: str, chunk: int, out: str):
    cfg = config.load("tiny_qae.yaml", [f"model.name_or_path={model_dir}", "deepspeed.zero_stage=3", "rollout.n=4",
                                        "trainer.micro_batch_max_tokens=88", f"trainer.logprob_chunk_tokens={chunk}"])
    launch.deepspeed_plugin = zero_persistence(launch.deepspeed_plugin)
    accelerator = launch.make_accelerator(cfg)
    hf = load_policy(cfg.model, model_dir)
    assert hf.lm_head.weight is not hf.model.embed_tokens.weight, "the model must be untied"
    counts = counting_coordinator({"lm_head": hf.lm_head.weight, "embed": hf.model.embed_tokens.weight})
    optimizer = torch.optim.AdamW(hf.parameters(), lr=1e-4)
    model, optimizer = accelerator.prepare(Policy(hf), optimizer)
    passes = {"n": 0}
    forward = model.module.forward

    def counted(*args, **kwargs):
        passes["n"] += 1
        return forward(*args, **kwargs)

    model.module.forward = counted
    batch, adv = synthetic_batch(accelerator.process_index)
    everything = list(range(len(batch.response_ids)))
    result = {}
    for phase in ("no_grad", "grad", "no_grad_again", "grad_again"):
        before, passes["n"] = dict(counts), 0
        if phase.startswith("no_grad"):
            known = train.old_logprobs(cfg, accelerator, model, batch, everything)
        else:
            model.train()
            train.accumulate_gradients(cfg, accelerator, model, batch, adv, known, everything)
            optimizer.zero_grad(set_to_none=True)
        result[phase] = {"passes": passes["n"], **{k: counts[k] - before[k] for k in counts}}
    result["rank"] = accelerator.process_index
    Path(f"{out}.rank{accelerator.process_index}").write_text(json.dumps(result))
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
