"""Records on the wire: a dataclass of token lists, per-token values, tensors and strings packed as a
few flat tensors, which pickle compactly for an all-gather over ranks (accelerate's gather_object).

    wire = to_wire(group)               # on each rank: a dict of tensors and strings
    group = from_wire(Group, wire)      # on every rank, after the gather: the same record

A field is packed by its value: a list as (one flat tensor, None), a list of lists as (one flat
tensor, the lists' lengths), the flat tensor int32 for tokens and float64 for per-token values;
anything else (a tensor, a string, None) as it is.
"""

from __future__ import annotations

import dataclasses

import torch


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _flat(values: list) -> torch.Tensor:
    """A list of numbers as int32 (every one an int) or float64."""
    return torch.tensor(values, dtype=torch.int32 if all(map(_is_int, values)) else torch.float64)


def to_wire(record) -> dict:
    """A dataclass record as {field: packed value}.

    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Pair:
    ...     ids: list
    ...     rows: list
    >>> wire = to_wire(Pair([5, 6], [[1, 2, 3], [4]]))
    >>> wire["rows"]
    (tensor([1, 2, 3, 4], dtype=torch.int32), tensor([3, 1]))
    >>> from_wire(Pair, wire)
    Pair(ids=[5, 6], rows=[[1, 2, 3], [4]])
    """
    wire = {}
    for field in dataclasses.fields(record):
        value = getattr(record, field.name)
        if isinstance(value, list) and value and isinstance(value[0], list):  # rows of numbers
            wire[field.name] = (_flat([x for row in value for x in row]), torch.tensor([len(row) for row in value]))
        elif isinstance(value, list):
            wire[field.name] = (_flat(value), None)
        else:
            wire[field.name] = value
    return wire


def from_wire(cls, wire: dict):
    """The record of class `cls` that to_wire packed into `wire`."""
    values = {}
    for field in dataclasses.fields(cls):
        value = wire[field.name]
        if isinstance(value, tuple):  # a packed list
            flat, lens = value
            value = flat.tolist() if lens is None else [part.tolist() for part in flat.split(lens.tolist())]
        values[field.name] = value
    return cls(**values)
