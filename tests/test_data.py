"""infra/data.py: deduplicated prompts against the row-by-row loader, the sampling distribution over
them, and one clear DataError for every malformed input."""

import collections
import json
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from transformers import AutoTokenizer

from config import DataConfig
from infra import data, readers
from infra.data import DataError, Prompt, PromptRows, PromptSampler

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(REPO / "tiny" / "model")


class CountingTokenizer:
    """Passes calls through to a tokenizer and counts them."""

    def __init__(self, tokenizer):
        self.tokenizer, self.calls = tokenizer, 0

    def apply_chat_template(self, *args, **kwargs):
        self.calls += 1
        return self.tokenizer.apply_chat_template(*args, **kwargs)

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.tokenizer(*args, **kwargs)


def verl_rows(seed: int = 0) -> list[dict]:
    """A DAPO-like file in verl's schema: 8 distinct (problem, answer) pairs, pair u in u + 1 rows,
    shuffled; pairs 0 and 1 share a problem, pair 7 is too long for max_prompt_len = 60."""
    pairs = [("Compute 1+1.", "2"), ("Compute 1+1.", "3")] + [(f"Compute {u}*{u}.", str(u * u)) for u in range(2, 7)]
    pairs.append(("Compute " + "+".join(["1"] * 40) + ".", "40"))
    rows = [{"data_source": "math_dapo", "prompt": [{"role": "user", "content": p}], "ability": "MATH",
             "reward_model": {"ground_truth": a, "style": "rule"}, "extra_info": {"index": f"id-{u}-{k}"}}
            for u, (p, a) in enumerate(pairs) for k in range(u + 1)]
    random.Random(seed).shuffle(rows)
    return rows


def verl_cfg(path, **kw) -> DataConfig:
    return DataConfig(train_files=str(path), max_prompt_len=60, **kw)


def plain_load_prompts(rows: list[dict], cfg: DataConfig, tokenizer) -> tuple[list[Prompt], int]:
    """The row-by-row loader: every row tokenized and kept (the reference for the fast path)."""
    prompts, dropped = [], 0
    for row in rows:
        messages = data.build_messages(data.get_field(row, cfg.prompt_key), cfg.prompt_template)
        ids = data.tokenize_prompt(tokenizer, messages, cfg.chat_template)
        if len(ids) > cfg.max_prompt_len:
            dropped += 1
            continue
        prompts.append(Prompt(messages[-1]["content"], str(data.get_field(row, cfg.answer_key)), ids))
    return prompts, dropped


@pytest.fixture
def verl_file(tmp_path):
    path = tmp_path / "dapo.parquet"
    rows = verl_rows()
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=7)  # several row groups
    return path, rows


# ----------------------------------------------------------------------------------------------
# Deduplication: the same rows, the same sampling distribution, one tokenization per prompt.
# ----------------------------------------------------------------------------------------------


def test_rows_equal_the_row_by_row_loader(verl_file, tokenizer, monkeypatch):
    path, rows = verl_file
    monkeypatch.setattr(readers, "BATCH_ROWS", 5)  # keys must match across batches too
    prompts, dropped = data.load_prompts(verl_cfg(path), tokenizer)
    expected, expected_dropped = plain_load_prompts(rows, verl_cfg(path), tokenizer)
    assert list(prompts) == expected and len(prompts) == len(expected) == 36 - 8
    assert dropped == prompts.dropped_rows == expected_dropped == 8 and prompts.dropped_unique == 1
    assert prompts.num_unique == 7 and sorted(prompts.counts.tolist()) == [1, 2, 3, 4, 5, 6, 7]
    assert prompts[-1] == expected[-1] and prompts[3:6] == expected[3:6]
    with pytest.raises(IndexError):
        prompts[len(prompts)]


def test_one_epoch_draws_each_prompt_as_often_as_the_file_holds_it(verl_file, tokenizer):
    path, rows = verl_file
    prompts, _ = data.load_prompts(verl_cfg(path), tokenizer)
    expected, _ = plain_load_prompts(rows, verl_cfg(path), tokenizer)
    sampler = PromptSampler(len(prompts), seed=3, shuffle=True)
    drawn = collections.Counter((p.problem, p.answer) for p in (prompts[i] for i in sampler.next(len(prompts))))
    assert drawn == collections.Counter((p.problem, p.answer) for p in expected)
    assert drawn[("Compute 1+1.", "2")] == 1 and drawn[("Compute 1+1.", "3")] == 2  # same problem, two answers
    assert sampler.state_dict() == {"epoch": 1, "pos": 0}


