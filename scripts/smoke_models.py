"""The two random-init models scripts/gpu_smoke.sh trains, built offline from tiny/model's tokenizer:

    python scripts/smoke_models.py OUT DTYPE [--cpu]   # OUT/model (flat) and OUT/peaked; a few seconds on a GPU

- OUT/model, flat: a Qwen3 of Qwen3-0.6B's shape (hidden 1024, 28 layers, 16 heads, 8 KV heads, head_dim 128,
  intermediate 3072, 151,936 tied vocabulary rows: 596,049,920 parameters) with the tiny task's 286-token
  tokenizer; ids 286.. are padding rows, as in Qwen's padded vocabulary. Its next-token distribution is nearly
  flat over all 151,936 ids, so sampled responses vary in length (the ZeRO-3 check needs that), and vLLM, which
  masks the padded ids, differs from the trainer by ~log(151,936 / 286) = 6.3 nats whatever its weights.
- OUT/peaked, the same model made peaked, as a trained one is: every real row of the (tied) embedding gets one
  shared coordinate (dimension 0 = 1.0), which every residual stream then carries, the padded rows are zeroed, and
  the final norm is scaled so that the real tokens' logits spread with standard deviation LOGIT_STD around a mean
  LOGIT_SHIFT above the padded ids' 0: the top token holds ~0.85 of the mass, the padded ids ~1e-8, as in a trained
  model whose padded rows are never sampled. vLLM then matches the trainer to the dtype's rounding when the weights
  arrived and misses by whole nats when they did not: what the smoke's engine-vs-trainer check needs.
--cpu: 2 small layers (vLLM's CPU attention needs head_dim >= 32), the same vocabulary: for checking the script.
"""

from __future__ import annotations

import argparse
import time

import torch
from transformers import AutoTokenizer, GenerationConfig, Qwen3Config, Qwen3ForCausalLM

QWEN3_06B = dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=128)
CPU_SHAPE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=1, head_dim=32)
LOGIT_STD = 4.0  # of the real tokens' logits at a position: top-token probability ~0.85, entropy ~0.5 nats
LOGIT_SHIFT = 20.0  # mean real logit above the padded ids' 0, as large as a trained model's top logits


def flat_model(shape: dict, tokenizer, dtype, device: str) -> Qwen3ForCausalLM:
    cfg = Qwen3Config(vocab_size=151936, tie_word_embeddings=True, max_position_embeddings=40960, rms_norm_eps=1e-6,
                      rope_parameters={"rope_type": "default", "rope_theta": 1e6}, bos_token_id=tokenizer.pad_token_id,
                      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **shape)
    torch.manual_seed(0)
    with torch.device(device):
        return Qwen3ForCausalLM(cfg).to(dtype)


@torch.no_grad()
def next_token_stats(model, n_real: int) -> dict:
    """On 8 random sequences of 32 real ids, means over positions (float32, from the model's logits): the real
    logits' std, the top token's probability, the padded ids' mass; and the smallest mean real logit."""
    ids = torch.randint(0, n_real, (8, 32), generator=torch.Generator().manual_seed(1)).to(model.device)
    logits = model(ids).logits.float()  # (8, 32, V)
    probs = logits.softmax(-1)  # (8, 32, V)
    return {"std": logits[..., :n_real].std(-1).mean().item(), "top": probs.max(-1).values.mean().item(),
            "padded": probs[..., n_real:].sum(-1).mean().item(), "floor": logits[..., :n_real].mean(-1).min().item()}


@torch.no_grad()
def make_peaked(model, n_real: int) -> dict:
    """The peaked copy, in place (see the module's docstring); next_token_stats before and after."""
    before = next_token_stats(model, n_real)
    emb = model.get_input_embeddings().weight  # (V, H), tied with the output layer
    emb[n_real:] = 0  # padded ids: logit 0 whatever the hidden state
    emb[:n_real, 0] = 1.0  # a coordinate every input carries, so every position's final hidden state has it > 0
    ids = torch.randint(0, n_real, (8, 32), generator=torch.Generator().manual_seed(1)).to(model.device)
    hidden = model.model(ids).last_hidden_state.float()  # (8, 32, H), after the final norm
    norm = model.model.norm.weight  # (H,)
    norm[1:] *= LOGIT_STD / (hidden[..., 1:] @ emb[:n_real, 1:].float().T).std(-1).mean()  # the spread
    norm[0] *= LOGIT_SHIFT / (hidden[..., 0].mean() * emb[0, 0].float())  # the shift shared by the real ids
    return {"before": before, "after": next_token_stats(model, n_real)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("dtype", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--cpu", action="store_true", help="2 small layers on the CPU")
    args = parser.parse_args()
    t0, dtype = time.perf_counter(), getattr(torch, args.dtype)
    tokenizer = AutoTokenizer.from_pretrained("tiny/model")  # 286 tokens, Qwen-style chat template
    model = flat_model(CPU_SHAPE if args.cpu else QWEN3_06B, tokenizer, dtype, "cpu" if args.cpu else "cuda")
    for name in ("model", "peaked"):
        if name == "peaked":
            stats = make_peaked(model, len(tokenizer))
        model.save_pretrained(f"{args.out}/{name}")
        tokenizer.save_pretrained(f"{args.out}/{name}")
        GenerationConfig.from_pretrained("tiny/model").save_pretrained(f"{args.out}/{name}")  # EOS: <|im_end|>
    n = sum(p.numel() for p in model.parameters())
    print(f"{n:,} parameters, vocab {model.config.vocab_size:,} rows for {len(tokenizer)} tokens, {args.dtype}; "
          f"built in {time.perf_counter() - t0:.1f} s")
    for when, s in stats.items():
        print(f"  {'flat (model)' if when == 'before' else 'peaked':<12}: real logits' std {s['std']:.2f}, top token "
              f"p {s['top']:.3f}, padded ids' mass {s['padded']:.2e} (means over 256 positions); smallest mean real "
              f"logit {s['floor']:.1f}")


if __name__ == "__main__":
    main()
