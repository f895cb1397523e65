"""configs/qwen3_1.7b_qae_1gpu.yaml, the one-GPU config: `rollout.gpu_memory_utilization: auto` (infra/gpu_memory.py)
for Qwen3-1.7B's shape on one card of 80 and of 24 GiB against hand-computed numbers (docs/gpu.md, "One GPU"), why
not 4B or 8B, the config keeping the 8B config's algorithm whole, and its CPU-shrunk twin: train.py, one step, with
the config's algorithm, batch shape and loss settings and the tiny policy in place of Qwen3-1.7B-Base."""

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

import config
from config import ConfigError
from infra import gpu_memory
from infra.logger import read_metrics

REPO = Path(__file__).resolve().parents[1]
NAME = "qwen3_1.7b_qae_1gpu.yaml"
GiB = 2**30
N = 1_720_574_976  # docs/gpu.md: 28 x 50,336,000 per layer + 311,164,928 (tied embedding) + 2,048


def qwen3(hidden: int, layers: int, heads: int, intermediate: int, tied: bool):
    """(parameters, config) of a Qwen3 of this shape (8 KV heads of 128, vocabulary 151,936), on the meta device."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    hf_config = Qwen3Config(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                            num_key_value_heads=8, head_dim=128, intermediate_size=intermediate, vocab_size=151936,
                            tie_word_embeddings=tied)
    with torch.device("meta"):
        return sum(p.numel() for p in AutoModelForCausalLM.from_config(hf_config).parameters()), hf_config


@pytest.fixture(scope="module")
def qwen3_1_7b():
    """Qwen3-1.7B(-Base): hidden 2048, 28 layers, 16 / 8 heads, intermediate 6144, tied."""
    n, hf_config = qwen3(2048, 28, 16, 6144, tied=True)
    assert n == N and gpu_memory.kv_bytes_per_token(hf_config, "bfloat16") == 28 * 8 * 128 * 2 * 2 == 112 * 1024
    return n, hf_config


def one_gpu(*overrides):
    return config.load(NAME, list(overrides))


def test_the_config_ships_auto_and_the_paper_algorithm():
    cfg, paper = one_gpu(), config.load("qwen3_8b_qae.yaml")
    assert cfg.rollout.gpu_memory_utilization == "auto" and cfg.model.name_or_path == "Qwen/Qwen3-1.7B-Base"
    assert cfg.algorithm == paper.algorithm and cfg.optim == paper.optim and cfg.rollout.n == 16  # K, clips, lr, G
    assert (cfg.trainer.train_batch_size, cfg.trainer.gen_batch_size) == (512 // 8, 1536 // 8)  # one GPU's share
    assert cfg.deepspeed == paper.deepspeed  # ZeRO-3 (fp32 master weights and Adam state), nothing offloaded
    assert "#   python train.py --config qwen3_1.7b_qae_1gpu.yaml\n" in (REPO / "configs" / NAME).read_text()


# By hand, one GPU, bf16, fp32 gradient accumulation: 18 B x 1,720,574,976 = 30,970,349,568 B = 28.843 GiB, + reduce
# bucket 5e8 x 2 B = 0.931 GiB + CUDA context 2 GiB = 31.775 GiB resident; margin 3.5 GiB; weights 2 B x N = 3.205 GiB.
#   80 GiB: (80 - 31.775 - 3.5) / 80 = 0.5591 -> 0.55; KV cache 0.55 x 80 - 3.205 - 3 = 37.795 GiB = 353,849 tokens
# With the optimizer on the host, 2 B x N = 3.205 GiB + 0.931 + 2 = 6.136 GiB resident:
#   24 GiB: (24 - 6.136 - 3.5) / 24 = 0.5985 -> 0.59; KV cache 0.59 x 24 - 3.205 - 3 = 7.955 GiB = 74,479 tokens
@pytest.mark.parametrize("card_gib, overrides, expected, kv_tokens", [
    (80, [], 0.55, 353_849),
    (24, ["deepspeed.offload_optimizer=cpu"], 0.59, 74_479),
])
def test_auto_on_one_card(qwen3_1_7b, card_gib, overrides, expected, kv_tokens):
    cfg = one_gpu("rollout.gpu_memory_utilization=auto", *overrides)
    value = gpu_memory.resolve(cfg, cfg.model.name_or_path, world=1, total_bytes=card_gib * GiB, size=qwen3_1_7b)
    assert value == expected
    kv = value * card_gib * GiB - 2 * N - gpu_memory.ENGINE_EXTRA
    assert round(kv / gpu_memory.kv_bytes_per_token(qwen3_1_7b[1], "bfloat16")) == kv_tokens
    assert kv_tokens > 7 * (2048 + 8192)  # at least 7 full-length sequences of KV cache


def test_on_24_gib_nothing_larger_fits(qwen3_1_7b):
    # 1.7B with its optimizer on the card: 31.8 GiB of training state on a 24 GiB card
    with pytest.raises(ConfigError, match="this 24.0 GiB GPU leaves vLLM 0.00 x 24.0 GiB next to 31.8 GiB"):
        gpu_memory.resolve(one_gpu(), "x", world=1, total_bytes=24 * GiB, size=qwen3_1_7b)
    # 4B offloaded: 2 B x 4.02e9 = 7.49 + 2.93 = 10.42 GiB; (24 - 10.42 - 3.5) / 24 = 0.41, less than its 7.5 GiB of
    # weights + 3 GiB + one sequence
    four_b = qwen3(2560, 36, 32, 9728, tied=True)
    with pytest.raises(ConfigError, match="leaves vLLM 0.41 x 24.0 GiB next to 10.4 GiB .* its 7.5 GiB of weights"):
        gpu_memory.resolve(one_gpu("deepspeed.offload_optimizer=cpu"), "x", world=1, total_bytes=24 * GiB, size=four_b)


def test_on_80_gib_4b_and_8b_fit_only_with_the_optimizer_on_the_host():
    four_b, eight_b = qwen3(2560, 36, 32, 9728, tied=True), qwen3(4096, 36, 32, 12288, tied=False)
    assert (four_b[0], eight_b[0]) == (4_022_468_096, 8_190_735_360)
    for size in (four_b, eight_b):  # 18 B x N: 67.4 and 137.3 GiB of training state on one card
        with pytest.raises(ConfigError, match="this 80.0 GiB GPU leaves vLLM"):
            gpu_memory.resolve(one_gpu(), "x", world=1, total_bytes=80 * GiB, size=size)
    offload = one_gpu("deepspeed.offload_optimizer=cpu")
    # (80 - (2 B x N + 2.93 GiB) - 3.5) / 80: 4B (80 - 10.42 - 3.5) / 80 = 0.826, 8B (80 - 18.19 - 3.5) / 80 = 0.729
    assert [gpu_memory.resolve(offload, "x", world=1, total_bytes=80 * GiB, size=size)
            for size in (four_b, eight_b)] == [0.82, 0.72]


# ----------------------------------------------------------------------------------------------
# The CPU-shrunk twin: train.py, one step, the config file itself with only these values replaced.
# ----------------------------------------------------------------------------------------------

TWIN = {
    "model.name_or_path": "tiny/model", "model.dtype": "float32",  # the tiny policy on a CPU
    "data.train_files": "tiny/train.jsonl", "data.prompt_key": "problem", "data.answer_key": "answer",
    "data.prompt_template": "{problem}", "data.max_prompt_len": "64",  # the tiny task
    "reward.mode": "verify", "reward.overlong_buffer_len": "4",  # its answers are bare numbers; shaping scaled
    "rollout.backend": "hf", "rollout.max_response_len": "24",  # no vLLM; its answers are at most 18 tokens
    # 1/16 of the prompts, the same shape: 4 optimizer steps per step, generation batches of at most 3x
    "trainer.train_batch_size": "4", "trainer.gen_batch_size": "12", "trainer.mini_batch_size": "1",
    "trainer.total_steps": "1", "trainer.require_cuda": "false",
    "deepspeed.zero_stage": "0",  # one CPU process; ZeRO-3's CPU twin is tests/test_zero3.py
    "eval.every": "0", "logging.wandb": "false",
}


def differing(a: config.Config, b: config.Config) -> set[str]:
    return {f"{s.name}.{f.name}" for s in dataclasses.fields(a) for f in dataclasses.fields(getattr(a, s.name))
            if getattr(getattr(a, s.name), f.name) != getattr(getattr(b, s.name), f.name)}


def test_the_twin_changes_no_algorithm_loss_or_group_setting():
    real, twin = one_gpu(), one_gpu(*[f"{k}={v}" for k, v in TWIN.items()])
    # only what TWIN names differs, and the engine-gap bands that follow model.dtype (0.05, 0.2 bf16; 1e-4, 1e-3 fp32)
    assert differing(real, twin) == set(TWIN) | {"rollout.logp_gap_max", "rollout.logp_gap_warn"}
    assert twin.algorithm == real.algorithm and twin.optim == real.optim and twin.rollout.n == 16
    for cfg in (real, twin):  # the batch's shape: 4 optimizer steps per step, generation batches of at most 3x
        trainer = cfg.trainer
        assert trainer.train_batch_size // trainer.mini_batch_size == 4 and trainer.adaptive_gen_batch
        assert trainer.gen_batch_size // trainer.train_batch_size == 3 and cfg.model.gradient_checkpointing


@pytest.mark.slow
def test_the_cpu_twin_takes_a_step(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "train.py", "--config", NAME, *[f"{k}={v}" for k, v in TWIN.items()],
           f"trainer.output_dir={out}"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [row] = read_metrics(out / "metrics.jsonl")
    assert row["step"] == 1 and row["optim/updates"] == 4 and row["optim/skipped"] == 0  # 4 mini-batches of 1 group
    assert row["sampling/gen_prompts"] <= 12 and 0 < row["adv/zero_frac"] < 1
    assert config.loads((out / "config.yaml").read_text()).algorithm == one_gpu().algorithm  # QAE, as configured