def test_each_distinct_prompt_is_tokenized_once(verl_file, tokenizer):
    path, _ = verl_file
    counting = CountingTokenizer(tokenizer)
    prompts, _ = data.load_prompts(verl_cfg(path), counting)
    assert counting.calls == 8 == prompts.num_unique + prompts.dropped_unique


def test_string_problems_and_number_answers(tmp_path, tokenizer):
    path = tmp_path / "train.jsonl"
    rows = [{"problem": "1+1", "answer": 2}, {"problem": "1+1", "answer": 2}, {"problem": "x", "answer": 2.5}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    prompts, _ = data.load_prompts(DataConfig(train_files=str(path), prompt_key="problem", answer_key="answer",
                                              prompt_template="Q: {problem}"), tokenizer)
    assert [(p.problem, p.answer) for p in prompts] == [("Q: 1+1", "2.0"), ("Q: 1+1", "2.0"), ("Q: x", "2.5")]
    assert prompts.num_unique == 2 and prompts[0] is prompts[1]


def test_role_defaults_to_user_and_counts_in_the_key(tmp_path, tokenizer):
    path = tmp_path / "train.parquet"
    chats = [[{"role": None, "content": "hi"}], [{"role": "user", "content": "hi"}],
             [{"role": "system", "content": "hi"}],
             [{"role": "system", "content": "a"}, {"role": "user", "content": "b"}]]
    pq.write_table(pa.table({"prompt": chats, "answer": ["1"] * 4}), path)
    prompts, _ = data.load_prompts(DataConfig(train_files=str(path), answer_key="answer"), tokenizer)
    assert prompts.row_to_unique.tolist() == [0, 0, 1, 2]


def test_prompt_rows_read_like_a_list():
    unique = [Prompt("a", "1", [5]), Prompt("b", "2", [6])]
    rows = PromptRows(unique, np.array([1, 0, 1], dtype=np.int32))
    assert list(rows) == [unique[1], unique[0], unique[1]] and rows[-3] is unique[1] and rows[np.int64(1)] is unique[0]
    assert rows[::2] == [unique[1], unique[1]] and unique[0] in rows and rows.counts.tolist() == [1, 2]


def test_sampler_draws_as_before():
    def old_draws(n, seed, k, calls):  # PromptSampler as it was, building the whole order as a list
        out, epoch, pos = [], 0, 0
        for _ in range(calls):
            got, order = [], torch.randperm(n, generator=torch.Generator().manual_seed(seed * 100_003 + epoch)).tolist()
            while len(got) < k:
                take = order[pos : pos + k - len(got)]
                got, pos = got + take, pos + len(take)
                if pos == n:
                    epoch, pos = epoch + 1, 0
                    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 100_003 + epoch)).tolist()
            out.append(got)
        return out

    sampler = PromptSampler(11, seed=5)
    assert [sampler.next(4) for _ in range(7)] == old_draws(11, 5, 4, 7)


# ----------------------------------------------------------------------------------------------
# Malformed input: one line, naming the file and the line or row, and the fix.
# ----------------------------------------------------------------------------------------------


def jsonl(*rows) -> bytes:
    return b"".join((r if isinstance(r, bytes) else json.dumps(r).encode()) + b"\n" for r in rows)


