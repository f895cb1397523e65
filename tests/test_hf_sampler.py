"""infra/hf_sampler.py: the shared prefill and the sampling loop sample what `generate` with one
prefill per response did, and the sampling pass's own log-probs and entropies equal a plain
forward of the policy.

(a) policy_logp / policy_entropy vs a forward of prompt + response, one sequence at a time, no
padding, through the trainer's own function (infra.logprobs.token_logprobs): tiny/model and a random
model whose padded vocabulary rows get ~6% of the mass, at T = 1.0 and 0.7.
(b) first- and second-token frequencies over 4,000 samples vs the model's exact probabilities.
(c) same seed -> same rollout; the responses of a group are not copies of each other.
(d) the sampling loop draws, token for token, what transformers' `generate` draws from the same
    shared prefill and seed, with temperature, top-k, top-p and suppressed ids in play.
"""

import doctest
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import rollout
from infra import data
from infra.hf_sampler import HFSampler, left_pad, shared_prefill
from infra.logprobs import token_logprobs

PROBLEMS = ["Compute 3-1.", "Compute 9981+22.", "Compute 1234567+7654321."]


def load(folder):
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32), AutoTokenizer.from_pretrained(folder)


def engine(model, tokenizer, temperature=1.0, max_response_len=24):
    cfg = SimpleNamespace(temperature=temperature, top_p=1.0, top_k=-1, max_response_len=max_response_len)
    return HFSampler(model, tokenizer, cfg)


def prompt(tokenizer, problem: str, suffix: str = "") -> list[int]:
    ids = data.tokenize_prompt(tokenizer, data.build_messages(problem, "{problem}"), True)
    return ids + tokenizer(suffix, add_special_tokens=False)["input_ids"]


@torch.no_grad()
def forward_logprobs(model, prompt_ids: list[int], response: list[int], temperature: float):
    """logp (T,), entropy (T,) of the response under one unpadded forward of prompt + response."""
    logits = model(torch.tensor([prompt_ids + response])).logits[:, len(prompt_ids) - 1 : -1]  # (1, T, V)
    logp, entropy = token_logprobs(logits, torch.tensor([response]), temperature)  # (1, T)
    return logp[0], entropy[0]


def test_docstring_examples():
    assert doctest.testmod(rollout).failed == 0


