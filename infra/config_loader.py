"""Reading configs: YAML files with `base:` inheritance, typed `section.key=value` overrides, and
building the typed dataclasses of config.py with errors that name the key, the file and the fix.

    data, origin = read_chain(path)            # the file merged over its `base:` files
    set_override(data, "algorithm.K=0.6")      # parsed once the field's type is known
    cfg = build(Config, data, origin)          # typed, unknown keys rejected with a suggestion

A config file may start with `base: <name>` (a bare name in configs/, or a path relative to the
file): the base is read first (its own base before it), then this file's sections are merged
over it key by key. `tiny_dapo.yaml` is `base: tiny_qae.yaml` plus the keys that differ.

Nothing here knows the config's fields: config.py passes its dataclasses in.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"


class ConfigError(ValueError):
    """A config that cannot run; the message names the key and how to fix it. It is one line even
    when it quotes the input (a key holding a newline prints as \\n)."""

    def __init__(self, message: str):
        super().__init__("\\n".join(message.splitlines()))


# ----------------------------------------------------------------------------------------------
# Files: lookup, YAML, `base:` chains.
# ----------------------------------------------------------------------------------------------


def resolve_path(name: str, relative_to: Path | None = None) -> Path:
    """A config file given as a path (relative to the cwd, or to `relative_to` for a `base:`),
    or as a bare name in configs/ ('.yaml' optional)."""
    names = [name] if name.endswith((".yaml", ".yml")) else [name, name + ".yaml"]
    roots = [Path("."), *([relative_to] if relative_to else []), CONFIG_DIR]
    for root in roots:
        for n in names:
            if (root / n).is_file():
                return root / n
    available = ", ".join(sorted(p.name for p in CONFIG_DIR.glob("*.yaml")))
    raise ConfigError(f"config file `{name}` not found (looked in . and {CONFIG_DIR}); available: {available}")


def read_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"config file `{path}` is not valid YAML{where}: {what}; correct the syntax there") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file `{path}` cannot be read as UTF-8 text ({type(e).__name__}: {e}); "
                          "save it as UTF-8") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"config file `{path}` must hold a mapping of sections, got {type(data).__name__}")
    return data or {}


def read_chain(path: Path) -> tuple[dict, dict[str, str]]:
    """The file's sections merged over its `base:` chain, and which file set each `section.key`."""
    chain, seen = [], []
    while True:
        if path.resolve() in seen:
            chain_text = " -> ".join(map(str, [*seen, path.resolve()]))
            raise ConfigError(f"config file `{path}` is its own base (`base:` chain {chain_text}); "
                              "remove the `base:` line that closes the loop")
        seen.append(path.resolve())
        data = read_yaml(path)
        chain.append((path, data))
        base = data.pop("base", None)
        if base is None:
            break
        if not isinstance(base, str):
            raise ConfigError(f"`base:` in `{path}` must be a config file name, got {base!r}")
        path = resolve_path(base, relative_to=path.parent)
    merged, origin = {}, {}
    for path, data in reversed(chain):  # the root base first, the named file last
        for section, values in data.items():
            if isinstance(values, dict) and isinstance(merged.get(section), dict):
                merged[section] = {**merged[section], **values}
            else:
                merged[section] = dict(values) if isinstance(values, dict) else values
            for key in values if isinstance(values, dict) else [None]:
                origin[f"{section}.{key}" if key is not None else section] = str(path)
    return merged, origin


# ----------------------------------------------------------------------------------------------
# Overrides: `section.key=value`, typed when the field is known.
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Override:
    """A command-line value, parsed once its field's type is known: text for a str field, else YAML."""

    text: str

    def parse(self, tp):
        if (tp is str or str in typing.get_args(tp)) and self.text not in ("null", "~"):
            return self.text
        try:
            return yaml.safe_load(self.text)
        except yaml.YAMLError:
            return self.text


def set_override(data: dict, item: str, all_keys: list[str], origin: dict | None = None) -> None:
    """Apply one `section.key=value` to the nested dict `data`."""
    dotted, sep, raw = item.partition("=")
    dotted = dotted.strip()
    if not sep:
        raise ConfigError(f"override `{item}` must look like `section.key=value`")
    parts = dotted.split(".")
    if len(parts) != 2 or not all(parts):
        raise ConfigError(f"override `{dotted}=...` must name `section.key`{suggest(dotted, all_keys)}")
    section = data.setdefault(parts[0], {})
    if not isinstance(section, dict):
        raise ConfigError(f"config section `{parts[0]}` must be a mapping")
    section[parts[1]] = Override(raw)
    if origin is not None:
        origin.pop(dotted, None)  # the value now comes from the command line, not from a file


