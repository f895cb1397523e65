"""Prompts in, micro-batches out: the prompt template, the table of distinct prompts built from the
training file (read and checked by infra/readers.py), a resumable seeded sampler, and token-budget
micro-batching.

Training data is a local .jsonl/.json/.parquet file or a Hugging Face hub dataset (DAPO-Math-17k:
problem in `prompt`, answer in `reward_model.ground_truth`). Columns are named in the config;
dotted names reach into nested fields. Every row is checked before the model loads (infra/readers.py):
bad JSON, an empty file, a missing column, a row whose problem or answer is missing, blank or of the
wrong type all raise DataError, one line naming the file, the line or row, and the fix.

Loading keeps each distinct (problem, answer) once, tokenized once, plus one int per row naming it:

    prompts[i] = unique[row_to_unique[i]]        len(prompts) = N kept rows, duplicates counted

so `PromptSampler(len(prompts), ...)` draws row i with probability 1/N, i.e. distinct prompt u
with probability count_u / N, exactly as over the full file. Shapes: N rows, U distinct prompts.

Choices, numbered (a departure from the paper or verl says so; reasons in docs/algorithm.md, "Choices by module"):
1. A problem given as a list of chat messages (as verl's DAPO parquet stores `prompt`) is used as those
   messages; a string problem goes through `data.prompt_template`, DAPO's by default (build_messages).
2. Prompts longer than `data.max_prompt_len` tokens are dropped when loading (as verl's
   `filter_overlong_prompts`), counted in rows and in distinct prompts (load_prompts).
3. Rows are deduplicated on (problem as chat messages, answer), each distinct prompt is tokenized once, and
   the kept rows stay in file order (PromptRows).
4. Local files are read without `datasets` and without a cache: parquet streamed in record batches of the two
   configured columns, JSON parsed whole by Python's json (infra.readers.ArrowRows).
5. A problem must be a non-blank string or a non-empty list of chat messages with non-blank string `content`,
   an answer a non-blank string or a number (infra.readers.check_batch); anything else is an error.
6. Micro-batches fill a token budget, longest first (token_budget_micro_batches), not a fixed count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from infra.readers import (  # noqa: F401  (LOCAL_FORMATS, DataError, load_rows: re-exported for eval.py and train.py)
    LOCAL_FORMATS,
    ArrowRows,
    DataError,
    check_batch,
    column_type,
    dotted_names,
    get_column,
    is_text,
    load_rows,
)


@dataclass
class Prompt:
    problem: str  # the problem as shown in logs
    answer: str  # ground truth, as given by the dataset
    prompt_ids: list[int]  # the tokenized prompt the policy sees (chat template applied)


# ----------------------------------------------------------------------------------------------
# Distinct prompts: keys, deduplication, tokenization (choices 1-3).
# ----------------------------------------------------------------------------------------------


def length_prefixed(strings: pa.Array) -> pa.Array:
    """"<byte length>:<string>" per row. A run of these splits back into its parts, so keys made
    by concatenating them are equal only when the parts are, whatever characters they hold."""
    strings = strings.cast(pa.string())
    return pc.binary_join_element_wise(pc.binary_length(strings).cast(pa.string()), ":", strings, "")


def row_keys(problem: pa.Array, answer: pa.Array) -> pa.Array:
    """One string per row, equal exactly when the rows' chat messages and answers are equal: the
    length-prefixed (role, content) of each message, then the length-prefixed answer."""
    if is_text(problem.type):
        return pc.binary_join_element_wise(length_prefixed(problem), length_prefixed(answer), "")
    messages = pc.list_flatten(problem)
    has_role = problem.type.value_type.get_field_index("role") >= 0
    role = pc.struct_field(messages, "role") if has_role else pa.nulls(len(messages), pa.string())
    message_keys = pc.binary_join_element_wise(length_prefixed(pc.fill_null(role, "user")),
                                               length_prefixed(pc.struct_field(messages, "content")), "")
    offsets = pc.subtract(problem.offsets, problem.offsets[0])  # a sliced batch's offsets start past 0
    problem_keys = pc.binary_join(type(problem).from_arrays(offsets, message_keys), "")
    return pc.binary_join_element_wise(problem_keys, length_prefixed(answer), "")


def distinct_rows(rows: ArrowRows, data_cfg) -> tuple[list[tuple], np.ndarray]:
    """Checks every row; returns the distinct (problem, answer) pairs as Python values, in order
    of first appearance, and for every row the index of its pair: (U pairs, (N,) int64).
    Keys are matched in pyarrow; only the U first appearances become Python objects."""
    columns = list(dict.fromkeys(key.split(".")[0] for key in (data_cfg.prompt_key, data_cfg.answer_key)))
    known = pa.array([], pa.string())  # (U,) key of each distinct pair seen so far
    pairs, row_to_unique, offset = [], [], 0
    for batch in rows.batches(columns):
        problem, answer = get_column(batch, data_cfg.prompt_key), get_column(batch, data_cfg.answer_key)
        check_batch(problem, answer, offset, rows.name, data_cfg)
        encoded = row_keys(problem, answer).dictionary_encode()  # the batch's distinct keys, and a code per row
        codes = encoded.indices.to_numpy()  # (batch rows,) index into encoded.dictionary
        found = pc.index_in(encoded.dictionary, value_set=known)  # (batch keys,) index in `known`, null if new
        new = found.is_null().to_numpy(zero_copy_only=False)  # (batch keys,)
        key_to_unique = pc.fill_null(found, -1).to_numpy().astype(np.int64)  # (batch keys,)
        key_to_unique[new] = len(known) + np.arange(new.sum())
        first_rows = pa.array(np.unique(codes, return_index=True)[1][new])  # (new keys,) a row holding each
        pairs += zip(problem.take(first_rows).to_pylist(), answer.take(first_rows).to_pylist())
        known = pa.concat_arrays([known, encoded.dictionary.filter(pa.array(new))])
        row_to_unique.append(key_to_unique[codes])  # (batch rows,)
        offset += len(batch)
    return pairs, np.concatenate(row_to_unique)


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
        return [{"role": m.get("role") or "user", "content": str(m["content"])} for m in problem]
    return [{"role": "user", "content": template.replace("{problem}", str(problem))}]


def tokenize_prompt(tokenizer, messages: list[dict], chat_template: bool) -> list[int]:
    if chat_template:
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
    return tokenizer("\n\n".join(m["content"] for m in messages), add_special_tokens=False)["input_ids"]


class PromptRows(Sequence):
    """The kept rows of a training file as a read-only list of Prompts, each distinct prompt stored
    once: row i is `unique[row_to_unique[i]]` (choice 3).

    >>> rows = PromptRows([Prompt("1+1", "2", [5]), Prompt("2+2", "4", [6])], np.array([0, 1, 0]))
    >>> len(rows), rows.num_unique, rows[2].problem, rows.counts.tolist()
    (3, 2, '1+1', [2, 1])
    """

    def __init__(self, unique: list[Prompt], row_to_unique: np.ndarray, dropped_rows: int = 0, dropped_unique: int = 0):
        self.unique = unique  # the distinct prompts, in order of first appearance
        self.row_to_unique = row_to_unique  # (N,) index into `unique` of each kept row
        self.dropped_rows = dropped_rows  # rows dropped as longer than data.max_prompt_len (choice 2)
        self.dropped_unique = dropped_unique  # distinct prompts among them

    @property
    def num_unique(self) -> int:
        return len(self.unique)

    @property
    def counts(self) -> np.ndarray:
        """(U,) rows of each distinct prompt: its multiplicity in the file."""
        return np.bincount(self.row_to_unique, minlength=len(self.unique))

    def __len__(self) -> int:
        return len(self.row_to_unique)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self.unique[u] for u in self.row_to_unique[i]]
        return self.unique[self.row_to_unique[i]]  # numpy raises the IndexError that ends iteration


def load_prompts(data_cfg, tokenizer) -> tuple[PromptRows, int]:
    """The usable rows of `data.train_files` as a PromptRows, and how many rows were dropped as
    too long. Every row is checked first; only the distinct prompts are tokenized."""
    rows = ArrowRows(data_cfg.train_files)
    if rows.num_rows == 0:
        raise DataError(f"dataset `{data_cfg.train_files}` has no rows; give it one row per problem")
    for key in ("prompt_key", "answer_key"):
        column = getattr(data_cfg, key)
        if column_type(rows.schema, column) is None:
            raise DataError(f"dataset `{data_cfg.train_files}` has no column `{column}` (config key `data.{key}`); "
                            f"its columns are {dotted_names(rows.schema)}")
    pairs, row_to_unique = distinct_rows(rows, data_cfg)  # U pairs, (N,)
    unique, keep = [], np.zeros(len(pairs), dtype=bool)  # keep: (U,)
    for u, (problem, answer) in enumerate(pairs):
        messages = build_messages(problem, data_cfg.prompt_template)
        ids = tokenize_prompt(tokenizer, messages, data_cfg.chat_template)
        if len(ids) <= data_cfg.max_prompt_len:  # choice 2
            keep[u] = True
            unique.append(Prompt(problem=messages[-1]["content"], answer=str(answer), prompt_ids=ids))
    if not unique:
        raise DataError(f"no prompt of `{data_cfg.train_files}` fits "
                        f"data.max_prompt_len = {data_cfg.max_prompt_len} tokens")
    new_index = np.cumsum(keep) - 1  # (U,) index among the kept distinct prompts
    kept_rows = keep[row_to_unique]  # (N,)
    dropped_rows = int(len(kept_rows) - kept_rows.sum())
    prompts = PromptRows(unique, new_index[row_to_unique[kept_rows]].astype(np.int32), dropped_rows, int((~keep).sum()))
    return prompts, dropped_rows


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

    def _order(self) -> torch.Tensor:
        if not self.shuffle:
            return torch.arange(self.num_prompts)
        g = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        return torch.randperm(self.num_prompts, generator=g)

    def next(self, k: int) -> list[int]:
        out, order = [], self._order()
        while len(out) < k:
            take = order[self.pos : self.pos + k - len(out)].tolist()  # a slice: no 1.79M-long Python list
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
    """Indices of sequences grouped, longest first, so that every group's tokens (the sum of its
    lengths: one packed row) fit `max_tokens` (choice 6). A sequence longer than the budget gets a
    group of its own.

    >>> token_budget_micro_batches([5, 100, 7, 90, 6], max_tokens=200)
    [[1, 3, 2], [4, 0]]
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups, current, used = [], [], 0
    for i in order:
        if current and used + lengths[i] > max_tokens:
            groups.append(current)
            current, used = [], 0
        current.append(i)
        used += lengths[i]
    if current:
        groups.append(current)
    return groups


def right_pad_float(rows: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """1-d float tensors -> values (B, R) right-padded with 0, mask (B, R)."""
    R = max(len(r) for r in rows)
    values = torch.zeros(len(rows), R)  # (B, R)
    mask = torch.zeros(len(rows), R, dtype=torch.long)  # (B, R)
    for b, r in enumerate(rows):
        values[b, : len(r)] = r
        mask[b, : len(r)] = 1
    return values, mask
