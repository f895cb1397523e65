"""Reading and checking a training or benchmark file: local .jsonl/.json/.parquet files and hub
datasets as pyarrow record batches, and the checks of the problem and answer columns, so that
every malformed input is one DataError line naming the file, the line or row, and the fix.

infra/data.py builds prompts from what this module reads (its choices 4 and 5 are the ones that apply
here: local files are read without `datasets`, parquet streamed in record batches of the two
configured columns, JSON parsed whole by Python's json; a problem is a non-blank string or a
list of chat messages, an answer a non-blank string or a number, anything else an error).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

LOCAL_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}
BATCH_ROWS = 16_384  # rows per record batch while reading: ~10 MB of DAPO prompts (data.load_prompts)


class DataError(ValueError):
    """Training data that cannot be used; the message names the file, the line or row, and the fix.
    It is one line even when it quotes the data (a column name holding a newline prints as \\n)."""

    def __init__(self, message: str):
        super().__init__("\\n".join(message.splitlines()))



# ----------------------------------------------------------------------------------------------
# Reading a file or hub dataset as pyarrow record batches; every failure is a DataError.
# ----------------------------------------------------------------------------------------------


def local_path(source: str) -> Path | None:
    """The checked local file `source` names, or None for a hub dataset name."""
    path = Path(source)
    if path.is_dir():
        raise DataError(f"dataset path `{source}` is a directory; give one {'/'.join(LOCAL_FORMATS)} file in it "
                        "(config key `data.train_files`)")
    if not (path.is_file() or path.suffix in LOCAL_FORMATS or path.is_absolute() or source.startswith(".")):
        return None
    if not path.is_file():
        raise DataError(f"dataset file `{source}` not found (config key `data.train_files`)")
    if path.suffix not in LOCAL_FORMATS:
        raise DataError(f"dataset file `{source}` must end in one of {sorted(LOCAL_FORMATS)}; "
                        "convert it to JSON lines or parquet")
    if path.stat().st_size == 0:
        raise DataError(f"dataset file `{source}` is empty; write one JSON object per line, or a parquet table")
    return path


class ArrowRows:
    """A training file or hub dataset as pyarrow: `schema`, `num_rows`, and `batches(columns)`
    (data.load_prompts). Reading it is where malformed files fail, each as a one-line DataError."""

    def __init__(self, source: str, split: str = "train"):
        import pyarrow.parquet as pq

        self.name, path = source, local_path(source)
        self.parquet, self.table = None, None
        if path is None:
            self.table = load_hub(source, split)
        elif path.suffix == ".parquet":
            try:
                self.parquet = pq.ParquetFile(path, pre_buffer=False)  # pre-buffering would hold whole row groups
            except (pa.ArrowException, OSError) as e:
                raise DataError(f"dataset file `{source}` is not a readable parquet file ({one_line(e)}); "
                                "write it with pyarrow or pandas `to_parquet`") from None
        else:
            self.table = read_json(path)
        self.schema = self.parquet.schema_arrow if self.parquet else self.table.schema
        self.num_rows = self.parquet.metadata.num_rows if self.parquet else self.table.num_rows

    def batches(self, columns: list[str]) -> Iterator[pa.RecordBatch]:
        if self.table is not None:
            yield from self.table.select(columns).to_batches(max_chunksize=BATCH_ROWS)
            return
        try:
            yield from self.parquet.iter_batches(batch_size=BATCH_ROWS, columns=columns)
        except (pa.ArrowException, OSError) as e:
            raise DataError(f"dataset file `{self.name}` is corrupt ({one_line(e)}); write it again") from None


def one_line(e: Exception, limit: int = 200) -> str:
    """`Type: first line of the message`, for wrapping a library's error into ours."""
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0][:limit] if lines else ''}"


def load_hub(source: str, split: str) -> pa.Table:
    import datasets

    try:
        return datasets.load_dataset(source, split=split).data.table
    except Exception as e:  # offline, a typo, a private set: say which and why, in one line
        raise DataError(f"cannot load dataset `{source}` from the hub ({one_line(e)})") from None


def read_json(path: Path) -> pa.Table:
    """A JSON-lines file, or one holding a single JSON array of objects, as a table. Parsed with
    Python's json, not pyarrow's JSON reader, which crashes on some valid files (a `null` line:
    apache/arrow#47409) and misreads others (`[null, 1]`: apache/arrow#51305)."""
    rows, where = json_rows(path)
    columns = {}
    for name in dict.fromkeys(key for row in rows for key in row):
        values = [row.get(name) for row in rows]
        try:
            columns[name] = pa.array(values)
        except (pa.ArrowException, ValueError, TypeError, OverflowError, RecursionError) as e:
            raise DataError(first_bad_value(path, name, values, where)
                            or f"field `{name}` of `{path}` cannot be read ({one_line(e)}); "
                               "give each field one type") from None
    return pa.table(columns)