# ----------------------------------------------------------------------------------------------
# Building dataclasses, with typed checks and suggestions.
# ----------------------------------------------------------------------------------------------


def suggest(key: str, options: list[str]) -> str:
    """' (did you mean `x`?)' for the closest option, case-insensitively, or ''."""
    lower = {o.lower(): o for o in options}
    leaf = key.split(".")[-1].lower()  # a right name in the wrong section: `trainer.K` -> `algorithm.K`
    match = [o for o in lower if o.split(".")[-1] == leaf][:1]
    match = match or difflib.get_close_matches(key.lower(), list(lower), n=1, cutoff=0.5)
    return f" (did you mean `{lower[match[0]]}`?)" if match else ""


def all_keys(cls) -> list[str]:
    """Every valid `section.key` of a config dataclass made of section dataclasses."""
    sections = typing.get_type_hints(cls)
    return [f"{name}.{f.name}" for name, sec in sections.items() for f in dataclasses.fields(sec)]


def _typename(tp) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def coerce(value, tp, key: str):
    """Check `value` against the annotation `tp`; return it converted (int -> float, list -> tuple)."""
    if isinstance(value, Override):
        value = value.parse(tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [x for x in args if x is not type(None)]
        if len(inner) == 1:
            return coerce(value, inner[0], key)
        for option in inner:  # `float | Literal["auto"]`: the first type that takes the value
            try:
                return coerce(value, option, key)
            except ConfigError:
                pass
        names = " or ".join(" or ".join(map(repr, typing.get_args(x))) if typing.get_origin(x) is Literal
                            else _typename(x) for x in inner)
        raise ConfigError(f"config key `{key}` must be {names}, got {value!r}")
    if origin is Literal:
        if not any(value == a and type(value) is type(a) for a in args):  # `false` is not the 0 of Literal[0, 3]
            raise ConfigError(f"config key `{key}` must be one of {list(args)}, "
                              f"got {value!r}{suggest(str(value), [str(x) for x in args])}")
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise ConfigError(f"config key `{key}` must be a list of {len(args)} numbers, got {value!r}")
        return tuple(coerce(v, t, f"{key}[{i}]") for i, (v, t) in enumerate(zip(value, args)))
    if tp is float and isinstance(value, str):  # YAML 1.1 reads `1e-6` (no dot) as a string
        try:
            return float(value)
        except ValueError:
            pass
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        str: isinstance(value, str),
    }[tp]
    if not ok:
        raise ConfigError(f"config key `{key}` must be {_typename(tp)}, got {value!r} ({type(value).__name__})")
    return float(value) if tp is float else value


def build(cls, data, origin: dict | None = None, prefix: str = "", keys: list[str] | None = None):
    """cls(**data) with every key known and every value of its field's type; errors name the
    key and, for a value read from a file, the file (`origin`: `section.key` -> file)."""
    origin = origin or {}
    keys = all_keys(cls) if keys is None else keys  # every `section.key`, for suggestions across sections
    where = lambda key: f" (set in `{origin[key]}`)" if key in origin else ""  # noqa: E731
    if not isinstance(data, dict):
        raise ConfigError(f"config section `{prefix}` must be a mapping of keys to values, got {data!r}{where(prefix)}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for key in data:
        if key not in names:
            full = f"{prefix}.{key}" if prefix else str(key)
            scope = ([f"{prefix}.{n}" for n in names] if prefix else names) + keys
            raise ConfigError(f"unknown config key `{full}`{where(full)}{suggest(full, scope)}")
    kwargs = {}
    for name in names:
        if name not in data:
            continue
        key = f"{prefix}.{name}" if prefix else name
        try:
            if dataclasses.is_dataclass(hints[name]):
                kwargs[name] = build(hints[name], data[name] or {}, origin, key, keys)
            else:
                kwargs[name] = coerce(data[name], hints[name], key)
        except ConfigError as e:  # add the file that set the value, once
            raise ConfigError(str(e) if "(set in" in str(e) else f"{e}{where(key)}") from None
    return cls(**kwargs)
