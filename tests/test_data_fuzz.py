"""A property of the loader: whatever a training file holds (random bytes, text, JSON-ish lines
with random keys and value types in a .jsonl; random column names and types in a parquet),
data.load_prompts either returns usable prompts or raises DataError with one line naming the
file. Never any other exception."""

import json
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from config import DataConfig
from infra import data

REPO = Path(__file__).resolve().parents[1]
FUZZ = settings(max_examples=250, deadline=10_000, database=None)  # ~3 s per test on one free CPU

keys = st.sampled_from(["problem", "answer", "prompt", "content", "role", "x.y"]) | st.text(max_size=5)
scalars = st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.floats(allow_nan=False) | st.text(max_size=12)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
                      max_leaves=6)
messages = st.lists(st.fixed_dictionaries({"content": scalars},
                                          optional={"role": st.sampled_from(["user", "system"]) | scalars}),
                    max_size=3)
chat = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "system"]),
                                       "content": st.text(min_size=1, max_size=20)}),
                min_size=1, max_size=2)
good_rows = st.fixed_dictionaries({"problem": st.text(min_size=1, max_size=20) | chat,
                                   "answer": st.text(min_size=1, max_size=4) | st.integers(0, 99)})
rows = (good_rows | st.fixed_dictionaries({"problem": values | messages, "answer": values})
        | st.dictionaries(keys, values, max_size=4))
good_lines = good_rows.map(lambda r: json.dumps(r).encode())
lines = (rows.map(lambda r: json.dumps(r).encode()) | st.text(max_size=30).map(str.encode) | st.binary(max_size=30)
         | st.sampled_from([b"", b"   ", b"{", b"[]", b"null", b'{"problem": NaN, "answer": 1}']))
files = ((st.lists(good_lines, min_size=1, max_size=5) | st.lists(good_lines | lines, max_size=6)).map(b"\n".join)
         | st.binary(max_size=60))
settings_of_the_loader = st.fixed_dictionaries({
    "prompt_key": st.sampled_from(["problem", "problem", "problem", "prompt", "x.y"]),
    "answer_key": st.sampled_from(["answer", "answer", "answer", "content"]),
    "chat_template": st.booleans(), "max_prompt_len": st.integers(1, 300)})


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(REPO / "tiny" / "model")


def load_or_fail_in_one_line(path: Path, tokenizer, **cfg) -> None:
    try:
        prompts, dropped = data.load_prompts(DataConfig(train_files=str(path), prompt_template="{problem}", **cfg),
                                             tokenizer)
    except data.DataError as e:
        message = str(e)
        assert len(message.splitlines()) == 1 and f"`{path}`" in message, message
        event(f"DataError: {message.split(f'`{path}`')[-1][:30]}")  # --hypothesis-show-statistics lists them
        return
    event("loaded")
    assert len(prompts) >= 1 and dropped >= 0 and prompts.num_unique >= 1
    for p in prompts.unique:
        assert isinstance(p.problem, str) and p.problem.strip() and isinstance(p.answer, str) and p.answer.strip()
        assert 0 < len(p.prompt_ids) <= cfg["max_prompt_len"] and all(isinstance(t, int) for t in p.prompt_ids)


@FUZZ
@given(content=files, cfg=settings_of_the_loader,
       suffix=st.sampled_from([".jsonl", ".json"]))
def test_any_json_file_loads_or_fails_in_one_line(tokenizer, content, cfg, suffix):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"train{suffix}"
        path.write_bytes(content)
        load_or_fail_in_one_line(path, tokenizer, **cfg)


@FUZZ
@given(table_rows=st.lists(good_rows, min_size=1, max_size=5) | st.lists(good_rows | rows, max_size=5),
       cfg=settings_of_the_loader)
def test_any_parquet_table_loads_or_fails_in_one_line(tokenizer, table_rows, cfg):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.parquet"
        try:
            pq.write_table(pa.Table.from_pylist(table_rows), path)
        except (pa.ArrowException, OverflowError):  # rows pyarrow cannot type, or a struct parquet cannot store
            # a wrong type
            pq.write_table(pa.table({"problem": pa.array([b"\x00"] * len(table_rows), pa.binary())}), path)
        load_or_fail_in_one_line(path, tokenizer, **cfg)
