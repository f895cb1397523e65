"""Shared fixtures: a random tiny Qwen3 policy and tokenizer built in a temporary folder, so
tests of the loop's pieces need no downloaded or committed weights."""

import json
import random

import pytest
import torch


def build_tiny_policy(folder, seed: int = 0, dtype=torch.float32):
    """A byte-level BPE tokenizer with a chat template and a random 2-layer Qwen3 (head_dim 32,
    embedding padded past the tokenizer as Qwen's is), saved as an HF folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    rng = random.Random(seed)
    text = [f"Compute {a}+{b}. Answer: {a + b}"
            for a, b in ((rng.randint(0, 99), rng.randint(0, 99)) for _ in range(300))]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(text + ["user assistant\n"], trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
                               "{{ m['content'] }}<|im_end|>\n{% endfor %}"
                               "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    cfg = Qwen3Config(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, head_dim=32, max_position_embeddings=256, tie_word_embeddings=True,
                      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None)
    torch.manual_seed(seed)
    Qwen3ForCausalLM(cfg).to(dtype).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_policy_dir(tmp_path_factory):
    return build_tiny_policy(tmp_path_factory.mktemp("tiny_policy"))


@pytest.fixture(scope="session")
def tiny_train_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "train.jsonl"
    rng = random.Random(1)
    with open(path, "w") as f:
        for _ in range(64):
            a, b = rng.randint(0, 9), rng.randint(0, 9)
            f.write(json.dumps({"problem": f"Compute {a}+{b}.", "answer": str(a + b)}) + "\n")
    return path


def pytest_collection_modifyitems(config, items):
    """Files holding a slow test run first, in their file order: with two workers taking one file at a
    time (pyproject.toml), the longest files then do not start last and leave one worker idle."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)  # stable: the order inside each part is kept
