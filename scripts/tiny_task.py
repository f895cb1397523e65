"""The tiny task of scripts/make_tiny.py, and how a policy is measured on it: problems at five
difficulty levels with integer answers, the worked answer the warm start learns, the tokenizer
that reads them, and sampled accuracy per level.

Every choice is explained in make_tiny.py's docstring; the numbers in comments here (1), 2), 3),
6), 7)) refer to its numbered list. make_tiny.py builds the model and its warm start on top of
this module and writes tiny/.

    >>> rows = build_problems(0, {1: 2, 2: 2, 3: 2, 4: 2, 5: 2}, direct_fraction=0.3)
    >>> len(rows["test"]), len(rows["train"]), len(rows["sft"])
    (500, 4000, 10)
    >>> is_correct("Reversed: 288\\nAnswer: 882", "882"), is_correct("Answer: 88", "882")
    (True, False)
"""

import json
import random
import re
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

# ---------------------------------------------------------------------------------------------
# Settings. Changing any of them changes the committed artifact; rerun the full build.
# ---------------------------------------------------------------------------------------------
# difficulty -> problem forms (operator, digits of a, digits of b), drawn uniformly. 1) Widths
# are fixed per form; level 3's 3-by-2-digit forms bridge levels 2 and 4 (without them the
# 3-layer model learned 3-digit problems far later in our runs).
LEVELS = {
    1: [("+", 2, 2)],
    2: [("-", 2, 2)],
    3: [("+", 3, 2), ("-", 3, 2)],
    4: [("+", 3, 3), ("-", 3, 3)],
    5: [("+", 4, 4)],
}
N_TRAIN_PER_LEVEL = 800
N_TEST_PER_LEVEL = 100
BPE_VOCAB = 300  # the trainer stops earlier once the task text has no pair left to merge
MAX_NEW_TOKENS = 48
MAX_POSITIONS = 256
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen's template, minus tools and thinking: one turn per message, assistant cue on request.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
ANSWER_RE = re.compile(r"Answer:\s*(-?\d+)", re.IGNORECASE)


# ---------------------------------------------------------------------------------------------
# Task
# ---------------------------------------------------------------------------------------------
def sample_problem(rng: random.Random, difficulty: int) -> tuple[str, int]:
    """One problem of a level as (text, answer). 1) Fixed-width operands; a >= b for "-".

    >>> sample_problem(random.Random(0), 3)
    ('Compute 876-63.', 813)
    """
    op, width_a, width_b = rng.choice(LEVELS[difficulty])
    a = rng.randint(10 ** (width_a - 1), 10**width_a - 1)
    b = rng.randint(10 ** (width_b - 1), 10**width_b - 1)
    if op == "-" and a < b:  # only when the widths are equal
        a, b = b, a
    return f"Compute {a}{op}{b}.", a + b if op == "+" else a - b


def worked_answer(answer: int) -> str:
    """2) The result's digits right to left, then the DAPO answer line.

    >>> worked_answer(882)
    'Reversed: 288\\nAnswer: 882'
    """
    return f"Reversed: {str(answer)[::-1]}\nAnswer: {answer}"


def direct_answer(answer: int) -> str:
    """7) The answer line alone: the warm start's other, less accurate way to answer."""
    return f"Answer: {answer}"


def build_problems(seed: int, sft_mix: dict[int, int], direct_fraction: float) -> dict[str, list[dict]]:
    """Distinct problems per level, split into test, train and the SFT pool (pairwise disjoint);
    a direct_fraction of the SFT pool is marked for the answer-line-only target (7)."""
    rng = random.Random(seed)
    splits = {"test": [], "train": [], "sft": []}
    for difficulty in LEVELS:
        want = N_TEST_PER_LEVEL + N_TRAIN_PER_LEVEL + sft_mix[difficulty]
        drawn: dict[str, int] = {}  # insertion-ordered, so the split is deterministic
        while len(drawn) < want:
            problem, answer = sample_problem(rng, difficulty)
            drawn.setdefault(problem, answer)
        rows = [{"problem": p, "answer": str(a), "difficulty": difficulty} for p, a in drawn.items()]
        splits["test"] += rows[:N_TEST_PER_LEVEL]
        splits["train"] += rows[N_TEST_PER_LEVEL:N_TEST_PER_LEVEL + N_TRAIN_PER_LEVEL]
        splits["sft"] += rows[N_TEST_PER_LEVEL + N_TRAIN_PER_LEVEL:]
    for name, rows in splits.items():
        rng.shuffle(rows)  # mix levels so any prefix of a file covers all of them
        for i, row in enumerate(rows):
            row["id"] = f"{name}-{i:05d}"
    style_rng = random.Random(seed + 3)  # its own stream: the data files do not depend on it
    for row in splits["sft"]:
        row["direct"] = style_rng.random() < direct_fraction  # 7) target without reversed digits
    return splits


def write_jsonl(path: Path, rows: list[dict]) -> None:
    with path.open("w") as f:
        for row in rows:
            keys = ("id", "problem", "answer", "difficulty")
            f.write(json.dumps({k: row[k] for k in keys}) + "\n")


# ---------------------------------------------------------------------------------------------
# Tokenizer
# ---------------------------------------------------------------------------------------------
def chat_prompt(problem: str) -> list[dict]:
    """The RL prompt: the problem text verbatim as the one user message, no instruction."""
    return [{"role": "user", "content": problem}]


