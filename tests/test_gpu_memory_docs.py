"""docs/gpu.md's memory tables are what infra/gpu_memory.py computes for the shipped configs: every table of the page
with a "vLLM's budget" row is read, each of its columns is a setup (its header, or the section heading, names the
GPUs and card, `key=value` overrides in backticks; the config is the one the section heading names), and each row this
file knows (`ROWS`: resident memory, `auto`'s fraction, vLLM's budget, the KV cache, ...) must state the number the
code computes for that setup, to the digits the page writes it with. The model shapes are the Qwen3 configs
(`SHAPES`), built on the meta device as infra.gpu_memory.model_size builds a downloaded one."""

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

import config
from config import ConfigError
from infra import gpu_memory

REPO = Path(__file__).resolve().parents[1]
GPU_MD = REPO / "docs" / "gpu.md"
GiB = 2**30

# Qwen/Qwen3-*-Base config.json shapes (vocabulary 151,936, head_dim 128 throughout): hidden, layers, query heads,
# KV heads, intermediate, tied embedding; the 30B-A3B's experts below.
DENSE = {"Qwen/Qwen3-0.6B-Base": (1024, 28, 16, 8, 3072, True), "Qwen/Qwen3-1.7B-Base": (2048, 28, 16, 8, 6144, True),
         "Qwen/Qwen3-4B-Base": (2560, 36, 32, 8, 9728, True), "Qwen/Qwen3-8B-Base": (4096, 36, 32, 8, 12288, False),
         "Qwen/Qwen3-14B-Base": (5120, 40, 40, 8, 17408, False)}
COUNTS = {"Qwen/Qwen3-0.6B-Base": 596_049_920, "Qwen/Qwen3-1.7B-Base": 1_720_574_976,  # docs/gpu.md's counts
          "Qwen/Qwen3-4B-Base": 4_022_468_096, "Qwen/Qwen3-8B-Base": 8_190_735_360,
          "Qwen/Qwen3-14B-Base": 14_768_307_200, "Qwen/Qwen3-30B-A3B-Base": 30_532_122_624}


