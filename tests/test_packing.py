"""Packed micro-batches (infra.policy.packed_inputs): one row per micro-batch, positions restarting per
sequence, no padding computed, against padded rows (bench/padded.py); and the HF sampler,
which shares the model, unchanged by the switch of its attention implementation."""

import pytest
import torch
from transformers import AutoModelForCausalLM

import rollout
from bench.padded import padded_response_logprobs
from infra import policy
from infra.policy import Policy, packed_inputs, response_logprobs
from rollout import make_sampler

REPO_TINY = "tiny/model"


def sequences(seed: int, B: int, vocab: int = 300):
    g = torch.Generator().manual_seed(seed)
    length = lambda lo, hi: int(torch.randint(lo, hi, (1,), generator=g))  # noqa: E731
    prompts = [torch.randint(3, vocab, (length(1, 15),), generator=g).tolist() for _ in range(B)]
    responses = [torch.randint(3, vocab, (length(1, 40),), generator=g).tolist() for _ in range(B)]
    return prompts, responses


def logprobs_and_grads(model, prompts, responses, packed: bool, chunk_rows=None):
    model.zero_grad(set_to_none=True)
    forward = response_logprobs if packed else padded_response_logprobs
    logp, entropy, mask = forward(Policy(model), prompts, responses, 0.8, chunk_rows=chunk_rows)
    w = torch.linspace(-1.0, 1.0, logp.numel()).view_as(logp)  # weigh every token differently
    ((logp * w + 0.5 * entropy) * mask).sum().backward()
    return logp * mask, entropy * mask, {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("seed, B", [(0, 1), (1, 5), (2, 9)])
def test_packed_rows_give_the_padded_log_probs_and_gradients(tiny_policy_dir, attn, seed, B):
    model = AutoModelForCausalLM.from_pretrained(tiny_policy_dir, dtype=torch.float32, attn_implementation=attn)
    prompts, responses = sequences(seed, B)
    lp_pad, ent_pad, g_pad = logprobs_and_grads(model, prompts, responses, packed=False)
    lp, ent, g = logprobs_and_grads(model, prompts, responses, packed=True, chunk_rows=7)  # several vocabulary chunks
    assert model.config._attn_implementation == (policy.PACKED_SDPA if attn == "sdpa" else attn)
    torch.testing.assert_close(lp, lp_pad, atol=1e-5, rtol=0)
    torch.testing.assert_close(ent, ent_pad, atol=1e-5, rtol=0)
    for name in g_pad:
        torch.testing.assert_close(g[name], g_pad[name], atol=1e-5, rtol=1e-5, msg=name)
    print(f"{attn} B={B}: max |dlogp| {(lp - lp_pad).abs().max():.2e}, max |dgrad| "
          f"{max((g[n] - g_pad[n]).abs().max().item() for n in g):.2e}")


def test_packed_layout_has_no_padding_and_restarts_positions():
    x = packed_inputs([[5, 6], [7]], [[8, 9, 10], [11]])
    assert x["input_ids"].tolist() == [[5, 6, 8, 9, 10, 7, 11]]
    assert x["position_ids"].tolist() == [[0, 1, 2, 3, 4, 0, 1]]
    assert x["cu_seq_lens"].tolist() == [0, 5, 7] and x["max_len"] == 5
    assert x["predict"].tolist() == [1, 2, 3, 5] and x["targets"].tolist() == [8, 9, 10, 11]


def test_the_packed_forward_builds_no_attention_mask(tiny_policy_dir, monkeypatch):
    import transformers.masking_utils as masking

    built = []
    original = masking.sdpa_mask
    monkeypatch.setattr(masking, "sdpa_mask", lambda *a, **k: built.append(k.get("q_length")) or original(*a, **k))
    model = AutoModelForCausalLM.from_pretrained(tiny_policy_dir, dtype=torch.float32)
    prompts, responses = sequences(3, 6)
    response_logprobs(Policy(model), prompts, responses, 1.0)
    assert built == []  # no (N, N) mask: one causal SDPA call per sequence
    padded_response_logprobs(Policy(model), prompts, responses, 1.0)
    assert built  # the padded rows' (B, 1, L, L) mask


def test_the_hf_sampler_draws_the_same_after_the_policy_switches_attention(tiny_policy_dir):
    from config import RolloutConfig
    from infra.model import load_tokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_policy_dir, dtype=torch.float32)
    tokenizer = load_tokenizer(str(tiny_policy_dir))
    engine = make_sampler(RolloutConfig(backend="hf", max_response_len=12, temperature=1.0), model, tokenizer, 64)
    prompts = [[5, 6, 7], [8, 9, 10, 11, 12], [13]]
    before = rollout.generate(engine, prompts, n=3, seed=7)
    Policy(model)  # switches the model from sdpa to packed_sdpa
    assert model.config._attn_implementation == policy.PACKED_SDPA
    after = rollout.generate(engine, prompts, n=3, seed=7)
    assert after.response_ids == before.response_ids
    assert after.policy_logp == before.policy_logp and after.policy_entropy == before.policy_entropy