def build_tokenizer(corpus: list[str]) -> PreTrainedTokenizerFast:
    """3) Byte-level BPE trained on the task text, one token per digit, Qwen chat specials."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),  # "845" -> "8", "4", "5"
        pre_tokenizers.ByteLevel(add_prefix_space=False),
    ])
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB, special_tokens=SPECIALS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte stays encodable
    )
    bpe.train_from_iterator(corpus, trainer)
    tok = PreTrainedTokenizerFast(  # <|im_start|> is special through the BPE trainer above
        tokenizer_object=bpe, pad_token="<|endoftext|>", eos_token="<|im_end|>",
        model_max_length=MAX_POSITIONS,
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def save_tokenizer(tok: PreTrainedTokenizerFast, folder: Path) -> None:
    """save_pretrained, then name the class "PreTrainedTokenizerFast" (transformers 5 writes
    "TokenizersBackend", which transformers 4 loaders such as older vLLM do not know)."""
    tok.save_pretrained(folder)
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.write_text(json.dumps(config, indent=2) + "\n")


# ---------------------------------------------------------------------------------------------
# Measurement
# ---------------------------------------------------------------------------------------------
@torch.no_grad()
def sample_responses(model, tok, problems: list[str], n_samples: int) -> tuple[list[str], list[bool]]:
    """n_samples responses per problem at temperature 1.0 (6): texts and whether each stopped
    with <|im_end|> before MAX_NEW_TOKENS. Left padding, as for any batched generation."""
    tok.padding_side = "left"
    prompts = [tok.apply_chat_template(chat_prompt(p), add_generation_prompt=True,
                                       tokenize=True, return_dict=False)
               for p in problems for _ in range(n_samples)]
    batch = tok.pad({"input_ids": prompts}, return_tensors="pt")  # (B, L_prompt) each
    out = model.generate(
        **batch, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
        max_new_tokens=MAX_NEW_TOKENS,
        suppress_tokens=list(range(len(tok), model.config.vocab_size)),  # 6) padded rows
    )  # (B, L_prompt + T)
    texts, stopped = [], []
    for ids in out[:, batch["input_ids"].shape[1]:].tolist():  # (B, T) as lists
        stopped.append(tok.eos_token_id in ids)
        ids = ids[:ids.index(tok.eos_token_id)] if stopped[-1] else ids
        texts.append(tok.decode(ids, skip_special_tokens=True))
    return texts, stopped


def is_correct(text: str, answer: str) -> bool:
    """6) The last "Answer: <int>" in the response equals the ground truth."""
    found = ANSWER_RE.findall(text)
    return bool(found) and int(found[-1]) == int(answer)


def measure(model, tok, test_rows: list[dict], per_level: int, n_samples: int, seed: int) -> dict:
    """Accuracy per difficulty on the first `per_level` test problems of each level, by sampling;
    the fraction of prompts in each QAE regime by their success rate p over the n_samples
    (K = 0.4: hard p <= 0.6, easy p > 0.6), the fraction of responses that stopped with
    <|im_end|>, and one sampled response per level."""
    torch.manual_seed(seed)
    report = {"accuracy": {}, "example": {}}
    stopped, worked, right, p = [], [], [], []  # per response x3; per prompt
    for difficulty in LEVELS:
        rows = [r for r in test_rows if r["difficulty"] == difficulty][:per_level]
        texts, stops = sample_responses(model, tok, [r["problem"] for r in rows], n_samples)
        answers = [r["answer"] for r in rows for _ in range(n_samples)]
        correct = list(map(is_correct, texts, answers))  # grouped by prompt, n_samples each
        p += [sum(correct[i:i + n_samples]) / n_samples for i in range(0, len(correct), n_samples)]
        report["accuracy"][difficulty] = sum(correct) / len(correct)
        stopped += stops
        worked += [t.startswith("Reversed:") for t in texts]  # 7) which way it answered
        right += correct
        report["example"][difficulty] = (rows[0]["problem"], texts[0])
    report["overall"] = sum(report["accuracy"].values()) / len(LEVELS)
    report["stopped"] = sum(stopped) / len(stopped)
    report["worked"] = sum(worked) / len(worked)

    def by_style(style):
        return [c for c, w in zip(right, worked) if w == style] or [0]

    report["accuracy_worked"] = sum(by_style(True)) / len(by_style(True))
    report["accuracy_direct"] = sum(by_style(False)) / len(by_style(False))
    report["regimes"] = {
        "all wrong (p = 0)": sum(x == 0 for x in p) / len(p),
        "hard (0 < p <= 0.6)": sum(0 < x <= 0.6 for x in p) / len(p),
        "easy (0.6 < p < 1)": sum(0.6 < x < 1 for x in p) / len(p),
        "all right (p = 1)": sum(x == 1 for x in p) / len(p),
    }
    return report


def time_generation(model, tok, train_rows: list[dict], n_prompts: int, group: int,
                    repeats: int = 3) -> float:
    """Seconds for one RL-style rollout batch: n_prompts * group responses at temperature 1.0,
    max_new_tokens MAX_NEW_TOKENS (median of `repeats`)."""
    problems = [r["problem"] for r in train_rows[:n_prompts]]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        sample_responses(model, tok, problems, group)
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]
