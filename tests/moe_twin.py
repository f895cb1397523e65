"""Worker of tests/test_moe.py, started on 2 ranks by `accelerate launch`: train.py's update of one step (two
mini-batches, several micro-batches each) on the tiny Qwen3-MoE of scripts/tiny_moe.py under DeepSpeed ZeRO-3, with
each rank's tokens routed to other experts; writes what it loaded, what it trained and where its tokens went.

    accelerate launch --multi_gpu --num_processes 2 tests/moe_twin.py MODEL_DIR OUT MODE

MODE: `leaf` runs as train.py does (infra.launch.deepspeed_plugin's config, MoE blocks as leaf modules, read back
by the accelerator's prepare); `unset` drops the project's leaf setting from that config (DeepSpeed's default list
then applies), which the read-back must refuse in one line; `off` sets no leaf module at all and skips the
read-back (how docs/gpu.md measured what the setting changes).

Every parameter is partitioned (`stage3_param_persistence_threshold` 0), as Qwen3-30B-A3B's are: the tiny model's
would otherwise stay whole on each rank (DeepSpeed's default threshold is 1e5 elements) and no gather would run.
Rank 0 writes OUT.pt ({"loaded": ..., "trained": ...}: every parameter whole, after the ZeRO-3 load and after the
update); every rank writes OUT.rank<N>.json (the experts its tokens reached per layer, the update's counts).
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

SPLIT = 150  # scripts/tiny_moe.py: ids below reach experts 0-3, the others 4-7
# One step: 4 prompts x 4 responses per rank, mini-batches of 2 prompts per rank (two optimizer steps), micro-batches
# of at most 64 tokens (several per mini-batch, a different number on each rank), gradient checkpointing as at scale.
TWIN = ["rollout.n=4", "trainer.train_batch_size=8", "trainer.mini_batch_size=4", "trainer.micro_batch_max_tokens=64",
        "data.max_prompt_len=16", "rollout.max_response_len=48", "model.gradient_checkpointing=true", "optim.lr=1e-3",
        "trainer.total_steps=1"]


def rank_batch(rank: int, P: int = 4, G: int = 4):
    """P prompts x G responses whose ids all lie on this rank's side of SPLIT (so each rank reaches its own experts),
    of rank-dependent lengths; a quarter of the advantages are 0."""
    g = torch.Generator().manual_seed(100 + rank)
    low, high = (3, SPLIT) if rank == 0 else (SPLIT, 286)
    ids = lambda n: torch.randint(low, high, (n,), generator=g).tolist()  # noqa: E731
    length = lambda lo, hi: int(torch.randint(lo, hi, (1,), generator=g))  # noqa: E731
    prompts = [ids(length(6, 14)) for _ in range(P)]
    responses = [ids(length(4, 20 + 8 * rank)) for _ in range(P * G)]
    adv = torch.randn(P * G, generator=g)
    adv[torch.rand(P * G, generator=g) < 0.25] = 0.0
    batch = batching.Batch([prompts[k // G] for k in range(P * G)], responses, [""] * (P * G),
                           torch.zeros(P, G), torch.zeros(P, G, dtype=torch.bool), torch.zeros(P, G))
    return batch, adv


def partitioned(plugin_fn, mode: str):
    """infra.launch.deepspeed_plugin with every parameter partitioned, and the leaf setting as MODE asks."""

    def plugin(cfg):
        p = plugin_fn(cfg)
        zero = p.hf_ds_config.config["zero_optimization"]
        zero["stage3_param_persistence_threshold"] = 0
        if mode == "unset":
            zero.pop("leaf_module")
        elif mode == "off":
            zero["leaf_module"] = {"classes": [], "names": [], "name_suffixes": []}
        return p

    return plugin


def whole(model) -> dict:
    """Every parameter of a ZeRO-3 model, gathered whole (a collective), as fp32 CPU tensors."""
    import deepspeed

    with deepspeed.zero.GatheredParameters(list(model.parameters())):
        return {name: p.detach().float().cpu().clone() for name, p in model.named_parameters()}


def main(model_dir: str, out: str, mode: str):
    cfg = config.load("tiny_qae.yaml", [f"model.name_or_path={model_dir}", "deepspeed.zero_stage=3", *TWIN])
    launch.deepspeed_plugin = partitioned(launch.deepspeed_plugin, mode)
    if mode == "off":
        launch.leaf_problem = lambda engine, built: None
    accelerator = launch.make_accelerator(cfg)
    hf = load_policy(cfg.model, model_dir)  # ZeRO-3 partitions it as it loads, from the per-expert checkpoint
    loaded = whole(hf)
    reached = {}  # layer -> experts its router picked for this rank's tokens

    def record(layer):
        return lambda module, args, out: reached.setdefault(layer, set()).update(out[2].flatten().tolist())

    for i, layer in enumerate(hf.model.layers):
        layer.mlp.gate.register_forward_hook(record(i))  # the router returns (logits, weights, expert indices)
    optimizer = torch.optim.AdamW(hf.parameters(), lr=cfg.optim.lr, betas=cfg.optim.betas,
                                  weight_decay=cfg.optim.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)  # constant, as the paper configs
    model, optimizer = accelerator.prepare(Policy(hf), optimizer)  # the leaf read-back runs here
    rank = accelerator.process_index
    batch, adv = rank_batch(rank)
    upd = train.update(cfg, accelerator, model, optimizer, scheduler, batch, adv, step=1)
    trained = whole(hf)
    if rank == 0:
        torch.save({"loaded": loaded, "trained": trained}, f"{out}.pt")
    Path(f"{out}.rank{rank}.json").write_text(json.dumps({
        "experts": {str(k): sorted(v) for k, v in reached.items()}, "grad_norms": upd.grad_norms,
        "micro_batches": upd.total("micro_batches"), "fillers": upd.total("fillers"),
        "leaf_blocks": sum(getattr(m, "_z3_leaf", False) for m in hf.modules())}))
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    main(*sys.argv[1:4])
