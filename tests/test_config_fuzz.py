"""A property of config overrides: whatever `section.key=value` strings a command line holds (real
keys, near-misses of real keys, random text; YAML-ish values of every kind), config.from_dict
either returns a Config or raises ConfigError with one line. Never any other exception. And the
command line (`python config.py --config tiny_qae.yaml OVERRIDE`) exits 0, or 2 with one line."""

import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

import config
from infra.config_loader import ConfigError, all_keys

REPO = Path(__file__).resolve().parents[1]
KEYS = all_keys(config.Config)  # every real `section.key`
FUZZ = settings(max_examples=300, deadline=2_000, database=None)  # ~2 s on one busy CPU


def near_miss(key: str, data) -> str:
    """A real key with one edit: a case change, a dropped, doubled or replaced character, a wrong section."""
    edit = data.draw(st.sampled_from(["case", "drop", "double", "replace", "section", "dots", "space"]))
    i = data.draw(st.integers(0, len(key) - 1))
    if edit == "case":
        return key.upper() if data.draw(st.booleans()) else key[:i] + key[i].swapcase() + key[i + 1:]
    if edit == "drop":
        return key[:i] + key[i + 1:]
    if edit == "double":
        return key[:i] + key[i] + key[i:]
    if edit == "replace":
        return key[:i] + data.draw(st.characters(codec="utf-8")) + key[i + 1:]
    if edit == "section":
        return data.draw(st.sampled_from(KEYS)).split(".")[0] + "." + key.split(".")[1]
    if edit == "dots":
        return key.replace(".", data.draw(st.sampled_from(["", "..", ".x.", "/", "_"])))
    return data.draw(st.sampled_from([" ", "\t", "\n"])).join([key[:i], key[i:]])


yaml_values = st.one_of(
    st.integers(-2**70, 2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["null", "~", "", "true", "False", "yes", "off", ".nan", "-.inf", "1e-6", "1e999", "0x1F", "0o17",
                     "1_000", "[0.9, 0.999]", "[0.9]", "[a, b, c]", "[", "]", "{a: 1}", "{", "'quoted'", '"x\\ny"',
                     "!!binary aGk=", "!!set {a, b}", "2024-01-01", "!!python/object:os.system x", "*alias", "&a 1",
                     "- 1", "a: b", "{problem}", "hf", "vllm", "quantile", "mean", "linear", "cosine", "float64",
                     "none", "pos", "cpu", "3", "0", "-1", "0.5", "1.5"]),
    st.text(max_size=12),
    st.lists(st.integers(-3, 3) | st.floats(-2, 2) | st.text(max_size=3), max_size=3).map(str),
)


@st.composite
def overrides(draw):
    """One command-line override: a key (real, near-miss or random), usually `=`, and a value."""
    kind = draw(st.sampled_from(["real", "real", "near", "random"]))
    key = draw(st.sampled_from(KEYS))
    if kind == "near":
        key = near_miss(key, draw(st.data()))
    elif kind == "random":
        key = draw(st.text(max_size=15))
    sep = draw(st.sampled_from(["=", "=", "=", "", " = ", "=="]))
    return f"{key}{sep}{draw(yaml_values)}"


def assert_one_line(e: ConfigError) -> None:
    message = str(e)
    assert message.strip() and len(message.splitlines()) == 1, repr(message)


@FUZZ
@given(items=st.lists(overrides(), min_size=1, max_size=3))
def test_overrides_give_a_config_or_one_line_config_error(items):
    try:
        cfg = config.from_dict({}, items)
    except ConfigError as e:
        assert_one_line(e)
    else:
        assert isinstance(cfg, config.Config)


@settings(max_examples=100, deadline=2_000, database=None)  # each example reads the YAML file again: ~3 s
@given(items=st.lists(overrides(), min_size=1, max_size=3))
def test_overrides_over_a_real_config_file(items):
    """The same, over the tiny config read from its file (values then carry their origin)."""
    try:
        config.load("tiny_qae.yaml", items)
    except ConfigError as e:
        assert_one_line(e)


@settings(max_examples=5, deadline=None, database=None)  # a process each: ~1 s apiece
@given(item=overrides().filter(lambda s: not s.startswith("-") and "\x00" not in s))
def test_cli_exits_0_or_2_with_one_line(item):
    proc = subprocess.run([sys.executable, str(REPO / "config.py"), "--config", "tiny_qae.yaml", item],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert "Traceback" not in proc.stderr, proc.stderr
    if proc.returncode == 0:
        assert proc.stderr == "" and config.loads(proc.stdout) is not None
    else:
        assert proc.returncode == 2
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
