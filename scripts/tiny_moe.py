"""Build a tiny random Qwen3-MoE (the architecture of Qwen3-30B-A3B-Base, 165,312 parameters) whose routing is set by
the token ids, saved as an HF folder in the hub's per-expert format, for the CPU twins of the mixture-of-experts path
(tests/test_moe.py: ZeRO-3 over two gloo ranks against one plain process, the vLLM weight sync).

    python scripts/tiny_moe.py --out /tmp/tiny_moe

What it writes: config.json (Qwen3MoeForCausalLM: 2 layers, hidden 64, 2 query / 1 KV heads of 32, 8 experts of
intermediate 32, top-2 routing, untied output layer, 320 vocabulary rows) and model.safetensors as transformers 5.19's
save_pretrained writes it: the experts it holds fused (gate_up_proj (E, 2I, H), down_proj (E, H, I)) converted back
to the hub's names (`mlp.experts.E.gate_proj.weight`, `up_proj`, `down_proj`), as Qwen/Qwen3-30B-A3B-Base stores
them; the tokenizer and generation config of tiny/model.

Choices, numbered:
1. Routing is forced by the token ids, so a test knows which experts each token must reach: embedding dimension 0
   is +1 for ids below SPLIT and -1 from SPLIT on, dimension 1 is +1 for even ids and -1 for odd ones, and the
   router reads only those two dimensions. Ids below SPLIT go to experts 0-3 (0, 1 if even; 2, 3 if odd), the
   others to experts 4-7, in both layers (the residual stream keeps the two dimensions far above the rest).
2. The routing margin (ROUTER_GAIN) is large enough that the weight updates of a short test cannot move a token to
   another expert, so runs that compute in another order still route alike.
"""

import argparse
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
SPLIT = 150  # choice 1: ids below go to experts 0-3, the rest to 4-7
ROUTER_GAIN = 2.0  # choice 2: logits of the chosen pair lead the next pair by ~2 x gain x 5.7 (the normed marker)


def config(tokenizer):
    from transformers import Qwen3MoeConfig

    return Qwen3MoeConfig(vocab_size=320, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                          num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                          num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, max_position_embeddings=256,
                          tie_word_embeddings=False, eos_token_id=tokenizer.eos_token_id,
                          pad_token_id=tokenizer.pad_token_id, bos_token_id=None)


def expected_experts(token: int, num_experts: int = 8) -> set[int]:
    """The two experts a token reaches in every layer (choice 1).

    >>> expected_experts(4), expected_experts(7), expected_experts(152), expected_experts(301)
    ({0, 1}, {2, 3}, {4, 5}, {6, 7})
    """
    first = (0 if token < SPLIT else num_experts // 2) + (0 if token % 2 == 0 else num_experts // 4)
    return {first, first + 1}


def build(out: Path, seed: int = 0) -> Path:
    """Write the tiny Qwen3-MoE and tiny/model's tokenizer into `out`; returns `out`."""
    from transformers import AutoTokenizer, GenerationConfig, Qwen3MoeForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(REPO / "tiny" / "model")
    torch.manual_seed(seed)
    model = Qwen3MoeForCausalLM(config(tokenizer))
    ids = torch.arange(model.config.vocab_size)
    with torch.no_grad():
        emb = model.model.embed_tokens.weight  # (V, H)
        emb[:, 0] = torch.where(ids < SPLIT, 1.0, -1.0)  # choice 1: which half of the experts
        emb[:, 1] = torch.where(ids % 2 == 0, 1.0, -1.0)  # which pair inside the half
        experts = torch.arange(model.config.num_experts)
        half = torch.where(experts < model.config.num_experts // 2, 1.0, -1.0)  # (E,)
        pair = torch.where(experts % (model.config.num_experts // 2) < model.config.num_experts // 4, 1.0, -1.0)
        for layer in model.model.layers:
            router = layer.mlp.gate.weight  # (E, H)
            router.zero_()
            router[:, 0], router[:, 1] = ROUTER_GAIN * half, ROUTER_GAIN * pair
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)  # per-expert names, as the hub stores Qwen3-MoE
    tokenizer.save_pretrained(out)
    GenerationConfig.from_pretrained(REPO / "tiny" / "model").save_pretrained(out)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    print(build(parser.parse_args().out, parser.parse_args().seed))
