"""Build the project's embedded tiny default: a ~0.6M-parameter Qwen3 policy, its tokenizer,
and a synthetic arithmetic task with verifiable integer answers (writes `tiny/`).

Why it exists: the RL loop (train.py) must run end to end on a 2-core CPU in minutes and show
reward rising, with no download. QAE's gate (arXiv 2509.22611: the K-quantile baseline of eq. 4,
read in the abstract as a two-regime gate) splits prompts by success rate p into hard
(p <= 1 - K = 0.6: reinforce rare successes) and easy (p > 0.6: suppress remaining failures), so
the task has five difficulty levels and the policy is warm-started only part of the way: both
kinds of prompt occur (tiny/README.md gives the share of each).

The task, its tokenizer and the measurement live in scripts/tiny_task.py (choices 1-3 and 6);
this file builds the model and its warm start (4, 5, 7) and writes the folder.

What it writes into --out (default tiny/):
  model/       HF folder: config.json, model.safetensors, generation_config.json, tokenizer
               files with a Qwen-style chat template. Loads offline with from_pretrained.
  train.jsonl  rows {"id", "problem", "answer", "difficulty"}; "answer" is an integer string.
  test.jsonl   same columns, held out: no problem string shared with train.jsonl.
  README.md    the command, the sizes, and the measured warm-start accuracy per difficulty.

Choices, numbered (each repeated where it is made):
1) Task: "Compute a+b." / "Compute a-b." with fixed-width operands per level (2, 3 or 4
   digits; a >= b for subtraction). Fixed width keeps each level's digit alignment constant,
   which a 3-layer model learns within the SFT budget; mixed widths did not.
2) Worked answer: the result's digits right to left (the order the carries run), then the
   DAPO answer line, e.g. "Reversed: 288\nAnswer: 882". Writing digits least-significant first
   is what lets a tiny transformer learn carries (Lee et al. 2023, "Teaching Arithmetic to
   Small Transformers", reversed output). Responses are 10-18 tokens with <|im_end|>.
3) Tokenizer: byte-level BPE from `tokenizers`, trained on the task text; digits are split
   one per token (pre-tokenizer `Digits(individual_digits=True)`, as Qwen does) so arithmetic
   is learnable. Specials: <|endoftext|> (pad), <|im_start|>, <|im_end|> (eos for chat).
4) Model: Qwen3ForCausalLM, random init, head_dim 32 (vLLM's CPU attention supports 32, 64, ...;
   16 fails), tied embeddings. The embedding is padded past len(tokenizer) to a multiple of 64,
   as Qwen pads its own (151,936 rows for 151,669 tokens); the trainer masks ids >= len(tokenizer).
5) Warm start, stage 1: supervised fine-tune on worked answers for problems drawn from a pool
   disjoint from both train.jsonl and test.jsonl, so the RL run's starting reward on train.jsonl
   is what the README measures on test.jsonl. It is short (SFT_STEPS: the 2-digit levels are
   learned in its last third, the 3-digit ones only begun) and sees harder levels less often
   (SFT_MIX), so accuracy under temperature-1.0 sampling is partial and graded by level.
6) Measurement: temperature 1.0, top_k 0, top_p 1.0, ids >= len(tokenizer) suppressed (as the
   trainer masks them), correct iff the last "Answer: <int>" equals the answer.
7) Warm start, stage 2: a short, gentle fine-tune on the same pool in which DIRECT_FRACTION of
   the targets are the answer line alone. The policy then skips the reversed digits in about a
   third of its samples and is then almost always wrong. Why: stage 1 alone left errors that
   are diffuse digit noise, which RL at a stable learning rate barely reduced in 100 steps
   (higher rates collapsed the policy); a choice made at one token, where one way earns far
   more reward, is what RL learns within tens of steps (it also lengthens the responses, as
   RLVR does at scale). Measured once with train.py and configs/tiny_qae.yaml and
   tiny_dapo.yaml (40 steps each): rollout accuracy rose from about 0.30 (mean of steps 1-5) to
   about 0.44 (steps 36-40) as the policy stopped skipping; response length 13.4 -> 14 tokens.

Run:
  python scripts/make_tiny.py                        # full build: ~2.5 min on 2 idle cores
  python scripts/make_tiny.py --quick --out /tmp/t   # smoke test: same files, a few SFT steps
"""

