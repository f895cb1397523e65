"""The primary measure of docs/smollm2_experiment.md: a policy's entropy on a fixed set of prompts,
for the starting model and every checkpoint of a run, so that runs are compared on the same prompts
(the batch entropy that train.py logs moves with the prompts dynamic sampling keeps).

    python scripts/probe_entropy.py runs/smollm2_qae_s1 --probe runs/arith/probe.jsonl --base runs/smollm2

For each model (the `--base` folder as step 0, then checkpoints/step_*/model in order) it samples
`--n` responses to every probe prompt at the training temperature and appends one JSON line per
model to RUN/probe.jsonl (a model already there is not measured again):

    entropy      mean over sampled response tokens of H(pi(. | prefix)), in nats (EOS included)
    unclean      share of responses that do not end right after their `Answer: N` line: text after
                 it, or no EOS within `--max-tokens` (the junk tails the experiment watches)
    acc          share answered correctly (reward.py's verify mode)
    len          mean response length in tokens (EOS included)

Choices, numbered:
1. Sampling is HF `generate` at temperature 1, top_p 1, with the seed reset before every model: each
   model draws from the same random stream, and the measuring code shares nothing with the trainer's.
2. Entropy is of the full next-token distribution at each sampled position (logits / T), averaged over
   every response token of every probe response, as `policy/entropy` is over a batch.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import reward  # noqa: E402  (after the path to the repository root)

ANSWER_LINE = re.compile(r"Answer:\s*-?\d+")


def clean_end(text: str, ended: bool) -> bool:
    """The response stops right after its `Answer: N` line.

    >>> clean_end("Answer: 42", True), clean_end("Answer: 42 !!", True), clean_end("Answer: 42", False)
    (True, False, False)
    """
    found = ANSWER_LINE.search(text)
    return ended and found is not None and not text[found.end():].strip()


@torch.no_grad()
def measure(model_dir: Path, rows: list[dict], n: int, max_tokens: int, seed: int) -> dict:
    """The four measures of one model on the probe rows (choices 1-2)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    eos = tokenizer.eos_token_id
    entropy_sum, tokens, unclean, correct, total = 0.0, 0, 0, 0, 0
    torch.manual_seed(seed)
    for row in rows:
        ids = tokenizer.apply_chat_template(row["problem"], add_generation_prompt=True, return_tensors="pt",
                                            return_dict=True)["input_ids"].repeat(n, 1)  # (n, L): no padding
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0, top_p=1.0,
                             top_k=0, max_new_tokens=max_tokens, output_logits=True, return_dict_in_generate=True,
                             pad_token_id=eos, eos_token_id=eos)
        logits = torch.stack(out.logits, dim=1).float()  # (n, T, V)
        logp = torch.log_softmax(logits, dim=-1)
        h = -(logp.exp() * logp).sum(-1)  # (n, T)
        new = out.sequences[:, ids.shape[1]:]  # (n, T)
        for i in range(n):
            ends = (new[i] == eos).nonzero()
            length = int(ends[0]) + 1 if len(ends) else new.shape[1]  # EOS included
            entropy_sum += h[i, :length].sum().item()
            tokens += length
            text = tokenizer.decode(new[i, :length], skip_special_tokens=True)
            unclean += not clean_end(text, ended=len(ends) > 0)
            correct += reward.score(text, row["answer"]).acc
            total += 1
    return {"entropy": entropy_sum / tokens, "unclean": unclean / total, "acc": correct / total,
            "len": tokens / total}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a train.py output directory")
    parser.add_argument("--probe", type=Path, required=True, help="probe.jsonl from scripts/arith_task.py")
    parser.add_argument("--base", type=Path, required=True, help="the starting model folder (step 0)")
    parser.add_argument("--n", type=int, default=4, help="responses per probe prompt")
    parser.add_argument("--max-tokens", type=int, default=16, help="the run's rollout.max_response_len")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rows = [json.loads(line) for line in args.probe.read_text().splitlines() if line.strip()]
    out = args.run / "probe.jsonl"
    done = {json.loads(line)["step"] for line in out.read_text().splitlines()} if out.exists() else set()
    models = [(0, args.base)] + [(int(d.name[5:]), d / "model")
                                 for d in sorted((args.run / "checkpoints").glob("step_*"))]
    for step, model_dir in models:
        if step in done:
            continue
        row = {"step": step, **measure(model_dir, rows, args.n, args.max_tokens, args.seed)}
        with open(out, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row))


if __name__ == "__main__":
    main()