OK = {"problem": "1+1", "answer": "2"}
BAD_FILES = [  # (name, file bytes, where the message must point, what it must say)
    ("bad_json.jsonl", jsonl(OK, OK, b'{"problem": "2+2", "answer": '), "line 3 ", "is not valid JSON"),
    ("not_object.jsonl", jsonl(OK, [1, 2]), "line 2 ", "not an object"),
    ("scalar.json", jsonl(5), "line 1 ", "not an object"),
    ("not_utf8.jsonl", jsonl(OK, b'{"problem": "\xff\xfe", "answer": "1"}'), "line 2 ", "not valid UTF-8"),
    ("twice.jsonl", jsonl(b'{"problem": "a", "problem": "b", "answer": "1"}'), "line 1 ", "given twice"),
    ("type_change.jsonl", jsonl(OK, OK, OK, {"problem": 7, "answer": "2"}), "line 4 ",
     "is a number here but a string on line 1"),
    ("nested_change.jsonl",
     jsonl({"problem": [{"content": "a"}], "answer": "1"}, {"problem": [{"content": 1}], "answer": "1"}),
     "line 2 ", "field `problem[].content`"),
    ("blank_lines.jsonl", b'\n' + jsonl(OK) + b'\n\n{"x": 1,}\n', "line 5 ", "is not valid JSON"),
    ("no_problem.jsonl", jsonl(OK, OK, {"answer": "2"}), "row 2 ", "has no problem in column `problem`"),
    ("null_problem.jsonl", jsonl(OK, {"problem": None, "answer": "2"}), "row 1 ", "has no problem in column `problem`"),
    ("blank_problem.jsonl", jsonl(OK, {"problem": " \n", "answer": "2"}), "row 1 ",
     "has no problem in column `problem`"),
    ("no_answer.jsonl", jsonl(OK, OK, {"problem": "3+3", "answer": ""}), "row 2 ", "has no answer in column `answer`"),
    ("null_answer.jsonl", jsonl(OK, {"problem": "3+3"}), "row 1 ", "has no answer in column `answer`"),
    ("number_problem.jsonl", jsonl({"problem": 7, "answer": "2"}), "row 0 ", "has a problem of type int64"),
    ("list_answer.jsonl", jsonl({"problem": "a", "answer": ["2"]}), "row 0 ",
     "has an answer of type list<item: string>"),
    ("bool_answer.jsonl", jsonl({"problem": "a", "answer": True}), "row 0 ", "has an answer of type bool"),
    ("null_then_bool.jsonl", jsonl({"problem": "a", "answer": None}, {"problem": "a", "answer": True}), "row 0 ",
     "has no answer"),
    ("dict_problem.jsonl", jsonl({"problem": {"text": "a"}, "answer": "2"}), "row 0 ", "has a problem of type struct"),
    ("no_content.jsonl", jsonl({"problem": [{"role": "user", "text": "a"}], "answer": "2"}), "row 0 ",
     "has a problem of type list"),
    ("empty_chat.jsonl", jsonl({"problem": [{"content": "a"}], "answer": "2"}, {"problem": [], "answer": "2"}),
     "row 1 ", "has no problem"),
    ("blank_message.jsonl",
     jsonl({"problem": [{"content": "a"}], "answer": "2"},
           {"problem": [{"content": "a"}, {"content": ""}], "answer": "2"}),
     "row 1 ", "has no problem"),
    ("empty.jsonl", b"", "is empty", "write one JSON object per line"),
    ("only_blank_lines.jsonl", b"\n\n  \n", "has no rows", "one row per problem"),
    ("no_rows.json", b"[]", "has no rows", "one row per problem"),
    ("null_line.jsonl", jsonl(None, OK), "line 1 ", "is a JSON null, not an object"),
    ("nan.jsonl", jsonl(OK, b'{"problem": "a", "answer": NaN}'), "line 2 ", "NaN is not JSON"),
    ("huge_int.jsonl", jsonl(OK, {"problem": "a", "answer": 10**30}), "line 2 ", "cannot store"),
    ("not_object_item.json", b'[{"problem": "a", "answer": "1"}, 3]', "item 1 ", "is not an object"),
    ("no_column.jsonl", jsonl({"question": "a", "answer": "1"}),
     "has no column `problem` (config key `data.prompt_key`)", "its columns are ['question', 'answer']"),
    ("train.csv", b"problem,answer\n1+1,2\n", "must end in one of", "convert it"),
    ("fake.parquet", b"not a parquet file", "not a readable parquet file", "ArrowInvalid"),
    ("mixed_array.json", b'[{"problem": "a", "answer": "1"},\n {"problem": 5, "answer": "1"}]', "item 1 ",
     "field `problem` is a number here but a string on item 0"),
]


