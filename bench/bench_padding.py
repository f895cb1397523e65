"""Padding of token-budget micro-batches against fixed-count micro-batches, on reasoning-trace
lengths (long-tailed: lognormal, capped at the response budget).

Both schemes make the same number of micro-batches from the same 512 sequences; the fixed-count
one takes them in data order (what a DataLoader with a batch size does), the token-budget one
(bench/padded.py's count_by_longest_micro_batches, infra.data.token_budget_micro_batches' rule for padded
rows: count x longest) sorts by length and fills each micro-batch up to the budget.
Prints, last, `pad_fraction=<token budget> naive_pad_fraction=<fixed count>`.
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.padded import (  # noqa: E402
    count_by_longest_micro_batches,
    fixed_count_micro_batches,
    padding_fraction,
)


def main():
    g = torch.Generator().manual_seed(0)
    # Prompt ~ 150 tokens; response ~ lognormal, median ~ 1,800 tokens, capped at 20,480 (DAPO's budget).
    responses = torch.exp(7.5 + 1.0 * torch.randn(512, generator=g)).clamp(16, 20480)
    prompts = torch.randint(60, 400, (512,), generator=g)
    lengths = (prompts + responses).round().long().tolist()
    budget = 2 * (2048 + 20480)  # configs/qwen3_8b_qae.yaml: trainer.micro_batch_max_tokens
    packed = count_by_longest_micro_batches(lengths, budget)
    naive = fixed_count_micro_batches(len(lengths), size=-(-len(lengths) // len(packed)))
    print(f"{len(lengths)} sequences, median {sorted(lengths)[256]} tokens, max {max(lengths)}, budget {budget} tokens")
    print(f"token budget: {len(packed)} micro-batches; fixed count: {len(naive)} micro-batches of {len(naive[0])}")
    print(f"pad_fraction={padding_fraction(lengths, packed):.4f} "
          f"naive_pad_fraction={padding_fraction(lengths, naive):.4f}")


if __name__ == "__main__":
    main()
