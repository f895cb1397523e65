"""The mixture-of-experts path under DeepSpeed ZeRO-3 (Qwen3-30B-A3B-Base's architecture): the CPU twin.

Two gloo ranks run train.py's update of one step on the tiny Qwen3-MoE of scripts/tiny_moe.py (tests/moe_twin.py),
against one plain process on both ranks' responses, and must train the same weights (within fp32's noise, as
tests/test_zero3.py holds the dense model). The twin forces what differs at scale:
- every parameter partitioned (persistence threshold 0), so every block is gathered and reduced;
- each rank's tokens reach other experts (rank 0: experts 0-3, rank 1: 4-7), checked on the routers' outputs;
- several micro-batches per optimizer step, a different number on each rank (filler passes), two optimizer steps,
  gradient checkpointing on;
- the model loaded under ZeRO-3 from the hub's per-expert checkpoint, compared with the checkpoint's own tensors;
- each MoE block a ZeRO-3 leaf module of the running engine, read back by the accelerator's prepare; a launch
  whose DeepSpeed config lacks the project's leaf setting stops in one line naming the fix.

With transformers 5.19's fused experts, no number changes without the leaf setting (docs/gpu.md, "Mixture of
experts": measured bit-identical weights with `moe_twin.py ... off`); `test_the_experts_are_one_module` holds the
reason, so that a transformers that splits them into modules again fails here first.
"""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import config
from infra import launch
from infra.model import MOE_BLOCKS, ModelError, moe_blocks

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
from tiny_moe import build, expected_experts  # noqa: E402

