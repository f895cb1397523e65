"""`rollout.gpu_memory_utilization: auto` (infra/gpu_memory.py) for a mixture of experts: Qwen3-30B-A3B's shape on
the meta device, against docs/gpu.md's hand-computed budget ("Qwen3-30B-A3B"). The rule counts every expert (all
are held in the training state and in vLLM's copy, though 8 of 128 run per token) and reads the KV cache's size from
the attention fields, which an MoE config holds as a dense one does."""

import pytest

import config
from config import ConfigError
from infra import gpu_memory

GiB = 2**30
N_30B = 30_532_122_624  # docs/gpu.md: 48 x 623,120,640 per layer + 2 x 311,164,928 (untied) + 2,048


@pytest.fixture(scope="module")
def qwen3_30b_a3b():
    """(parameters, config) of Qwen3-30B-A3B(-Base): hidden 2048, 48 layers, 32 / 4 heads of 128, 128 experts of
    moe_intermediate 768, top-8, vocabulary 151,936, untied (Qwen/Qwen3-30B-A3B-Base config.json)."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen3MoeConfig

    hf_config = Qwen3MoeConfig(hidden_size=2048, num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4,
                               head_dim=128, num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768,
                               intermediate_size=6144, vocab_size=151936, tie_word_embeddings=False)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config)
    layer = model.model.layers[0]
    assert sum(p.numel() for p in layer.mlp.experts.parameters()) == 128 * 3 * 2048 * 768  # every expert counted
    assert sum(p.numel() for p in layer.parameters()) == 623_120_640
    n = sum(p.numel() for p in model.parameters())
    assert n == 48 * 623_120_640 + 2 * 311_164_928 + 2048 == N_30B
    return n, hf_config


def paper(*overrides):
    return config.load("qwen3_8b_qae.yaml", ["rollout.gpu_memory_utilization=auto", *overrides])


def test_kv_cache_per_token(qwen3_30b_a3b):
    _, hf_config = qwen3_30b_a3b
    assert gpu_memory.kv_bytes_per_token(hf_config, "bfloat16") == 48 * 4 * 128 * 2 * 2 == 96 * 1024


# By hand (docs/gpu.md), bf16, fp32 gradient accumulation, 80 GiB cards; vLLM's bf16 weights 2 B x N = 56.87 GiB:
#   8 GPUs:  18 B x N / 8 = 63.98 GiB + 0.93 + 2 = 66.91 GiB resident: nothing near 56.87 GiB is left -> refused
#   64 GPUs: 18 B x N / 64 = 8.00 GiB + 2.93 = 10.93 GiB; (80 - 10.93 - 3.5) / 80 = 0.8196 -> 0.81
#   8 GPUs, offload_optimizer cpu: 2 B x N / 8 = 7.11 GiB + 2.93 = 10.04 GiB; (80 - 10.04 - 3.5) / 80 = 0.8307 -> 0.83
#   141 GiB, 8 GPUs: (141 - 66.91 - 3.5) / 141 = 0.5006 -> 0.50
@pytest.mark.parametrize("card_gib, world, overrides, expected", [
    (80, 64, [], 0.81),
    (80, 8, ["deepspeed.offload_optimizer=cpu"], 0.83),
    (80, 16, ["deepspeed.offload_optimizer=cpu"], 0.87),
    (141, 8, [], 0.50),
])
def test_auto_for_qwen3_30b_a3b(qwen3_30b_a3b, card_gib, world, overrides, expected):
    cfg = paper(*overrides)
    assert gpu_memory.resolve(cfg, "Qwen/Qwen3-30B-A3B-Base", world=world, total_bytes=card_gib * GiB,
                              size=qwen3_30b_a3b) == expected
    kv = expected * card_gib * GiB - 2 * N_30B - gpu_memory.ENGINE_EXTRA  # what is left for vLLM's KV cache
    assert kv > gpu_memory.kv_bytes_per_token(qwen3_30b_a3b[1], "bfloat16") * (2048 + 20480)  # a full sequence fits


@pytest.mark.parametrize("world", [8, 16, 32])
def test_without_offload_one_to_four_nodes_of_80_gib_are_refused(qwen3_30b_a3b, world):
    with pytest.raises(ConfigError, match="GPU leaves vLLM .* less than its 56.9 GiB of weights"):
        gpu_memory.resolve(paper(), "Qwen/Qwen3-30B-A3B-Base", world=world, total_bytes=80 * GiB, size=qwen3_30b_a3b)


def test_the_parameter_count_of_a_per_expert_checkpoint(tmp_path):
    """model_size counts the model transformers builds (experts fused) as the hub's per-expert tensors add up."""
    import sys
    from pathlib import Path

    from safetensors.torch import load_file

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from tiny_moe import build

    folder = build(tmp_path / "moe")
    n, hf_config = gpu_memory.model_size(str(folder))
    stored = load_file(folder / "model.safetensors")
    assert any(".experts.0.gate_proj." in k for k in stored)  # the hub's layout, one tensor per expert
    assert n == sum(t.numel() for t in stored.values()) and hf_config.num_experts == 8