def json_rows(path: Path) -> tuple[list[dict], list[str]]:
    """The objects of a JSON file, and where each one is ("line 3", or "item 3" of an array)."""
    text = path.read_bytes()
    if text.lstrip()[:1] == b"[":  # one JSON array of objects?
        try:
            doc = json.loads(text.decode("utf-8-sig"), object_pairs_hook=object_without_repeats,
                             parse_constant=no_constant)
        except (ValueError, RecursionError):
            doc = None  # then read it as JSON lines, to name the bad line
        if isinstance(doc, list):
            for i, row in enumerate(doc):
                if not isinstance(row, dict):
                    raise DataError(f"item {i} of the JSON array in `{path}` is not an object; "
                                    "make every item a {...} object")
            return doc, [f"item {i}" for i in range(len(doc))]
    rows, where = [], []
    for lineno, line in enumerate(text.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line.decode("utf-8-sig"), object_pairs_hook=object_without_repeats,
                             parse_constant=no_constant)
        except UnicodeDecodeError:
            raise DataError(f"line {lineno} of `{path}` is not valid UTF-8; save the file as UTF-8") from None
        except (ValueError, RecursionError) as e:
            raise DataError(f"line {lineno} of `{path}` is not valid JSON ({one_line(e, 80)}); "
                            "fix it or delete it") from None
        if not isinstance(row, dict):
            kind = JSON_KINDS.get(type(row), "null")
            raise DataError(f"line {lineno} of `{path}` is a JSON {kind}, not an object; "
                            "write one {...} object per line")
        rows.append(row)
        where.append(f"line {lineno}")
    return rows, where


def object_without_repeats(pairs: list[tuple[str, object]]) -> dict:
    keys = [k for k, _ in pairs]
    if len(set(keys)) < len(keys):
        raise ValueError(f"key `{next(k for k in keys if keys.count(k) > 1)}` given twice")
    return dict(pairs)


def no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


JSON_KINDS = {bool: "boolean", int: "number", float: "number", str: "string", list: "array", dict: "object"}


def first_bad_value(path: Path, name: str, values: list, where: list[str]) -> str | None:
    """Why column `name` cannot become one pyarrow array, at the first row that breaks it: a value
    pyarrow cannot hold (an integer past 64 bits), or a type that differs from an earlier row's."""
    kinds: dict[str, tuple[str, str]] = {}  # field path -> (JSON kind, where it was first seen)
    for value, at in zip(values, where):
        try:
            pa.array([value])
            clash = kind_clash(kinds, name, value, at)
        except (pa.ArrowException, ValueError, TypeError, OverflowError) as e:
            clash = f"field `{name}` holds a value pyarrow cannot store ({one_line(e, 80)})"
        except RecursionError:
            clash = f"field `{name}` is nested too deeply"
        if clash:
            return f"{at} of `{path}`: {clash}; give each field one type"
    return None


def kind_clash(kinds: dict, path: str, value, at: str) -> str | None:
    """Records the JSON kind of `value` and of everything inside it; says where one differs from
    an earlier row's (a pyarrow column holds one type; null goes with any)."""
    kind = JSON_KINDS.get(type(value))
    if kind is None:
        return None
    first_kind, first_at = kinds.setdefault(path, (kind, at))
    if kind != first_kind:
        article = lambda word: "an" if word[0] in "aeiou" else "a"  # noqa: E731
        return f"field `{path}` is {article(kind)} {kind} here but {article(first_kind)} {first_kind} on {first_at}"
    if kind == "object":
        inner = [(f"{path}.{k}", v) for k, v in value.items()]
    else:
        inner = [(f"{path}[]", v) for v in value] if kind == "array" else []
    for inner_path, inner_value in inner:
        clash = kind_clash(kinds, inner_path, inner_value, at)
        if clash:
            return clash
    return None


def load_rows(source: str, split: str = "train"):
    """A `datasets.Dataset` of a local file or hub dataset (eval.py reads its benchmarks so)."""
    import datasets

    rows = ArrowRows(source, split)
    return datasets.Dataset(pa.Table.from_batches(list(rows.batches(rows.schema.names)), schema=rows.schema))


# ----------------------------------------------------------------------------------------------
# Checking the problem and answer columns, vectorized over a record batch (as data.load_prompts needs them).
# ----------------------------------------------------------------------------------------------


