"""Time of the gradient passes with zero-advantage responses skipped against not skipped.

Under QAE ~80% of responses get advantage exactly 0; with no KL and no entropy bonus they add
exactly 0 gradient, so train.accumulate_gradients skips them (trainer.sparse_update) while
keeping them in the token-mean denominator. This runs one mini-batch of 64 responses
(micro-batches of at most 4096 tokens) through a random Qwen3-architecture model both ways on
the same inputs, checks the gradients agree, and prints, last,
`time_ratio=<skip/no-skip> max_grad_rel_err=<||g_skip - g|| / ||g|| over all parameters>`.
"""

import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import config  # noqa: E402
import train  # noqa: E402
from infra.passes import Logprobs  # noqa: E402
from infra.policy import Policy  # noqa: E402
from rollout import Batch  # noqa: E402


def make_model(vocab=2048, hidden=256, layers=4):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
                      num_attention_heads=hidden // 32, num_key_value_heads=2, head_dim=32, max_position_embeddings=512,
                      tie_word_embeddings=True)
    return Policy(Qwen3ForCausalLM(cfg).float())  # the module train.py's passes run through


def make_batch(P=8, G=8, vocab=2048, nonzero=0.2):
    g = torch.Generator().manual_seed(1)
    prompt = [torch.randint(0, vocab, (32,), generator=g).tolist() for _ in range(P)]
    lens = torch.randint(32, 160, (P * G,), generator=g).tolist()
    responses = [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lens]
    adv = torch.zeros(P * G)
    live = torch.randperm(P * G, generator=g)[: round(nonzero * P * G)]
    adv[live] = torch.randn(len(live), generator=g)  # 80% exact zeros, as QAE at K = 0.4
    batch = Batch([prompt[k // G] for k in range(P * G)], responses, [""] * (P * G),
                  torch.zeros(P, G), torch.zeros(P, G, dtype=torch.bool), torch.zeros(P, G))
    return batch, adv


def grads_of(cfg, accelerator, model, batch, adv, known, sparse: bool):
    cfg.trainer.sparse_update = sparse
    model.zero_grad(set_to_none=True)
    t0 = time.perf_counter()
    train.accumulate_gradients(cfg, accelerator, model, batch, adv, known, list(range(len(adv))))
    elapsed = time.perf_counter() - t0
    return elapsed, [p.grad.clone() for p in model.parameters()]


def main():
    from accelerate import Accelerator

    torch.set_num_threads(2)
    accelerator = Accelerator(cpu=True)
    cfg = config.from_dict({}, ["trainer.micro_batch_max_tokens=4096", "rollout.max_response_len=2048",
                                "data.max_prompt_len=512", "reward.overlong_buffer_len=0"])
    model = make_model()
    batch, adv = make_batch()
    known = train.old_logprobs(cfg, accelerator, model, batch, list(range(len(adv))))
    # old log-probs off the policy: ratios vary
    known = Logprobs({i: (lp + 0.05 * torch.randn(len(lp)), ent) for i, (lp, ent) in known.rows.items()})
    print(f"{len(adv)} responses, {(adv == 0).float().mean().item():.0%} with zero advantage, "
          f"{sum(len(r) for r in batch.response_ids)} response tokens")
    times = {True: [], False: []}
    for _ in range(3):
        for sparse in (False, True):
            elapsed, grads = grads_of(cfg, accelerator, model, batch, adv, known, sparse)
            times[sparse].append(elapsed)
            if sparse:
                skip_grads = grads
            else:
                full_grads = grads
    diff = torch.cat([(a - b).flatten() for a, b in zip(skip_grads, full_grads)])
    err = (diff.norm() / torch.cat([b.flatten() for b in full_grads]).norm()).item()
    t_skip, t_full = statistics.median(times[True]), statistics.median(times[False])
    print(f"gradient passes: skip {t_skip:.2f} s, no skip {t_full:.2f} s (median of 3)")
    print(f"time_ratio={t_skip / t_full:.3f} max_grad_rel_err={err:.2e}")


if __name__ == "__main__":
    main()
