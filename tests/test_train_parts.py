"""The loop's pieces: response log-probs, exact sparse update, NaN skipping, dynamic sampling."""

import pytest
import torch
from accelerate import Accelerator
from transformers import AutoModelForCausalLM, AutoTokenizer

import config
import rollout as batching
import train
from infra.data import Prompt
from infra.logprobs import logprob_entropy
from infra.optim import make_scheduler
from infra.passes import Logprobs, needs_old_pass
from infra.policy import Policy, response_logprobs


@pytest.fixture(scope="module")
def accelerator():
    return Accelerator(cpu=True)


@pytest.fixture(scope="module")
def cfg():
    return config.from_dict({}, ["trainer.micro_batch_max_tokens=400", "rollout.max_response_len=40",
                                 "data.max_prompt_len=40", "reward.overlong_buffer_len=0", "rollout.n=4",
                                 "trainer.train_batch_size=2", "trainer.gen_batch_size=3", "trainer.mini_batch_size=2"])


def random_batch(P=4, G=4, vocab=300, zero_frac=0.75, seed=0):
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, vocab, (int(torch.randint(3, 12, (1,), generator=g)),), generator=g).tolist()
               for _ in range(P)]
    responses = [torch.randint(3, vocab, (int(torch.randint(1, 30, (1,), generator=g)),), generator=g).tolist()
                 for _ in range(P * G)]
    adv = torch.randn(P * G, generator=g, dtype=torch.float64).float()
    adv[torch.rand(P * G, generator=g) < zero_frac] = 0.0
    batch = batching.Batch([prompts[k // G] for k in range(P * G)], responses, [""] * (P * G),
                           torch.zeros(P, G), torch.zeros(P, G, dtype=torch.bool), torch.zeros(P, G))
    return batch, adv


def test_response_logprobs_match_full_forward(tiny_policy_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_policy_dir, dtype=torch.float32)
    batch, _ = random_batch()
    ids = slice(0, 5)
    logp, ent, mask = response_logprobs(Policy(model), batch.prompt_ids[ids], batch.response_ids[ids], temperature=0.7)
    for row, (p, r) in enumerate(zip(batch.prompt_ids[ids], batch.response_ids[ids])):
        logits = model(torch.tensor([p + r])).logits[0, len(p) - 1 : len(p) + len(r) - 1]  # (R, V) predicting r
        ref_logp, ref_ent = logprob_entropy(logits[None], torch.tensor([r]), temperature=0.7)
        torch.testing.assert_close(logp[row, : len(r)], ref_logp[0], atol=1e-5, rtol=0)
        torch.testing.assert_close(ent[row, : len(r)], ref_ent[0], atol=1e-5, rtol=0)
        assert mask[row].sum() == len(r)


def test_sparse_update_gives_the_same_gradients(tiny_policy_dir, accelerator, cfg):
    model = Policy(AutoModelForCausalLM.from_pretrained(tiny_policy_dir, dtype=torch.float64))
    batch, adv = random_batch(P=4, G=4, zero_frac=0.8, seed=3)
    assert 0 < (adv != 0).sum() < len(adv)
    known = train.old_logprobs(cfg, accelerator, model, batch, list(range(16)))
    known = Logprobs({i: (lp + 0.1 * torch.randn(len(lp), generator=torch.Generator().manual_seed(i)), ent)
                      for i, (lp, ent) in known.rows.items()})
    grads, metrics = {}, {}
    for sparse in (False, True):
        cfg.trainer.sparse_update = sparse
        model.zero_grad(set_to_none=True)
        metrics[sparse] = train.accumulate_gradients(cfg, accelerator, model, batch, adv.double(), known,
                                                     list(range(16)))
        grads[sparse] = torch.cat([p.grad.flatten() for p in model.parameters()])
    cfg.trainer.sparse_update = True
    rel = ((grads[True] - grads[False]).norm() / grads[False].norm()).item()
    assert grads[False].norm() > 0 and rel <= 1e-6
    assert metrics[True].micro_batches <= metrics[False].micro_batches
    assert metrics[True].losses["clip_frac_high"] == pytest.approx(metrics[False].losses["clip_frac_high"])


def test_all_zero_advantages_still_make_zero_gradients(tiny_policy_dir, accelerator, cfg):
    # Every rank must run at least one (zero-weighted) pass, and AdamW must see zero gradients,
    # not missing ones, exactly as without skipping.
    model = Policy(AutoModelForCausalLM.from_pretrained(tiny_policy_dir, dtype=torch.float32))
    batch, _ = random_batch(P=2, G=4)
    adv = torch.zeros(8)
    known = train.old_logprobs(cfg, accelerator, model, batch, list(range(8)))
    model.zero_grad(set_to_none=True)
    m = train.accumulate_gradients(cfg, accelerator, model, batch, adv, known, list(range(8)))
    assert m.micro_batches == 0 and m.fillers == 1
    assert all(p.grad is not None and torch.all(p.grad == 0) for p in model.parameters())


def test_the_entropy_sample_is_respected_and_changes_no_gradient(tiny_policy_dir, accelerator, cfg):
    """With vLLM (no sampler log-probs) the no-grad pass covers the later mini-batches' A != 0
    responses, which the update needs, plus `logging.entropy_sample` of the A = 0 ones: a fraction
    rounded up or a count; the update is the same whatever the sample."""
    import math

    from infra.logger import logprob_sums

    model = Policy(AutoModelForCausalLM.from_pretrained(tiny_policy_dir, dtype=torch.float64))
    batch, adv = random_batch(P=4, G=4, zero_frac=0.6, seed=5)
    assert batch.policy_logp is None  # as with vLLM
    first, zero = 8, [i for i in range(16) if adv[i] == 0]  # the first mini-batch: responses 0-7
    needed = [i for i in range(16) if adv[i] != 0 and i >= first]
    assert needed and len(zero) >= 5
    grads = {}
    for sample, expected in ((1.0, len(zero)), (0.25, math.ceil(0.25 * len(zero))), (3, 3)):
        cfg.logging.entropy_sample = sample
        todo = needs_old_pass(cfg, batch, adv, first, world=1, key=(0, 1, 0))
        sampled = [i for i in todo if i not in needed]
        assert set(needed) <= set(todo) and all(adv[i] == 0 for i in sampled) and len(sampled) == expected
        known = train.old_logprobs(cfg, accelerator, model, batch, todo)
        model.zero_grad(set_to_none=True)
        for idx in (list(range(8)), list(range(8, 16))):  # two mini-batches (no optimizer step between: sums)
            mini = train.accumulate_gradients(cfg, accelerator, model, batch, adv.double(), known, idx)
            known = known.merged(mini.fresh)  # as train.update does: the first mini-batch's own log-probs join
        grads[sample] = torch.cat([p.grad.flatten() for p in model.parameters()])
        sums = logprob_sums(batch, adv, known.rows, from_sampler=False)
        covered = sum(len(batch.response_ids[i]) for i in range(16) if adv[i] != 0 or i in sampled)
        assert sums["covered"] == covered and sums["tokens"] == pytest.approx(sum(map(len, batch.response_ids)))
    cfg.logging.entropy_sample = 1.0
    for sample in (0.25, 3):
        assert ((grads[sample] - grads[1.0]).norm() / grads[1.0].norm()).item() < 1e-12


def test_nonfinite_gradient_skips_the_step(tiny_policy_dir, accelerator, cfg):
    model = AutoModelForCausalLM.from_pretrained(tiny_policy_dir, dtype=torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = make_scheduler(opt, cfg.optim, 10)
    before = [p.detach().clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    next(model.parameters()).grad[0, 0] = float("nan")
    norm, applied = train.optimizer_step(cfg, accelerator, model, opt, sched)
    assert not applied and norm != norm  # NaN
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert not opt.state and sched.last_epoch == 0
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    norm, applied = train.optimizer_step(cfg, accelerator, model, opt, sched)
    assert applied and not all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


class ScriptedEngine:
    """Answers prompt i with `correct[i]` right answers out of n: 'Answer: <gold>' or 'Answer: 999'."""

    def __init__(self, tokenizer, prompts, correct):
        self.tok, self.prompts, self.correct, self.calls = tokenizer, prompts, correct, 0

    def sync_weights(self, model):
        pass

    @property
    def eos_ids(self):
        return [self.tok.eos_token_id]

    def sample(self, prompt_ids, n, seed):
        self.calls += 1
        responses = []
        for p in prompt_ids:
            i = next(k for k, q in enumerate(self.prompts) if q.prompt_ids == p)
            for j in range(n):
                text = f"Answer: {self.prompts[i].answer if j < self.correct[i] else 999}"
                responses.append(self.tok(text, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id])
        return responses, {}


def scripted(tiny_policy_dir, correct):
    tok = AutoTokenizer.from_pretrained(tiny_policy_dir)
    prompts = [Prompt(f"p{i}", str(10 + i), [5, 6, 7 + i]) for i in range(len(correct))]
    return tok, prompts, ScriptedEngine(tok, prompts, correct)


def test_dynamic_sampling_fills_the_batch(tiny_policy_dir, accelerator, cfg):
    from infra import data

    # 4 responses each; prompts 0, 2 all-correct / all-wrong (dropped), 1, 3, 4 mixed.
    tok, prompts, engine = scripted(tiny_policy_dir, correct=[4, 1, 0, 3, 2, 4])
    sampler = data.PromptSampler(len(prompts), seed=0, shuffle=False)
    got = batching.collect_batch(cfg, accelerator, engine, tok, prompts, sampler, step=1)
    batch, seen, gen_batches = got.batch, got.seen, got.gen_batches
    # gen batch 1 = prompts 0, 1, 2 -> keeps 1; batch 2 = prompts 3, 4, 5 -> keeps 3, 4; truncated to 2.
    assert gen_batches == 2 and engine.calls == 2
    assert seen.groups == 6 and seen.kept == 3 and seen.timeouts == 0
    assert batch.reward.shape == (2, 4) and batch.acc.sum(1).tolist() == [1, 3]
    assert batch.reward.tolist() == [[1.0, -1.0, -1.0, -1.0], [1.0, 1.0, 1.0, -1.0]]
    assert batch.answers == ["11"] * 4 + ["13"] * 4
    assert sum(seen.acc) == 4 + 1 + 0 + 3 + 2 + 4 and seen.reward == [1.0 if a else -1.0 for a in seen.acc]


def test_dynamic_sampling_gives_up_with_a_clear_error(tiny_policy_dir, accelerator, cfg):
    from infra import data

    tok, prompts, engine = scripted(tiny_policy_dir, correct=[4, 0, 4, 0])
    sampler = data.PromptSampler(len(prompts), seed=0, shuffle=False)
    with pytest.raises(batching.DynamicSamplingError, match="kept 0 of 30 prompt groups.*after 10 generation batches"):
        batching.collect_batch(cfg, accelerator, engine, tok, prompts, sampler, step=1)


def test_without_dynamic_sampling_everything_is_kept(tiny_policy_dir, accelerator):
    from infra import data

    cfg = config.from_dict({}, ["rollout.n=4", "trainer.train_batch_size=2", "trainer.gen_batch_size=null",
                                "trainer.mini_batch_size=2", "algorithm.dynamic_sampling=false",
                                "reward.overlong_buffer_len=0"])
    tok, prompts, engine = scripted(tiny_policy_dir, correct=[4, 0, 2])
    got = batching.collect_batch(cfg, accelerator, engine, tok, prompts, data.PromptSampler(3, 0, False), step=1)
    assert got.gen_batches == 1 and got.batch.acc.sum(1).tolist() == [4, 0]


def test_keep_rate_sizes_generation_batches_by_hand():
    rate = batching.KeepRate()
    assert rate.batch_size(needed=8, cap=32, world=1) == 32  # no history yet: the configured size
    rate.update(kept=8, generated=16)  # keep rate 1/2
    assert rate.batch_size(needed=8, cap=32, world=1) == 20  # 8 / 0.5 * 1.25
    assert rate.batch_size(needed=3, cap=32, world=1) == 8  # ceil(3 / 0.5 * 1.25) = 8
    assert rate.batch_size(needed=3, cap=32, world=3) == 9  # a multiple of the processes
    assert rate.batch_size(needed=16, cap=32, world=1) == 32  # capped at gen_batch_size
    rate.update(kept=0, generated=10)  # decays by 0.9: 7.2 kept of 24.4
    assert (rate.kept, rate.generated) == pytest.approx((7.2, 24.4))
    assert rate.batch_size(needed=2, cap=32, world=1) == 9  # ceil(2 / (7.2 / 24.4) * 1.25) = ceil(8.47)


def test_adaptive_generation_batch_asks_for_what_is_still_needed(tiny_policy_dir, accelerator):
    from infra import data

    cfg = config.from_dict({}, ["rollout.n=4", "trainer.train_batch_size=2", "trainer.gen_batch_size=4",
                                "trainer.mini_batch_size=2", "reward.overlong_buffer_len=0",
                                "trainer.adaptive_gen_batch=true"])
    tok, prompts, engine = scripted(tiny_policy_dir, correct=[2] * 12)  # every group is mixed: keep rate 1
    rate = batching.KeepRate()
    sampler = data.PromptSampler(len(prompts), seed=0, shuffle=False)
    seen = batching.collect_batch(cfg, accelerator, engine, tok, prompts, sampler, step=1, keep_rate=rate).seen
    assert seen.sizes == [4] and rate.kept == rate.generated == 4  # the first batch: gen_batch_size
    seen = batching.collect_batch(cfg, accelerator, engine, tok, prompts, sampler, step=2, keep_rate=rate).seen
    assert seen.sizes == [3]  # 2 needed / rate 1 * 1.25 -> 3, not 4
