"""`rollout.gpu_memory_utilization: auto` (infra/gpu_memory.py, docs/gpu.md's rule) on faked card sizes:
Qwen3-8B's shape on the meta device, 8 GPUs of 80 and of 141 GiB, against hand-computed fractions."""

from pathlib import Path

import pytest

import config
from config import ConfigError
from infra import gpu_memory

GiB = 2**30


@pytest.fixture(scope="module")
def qwen3_8b():
    """(parameters, config) of Qwen3-8B(-Base): hidden 4096, 36 layers, 32 / 8 heads, head_dim 128, untied."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    hf_config = Qwen3Config(hidden_size=4096, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
                            head_dim=128, intermediate_size=12288, vocab_size=151936, tie_word_embeddings=False)
    with torch.device("meta"):
        n = sum(p.numel() for p in AutoModelForCausalLM.from_config(hf_config).parameters())
    assert n == 36 * 192_946_432 + 2 * 622_329_856 + 4096  # docs/gpu.md's count: 8,190,735,360
    return n, hf_config


def paper(*overrides):
    return config.load("qwen3_8b_qae.yaml", ["rollout.gpu_memory_utilization=auto", *overrides])


# By hand, 8 GPUs, bf16, fp32 gradient accumulation: 18 B x 8,190,735,360 / 8 = 18,429,154,560 B = 17.163 GiB,
# + reduce bucket 5e8 x 2 B = 0.931 GiB + CUDA context 2 GiB = 20.095 GiB resident; margin 3.5 GiB.
#   80 GiB:  (80 - 20.095 - 3.5) / 80 = 0.70506 -> 0.70
#   141 GiB: (141 - 20.095 - 3.5) / 141 = 0.83266 -> 0.83
@pytest.mark.parametrize("card_gib, expected", [(80, 0.70), (141, 0.83)])
def test_auto_from_the_card_size(qwen3_8b, card_gib, expected, capsys):
    value = gpu_memory.resolve(paper(), "Qwen/Qwen3-8B-Base", world=8, total_bytes=card_gib * GiB, size=qwen3_8b)
    assert value == expected
    line = capsys.readouterr().err.strip()
    assert line.startswith(f"rollout.gpu_memory_utilization: auto = {expected:.2f} = ({card_gib:.1f} GiB card - "
                           "20.1 GiB")
    assert len(line.splitlines()) == 1


def test_resident_side_by_hand(qwen3_8b):
    n, _ = qwen3_8b
    assert gpu_memory.resident_bytes(n, 8, paper()) == pytest.approx(18 * n / 8 + 1e9 + 2 * GiB)
    bf16_grads, offload = paper("deepspeed.grad_accum_fp32=false"), paper("deepspeed.offload_optimizer=cpu")
    assert gpu_memory.resident_bytes(n, 8, bf16_grads) == pytest.approx(16 * n / 8 + 1e9 + 2 * GiB)
    assert gpu_memory.resident_bytes(n, 8, offload) == pytest.approx(2 * n / 8 + 1e9 + 2 * GiB)
    assert gpu_memory.resident_bytes(n, 8, paper(), training=False) == 2 * GiB  # eval.py: the policy stays on the CPU
    # 16 GPUs halve the state: (80 - (18 x n / 16 + 1e9 B + 2 GiB) / GiB - 3.5) / 80 = 0.8124 -> 0.81
    assert gpu_memory.fraction(80 * GiB, n, 16, paper()) == 0.81
    assert gpu_memory.fraction(80 * GiB, n, 8, paper(), training=False) == 0.92  # (80 - 2 - 3.5) / 80 = 0.93, capped


def test_numbers_pass_through_and_auto_needs_a_gpu(qwen3_8b):
    assert gpu_memory.resolve(paper("rollout.gpu_memory_utilization=0.65"), "x", 8, 80 * GiB, qwen3_8b) == 0.65
    assert gpu_memory.resolve(paper("rollout.backend=hf"), "x", 8, 80 * GiB, qwen3_8b) == "auto"  # unused by HF
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="auto, which sizes vLLM from the GPU's memory, and this machine has no"):
            gpu_memory.resolve(paper(), "x", 8, size=qwen3_8b)


def test_a_card_too_small_for_the_engine_is_refused(qwen3_8b):
    # one 40 GiB GPU: resident 18 B x n + 0.93 + 2 = 140.2 GiB > the card: nothing is left for vLLM
    with pytest.raises(ConfigError, match="config key `rollout.gpu_memory_utilization` is auto: this 40.0 GiB GPU"):
        gpu_memory.resolve(paper(), "x", world=1, total_bytes=40 * GiB, size=qwen3_8b)


def test_the_parameter_count_comes_from_the_model_config():
    from safetensors.torch import load_file

    n, _ = gpu_memory.model_size("tiny/model")
    weights = load_file("tiny/model/model.safetensors")
    assert n == sum(t.numel() for t in weights.values())  # tiny/model is tied: one matrix stored, counted once


def test_config_takes_auto_or_a_fraction():
    assert config.from_dict({}, ["rollout.gpu_memory_utilization=auto"]).rollout.gpu_memory_utilization == "auto"
    assert config.from_dict({}, ["rollout.gpu_memory_utilization=0.8"]).rollout.gpu_memory_utilization == 0.8
    for bad, message in (("Auto", "must be float or 'auto', got 'Auto'"),
                         ("1.2", "must be in (0, 1) or auto, got 1.2")):
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
            config.from_dict({}, [f"rollout.gpu_memory_utilization={bad}"])


def test_train_py_refuses_auto_without_a_gpu_before_the_model_loads(tmp_path):
    import subprocess
    import sys

    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    proc = subprocess.run([sys.executable, "train.py", "--config", "tiny_qae.yaml", "rollout.backend=vllm",
                           "rollout.gpu_memory_utilization=auto", f"trainer.output_dir={tmp_path / 'run'}"],
                          cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: config key `rollout.gpu_memory_utilization` is auto, which sizes vLLM from the GPU's memory, and this "
        "machine has no CUDA GPU; give a number (vLLM's CPU build: its share of host memory)"]
    assert not (tmp_path / "run").exists()


def test_the_cap_is_vllms_default():
    from vllm.config import CacheConfig  # the test set installs vLLM's CPU build, which has the same default

    assert gpu_memory.MAX_FRACTION == CacheConfig().gpu_memory_utilization == 0.92