import argparse
import json
import math
import random
import time
from pathlib import Path

import torch
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from tiny_task import (  # scripts/ is on sys.path when this file runs as a script
    LEVELS,
    MAX_NEW_TOKENS,
    MAX_POSITIONS,
    build_problems,
    build_tokenizer,
    chat_prompt,
    direct_answer,
    measure,
    save_tokenizer,
    time_generation,
    worked_answer,
    write_jsonl,
)

# ---------------------------------------------------------------------------------------------
# Settings. Changing any of them changes the committed artifact; rerun the full build (the task's
# own settings are in tiny_task.py).
# ---------------------------------------------------------------------------------------------
SEED = 0
# 5) problems per level in the SFT pool; hard levels get fewer so the warm start stays partial.
SFT_MIX = {1: 3000, 2: 3000, 3: 2000, 4: 1500, 5: 1500}
SFT_BATCH = 64
# 5) stage 1, worked answers only: steps (full build, --quick), peak lr, warmup steps.
SFT_STEPS, SFT_QUICK_STEPS, SFT_LR, SFT_WARMUP = 1400, 20, 2e-3, 50
# 7) stage 2, the same pool with this fraction of targets cut to the answer line alone.
DIRECT_FRACTION = 0.3
STYLE_STEPS, STYLE_QUICK_STEPS, STYLE_LR, STYLE_WARMUP = 150, 5, 3e-4, 10


# ---------------------------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------------------------
def padded_vocab_size(n_tokens: int, multiple: int = 64) -> int:
    """4) Embedding rows: the next multiple of 64 strictly above len(tokenizer).

    >>> padded_vocab_size(280), padded_vocab_size(320)
    (320, 384)
    """
    return (n_tokens // multiple + 1) * multiple


def build_model(tok: PreTrainedTokenizerFast) -> Qwen3ForCausalLM:
    """4) Random-init Qwen3: 3 layers, hidden 128, 4 query / 2 KV heads of head_dim 32."""
    config = Qwen3Config(
        vocab_size=padded_vocab_size(len(tok)),
        hidden_size=128, intermediate_size=384, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        max_position_embeddings=MAX_POSITIONS, tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id, bos_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tok.pad_token_id, pad_token_id=tok.pad_token_id,
        eos_token_id=[tok.eos_token_id, tok.pad_token_id],
        do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=MAX_NEW_TOKENS,
    )
    return model



# ---------------------------------------------------------------------------------------------
# Warm start (supervised fine-tune)
# ---------------------------------------------------------------------------------------------
def encode_example(tok: PreTrainedTokenizerFast, row: dict) -> tuple[list[int], list[int]]:
    """(prompt ids, response ids); the response ends with <|im_end|> so generation stops."""
    prompt = tok.apply_chat_template(chat_prompt(row["problem"]), add_generation_prompt=True,
                                     tokenize=True, return_dict=False)
    target = (direct_answer if row["direct"] else worked_answer)(int(row["answer"]))
    response = tok(target)["input_ids"] + [tok.eos_token_id]
    return prompt, response


def collate(examples: list[tuple[list[int], list[int]]], pad_id: int):
    """Right-padded batch; labels are -100 outside the response (loss on response tokens only)."""
    B, L = len(examples), max(len(p) + len(r) for p, r in examples)
    input_ids = torch.full((B, L), pad_id)  # (B, L)
    labels = torch.full((B, L), -100)  # (B, L)
    attention_mask = torch.zeros((B, L), dtype=torch.long)  # (B, L)
    for i, (p, r) in enumerate(examples):
        n = len(p) + len(r)
        input_ids[i, :n] = torch.tensor(p + r)
        labels[i, len(p):n] = torch.tensor(r)
        attention_mask[i, :n] = 1
    return input_ids, labels, attention_mask


def sft_lr(step: int, steps: int, lr: float, warmup: int) -> float:
    """Linear warmup, then cosine to zero at the last step (in our runs most of the learning
    happened during the decay: a constant lr of the same size learned far less)."""
    return lr * min(1.0, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * step / steps))


