"""Prompts in, micro-batches out: dataset loading and checks, the prompt template, a resumable
seeded sampler, and token-budget micro-batching.

Training data is a Hugging Face `datasets` source: a hub name (DAPO-Math-17k: problem in
`prompt`, answer in `reward_model.ground_truth`) or a local .jsonl/.json/.parquet file. Columns
are named in the config; dotted names reach into nested fields. Every row is checked before the
model loads: a missing column or a row without an answer is an error naming the column and the
row.

Choices, numbered:
1. A problem given as a list of chat messages (verl's DAPO parquet stores `prompt` that way,
   template already applied) is used as those messages; a string problem goes through
   `data.prompt_template` (DAPO's template by default, QAE_SPEC section 7).
2. Prompts longer than `data.max_prompt_len` tokens are dropped when loading (as verl's
   `filter_overlong_prompts`), and the count is reported.
3. Micro-batches are filled by a token budget, not a fixed count: sequences sorted by length,
   longest first, and cut into runs whose padded size (count x longest) fits the budget. On
   long-tailed reasoning-trace lengths this keeps padding small (bench/bench_padding.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

LOCAL_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}


class DataError(ValueError):
    """Training data that cannot be used; the message names the file, column or row."""


@dataclass
class Prompt:
    problem: str  # the problem as shown in logs
    answer: str  # ground truth, as given by the dataset
    prompt_ids: list[int]  # the tokenized prompt the policy sees (chat template applied)


def load_rows(source: str, split: str = "train"):
    """A `datasets.Dataset` from a local file or, failing that, a hub dataset name."""
    import datasets

    path = Path(source)
    if path.suffix in LOCAL_FORMATS or path.is_absolute() or source.startswith("."):
        if not path.is_file():
            raise DataError(f"dataset file `{source}` not found (config key `data.train_files`)")
        if path.suffix not in LOCAL_FORMATS:
            raise DataError(f"dataset file `{source}` must end in one of {sorted(LOCAL_FORMATS)}")
        return datasets.load_dataset(LOCAL_FORMATS[path.suffix], data_files=str(path), split="train")
    try:
        return datasets.load_dataset(source, split=split)
    except Exception as e:  # offline, a typo, a private set: say which and why, in one line
        raise DataError(f"cannot load dataset `{source}` from the hub ({type(e).__name__}: {str(e).splitlines()[0][:200]})") from None


def get_field(row: dict, dotted: str):
    """row["a"]["b"] for dotted = "a.b"; None where any part is missing."""
    value = row
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def build_messages(problem, template: str) -> list[dict]:
    """The chat messages of one prompt (choice 1 of the module docstring)."""
    if isinstance(problem, list) and all(isinstance(m, dict) and "content" in m for m in problem):
        return [{"role": m.get("role", "user"), "content": str(m["content"])} for m in problem]
    return [{"role": "user", "content": template.replace("{problem}", str(problem))}]


def tokenize_prompt(tokenizer, messages: list[dict], chat_template: bool) -> list[int]:
    if chat_template:
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
    return tokenizer("\n\n".join(m["content"] for m in messages), add_special_tokens=False)["input_ids"]


def load_prompts(data_cfg, tokenizer) -> tuple[list[Prompt], int]:
    """All usable prompts of `data.train_files`, and how many were dropped as too long."""
    rows = load_rows(data_cfg.train_files)
    for key in ("prompt_key", "answer_key"):
        column = getattr(data_cfg, key)
        if column.split(".")[0] not in rows.column_names:
            raise DataError(
                f"dataset `{data_cfg.train_files}` has no column `{column}` (config key `data.{key}`); "
                f"its columns are {rows.column_names}"
            )
    prompts, dropped = [], 0
    for i, row in enumerate(rows):
        problem, answer = get_field(row, data_cfg.prompt_key), get_field(row, data_cfg.answer_key)
        if problem is None or (isinstance(problem, str) and not problem.strip()):
            raise DataError(f"row {i} of `{data_cfg.train_files}` has no problem in column `{data_cfg.prompt_key}`")
        if answer is None or not str(answer).strip():
            raise DataError(f"row {i} of `{data_cfg.train_files}` has no answer in column `{data_cfg.answer_key}`")
        messages = build_messages(problem, data_cfg.prompt_template)
        ids = tokenize_prompt(tokenizer, messages, data_cfg.chat_template)
        if len(ids) > data_cfg.max_prompt_len:
            dropped += 1
            continue
        prompts.append(Prompt(problem=messages[-1]["content"], answer=str(answer), prompt_ids=ids))
    if not prompts:
        raise DataError(f"no prompt of `{data_cfg.train_files}` fits data.max_prompt_len = {data_cfg.max_prompt_len} tokens")
    return prompts, dropped


class PromptSampler:
    """Draws prompt indices epoch by epoch, reshuffled each epoch from (seed, epoch); its whole
    state is (epoch, position), so a resumed run draws exactly the same prompts.

    >>> s = PromptSampler(5, seed=0, shuffle=False)
    >>> s.next(3), s.next(3), s.state_dict()
    ([0, 1, 2], [3, 4, 0], {'epoch': 1, 'pos': 1})
    """

    def __init__(self, num_prompts: int, seed: int, shuffle: bool = True):
        self.num_prompts, self.seed, self.shuffle = num_prompts, seed, shuffle
        self.epoch, self.pos = 0, 0

    def _order(self) -> list[int]:
        if not self.shuffle:
            return list(range(self.num_prompts))
        g = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        return torch.randperm(self.num_prompts, generator=g).tolist()

    def next(self, k: int) -> list[int]:
        out, order = [], self._order()
        while len(out) < k:
            take = order[self.pos : self.pos + k - len(out)]
            out += take
            self.pos += len(take)
            if self.pos == self.num_prompts:
                self.epoch, self.pos = self.epoch + 1, 0
                order = self._order()
        return out

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "pos": self.pos}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.pos = state["epoch"], state["pos"]


# ----------------------------------------------------------------------------------------------
# Micro-batches.
# ----------------------------------------------------------------------------------------------


def token_budget_micro_batches(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Indices of sequences grouped so that count x longest <= max_tokens in every group
    (choice 3). A sequence longer than the budget gets a group of its own.

    >>> token_budget_micro_batches([5, 100, 7, 90, 6], max_tokens=200)
    [[1, 3], [2, 4, 0]]
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups, current = [], []
    for i in order:
        if current and (len(current) + 1) * lengths[current[0]] > max_tokens:
            groups.append(current)
            current = []
        current.append(i)
    if current:
        groups.append(current)
    return groups


def fixed_count_micro_batches(num: int, size: int) -> list[list[int]]:
    """The naive alternative: consecutive groups of `size` sequences (for the padding bench)."""
    return [list(range(i, min(i + size, num))) for i in range(0, num, size)]


def padding_fraction(lengths: list[int], groups: list[list[int]]) -> float:
    """Fraction of the padded (count x longest) slots of all groups that are padding."""
    slots = sum(len(g) * max(lengths[i] for i in g) for g in groups)
    return 1.0 - sum(lengths) / slots if slots else 0.0


def right_pad_float(rows: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """1-d float tensors -> values (B, R) right-padded with 0, mask (B, R)."""
    R = max(len(r) for r in rows)
    values = torch.zeros(len(rows), R)  # (B, R)
    mask = torch.zeros(len(rows), R, dtype=torch.long)  # (B, R)
    for b, r in enumerate(rows):
        values[b, : len(r)] = r
        mask[b, : len(r)] = 1
    return values, mask


def right_pad(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token lists -> input_ids (B, L) right-padded, attention_mask (B, L)."""
    L = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), L), pad_id, dtype=torch.long)  # (B, L)
    mask = torch.zeros(len(seqs), L, dtype=torch.long)  # (B, L)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[b, : len(s)] = 1
    return ids, mask
