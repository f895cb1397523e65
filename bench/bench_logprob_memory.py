"""Peak memory of the chunked log-prob + entropy path against the naive full-vocabulary path.

At Qwen's vocabulary (V = 151,936) the naive path (infra.logprobs.logprob_entropy on the whole
logits) builds (B*T, V) fp32 logits and probabilities; the chunked path
(infra.logprobs.token_logprobs_from_hidden) projects and reduces a chunk of tokens at a time and
recomputes chunks in backward. Both run on the same inputs in this one
process, forward and backward (the gradient pass of training) and forward only (the no-grad
old-logprob pass); the script prints the peak memory above the inputs, the max abs difference of
log-probs, entropies and gradients, and last `peak_memory_ratio=<chunked/naive>` (the worse of
the two passes).

    python bench/bench_logprob_memory.py            # CPU: peak resident memory from /proc
    python bench/bench_logprob_memory.py --device cuda   # GPU: torch.cuda.max_memory_allocated
"""

import argparse
import re
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from infra.logprobs import logprob_entropy, token_logprobs_from_hidden  # noqa: E402


def _status_kib(field: str) -> int:
    return int(re.search(rf"{field}:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))


def measure(fn, device: str):
    """Run fn(); return (its result, peak bytes allocated above what existed before it)."""
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        out = fn()
        torch.cuda.synchronize()
        return out, torch.cuda.max_memory_allocated() - before
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak-resident-set counter (VmHWM)
    before = _status_kib("VmRSS")
    out = fn()
    return out, (_status_kib("VmHWM") - before) * 1024


def run(path: str, hidden, head, targets, train: bool):
    """Log-probs and entropy by one path; with train=True also d(sum logp + sum H)/d hidden."""
    h = hidden.detach().requires_grad_(train)
    with torch.set_grad_enabled(train):
        if path == "naive":
            logp, ent = logprob_entropy(head(h), targets)  # (B, T, V) fp32 tensors inside
        else:
            logp, ent = token_logprobs_from_hidden(h, head, targets)
        if train:
            (logp.sum() + ent.sum()).backward()
    return logp.detach(), ent.detach(), (h.grad if train else None)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=4, help="B sequences")
    parser.add_argument("--seq", type=int, default=512, help="T tokens per sequence")
    parser.add_argument("--hidden", type=int, default=1024, help="H (Qwen3-0.6B: 1024)")
    parser.add_argument("--vocab", type=int, default=151_936, help="V (Qwen: 151,936)")
    args = parser.parse_args()
    torch.manual_seed(0)
    B, T, H, V = args.batch, args.seq, args.hidden, args.vocab
    dev = torch.device(args.device)
    hidden = torch.randn(B, T, H, device=dev) * 0.5  # (B, T, H)
    head = torch.nn.Linear(H, V, bias=False).to(dev).requires_grad_(False)
    targets = torch.randint(0, V, (B, T), device=dev)  # (B, T)
    naive_logits_gb = B * T * V * 4 / 1e9
    print(f"B*T = {B * T} tokens, V = {V}, H = {H}: one fp32 (B*T, V) tensor = {naive_logits_gb:.2f} GB")

    ratios = []
    for train in (True, False):
        t0 = time.perf_counter()
        (c_logp, c_ent, c_grad), c_peak = measure(lambda train=train: run("chunked", hidden, head, targets, train),
                                                  args.device)
        t1 = time.perf_counter()
        (n_logp, n_ent, n_grad), n_peak = measure(lambda train=train: run("naive", hidden, head, targets, train),
                                                  args.device)
        t2 = time.perf_counter()
        diff = max((c_logp - n_logp).abs().max().item(), (c_ent - n_ent).abs().max().item())
        grad_diff = (c_grad - n_grad).abs().max().item() if train else 0.0
        label = "forward+backward" if train else "forward (no grad)"
        print(
            f"{label:18s} peak naive {n_peak / 1e9:6.2f} GB ({t2 - t1:5.1f} s)  chunked {c_peak / 1e9:6.2f} GB "
            f"({t1 - t0:5.1f} s)  ratio {c_peak / n_peak:.3f}  max|diff| logp/entropy {diff:.2e}  grad {grad_diff:.2e}"
        )
        assert n_peak > 1e9, "choose B*T so that the naive path needs more than 1 GB"
        assert diff <= 1e-5 and grad_diff <= 1e-5, "chunked and naive disagree"
        ratios.append(c_peak / n_peak)
    print(f"peak_memory_ratio={max(ratios):.3f}")


if __name__ == "__main__":
    main()