@cache
def shape(name: str):
    """(parameters, HF config) of a Qwen3 base model, counted on the meta device."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3MoeConfig

    if name == "Qwen/Qwen3-30B-A3B-Base":
        hf = Qwen3MoeConfig(hidden_size=2048, num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4,
                            head_dim=128, num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768,
                            intermediate_size=6144, vocab_size=151936, tie_word_embeddings=False)
    else:
        hidden, layers, heads, kv_heads, intermediate, tied = DENSE[name]
        hf = Qwen3Config(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                         num_key_value_heads=kv_heads, head_dim=128, intermediate_size=intermediate,
                         vocab_size=151936, tie_word_embeddings=tied)
    with torch.device("meta"):
        n = sum(p.numel() for p in AutoModelForCausalLM.from_config(hf).parameters())
    assert n == COUNTS[name]
    return n, hf


@dataclass
class Setup:
    """One column of a table: a shipped config with overrides, on `world` GPUs of `card` GiB."""

    config: str
    world: int
    card: float
    overrides: tuple[str, ...] = ()

    def cfg(self):
        return config.load(self.config, ["rollout.gpu_memory_utilization=auto", *self.overrides])

    def numbers(self) -> dict:
        """What the code gives for this setup, in GiB and tokens; without `auto` and what follows from it when
        `auto` refuses the setup."""
        cfg, total = self.cfg(), self.card * GiB
        n, hf = shape(cfg.model.name_or_path)
        resident, b = gpu_memory.resident_bytes(n, self.world, cfg), gpu_memory.BYTES[cfg.model.dtype]
        gen = (cfg.trainer.gen_batch_size or cfg.trainer.train_batch_size) // self.world
        found = {"n": n, "state": (resident - gpu_memory.REDUCE_BUCKET * b - gpu_memory.CONTEXT) / GiB,
                 "resident": resident / GiB, "rule": (total - resident - gpu_memory.MARGIN) / total,
                 "weights": b * n / GiB, "gathered": b * n * (self.world - 1) / self.world / GiB,
                 "host": 16 * n / self.world / GiB if cfg.deepspeed.offload_optimizer == "cpu" else 0.0,
                 "gen_prompts": gen, "gen_responses": gen * cfg.rollout.n}
        try:
            auto = gpu_memory.resolve(cfg, cfg.model.name_or_path, self.world, total_bytes=total, size=(n, hf))
        except ConfigError:
            return found
        length = cfg.data.max_prompt_len + cfg.rollout.max_response_len
        kv = auto * total - b * n - gpu_memory.ENGINE_EXTRA
        tokens = kv / gpu_memory.kv_bytes_per_token(hf, cfg.model.dtype)
        generating = resident / GiB + auto * self.card
        return found | {"auto": auto, "budget": auto * self.card, "kv": kv / GiB, "tokens": tokens,
                        "sequences": tokens / length, "length": length,
                        "per_sequence": tokens / cfg.rollout.max_num_seqs, "generating": generating,
                        "margin": self.card - generating, "sleep": (auto * total - gpu_memory.ENGINE_EXTRA) / GiB}


NUMBER = r"(\d[\d,]*(?:\.\d+)?)"
# Row label (how it starts) -> [(pattern in the cell, the number it captures, whether the cell must hold it)]; a row
# not named here is prose. A setup `auto` refuses has no "auto" and no number after it: its cells say "refused", "-".
ROWS = {
    "parameters, N": [(NUMBER, "n", True)],
    "training state": [(NUMBER + r" GiB", "state", True)],
    "resident": [(NUMBER + r" GiB", "resident", True)],
    "gpu_memory_utilization": [(NUMBER + r" ->", "rule", False), (r"\*\*" + NUMBER + r"\*\*", "auto", True)],
    "vLLM's budget": [(NUMBER + r" GiB", "budget", True)],
    "of which bf16 weights": [(NUMBER + r" GiB", "weights", True)],
    "of which KV cache": [(NUMBER + r" GiB", "kv", True), (NUMBER + r" tokens", "tokens", True),
                          (NUMBER + r" (?:full )?sequences", "sequences", False),
                          (r"sequences of " + NUMBER, "length", False)],
    "KV tokens per running sequence": [(NUMBER, "per_sequence", True)],
    "while generating": [(NUMBER + r" GiB", "generating", True), (r"margin " + NUMBER, "margin", False)],
    "sleep level 2 returns": [(NUMBER + r" GiB", "sleep", True)],
    "optimizer state on the host": [(NUMBER + r" GiB", "host", True)],
    "weight sync, gathered per GPU": [(NUMBER + r" GiB", "gathered", True)],
    "generation batch per GPU": [(NUMBER + r" prompts", "gen_prompts", True), (r"= " + NUMBER, "gen_responses", False)],
}


def stated(text: str, value: float) -> bool:
    """`text` is `value` as the page rounds: to its decimals, or an integer to its trailing zeros (~274,800)."""
    digits = text.replace(",", "")
    if "." in digits:
        return round(value, len(digits.split(".")[1])) == float(digits)
    zeros = len(digits) - len(digits.rstrip("0")) if len(digits) > 3 else 0
    return round(value, -zeros) == int(digits)


SETUP = re.compile(r"(\d+) x ([\d.]+) GiB")


def tables(text: str):
    """(section heading, header cells, rows of cells) of every Markdown table of `text`."""
    heading, found, rows = "", [], []
    for line in text.splitlines() + [""]:
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif rows:
            found.append((heading, rows[0], [r for r in rows[2:]]))
            rows = []
    return found


def columns(heading: str, header: list[str]) -> dict[int, Setup]:
    """{column index: its setup}: columns whose header names N x C GiB, else the last column on the heading's setup."""
    name = re.search(r"configs/([\w.]+\.yaml)", heading).group(1)
    found = {i: cell for i, cell in enumerate(header) if SETUP.search(cell)} or {len(header) - 1: heading}
    return {i: Setup(name, int(SETUP.search(cell).group(1)), float(SETUP.search(cell).group(2)),
                     tuple(re.findall(r"`([\w.]+=[^`]+)`", cell))) for i, cell in found.items()}