@pytest.mark.parametrize("name, content, where, what", BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_malformed_file_is_one_line(tmp_path, tokenizer, name, content, where, what):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(DataError) as e:
        data.load_prompts(DataConfig(train_files=str(path), prompt_key="problem", answer_key="answer"), tokenizer)
    message = str(e.value)
    assert "\n" not in message and f"`{path}`" in message and where in message and what in message, message


def test_parquet_problems(tmp_path, tokenizer):
    path = tmp_path / "zero_rows.parquet"
    pq.write_table(pa.table({"prompt": pa.array([], pa.string()), "answer": pa.array([], pa.string())}), path)
    with pytest.raises(DataError, match=r"^dataset `.*zero_rows.parquet` has no rows; "):
        data.load_prompts(DataConfig(train_files=str(path), answer_key="answer"), tokenizer)
    path = tmp_path / "no_ground_truth.parquet"
    pq.write_table(pa.table({"prompt": ["a"], "reward_model": [{"style": "rule"}]}), path)
    with pytest.raises(DataError, match=r"has no column `reward_model.ground_truth` \(config key `data.answer_key`\); "
                                        r"its columns are \['prompt', 'reward_model', 'reward_model.style'\]"):
        data.load_prompts(DataConfig(train_files=str(path)), tokenizer)
    path = tmp_path / "blank.parquet"
    pq.write_table(pa.table({"prompt": [[{"role": "user", "content": "a"}]] * 3 + [[{"role": "user", "content": " "}]],
                             "reward_model": [{"ground_truth": "1"}] * 4}), path, row_group_size=2)
    with pytest.raises(DataError, match=r"^row 3 of `.*blank.parquet` has no problem in column `prompt`; "):
        data.load_prompts(DataConfig(train_files=str(path)), tokenizer)


def test_directory_and_missing_file(tmp_path, tokenizer):
    with pytest.raises(DataError, match=r"^dataset path `.*` is a directory; "
                                        r"give one .jsonl/.json/.parquet file in it"):
        data.load_prompts(DataConfig(train_files=str(tmp_path)), tokenizer)
    with pytest.raises(DataError, match=r"^dataset file `.*nothing.jsonl` not found "
                                        r"\(config key `data.train_files`\)$"):
        data.load_prompts(DataConfig(train_files=str(tmp_path / "nothing.jsonl")), tokenizer)


def test_hub_dataset_without_the_columns(monkeypatch, tokenizer):
    monkeypatch.setattr(readers, "load_hub", lambda source, split: pa.table({"question": ["a"], "answer": ["1"]}))
    with pytest.raises(DataError, match=r"^dataset `owner/set` has no column `prompt` "
                                        r"\(config key `data.prompt_key`\); "):
        data.load_prompts(DataConfig(train_files="owner/set"), tokenizer)


def test_nothing_fits(tmp_path, tokenizer):
    path = tmp_path / "long.jsonl"
    path.write_bytes(jsonl(OK))
    with pytest.raises(DataError, match="no prompt of .* fits data.max_prompt_len = 3 tokens"):
        data.load_prompts(DataConfig(train_files=str(path), prompt_key="problem", answer_key="answer",
                                     max_prompt_len=3), tokenizer)


def test_json_pyarrow_would_misread(tmp_path, tokenizer):
    path = tmp_path / "nulls.jsonl"  # pyarrow's JSON reader: invalid list offsets (apache/arrow#51305)
    path.write_bytes(jsonl({"problem": "a", "answer": "1", "tags": [None, 1]},
                           {"problem": "b", "answer": "2", "tags": None}))
    prompts, _ = data.load_prompts(DataConfig(train_files=str(path), prompt_key="problem", answer_key="answer"),
                                   tokenizer)
    assert [p.answer for p in prompts] == ["1", "2"]
    assert data.load_rows(str(path))[0]["tags"] == [None, 1]


def test_json_array_and_load_rows(tmp_path):
    path = tmp_path / "array.json"
    path.write_text(json.dumps([OK, {"problem": "2+2", "answer": "4"}], indent=1))
    rows = data.load_rows(str(path))
    assert rows.column_names == ["problem", "answer"] and rows[1] == {"problem": "2+2", "answer": "4"}
    assert len(data.load_rows(str(REPO / "tiny" / "test.jsonl"))) == 500


def test_docstring_examples():
    import doctest

    assert doctest.testmod(data).failed == 0