LAUNCH = [sys.executable, "-m", "accelerate.commands.launch", "--main_process_port", "29616",  # parallel files
          "--multi_gpu", "--num_processes", "2"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_SILENT": "true"}
BLOCK = MOE_BLOCKS["qwen3_moe"]
TIMEOUT = 300  # a collective hang fails here


@pytest.fixture(scope="module")
def moe_dir(tmp_path_factory):
    return build(tmp_path_factory.mktemp("tiny_moe"))


def twin(model_dir: Path, out: Path, mode: str, command=LAUNCH) -> tuple[int, str]:
    proc = subprocess.Popen([*command, "tests/moe_twin.py", str(model_dir), str(out), mode], cwd=REPO, env=ENV,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        log, _ = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"the 2-rank MoE twin ({mode}) did not finish in {TIMEOUT} s (a collective hang?):\n"
                    f"{proc.communicate()[0][-3000:]}")
    return proc.returncode, log


def test_the_experts_are_one_module(moe_dir):
    """Why the leaf setting changes no number with transformers 5.19: each block's experts are one module holding
    two 3D parameters, so every forward runs (and ZeRO-3 gathers) the same modules on every rank whatever the routing,
    and every backward gives both parameters a gradient (zero rows for experts no token reached)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(moe_dir)
    block = model.model.layers[0].mlp
    assert f"{type(block).__module__}.{type(block).__qualname__}" == BLOCK
    E, H, inter = model.config.num_experts, model.config.hidden_size, model.config.moe_intermediate_size
    shapes = {n: tuple(p.shape) for n, p in block.named_parameters()}
    assert shapes == {"experts.gate_up_proj": (E, 2 * inter, H), "experts.down_proj": (E, H, inter),
                      "gate.weight": (E, H)}
    assert [n for n, _ in block.named_children()] == ["experts", "gate"]  # no module per expert
    ids = torch.tensor([[4, 6, 8, 10]])  # even ids below the split: experts 0 and 1 only
    model(ids).logits.sum().backward()
    grad = block.experts.down_proj.grad  # (E, H, I)
    assert grad is not None and grad[:2].abs().sum() > 0 and (grad[2:] == 0).all()


def test_the_model_type_names_its_moe_blocks(moe_dir, tmp_path):
    assert moe_blocks(str(moe_dir)) == [BLOCK]
    assert moe_blocks(str(REPO / "tiny" / "model")) == []  # dense: no leaf module
    from transformers import MixtralConfig

    MixtralConfig(num_local_experts=4, num_hidden_layers=1).save_pretrained(tmp_path / "mixtral")
    with pytest.raises(ModelError, match="mixture of experts .* add its sparse block's class to infra.model.MOE_BL"):
        moe_blocks(str(tmp_path / "mixtral"))
    moe = launch.deepspeed_plugin(config.load("tiny_qae.yaml", [f"model.name_or_path={moe_dir}",
                                                                "deepspeed.zero_stage=3"]))
    dense = launch.deepspeed_plugin(config.load("tiny_qae.yaml", ["deepspeed.zero_stage=3"]))
    assert moe.deepspeed_config["zero_optimization"]["leaf_module"] == {"classes": [BLOCK], "names": [],
                                                                        "name_suffixes": []}
    assert "leaf_module" not in dense.deepspeed_config["zero_optimization"]


def test_leaf_problem_names_each_way_the_setting_can_miss(moe_dir):
    """`leaf_problem` on a stand-in for DeepSpeed's engine: its module, its config's leaf classes, the flags."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(moe_dir)
    blocks = [layer.mlp for layer in model.model.layers]

    def engine(classes, flagged=blocks):
        for block in blocks:
            block._z3_leaf = block in flagged
            for p in block.parameters():
                p.ds_z3_leaf_module = block if block in flagged else None
        return SimpleNamespace(module=model, _config=SimpleNamespace(
            zero_config=SimpleNamespace(leaf_module=SimpleNamespace(classes=classes))))

    assert launch.leaf_problem(engine([BLOCK]), [BLOCK]) is None
    assert "names no leaf module" in launch.leaf_problem(engine([BLOCK]), [])  # the setting removed
    assert "holds zero_optimization.leaf_module.classes ['x']" in launch.leaf_problem(engine(["x"]), [BLOCK])
    assert "1 of 2 MoE blocks are not ZeRO-3 leaf modules" in launch.leaf_problem(engine([BLOCK], blocks[:1]), [BLOCK])
    dense = SimpleNamespace(module=torch.nn.Linear(2, 2), _config=engine([BLOCK])._config)
    assert "the model has no such module" in launch.leaf_problem(dense, [BLOCK])
    assert launch.leaf_problem(dense, []) is None


def test_a_checkpoint_missing_a_blocks_experts_is_refused(moe_dir, tmp_path):
    """transformers loads it with a warning and random experts there (under ZeRO-3 it reports the same two keys
    missing: checked by hand); load_policy refuses it."""
    import shutil

    from safetensors.torch import load_file, save_file

    from infra.model import load_policy

    broken = Path(shutil.copytree(moe_dir, tmp_path / "broken"))
    kept = {k: v for k, v in load_file(broken / "model.safetensors").items()
            if not k.startswith("model.layers.1.mlp.experts.")}
    save_file(kept, broken / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelError, match=r"\(2 not loaded: model\.layers\.1\.mlp\.experts\.down_proj, "
                                         r"model\.layers\.1\.mlp\.experts\.gate_up_proj\)"):
        load_policy(config.load("tiny_qae.yaml").model, str(broken))


def plain_update(moe_dir: Path) -> tuple[dict, dict, list[float]]:
    """One plain process (no DeepSpeed) on both ranks' responses, mini-batch m holding each rank's mini-batch m:
    (weights before, weights after, gradient norms)."""
    from accelerate import Accelerator

    import rollout as batching
    import train
    from infra.model import load_policy
    from infra.policy import Policy
    from moe_twin import TWIN, rank_batch

    cfg = config.load("tiny_qae.yaml", [f"model.name_or_path={moe_dir}", "deepspeed.zero_stage=0", *TWIN])
    hf = load_policy(cfg.model, str(moe_dir))
    before = {n: p.detach().clone() for n, p in hf.named_parameters()}
    (b0, a0), (b1, a1) = rank_batch(0), rank_batch(1)
    half = len(a0) // 2  # each rank's responses in one of its two mini-batches
    order = [(b, a, range(m * half, (m + 1) * half)) for m in (0, 1) for b, a in ((b0, a0), (b1, a1))]
    pick = lambda field: [getattr(b, field)[i] for b, _, part in order for i in part]  # noqa: E731
    G = cfg.rollout.n
    P = 2 * len(a0) // G  # prompts of both ranks
    batch = batching.Batch(pick("prompt_ids"), pick("response_ids"), [""] * 2 * len(a0), torch.zeros(P, G),
                           torch.zeros(P, G, dtype=torch.bool), torch.zeros(P, G))
    adv = torch.cat([a[list(part)] for _, a, part in order])
    optimizer = torch.optim.AdamW(hf.parameters(), lr=cfg.optim.lr, betas=cfg.optim.betas,
                                  weight_decay=cfg.optim.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    upd = train.update(cfg, Accelerator(cpu=True), Policy(hf), optimizer, scheduler, batch, adv, step=1)
    return before, {n: p.detach().clone() for n, p in hf.named_parameters()}, upd.grad_norms


def checkpoint_fused(folder: Path) -> dict:
    """The per-expert checkpoint's expert tensors stacked by hand into the model's fused layout."""
    from safetensors.torch import load_file

    raw, out = load_file(folder / "model.safetensors"), {}
    for layer in sorted({k.split(".")[2] for k in raw if ".experts." in k}):
        head = f"model.layers.{layer}.mlp.experts"
        E = len({k.split(".")[5] for k in raw if k.startswith(head + ".")})
        out[f"{head}.gate_up_proj"] = torch.stack([torch.cat([raw[f"{head}.{e}.gate_proj.weight"],
                                                              raw[f"{head}.{e}.up_proj.weight"]]) for e in range(E)])
        out[f"{head}.down_proj"] = torch.stack([raw[f"{head}.{e}.down_proj.weight"] for e in range(E)])
    return raw | out


@pytest.mark.slow
def test_two_zero3_ranks_with_other_experts_train_what_one_process_trains(moe_dir, tmp_path):
    code, log = twin(moe_dir, tmp_path / "leaf", "leaf")
    assert code == 0, log[-3000:]
    ranks = [json.loads(Path(f"{tmp_path / 'leaf'}.rank{r}.json").read_text()) for r in (0, 1)]
    weights = torch.load(f"{tmp_path / 'leaf'}.pt")
    # What the twin must force, or it proves nothing:
    for rank, want in ((0, set().union(*map(expected_experts, range(3, 150)))),
                       (1, set().union(*map(expected_experts, range(150, 286))))):
        assert {k: set(v) for k, v in ranks[rank]["experts"].items()} == {"0": want, "1": want}, ranks[rank]
    assert not set(ranks[0]["experts"]["0"]) & set(ranks[1]["experts"]["0"])  # the ranks' experts differ
    assert all(r["leaf_blocks"] == 2 for r in ranks)  # each MoE block a leaf of the running engine
    assert all(r["micro_batches"] >= 2 * len(r["grad_norms"]) == 4 for r in ranks), ranks  # 2+ per optimizer step
    assert sum(r["fillers"] for r in ranks) > 0, "the ranks never had unequal numbers of micro-batches"

    # Loaded under ZeRO-3 from the per-expert checkpoint: the checkpoint's tensors, exactly.
    sent = checkpoint_fused(moe_dir)
    assert {k: (v - sent[k]).abs().max().item() for k, v in weights["loaded"].items()} == \
        {k: 0.0 for k in weights["loaded"]}

    before, after, norms = plain_update(moe_dir)
    assert ranks[0]["grad_norms"] == pytest.approx(norms, rel=2e-5)
    moved = max((after[k] - before[k]).abs().max().item() for k in after)
    gap = max((weights["trained"][k] - after[k]).abs().max().item() for k in after)
    print(f"weights moved {moved:.3g}; 2 ZeRO-3 ranks vs 1 plain process differ by {gap:.3g}")
    assert moved > 1e-3 and gap < 1e-5, (moved, gap)


@pytest.mark.slow
def test_a_deepspeed_config_without_the_leaf_setting_stops_in_one_line(moe_dir, tmp_path):
    """The project's setting removed (DeepSpeed's default list would still flag the block): the read-back in the
    accelerator's prepare refuses to train, in one line naming the fix. One ZeRO-3 process (`python train.py`'s
    form) is enough: every rank reads back its own engine."""
    code, log = twin(moe_dir, tmp_path / "unset", "unset", command=[sys.executable])
    lines = [x for x in log.splitlines() if x.startswith("error: ")]
    assert code != 0 and len(lines) == 1, log[-3000:]
    assert "the model has 2 MoE blocks" in lines[0] and "names no leaf module" in lines[0]
    assert "infra.launch.deepspeed_plugin must set zero_optimization.leaf_module.classes" in lines[0]
    assert not Path(f"{tmp_path / 'unset'}.rank0.json").exists()  # stopped before any update