def sft(model, tok, rows: list[dict], steps: int, lr: float, warmup: int, seed: int) -> list[float]:
    """Cross-entropy on each row's target, SFT_BATCH problems per step, a fresh AdamW;
    returns the loss curve."""
    examples = [encode_example(tok, row) for row in rows]
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.0)
    model.train()
    losses = []
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = sft_lr(step, steps, lr, warmup)
        batch = [examples[rng.randrange(len(examples))] for _ in range(SFT_BATCH)]
        input_ids, labels, attention_mask = collate(batch, tok.pad_token_id)  # (B, L) each
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if step % 100 == 0 or step == steps - 1:
            print(f"sft step {step:5d}  loss {loss.item():.4f}", flush=True)
    model.eval()
    return losses



# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------
def write_readme(path: Path, command: str, facts: dict, report: dict, stage1: dict) -> None:
    """tiny/README.md: what was built, by which command, its sizes and measured accuracy."""
    level_rows = "\n".join(
        f"| {d} | {', '.join(f'`a{op}b` ({wa}+{wb} digits)' for op, wa, wb in forms)} | "
        f"{facts['n_train'][d]} | {facts['n_test'][d]} | {facts['n_sft'][d]} | "
        f"{report['accuracy'][d]:.1%} | {stage1['accuracy'][d]:.1%} |"
        for d, forms in LEVELS.items()
    )
    regimes = "\n".join(f"  - {name}: {share:.1%}" for name, share in report["regimes"].items())
    gen_times = ", ".join(f"{n} responses {t:.2f} s" for n, t in facts["gen_seconds"].items())
    samples = "\n".join(f"    {d}  {p:<18} -> {r!r}" for d, (p, r) in report["example"].items())
    path.write_text(f"""# tiny: the embedded default policy and task

A {facts['n_params'] / 1e6:.2f}M-parameter Qwen3 policy, its tokenizer and a synthetic
arithmetic task with integer answers, so the RL loop runs end to end on a CPU with no download
(configs `tiny_qae` and `tiny_dapo`). Everything here was written by one seeded command:

    {command}

See the docstring of `scripts/make_tiny.py` for every design choice.

## Files

- `model/`: `Qwen3ForCausalLM` + tokenizer; loads offline with
  `AutoModelForCausalLM.from_pretrained("tiny/model")` and `AutoTokenizer.from_pretrained("tiny/model")`.
  float32, model.safetensors {facts['model_bytes'] / 1e6:.2f} MB.
- `train.jsonl` ({sum(facts['n_train'].values())} rows),
  `test.jsonl` ({sum(facts['n_test'].values())} rows):
  `{{"id", "problem", "answer", "difficulty"}}`, `answer` an integer string. No problem is in
  both files, and neither shares a problem with the warm start's SFT pool.

## Model and tokenizer

- Qwen3: 3 layers, hidden 128, intermediate 384, 4 query heads / 2 KV heads, head_dim 32,
  max_position_embeddings 256, tied embeddings, random init then the warm start below.
- Tokenizer: byte-level BPE trained on the task text, `len(tokenizer)` = {facts['n_tokens']};
  the embedding has {facts['vocab_size']} rows (padded to a multiple of 64, as Qwen pads its
  own): mask sampled ids >= len(tokenizer). Digits are one token each.
- Specials: `<|endoftext|>` (pad), `<|im_start|>`, `<|im_end|>` (eos). Qwen-style chat template:
  `<|im_start|>user\\n{{problem}}<|im_end|>\\n<|im_start|>assistant\\n` with
  `add_generation_prompt=True`. The prompt is the problem text verbatim as the one user
  message, no instruction around it: that is what the warm start saw.
- Padding side is the tokenizer default (right); set `tokenizer.padding_side = "left"` at load
  time for batched generation. generation_config stops on `<|im_end|>` or `<|endoftext|>`.

## Task

Problem text `Compute a+b.` / `Compute a-b.`; the warm start's target writes the result's
digits right to left, then the answer line the reward reads:

    Compute 37+45.
    {worked_answer(82).replace(chr(10), chr(10) + "    ")}

| difficulty | problem | train | test | SFT pool | warm-start accuracy | after stage 1 only |
|---|---|---|---|---|---|---|
{level_rows}
| all | | | | | {report['overall']:.1%} | {stage1['overall']:.1%} |

"Warm-start accuracy" is the committed policy's (both stages). "After stage 1 only" is the
same measurement before stage 2, i.e. about what the policy reaches once RL has taught it never
to skip the reversed digits.

## Warm start and measurement

Two supervised stages on the SFT pool, {SFT_BATCH} problems a step, AdamW, linear warmup then
cosine to 0; {facts['sft_seconds']:.0f} s in all.

1. {facts['sft_steps'][0]} steps at peak lr {SFT_LR} (warmup {SFT_WARMUP}) on worked answers
   only; final loss {facts['stage_loss'][0]:.4f}. Kept short on purpose: the 2-digit levels are
   learned in its last third and the 3-digit ones only begun.
2. {facts['sft_steps'][1]} steps at peak lr {STYLE_LR} (warmup {STYLE_WARMUP}) where
   {DIRECT_FRACTION:.0%} of the targets are the answer line alone (`Answer: 82`); final loss
   {facts['stage_loss'][1]:.4f}. The policy now skips the reversed digits in some samples and is
   then almost always wrong: the first thing RL learns is to stop skipping, which raises the
   reward within tens of steps (stage 1's remaining errors are diffuse digit noise that RL at a
   stable learning rate barely moved in our runs).

The step counts, the mix (SFT pool column) and the fraction were picked by hand from a few
runs. Stage 1's learning comes in sudden jumps whose timing is chaotic: a small change to the
steps, the mix, the seed or the CPU can move a jump past the end (one mix we tried learned
nothing in 1400 steps), so re-measure after any change.

Accuracy: {facts['per_level']} test problems per difficulty x {facts['n_samples']} samples,
temperature 1.0, top_k 0, top_p 1.0, max_new_tokens {MAX_NEW_TOKENS}; correct iff the last
`Answer: <int>` equals the answer. One sampled response per difficulty:

{samples}

- overall (mean over difficulties): {report['overall']:.1%}
- responses that write the reversed digits first: {report['worked']:.1%}; their accuracy
  {report['accuracy_worked']:.1%}, against {report['accuracy_direct']:.1%} for those that skip them
- responses that ended with `<|im_end|>` before max_new_tokens: {report['stopped']:.1%}
- prompts by success rate p over their {facts['n_samples']} samples (QAE K = 0.4 splits at
  p = 0.6; groups with p = 0 or 1 have zero variance and are dropped by dynamic sampling):
{regimes}
- one rollout batch with HF `generate` on 2 CPU threads (8 samples per prompt, temperature 1.0,
  max_new_tokens {MAX_NEW_TOKENS}, median of 3): {gen_times}
  (wall clock on a shared machine; varies with load)

Reruns of the command on the same machine give the same files except this README's timings
(checked: identical model.safetensors). On another CPU the floating-point reductions differ,
and with them possibly the warm start (see above): the committed weights are the reference.
""")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("tiny"), help="output folder")
    parser.add_argument("--quick", action="store_true",
                        help=f"{SFT_QUICK_STEPS} + {STYLE_QUICK_STEPS} SFT steps and a small "
                             "measurement: a smoke test, not the committed artifact")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args()
    command = "python scripts/make_tiny.py" + (" --quick" if args.quick else "") + f" --out {args.out}"
    if args.seed != SEED:
        command += f" --seed {args.seed}"
    torch.set_num_threads(2)  # the machine the artifact is built on; also fixes reduction order

    # Task: pairwise-disjoint test / train / SFT pool.
    splits = build_problems(args.seed, SFT_MIX, DIRECT_FRACTION)
    (args.out / "model").mkdir(parents=True, exist_ok=True)
    write_jsonl(args.out / "train.jsonl", splits["train"])
    write_jsonl(args.out / "test.jsonl", splits["test"])

    # Tokenizer on the task text (special tokens are added by the trainer, not learned).
    rows = splits["sft"] + splits["train"] + splits["test"]
    corpus = [f"user\n{r['problem']}\nassistant\n{worked_answer(int(r['answer']))}" for r in rows]
    tok = build_tokenizer(corpus)

    # Model and warm start.
    torch.manual_seed(args.seed)
    model = build_model(tok)
    steps = (SFT_QUICK_STEPS, STYLE_QUICK_STEPS) if args.quick else (SFT_STEPS, STYLE_STEPS)
    per_level, n_samples = (5, 2) if args.quick else (40, 8)
    start = time.perf_counter()
    # 5) Stage 1: worked answers only, until the 2-digit levels are learned.
    worked_only = [dict(row, direct=False) for row in splits["sft"]]
    losses = sft(model, tok, worked_only, steps[0], SFT_LR, SFT_WARMUP, seed=args.seed + 1)
    sft_seconds = time.perf_counter() - start
    # What the policy does once it never skips the digits (sampling leaves the weights alone).
    stage1 = measure(model, tok, splits["test"], per_level, n_samples, seed=args.seed + 2)
    # 7) Stage 2: a DIRECT_FRACTION of the targets lose their reversed digits.
    start = time.perf_counter()
    losses += sft(model, tok, splits["sft"], steps[1], STYLE_LR, STYLE_WARMUP, seed=args.seed + 5)
    sft_seconds += time.perf_counter() - start
    model.save_pretrained(args.out / "model")
    save_tokenizer(tok, args.out / "model")

    # Measurement (6), written to the README.
    report = measure(model, tok, splits["test"], per_level, n_samples, seed=args.seed + 2)
    gen_seconds = {n: time_generation(model, tok, splits["train"], n // 8, 8,
                                      repeats=1 if args.quick else 3) for n in (64, 128)}

    def count(name):
        return {d: sum(r["difficulty"] == d for r in splits[name]) for d in LEVELS}

    facts = {
        "n_params": sum(p.numel() for p in model.parameters()),
        "model_bytes": (args.out / "model" / "model.safetensors").stat().st_size,
        "n_tokens": len(tok), "vocab_size": model.config.vocab_size,
        "n_train": count("train"), "n_test": count("test"), "n_sft": count("sft"),
        "sft_steps": steps, "stage_loss": (losses[steps[0] - 1], losses[-1]),
        "sft_seconds": sft_seconds,
        "per_level": per_level, "n_samples": n_samples,
        "gen_seconds": gen_seconds,
    }
    write_readme(args.out / "README.md", command, facts, report, stage1)
    print(json.dumps({"stage1_accuracy": stage1["accuracy"], "stage1_overall": stage1["overall"],
                      "accuracy": report["accuracy"], "overall": report["overall"],
                      "worked": report["worked"], "accuracy_worked": report["accuracy_worked"],
                      "accuracy_direct": report["accuracy_direct"],
                      "stopped": report["stopped"], "regimes": report["regimes"],
                      "gen_seconds": gen_seconds,
                      "sft_seconds": sft_seconds}, indent=1))


if __name__ == "__main__":
    main()
