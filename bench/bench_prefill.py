"""Time of one 64-completion rollout call (8 prompts x 8 responses, at most 24 new tokens, the
tiny policy) as rollout.generate makes it with infra/hf_sampler.py (one prefill per prompt, shared_prefill, then
its own sampling loop, sampling_loop) against transformers' `generate` with one prefill per response
(`num_return_sequences`).

The new call also returns policy_logp and policy_entropy (the trainer's definitions); that work is in its time.
The two are timed in alternation after one warm-up call each; the same seed gives the same
samples both ways wherever float rounding does not move a draw, which is counted too.
Prints the median times and, last, `prefill_time_ratio=<new/old>`.
"""

import json
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
import rollout  # noqa: E402
from infra import data  # noqa: E402
from infra.hf_sampler import HFSampler, left_pad  # noqa: E402

P, G, MAX_NEW, REPEATS = 8, 8, 24, 15


@torch.no_grad()
def generate_per_response_prefill(engine: HFSampler, prompt_ids: list[list[int]], n: int, seed: int):
    """The old HF sampler: every prompt expanded to n rows before it is encoded."""
    torch.manual_seed(seed)
    input_ids, attention_mask = left_pad(prompt_ids, engine.pad_id)  # (P, L)
    cfg = engine.cfg
    out = engine.model.generate(input_ids=input_ids, attention_mask=attention_mask, do_sample=True,
                                temperature=cfg.temperature, top_p=cfg.top_p, top_k=None,
                                max_new_tokens=cfg.max_response_len, num_return_sequences=n,
                                eos_token_id=engine.eos_ids, pad_token_id=engine.pad_id,
                                suppress_tokens=engine.suppress, use_cache=True)  # (P*n, L + new)
    return rollout.split_responses(out[:, input_ids.shape[1] :].tolist(), engine.eos_ids)


def timed(fn) -> tuple[float, rollout.Rollout]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main():
    model = AutoModelForCausalLM.from_pretrained(REPO / "tiny/model", dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(REPO / "tiny/model")
    rows = [json.loads(line) for line in (REPO / "tiny/train.jsonl").read_text().splitlines()[:P]]
    prompts = [data.tokenize_prompt(tokenizer, data.build_messages(r["problem"], "{problem}"), True) for r in rows]
    cfg = SimpleNamespace(temperature=1.0, top_p=1.0, top_k=-1, max_response_len=MAX_NEW)
    engine = HFSampler(model, tokenizer, cfg)
    new = lambda seed: rollout.generate(engine, prompts, n=G, seed=seed)  # noqa: E731
    old = lambda seed: generate_per_response_prefill(engine, prompts, n=G, seed=seed)  # noqa: E731
    new(0), old(0)  # warm-up
    times = {"new": [], "old": []}
    same = 0
    for seed in range(REPEATS):
        t_new, out_new = timed(lambda seed=seed: new(seed))
        t_old, out_old = timed(lambda seed=seed: old(seed))
        times["new"].append(t_new)
        times["old"].append(t_old)
        same += sum(a == b for a, b in zip(out_new.response_ids, out_old.response_ids))
    lengths = sorted(len(p) for p in prompts)
    print(f"{P} prompts ({lengths[0]}-{lengths[-1]} tokens) x {G} responses, <= {MAX_NEW} new tokens, "
          f"{REPEATS} alternating repeats, torch threads {torch.get_num_threads()}")
    print(f"same samples for the same seed: {same}/{P * G * REPEATS}")
    med_new, med_old = statistics.median(times["new"]), statistics.median(times["old"])
    print(f"median s/call: shared prefill {med_new:.4f}, prefill per response {med_old:.4f}")
    print(f"prefill_time_ratio={med_new / med_old:.3f}")


if __name__ == "__main__":
    main()
