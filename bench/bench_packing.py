"""Packed micro-batches against padded ones: update time, peak memory and tokens computed, in one run.

    python bench/bench_packing.py [--mini-batches 4] [--rounds 3] [--threads 2]   # ~80 s on 2 idle cores

(On a machine other jobs share, --threads 1: two threads then mostly wait on each other.)

The same gradient passes both ways, shaped as one GPU's in the paper's configuration: each
mini-batch gives a GPU 64 responses (32 prompts x 16 over 8 GPUs), of which ~20% (13) have a
non-zero advantage under QAE and go through the gradient passes (the exact sparse update). Each
mini-batch's 13 are cut by the same token budget into micro-batches, each through the log-prob
forward, the clip-higher loss and backward.
  packed  the trainer's: one row per micro-batch, positions restarting per sequence
          (infra.policy.packed_inputs), micro-batches filled up to the budget by their sum of tokens;
  padded  the plain layout: rows [prompt][response][pad] with a (B, 1, L, L) attention
          mask, micro-batches filled by count x longest (bench/padded.py), and the output layer
          over every (B, R) response slot.
Lengths are the paper's shape (bench/bench_padding.py's: response lognormal with median ~1,800
tokens capped at 20,480, prompts 60-400) scaled by 1/12, with the token budget scaled alike
(configs/qwen3_8b_qae.yaml's 45,056 -> 3,754): on the model below (hidden 256, 4 layers,
bench_sparse_update.py's) attention costs about as much against the linear layers at these lengths
as Qwen3-8B's at the paper's (per token and layer, ~4 L H against ~2 x 12 H^2 FLOPs: L / 1,900
here, L / 24,000 for Qwen3-8B). Each variant runs in its own process (its peak resident memory
is its own), the processes alternate, and the medians are reported. Printed last:
`time_ratio=<packed/padded> padded_slots_computed=<padding in packed> peak_mem_ratio=<packed/padded>`.

    python bench/bench_packing.py --paper-plan     # seconds: no model, the pass plan only
    python bench/bench_packing.py --gradient-gap cuda bfloat16    # only the two layouts' gradients, compared

estimates instead the trainer compute of one step on one GPU of configs/qwen3_8b_qae.yaml with
vLLM, before and after this change, from the pass plan (infra.passes.needs_old_pass and the micro-batches
of both layouts) on the same lengths: see paper_plan and docs/gpu.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import loss  # noqa: E402
from bench.padded import count_by_longest_micro_batches, padded_response_logprobs  # noqa: E402
from infra import data  # noqa: E402
from infra.policy import Policy, response_logprobs  # noqa: E402

SCALE = 12  # paper lengths / SCALE
BUDGET = 45056 // SCALE  # configs/qwen3_8b_qae.yaml's trainer.micro_batch_max_tokens, scaled


def micro_batches(lens: list[int], budget: int, packed: bool) -> list[list[int]]:
    """The trainer's token budget over packed rows, or the padded rows' count x longest."""
    return data.token_budget_micro_batches(lens, budget) if packed else count_by_longest_micro_batches(lens, budget)


def make_model(vocab=2048, hidden=256, layers=4):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
                      num_attention_heads=hidden // 32, num_key_value_heads=2, head_dim=32,
                      max_position_embeddings=4096,
                      tie_word_embeddings=True)
    return Qwen3ForCausalLM(cfg).float()


def make_batch(n: int, vocab=2048):
    """n prompts and responses with the paper's long-tailed lengths, scaled; advantages and
    off-policy old log-prob offsets, per response."""
    g = torch.Generator().manual_seed(0)
    resp = (torch.exp(7.5 + torch.randn(n, generator=g)).clamp(16, 20480) / SCALE).round().clamp(min=1).long().tolist()
    prompt = (torch.randint(60, 400, (n,), generator=g) / SCALE).round().long().tolist()
    prompts = [torch.randint(3, vocab, (p,), generator=g).tolist() for p in prompt]
    responses = [torch.randint(3, vocab, (r,), generator=g).tolist() for r in resp]
    adv = torch.randn(n, generator=g)
    offsets = [0.05 * torch.randn(r, generator=g) for r in resp]  # old log-prob - log-prob: ratios off 1
    return prompts, responses, adv, offsets


def update(model, prompts, responses, adv, offsets, packed: bool, per_mini_batch: int = 13) -> dict:
    """The gradient passes of mini-batches of `per_mini_batch` responses; returns the token counts they computed."""
    lens = [len(p) + len(r) for p, r in zip(prompts, responses)]
    micro = [[j + m for j in mb] for m in range(0, len(lens), per_mini_batch)
             for mb in micro_batches(lens[m : m + per_mini_batch], BUDGET, packed)]
    tokens = sum(lens)
    slots = sum(len(mb) * max(lens[i] for i in mb) for mb in micro) if not packed else tokens
    head_rows = sum(len(mb) * max(len(responses[i]) for i in mb) for mb in micro)  # (B, R) slots per micro-batch
    head_rows = sum(len(r) for r in responses) if packed else head_rows
    weight = torch.full((len(prompts),), 1.0 / sum(len(r) for r in responses))
    for mb in micro:
        forward = response_logprobs if packed else padded_response_logprobs
        logp, _, mask = forward(model, [prompts[i] for i in mb], [responses[i] for i in mb], 1.0)
        old = logp.detach() + data.right_pad_float([offsets[i] for i in mb])[0].to(logp.device)  # (B, R)
        policy_loss, _ = loss.policy_loss(logp, old, adv[mb].to(logp.device), mask, weight[mb].to(logp.device))
        policy_loss.backward()
    return {"micro_batches": len(micro), "tokens": tokens, "slots": slots, "head_rows": head_rows}


def rss_bytes() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def worker(variant: str, n: int, repeats: int, threads: int) -> None:
    torch.set_num_threads(threads)
    model = Policy(make_model())
    prompts, responses, adv, offsets = make_batch(n)
    update(model, prompts[:4], responses[:4], adv[:4], offsets, variant == "packed")  # warm-up: kernels, allocator
    model.zero_grad(set_to_none=True)
    base = rss_bytes()
    times = []
    for _ in range(repeats):
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        counts = update(model, prompts, responses, adv, offsets, variant == "packed")
        times.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    grad = torch.cat([p.grad.flatten() for p in model.parameters()])
    torch.save(grad, f"/tmp/bench_packing_grad_{variant}.pt")
    print(json.dumps({"variant": variant, "times": times, "peak_bytes": peak, **counts}))


def gradient_gap(device: str, dtype: str, mini_batches: int) -> float:
    """|grad_packed - grad_padded| / |grad_padded| over every parameter, the same responses through the gradient
    passes both ways on one model in `dtype` on `device` (scripts/gpu_smoke.sh runs it on CUDA in bf16)."""
    torch.manual_seed(0)
    model = Policy(make_model().to(device=device, dtype=getattr(torch, dtype)))
    prompts, responses, adv, offsets = make_batch(13 * mini_batches)
    grads = {}
    for variant in ("packed", "padded"):
        model.zero_grad(set_to_none=True)
        update(model, prompts, responses, adv, offsets, variant == "packed")
        grads[variant] = torch.cat([p.grad.float().flatten() for p in model.parameters()])
    return ((grads["packed"] - grads["padded"]).norm() / grads["padded"].norm()).item()


# Qwen3-8B: 36 layers, hidden 4096 (32 query heads x 128), vocabulary 151,936, untied; 8.19B parameters
# of which 0.622B are the embedding (a lookup) and 0.622B the output layer.
LAYERS, HIDDEN, BODY, HEAD = 36, 4096, 8.19e9 - 2 * 0.622e9, 0.622e9


def paper_plan(seed: int = 0) -> None:
    """One GPU's share of a step of configs/qwen3_8b_qae.yaml with vLLM: 64 prompts x 16 = 1,024
    responses, 16 mini-batches of 64, a fifth of them with A != 0 (QAE's ~80% zero advantage),
    lengths bench_padding.py's. FLOPs: 2 per parameter per token slot forward (the body over every
    slot of a row, the output layer over every row it is given), attention 4 x L x HIDDEN per layer
    and token, over the whole L x L square for padded rows (a dense mask: no causal skipping) and
    the causal half for packed sequences; a gradient pass is 4 forwards (backward 2, recompute 1:
    gradient checkpointing and the chunked log-probs). Output-layer all-gathers under ZeRO-3: before,
    one per 220-row chunk in forward and two in backward (recompute, backward) in passes whose trace
    was invalid (most: their chunk counts differ), after, one per forward and one per backward."""
    import config
    from infra.passes import needs_old_pass
    from rollout import Batch

    cfg = config.load("qwen3_8b_qae.yaml", ["rollout.backend=vllm"])
    g = torch.Generator().manual_seed(seed)
    n, mini, budget = 1024, 64, cfg.trainer.micro_batch_max_tokens
    resp = torch.exp(7.5 + torch.randn(n, generator=g)).clamp(16, 20480).round().long().tolist()
    prompt = torch.randint(60, 400, (n,), generator=g).tolist()
    adv = (torch.rand(n, generator=g) < 0.2).float() * torch.randn(n, generator=g)
    # as vLLM gives it: no policy log-probs
    batch = Batch([[0] * p for p in prompt], [[0] * r for r in resp], [""] * n, torch.zeros(n // 16, 16),
                  torch.zeros(n // 16, 16, dtype=torch.bool), torch.zeros(n // 16, 16))
    first = mini  # the first mini-batch: responses 0 .. mini - 1

    def cost(ids, packed: bool, grad: bool) -> dict:
        lens = [prompt[i] + resp[i] for i in ids]
        micro = [[ids[j] for j in mb] for mb in micro_batches(lens, budget, packed)]
        rows = [sum(resp[i] for i in mb) if packed else len(mb) * max(resp[i] for i in mb) for mb in micro]
        slots = sum(prompt[i] + resp[i] for mb in micro for i in mb) if packed else \
            sum(len(mb) * max(prompt[i] + resp[i] for i in mb) for mb in micro)
        attn = sum((prompt[i] + resp[i]) ** 2 / 2 for mb in micro for i in mb) if packed else \
            sum(len(mb) * max(prompt[i] + resp[i] for i in mb) ** 2 for mb in micro)
        flops = (2 * BODY * slots + 2 * HEAD * sum(rows) + 4 * HIDDEN * LAYERS * attn) * (4 if grad else 1)
        per_call = 2 if grad else 1  # packed: the forward, and the backward
        gathers = len(micro) * per_call if packed else sum(math.ceil(r / 220) * (3 if grad else 1) for r in rows)
        return {"responses": len(ids), "passes": len(micro), "slots": slots, "flops": flops, "gathers": gathers}

    nonzero = [[i for i in range(m, m + mini) if adv[i] != 0] for m in range(0, n, mini)]
    old_before = [i for i in range(n) if not (adv[i] != 0 and i < first)]  # train.py before: every response but those
    old_after = needs_old_pass(cfg, batch, adv, first, world=8, key=(cfg.trainer.seed, 1, 0))
    rows = {}
    for name, packed, todo in (("before", False, old_before), ("sample only, padded", False, old_after),
                               ("after", True, old_after)):
        parts = [cost(todo, packed, False)] + [cost(ids, packed, True) for ids in nonzero if ids]
        rows[name] = {k: sum(p[k] for p in parts) for k in parts[0]} | {"old": parts[0]}
        r = rows[name]
        old, grad_flops = r["old"], r["flops"] - r["old"]["flops"]
        print(f"{name}: no-grad pass {old['responses']} responses in {old['passes']} passes "
              f"({old['flops'] / 1e15:.1f} PFLOP); gradient passes {r['responses'] - old['responses']} responses "
              f"in {r['passes'] - old['passes']} passes ({grad_flops / 1e15:.1f} PFLOP); "
              f"{r['slots'] / 1e6:.2f}M token slots, {r['flops'] / 1e15:.1f} PFLOP, "
              f"~{r['gathers']} output-layer gathers")
    before, after = rows["before"]["flops"], rows["after"]["flops"]
    print(f"trainer_compute_ratio={after / before:.3f} "
          f"(at 400 TFLOP/s per GPU: {before / 4e14:.0f} s -> {after / 4e14:.0f} s per step)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mini-batches", type=int, default=4, help="of 13 responses in the gradient passes")
    ap.add_argument("--rounds", type=int, default=3, help="processes per variant, alternating")
    ap.add_argument("--repeats", type=int, default=2, help="timed updates per process")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--worker", choices=["packed", "padded"])
    ap.add_argument("--paper-plan", action="store_true", help="the trainer compute per step at 8B, estimated")
    ap.add_argument("--gradient-gap", nargs=2, metavar=("DEVICE", "DTYPE"),
                    help="only the packed-vs-padded gradient gap, e.g. cuda bfloat16 (scripts/gpu_smoke.sh)")
    args = ap.parse_args()
    if args.paper_plan:
        return paper_plan()
    if args.gradient_gap:
        gap = gradient_gap(*args.gradient_gap, args.mini_batches)
        return print(f"packed_vs_padded_grad_rel_diff={gap:.3e} ({' '.join(args.gradient_gap)}, "
                     f"{13 * args.mini_batches} responses)")
    if args.worker:
        return worker(args.worker, 13 * args.mini_batches, args.repeats, args.threads)
    prompts, responses, _, _ = make_batch(13 * args.mini_batches)
    lens = sorted(len(p) + len(r) for p, r in zip(prompts, responses))
    print(f"{len(lens)} responses in {args.mini_batches} mini-batches, prompt + response tokens: "
          f"median {lens[len(lens) // 2]}, max {lens[-1]}, "
          f"total {sum(lens)}; token budget {BUDGET} (paper lengths and budget / {SCALE})")
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    runs = {"padded": [], "packed": []}
    for _ in range(args.rounds):
        for variant in ("padded", "packed"):
            cmd = [sys.executable, __file__, "--worker", variant, "--mini-batches", str(args.mini_batches),
                   "--repeats", str(args.repeats), "--threads", str(args.threads)]
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
            runs[variant].append(json.loads(out.strip().splitlines()[-1]))
    res = {}
    for variant, rs in runs.items():
        r = rs[0]
        res[variant] = {"time": statistics.median(t for x in rs for t in x["times"]),
                        "peak": statistics.median(x["peak_bytes"] for x in rs),
                        **{k: r[k] for k in ("micro_batches", "tokens", "slots", "head_rows")}}
        print(f"{variant:7s} update {res[variant]['time']:.2f} s (median of {len(rs) * args.repeats}), peak memory "
              f"+{res[variant]['peak'] / 2**20:.0f} MiB, {r['micro_batches']} micro-batches, {r['slots']} token slots "
              f"through the layers for {r['tokens']} tokens ({r['slots'] - r['tokens']} padding), "
              f"{r['head_rows']} output-layer rows")
    a, b = (torch.load(f"/tmp/bench_packing_grad_{v}.pt", weights_only=True) for v in ("packed", "padded"))
    print(f"gradient packed vs padded: max relative difference {((a - b).norm() / b.norm()).item():.1e}")
    p, q = res["packed"], res["padded"]
    print(f"time_ratio={p['time'] / q['time']:.3f} padded_slots_computed={p['slots'] - p['tokens']} "
          f"peak_mem_ratio={p['peak'] / q['peak']:.3f}")


if __name__ == "__main__":
    main()