# ----------------------------------------------------------------------------------------------
# (a) the sampling pass's log-probs and entropies = a plain forward
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("which", ["tiny/model", "random"])
def test_policy_logp_and_entropy_match_full_forward(which, temperature, tiny_policy_dir):
    model, tokenizer = load(tiny_policy_dir if which == "random" else which)
    prompts = [prompt(tokenizer, p) for p in PROBLEMS]
    assert len({len(p) for p in prompts}) == len(prompts), "prompts of different lengths: left padding differs per row"
    n = 4
    out = rollout.generate(engine(model, tokenizer, temperature), prompts, n=n, seed=0)
    assert len(out.response_ids) == len(prompts) * n
    for k, response in enumerate(out.response_ids):
        assert len(out.policy_logp[k]) == len(out.policy_entropy[k]) == len(response)  # EOS included, nothing after
        logp, entropy = forward_logprobs(model, prompts[k // n], response, temperature)  # response k: prompt k // n
        # fp32 against fp32: each is ~1e-5 off an fp64 forward, so the bound is 1e-5 + 1e-5 * |value|
        torch.testing.assert_close(torch.tensor(out.policy_logp[k]), logp, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(torch.tensor(out.policy_entropy[k]), entropy, atol=1e-5, rtol=1e-5)


def test_one_token_prompt_is_prefilled_after_a_pad(tiny_policy_dir):
    """A batch of one-token prompts has nothing to prefill: left_pad puts a masked pad first."""
    model, tokenizer = load(tiny_policy_dir)
    out = rollout.generate(engine(model, tokenizer, max_response_len=6), [[5], [7]], n=2, seed=0)
    for k, response in enumerate(out.response_ids):
        logp, entropy = forward_logprobs(model, [[5], [7]][k // 2], response, 1.0)
        torch.testing.assert_close(torch.tensor(out.policy_logp[k]), logp, atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------------------------
# (b) the sampler's distribution: frequencies vs exact probabilities
# ----------------------------------------------------------------------------------------------


def total_variation(counts: torch.Tensor, probs: torch.Tensor) -> float:
    return 0.5 * (counts / counts.sum() - probs).abs().sum().item()


def expected_tv_bound(probs: torch.Tensor, N: int) -> float:
    """E[TV] of N samples' frequencies <= 0.5 * sum_k sqrt(p_k (1 - p_k) / N) (Jensen, per cell)."""
    return 0.5 * (probs * (1 - probs) / N).sqrt().sum().item()


@torch.no_grad()
def exact_first_two(model, prompt_ids: list[int], allowed: int, eos_ids: list[int], temperature: float):
    """Exact P(first token) (A,) and P(second token) (A + 1,), last cell = ended at the first,
    of the sampler: softmax(logits / T) over ids < allowed (HFSampler.suppress), top-k/top-p off."""
    z = model(torch.tensor([prompt_ids])).logits[0, -1, :allowed]  # (A,)
    p1 = torch.softmax(z.double() / temperature, -1)  # (A,)
    both = torch.tensor([prompt_ids + [a] for a in range(allowed)])  # (A, L + 1): every first token
    p2_given = torch.softmax(model(both).logits[:, -1, :allowed].double() / temperature, -1)  # (A, A)
    ended = torch.zeros(allowed, dtype=torch.bool)
    ended[[e for e in eos_ids if e < allowed]] = True  # (A,)
    p2 = (p1[~ended, None] * p2_given[~ended]).sum(0)  # (A,)
    return p1, torch.cat([p2, p1[ended].sum()[None]])  # (A,), (A + 1,)


def test_first_and_second_token_frequencies_match_the_model():
    """4,000 samples per prompt (two prompts of different lengths, one batch): the frequencies of
    the first and second token are within twice the expected sampling error of the exact
    probabilities, and the test can tell T = 0.7 from T = 1.0. Fixed seed: not flaky."""
    model, tokenizer = load("tiny/model")
    prompts = [prompt(tokenizer, "Compute 99+87.", "Answer: "), prompt(tokenizer, "Compute 9981+22.")]
    N, T, A = 4000, 0.7, len(tokenizer)
    sampler = engine(model, tokenizer, T, max_response_len=2)
    out = rollout.generate(sampler, prompts, n=N, seed=1)
    for i, p in enumerate(prompts):
        group = out.response_ids[i * N : (i + 1) * N]
        first = torch.bincount(torch.tensor([r[0] for r in group]), minlength=A).double()  # (A,)
        second = torch.bincount(torch.tensor([r[1] if len(r) > 1 else A for r in group]), minlength=A + 1).double()
        p1, p2 = exact_first_two(model, p, A, sampler.eos_ids, T)
        p1_hot, _ = exact_first_two(model, p, A, sampler.eos_ids, 1.0)
        assert total_variation(first, p1) < 2 * expected_tv_bound(p1, N)
        assert total_variation(second, p2) < 2 * expected_tv_bound(p2, N)
        if i == 0:  # the digit prompt: T = 0.7 and T = 1.0 differ by far more than the sampling error
            assert total_variation(first, p1_hot) > 4 * expected_tv_bound(p1, N)


# ----------------------------------------------------------------------------------------------
# (c) seeding and independence within a group
# ----------------------------------------------------------------------------------------------


def test_same_seed_same_rollout_and_groups_are_not_copies():
    model, tokenizer = load("tiny/model")
    prompts = [prompt(tokenizer, "Compute 99+87.", "Answer: ")] + [prompt(tokenizer, p) for p in PROBLEMS]
    sampler, n = engine(model, tokenizer), 8
    a, b, c = (rollout.generate(sampler, prompts, n=n, seed=s) for s in (3, 3, 4))
    assert a == b  # every field: ids, truncation, policy_logp, policy_entropy
    assert a.response_ids != c.response_ids
    for i in range(len(prompts)):
        group = {tuple(r) for r in a.response_ids[i * n : (i + 1) * n]}
        assert len(group) > 1, f"prompt {i}: its {n} responses are all the same sequence"


def test_report_policy_logp_off_samples_the_same_and_reports_nothing():
    model, tokenizer = load("tiny/model")
    prompts = [prompt(tokenizer, p) for p in PROBLEMS]
    sampler = engine(model, tokenizer)
    full = rollout.generate(sampler, prompts, n=2, seed=5)
    sampler.report_policy_logp = False  # what evaluation needs: no logits kept
    bare = rollout.generate(sampler, prompts, n=2, seed=5)
    assert bare.response_ids == full.response_ids and bare.truncated == full.truncated
    assert bare.policy_logp is None and bare.policy_entropy is None


# ----------------------------------------------------------------------------------------------
# (d) the sampling loop draws what transformers' generate draws (infra.hf_sampler.sampling_loop)
# ----------------------------------------------------------------------------------------------


@torch.no_grad()
def generate_reference(sampler: HFSampler, prompt_ids: list[list[int]], n: int, seed: int) -> list[list[int]]:
    """The same call through transformers' `generate`, continuing from the same shared prefill."""
    torch.manual_seed(seed)
    input_ids, attention_mask = left_pad(prompt_ids, sampler.pad_id)  # (P, L)
    cfg = sampler.cfg
    out = sampler.model.eval().generate(
        input_ids=input_ids.repeat_interleave(n, dim=0), attention_mask=attention_mask.repeat_interleave(n, dim=0),
        past_key_values=shared_prefill(sampler.model, input_ids, attention_mask, n), do_sample=True,
        temperature=cfg.temperature, top_p=cfg.top_p, top_k=max(0, cfg.top_k),
        max_new_tokens=cfg.max_response_len, eos_token_id=sampler.eos_ids, pad_token_id=sampler.pad_id,
        suppress_tokens=sampler.suppress)  # (P*n, L + T)
    return rollout.split_responses(out[:, input_ids.shape[1] :].tolist(), sampler.eos_ids).response_ids


@pytest.mark.parametrize("temperature, top_k, top_p", [(1.0, -1, 1.0), (0.7, 20, 0.9), (1.3, 5, 1.0), (1.0, -1, 0.5)])
@pytest.mark.parametrize("which", ["tiny/model", "random"])
def test_sampling_loop_draws_what_generate_draws(which, temperature, top_k, top_p, tiny_policy_dir):
    model, tokenizer = load(tiny_policy_dir if which == "random" else which)
    sampler = engine(model, tokenizer, temperature)
    sampler.cfg.top_k, sampler.cfg.top_p = top_k, top_p
    assert sampler.suppress  # both models pad their vocabulary past the tokenizer: the suppression is exercised
    prompts = [prompt(tokenizer, p) for p in PROBLEMS]
    for seed in (0, 1, 2):
        ours = rollout.generate(sampler, prompts, n=4, seed=seed).response_ids
        assert ours == generate_reference(sampler, prompts, n=4, seed=seed), (seed, temperature, top_k, top_p)
    assert all(t < len(tokenizer) for r in ours for t in r)  # ids >= len(tokenizer) never sampled