def problems(text: str) -> tuple[list[str], set[str]]:
    """Every stated number that is not the code's, and the configs whose tables were checked."""
    wrong, checked = [], set()
    for heading, header, rows in tables(text):
        if not any(r[0].startswith("vLLM's budget") for r in rows):
            continue
        for col, setup in columns(heading, header).items():
            numbers, where = setup.numbers(), f"{heading} / {header[col]}"
            checked.add(setup.config)
            for row in rows:
                label, cell = row[0].strip("*"), row[col] if col < len(row) else ""
                patterns = next((p for start, p in ROWS.items() if label.startswith(start)), [])
                if not patterns or cell in ("", "same"):
                    continue
                keys = [key for _, key, _ in patterns]
                if not set(keys) <= set(numbers):  # a number after `auto`, which refuses this setup
                    refused = label.startswith("gpu_memory_utilization") and "refused" in cell
                    if not refused and cell != "-":
                        wrong.append(f"{where} / {label}: `auto` refuses this setup, the page says {cell!r}")
                    patterns = [p for p in patterns if p[1] in numbers and refused]  # its fraction, if written
                elif cell.startswith("-"):  # nothing stated: right only where the code has nothing either
                    wrong += [] if not any(numbers[key] for key in keys) else [
                        f"{where} / {label}: the page states nothing, the code gives {numbers[keys[0]]:,.4f}"]
                    continue
                for pattern, key, required in patterns:
                    m = re.search(pattern, cell)
                    if (m is None and required) or (m is not None and not stated(m.group(1), numbers[key])):
                        wrong.append(f"{where} / {label}: {key} is {numbers[key]:,.4f}, the page says {cell!r}")
    return wrong, checked


def test_the_memory_tables_state_what_the_code_computes():
    wrong, checked = problems(GPU_MD.read_text())
    assert not wrong, "docs/gpu.md disagrees with infra/gpu_memory.py:\n" + "\n".join(wrong)
    shipped = {"qwen3_8b_qae.yaml", "qwen3_14b_qae.yaml", "qwen3_30b_a3b_gspo_qae.yaml", "qwen3_1.7b_qae_1gpu.yaml"}
    assert shipped <= checked, f"no memory table checked for {sorted(shipped - checked)}"


def test_the_check_can_fail():
    page = "\n".join([
        "## Memory: Qwen3-8B (configs/qwen3_8b_qae.yaml)", "",
        "| what | 8 x 80 GiB | 16 x 80 GiB |", "|---|---|---|",
        "| gpu_memory_utilization `auto` | 0.705 -> **0.70** | 0.812 -> **0.81** |",
        "| vLLM's budget | 56.0 GiB | 64.8 GiB |",
        "| of which KV cache | ~37.7 GiB = ~274,800 tokens = 12.2 sequences of 22,528 | ~46.5 GiB, ~338,900 tokens |"])
    assert problems(page) == ([], {"qwen3_8b_qae.yaml"})
    for right, wrong in (("**0.70**", "**0.50**"), ("274,800", "262,200"), ("56.0 GiB", "40.0 GiB")):
        assert len(problems(page.replace(right, wrong, 1))[0]) == 1
    refused = page.replace("16 x 80 GiB", "1 x 80 GiB")  # 140 GiB of state on one card: `auto` refuses it
    assert len(problems(refused)[0]) == 3  # the fraction, the budget, the KV cache
    fixed = refused.replace("0.812 -> **0.81**", "refused").replace("64.8 GiB", "-")
    fixed = fixed.replace("~46.5 GiB, ~338,900 tokens", "-")
    assert problems(fixed) == ([], {"qwen3_8b_qae.yaml"})


@pytest.mark.parametrize("text, value, ok", [("0.70", 0.7, True), ("0.50", 0.5332, False), ("274,800", 274_836, True),
                                             ("77,900", 77_920, True), ("12.2", 12.19, True), ("256", 256.4, True)])
def test_numbers_are_compared_to_the_digits_the_page_gives(text, value, ok):
    assert stated(text, value) == ok