def dotted_names(schema_or_type, prefix: str = "") -> list[str]:
    """Every column and nested field, dotted: ["prompt", "reward_model.ground_truth", ...]."""
    names = []
    for field in schema_or_type:
        names.append(prefix + field.name)
        if pa.types.is_struct(field.type):
            names += dotted_names(field.type, prefix + field.name + ".")
    return names


def column_type(schema: pa.Schema, dotted: str) -> pa.DataType | None:
    """The type of column["a"]["b"] for dotted = "a.b"; None where a part is missing (or named twice)."""
    t = pa.struct(list(schema))
    for name in dotted.split("."):
        if not pa.types.is_struct(t) or t.get_field_index(name) < 0:
            return None
        t = t.field(name).type
    return t


def get_column(batch: pa.RecordBatch, dotted: str) -> pa.Array:
    """batch["a"]["b"] for dotted = "a.b" (null where a parent is null)."""
    first, *rest = dotted.split(".")
    column = batch.column(first)
    for name in rest:
        column = pc.struct_field(column, name)
    return column


def is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def is_messages(t: pa.DataType) -> bool:
    """A list of {"role", "content"} structs with string content (role optional)."""
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)) or not pa.types.is_struct(t.value_type):
        return False
    content, role = t.value_type.get_field_index("content"), t.value_type.get_field_index("role")
    return (content >= 0 and is_text(t.value_type.field(content).type)
            and (role < 0 or is_text(t.value_type.field(role).type)))


def blank(strings: pa.Array) -> pa.Array:
    """True where a string is null, empty or only whitespace."""
    return pc.fill_null(pc.or_(pc.equal(pc.binary_length(strings), 0), pc.utf8_is_space(strings)), True)


def first_true(mask: pa.Array) -> int | None:
    i = pc.index(mask, True).as_py()
    return None if i < 0 else i


def first_bad_problem(problem: pa.Array) -> int | None:
    """Index of the first row whose problem is missing or blank (problem of a supported type)."""
    if is_text(problem.type):
        return first_true(blank(problem))
    no_messages = first_true(pc.fill_null(pc.equal(pc.list_value_length(problem), 0), True))  # a null or empty list
    messages = pc.list_flatten(problem)
    k = first_true(pc.or_(messages.is_null(), blank(pc.struct_field(messages, "content"))))
    blank_message = None if k is None else pc.list_parent_indices(problem)[k].as_py()  # its row
    return min((i for i in (no_messages, blank_message) if i is not None), default=None)


def first_bad_answer(answer: pa.Array) -> int | None:
    """Index of the first row whose answer is missing, blank or NaN (answer of a supported type)."""
    if is_text(answer.type):
        return first_true(blank(answer))
    if pa.types.is_floating(answer.type):
        return first_true(pc.fill_null(pc.is_nan(answer), True))
    return first_true(answer.is_null())


PROBLEM_FIX = ('a problem is a non-blank string or a list of chat messages {"role", "content"} '
               "with non-blank string content")
ANSWER_FIX = "an answer is a non-blank string or a number"


def check_batch(problem: pa.Array, answer: pa.Array, offset: int, name: str, data_cfg) -> None:
    """Raises DataError at the first row of the batch (row `offset` of the file) whose problem or
    answer cannot be used (as data.load_prompts needs them). A column of the wrong type is wrong from its first row."""
    problem_type_ok = is_text(problem.type) or is_messages(problem.type)
    answer_type_ok = is_text(answer.type) or pa.types.is_integer(answer.type) or pa.types.is_floating(answer.type)
    i = first_bad_problem(problem) if problem_type_ok else 0
    j = first_bad_answer(answer) if answer_type_ok else 0
    if i is not None and (j is None or i <= j):
        raise bad_value(problem, i, problem_type_ok, offset, name, data_cfg.prompt_key, "problem", PROBLEM_FIX)
    if j is not None:
        raise bad_value(answer, j, answer_type_ok, offset, name, data_cfg.answer_key, "answer", ANSWER_FIX)


def bad_value(column: pa.Array, i: int, type_ok: bool, offset: int, name: str, key: str, what: str,
              fix: str) -> DataError:
    if column[i].is_valid and not type_ok:
        article = "an" if what[0] in "aeiou" else "a"
        return DataError(f"row {offset + i} of `{name}` has {article} {what} of type {column.type} "
                         f"in column `{key}`; {fix}")
    return DataError(f"row {offset + i} of `{name}` has no {what} in column `{key}`; {fix}")
