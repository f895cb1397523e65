"""The policy losses of Table 2 (loss.POLICY_LOSSES: clip-higher, Clip-Cov, KL-Cov, GSPO) against hand-computed
numbers and against the formulas as verl's core_algos implements them (compute_policy_loss_clip_cov, _kl_cov, _gspo,
restated below from their definitions); the covariance selection over packed micro-batches and ranks against the
plain selection on one flat mini-batch; the sparse update never dropping a token a loss reads."""

import math
import threading

import pytest
import torch

import config
import loss
from infra.selection import lowest_over_ranks, mini_batch_tokens

# ----------------------------------------------------------------------------------------------
# The formulas as verl implements them, restated from their definitions (per token, before aggregation).
# ----------------------------------------------------------------------------------------------


def verl_clip_cov(logp, old, adv, corr, lo, hi):
    """max(-A rho, -A clip(rho, 1 - lo, 1 + hi)) * corr, corr 0 at the picked tokens; no dual clip, no clamp."""
    ratio = torch.exp(logp - old)
    return torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 1 - lo, 1 + hi)) * corr


def verl_kl_cov(logp, old, adv, picked, coef):
    """-A rho everywhere, -A rho + coef |logp - old| at the picked tokens; no clip."""
    ratio = torch.exp(logp - old)
    return torch.where(picked, -adv * ratio + coef * (logp - old).abs(), -adv * ratio)


def verl_gspo(logp, old, adv, mask, lo, hi):
    """s_it = exp(logp - sg(logp) + sg(mean_t (logp - old))), clamped above at 10 in log; the PPO clip on it."""
    seq = ((logp - old) * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    s = torch.exp(torch.clamp(logp - logp.detach() + seq.detach()[:, None], max=10.0))
    return torch.maximum(-adv * s, -adv * torch.clamp(s, 1 - lo, 1 + hi))


def plain_select(name, adv, logp, uniform, **settings):
    """The selection on one flat mini-batch (N,) in token order, as written: the token means, cov_t, the loss's
    priority, the max(1, floor(fraction * N)) lowest, ties to the earlier token."""
    entry = loss.POLICY_LOSSES[name]
    cov = (adv - adv.mean()) * (logp - logp.mean())
    priority = entry.priority(cov, uniform, **loss.taking(entry.priority, settings))
    n = min(max(1, int(settings[entry.fraction] * len(cov))), int(torch.isfinite(priority).sum()))
    picked = torch.zeros(len(cov), dtype=torch.bool)
    picked[sorted(range(len(cov)), key=lambda t: (priority[t].item(), t))[:n]] = True
    return picked


# A ragged micro-batch: lengths 3, 2, 1; advantages 1.5, 0 (an A = 0 response), -1.
RATIO = torch.tensor([[1.0, 1.5, 0.7], [0.9, 1.2, 1.0], [0.5, 1.0, 1.0]])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0]], dtype=torch.float64)
ADV = torch.tensor([1.5, 0.0, -1.0], dtype=torch.float64)
OLD = torch.tensor([[-0.5, -1.0, -2.0], [-0.5, -3.0, 0.0], [-1.0, 0.0, 0.0]], dtype=torch.float64)
LOGP = OLD + RATIO.double().log()
# Its tokens flat, hand-computed: mean A = 3.5 / 6 = 7/12, mean old logp = -8/6 = -4/3, so
# cov = (11/12)(5/6) = 55/72, (11/12)(1/3), (11/12)(-2/3), (-7/12)(5/6), (-7/12)(-5/3) = 35/36, (-19/12)(1/3).
COV = [55 / 72, 11 / 36, -11 / 18, -35 / 72, 35 / 36, -19 / 36]
FLAT = dict(adv=torch.tensor([1.5, 1.5, 1.5, 0.0, 0.0, -1.0], dtype=torch.float64),
            logp=torch.tensor([-0.5, -1.0, -2.0, -0.5, -3.0, -1.0], dtype=torch.float64))


def rows(flat: list) -> torch.Tensor:
    """Flat per-token values of the micro-batch above as (3, 3), 0 at padding."""
    out = torch.zeros(3, 3, dtype=torch.float64)
    out[MASK.bool()] = torch.tensor(flat, dtype=torch.float64)
    return out


def test_covariance_by_hand():
    cov = loss.token_covariance(FLAT["adv"], FLAT["logp"], 7 / 12, -4 / 3)
    assert cov.tolist() == pytest.approx(COV)


@pytest.mark.parametrize("ratio, keys, expected", [
    (0.2, [0.9, 0.1, 0.1, 0.1, 0.3, 0.1], [4]),  # floor(0.2 * 6) = 1 of the two candidates (t0, t4): the lower key
    (0.2, [0.2, 0.1, 0.1, 0.1, 0.3, 0.1], [0]),
    (0.5, [0.9, 0.1, 0.1, 0.1, 0.3, 0.1], [0, 4]),  # 3 asked, 2 candidates: both, no more
])
def test_clip_cov_picks_candidates_between_the_bounds(ratio, keys, expected):
    # lb = 0.5, ub = 1: candidates 55/72 (t0) and 35/36 (t4); t1 (11/36) and t3, t5 (negative) are not.
    picked = plain_select("clip-cov", FLAT["adv"], FLAT["logp"], torch.tensor(keys, dtype=torch.float64),
                          clip_cov_ratio=ratio, clip_cov_lb=0.5, clip_cov_ub=1.0)
    assert picked.nonzero().flatten().tolist() == expected


def test_kl_cov_picks_the_largest_covariance_an_a0_token_among_them():
    picked = plain_select("kl-cov", FLAT["adv"], FLAT["logp"], torch.zeros(6), kl_cov_ratio=0.34)  # floor(2.04) = 2
    assert picked.nonzero().flatten().tolist() == [0, 4]  # 35/36 (t4, of the A = 0 response) and 55/72


def micro_batch_loss(name, selected=None, **settings):
    """policy_loss on the micro-batch above with token-mean weights (N = 6)."""
    return loss.policy_loss(LOGP, OLD, ADV, MASK, torch.full((3,), 1 / 6, dtype=torch.float64), name=name,
                            selected=selected, **settings)


def test_clip_cov_by_hand_and_as_verl():
    # A = 1.5: rho 1 -> -1.5; rho 1.5 -> max(-2.25, -1.5 * 1.28) = -1.92, but picked: 0; rho 0.7 -> max(-1.05, -1.2)
    # = -1.05. A = 0: 0. A = -1: rho 0.5 -> max(0.5, 0.8) = 0.8 (no dual clip).
    selected = rows([0, 1, 0, 0, 0, 0]).bool()
    total, m = micro_batch_loss("clip-cov", selected, clip_eps_low=0.2, clip_eps_high=0.28)
    assert total.item() == pytest.approx((-1.5 - 1.05 + 0.8) / 6)
    assert m["clip_frac_low"].item() == 1 and m["clip_frac_high"].item() == 1  # rho 0.5 (A < 0), rho 1.5 (A > 0)
    per_token = loss.clip_cov(LOGP, OLD, ADV[:, None], MASK, selected, 0.2, 0.28)[0]
    ref = verl_clip_cov(LOGP, OLD, ADV[:, None], 1.0 - selected.double(), 0.2, 0.28)
    torch.testing.assert_close(per_token * MASK, ref * MASK)


def test_kl_cov_by_hand_and_as_verl():
    # Picked t0 (rho 1: |log rho| = 0) and t4 (A = 0, rho 1.2: + log 1.2). Elsewhere -A rho, no clip:
    # -1.5, -2.25, -1.05; 0, 0 + log 1.2; 0.5.
    selected = rows([1, 0, 0, 0, 1, 0]).bool()
    total, _ = micro_batch_loss("kl-cov", selected, kl_cov_coef=1.0)
    assert total.item() == pytest.approx((-1.5 - 2.25 - 1.05 + math.log(1.2) + 0.5) / 6)
    per_token = loss.kl_cov(LOGP, OLD, ADV[:, None], MASK, selected, 1.0)[0]
    torch.testing.assert_close(per_token * MASK, verl_kl_cov(LOGP, OLD, ADV[:, None], selected, 1.0) * MASK)
    logp = LOGP.clone().requires_grad_()  # the A = 0 token's penalty has a gradient: sign(log rho) / 6
    loss.policy_loss(logp, OLD, ADV, MASK, torch.full((3,), 1 / 6, dtype=torch.float64), name="kl-cov",
                     selected=selected, kl_cov_coef=1.0)[0].backward()
    assert logp.grad[1].tolist() == pytest.approx([0.0, 1 / 6, 0.0])


def test_gspo_by_hand_as_verl_and_as_the_sequence_objective():
    # log rho per token: [0.3, -0.1, 0.1] (A = 1), [0, -0.4] (A = -1), [1e-4, -1e-4, 2e-4] (A = 2), GSPO's clip 3e-4 /
    # 4e-4. s = e^0.1 > 1.0004: held at 1.0004; s = e^-0.2 < 0.9997: held at 0.9997; s = e^(2e-4 / 3): free.
    old = torch.zeros(3, 3, dtype=torch.float64)
    logp = torch.tensor([[0.3, -0.1, 0.1], [0.0, -0.4, 0.0], [1e-4, -1e-4, 2e-4]], dtype=torch.float64)
    mask = MASK.clone()
    mask[2] = 1.0  # lengths 3, 2, 3
    adv, lens = torch.tensor([1.0, -1.0, 2.0], dtype=torch.float64), mask.sum(1)
    weight = loss.AGGREGATIONS["seq-mean-token-mean"](lens, lens, loss.MiniBatchCounts(lens.sum().item(), 3, 1))
    x = logp.clone().requires_grad_()
    total, m = loss.policy_loss(x, old, adv, mask, weight, name="gspo", clip_eps_low=3e-4, clip_eps_high=4e-4)
    s2 = math.exp(2e-4 / 3)
    assert total.item() == pytest.approx((-1.0004 + 0.9997 - 2 * s2) / 3)
    assert m["seq_clip_frac"].item() == 2 and m["num_sequences"].item() == 3
    assert m["seq_ratio_min"].item() == pytest.approx(math.exp(-0.2)) and m["seq_ratio_max"].item() == pytest.approx(
        math.exp(0.1))
    total.backward()
    assert x.grad[:2].abs().sum() == 0 and x.grad[2].tolist() == pytest.approx([-2 * s2 / 9] * 3)  # clipped: none
    torch.testing.assert_close(loss.gspo(logp, old, adv[:, None], mask, None, 3e-4, 4e-4)[0] * mask,
                               verl_gspo(logp, old, adv[:, None], mask, 3e-4, 4e-4) * mask)
    # GSPO's own sequence objective, mean over sequences of -min(s_i A_i, clip(s_i) A_i), has the same gradient.
    g = torch.Generator().manual_seed(0)
    logp = (torch.randn(4, 5, generator=g, dtype=torch.float64) * 0.05).requires_grad_()
    old, adv = torch.zeros(4, 5, dtype=torch.float64), torch.tensor([1.0, -0.5, 2.0, -1.0], dtype=torch.float64)
    mask = (torch.arange(5)[None, :] < torch.tensor([5, 2, 4, 1])[:, None]).double()
    lens = mask.sum(1)
    weight = loss.AGGREGATIONS["seq-mean-token-mean"](lens, lens, loss.MiniBatchCounts(lens.sum().item(), 4, 1))
    token_form = torch.autograd.grad(loss.policy_loss(logp, old, adv, mask, weight, name="gspo", clip_eps_low=0.02,
                                                      clip_eps_high=0.03)[0], logp)[0]
    s = torch.exp(((logp - old) * mask).sum(1) / lens)
    sequence = torch.maximum(-adv * s, -adv * s.clamp(0.98, 1.03)).mean()
    torch.testing.assert_close(token_form, torch.autograd.grad(sequence, logp)[0])


def test_clip_higher_is_the_default_and_unchanged():
    plain = loss.clip_higher_token_loss(LOGP, OLD, ADV, 0.2, 0.28, 10.0)
    total, m = micro_batch_loss("clip-higher")
    assert total.item() == pytest.approx((plain * MASK).sum().item() / 6)
    assert loss.settings_of("clip-higher") == ["clip_eps_low", "clip_eps_high", "clip_c"]
    assert config.from_dict({}).algorithm.policy_loss == "clip-higher"


# ----------------------------------------------------------------------------------------------
# The selection over packed micro-batches and ranks equals the plain one on the flat mini-batch.
# ----------------------------------------------------------------------------------------------


class Ranks:
    """Accelerators of `world` ranks run as threads: gather and reduce meet at a barrier, as collectives do."""

    def __init__(self, world: int):
        self.world, self.barrier, self.slots = world, threading.Barrier(world), {}

    def rank(self, r: int):
        ranks = self

        class Accelerator:
            device, process_index, num_processes = torch.device("cpu"), r, ranks.world

            def gather(self, x):
                return torch.cat(ranks.meet(r, x))

            def reduce(self, x, op):
                return sum(ranks.meet(r, x))

        return Accelerator()

    def meet(self, r, x):
        self.slots[r] = x
        self.barrier.wait()
        out = [self.slots[k] for k in range(self.world)]
        self.barrier.wait()
        return out

    def run(self, fn):
        """fn(rank, accelerator) on every rank at once; the results in rank order."""
        out = [None] * self.world
        threads = [threading.Thread(target=lambda r=r: out.__setitem__(r, fn(r, self.rank(r))))
                   for r in range(self.world)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return out


def random_mini_batch(responses: int, seed: int):
    from infra.passes import Logprobs

    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 9, (responses,), generator=g).tolist()
    adv = torch.randn(responses, generator=g).double() * (torch.rand(responses, generator=g) < 0.5)  # half A = 0
    old = Logprobs({i: (-torch.rand(n, generator=g) * 4, torch.zeros(n)) for i, n in enumerate(lengths)})
    return adv, old


def loss_config(name: str, *overrides: str, **settings):
    """A config with policy loss `name` and exactly the loss settings given (the others null)."""
    return config.from_dict({}, [f"algorithm.policy_loss={name}"] + [f"algorithm.{k}=null" for k in loss.SETTINGS]
                            + [f"algorithm.{k}={v}" for k, v in settings.items()] + list(overrides))


CLIP_COV = dict(clip_eps_low=1.0, clip_eps_high=1.0, clip_cov_lb=0.1, clip_cov_ub=1.5)


@pytest.mark.parametrize("name, settings", [
    ("clip-cov", dict(CLIP_COV, clip_cov_ratio=0.1)),
    ("clip-cov", dict(CLIP_COV, clip_cov_ratio=0.5)),  # more asked than candidates
    ("kl-cov", dict(kl_cov_ratio=0.2, kl_cov_coef=1.0)),
])
@pytest.mark.parametrize("world", [1, 2, 4])
def test_the_pick_over_ranks_is_the_plain_pick(name, settings, world):
    import train

    responses, key = 16, (3, 7, 0, 1)
    adv, old = random_mini_batch(responses, seed=len(name) + world)
    whole = mini_batch_tokens(old, adv, list(range(responses)), 0, key, max_len=100)
    expected = plain_select(name, whole.adv, whole.logp, whole.uniform, **settings)
    assert 0 < expected.sum() < len(expected)
    cfg = loss_config(name, "rollout.max_response_len=100", "data.max_prompt_len=10", "reward.overlong_buffer_len=0",
                      **settings)
    share = responses // world

    def pick(r, accelerator):  # rank r holds responses [r * share, (r + 1) * share) of the mini-batch, as dealt
        idx = list(range(r * share, (r + 1) * share))
        mine = {i: old.rows[i] for i in idx}
        from infra.passes import Logprobs

        return train.pick_tokens(cfg, accelerator, adv, Logprobs(mine), idx, key)

    results = Ranks(world).run(pick)
    got = torch.cat([torch.cat([p[i] for i in sorted(p)]) for p, _ in results])
    assert torch.equal(got, expected)
    counts = [report for _, report in results]
    assert sum(c["cov_selected"] for c in counts) == expected.sum()


def test_a_tokens_keys_and_id_do_not_depend_on_its_rank():
    adv, old = random_mini_batch(8, seed=5)
    whole = mini_batch_tokens(old, adv, list(range(8)), 0, (1, 2, 0, 0), max_len=50)
    halves = [mini_batch_tokens(old, adv, list(range(r * 4, r * 4 + 4)), r * 4, (1, 2, 0, 0), max_len=50)
              for r in (0, 1)]
    assert torch.equal(whole.uniform, torch.cat([h.uniform for h in halves]))
    assert torch.equal(whole.ids, torch.cat([h.ids for h in halves]))
    other = mini_batch_tokens(old, adv, list(range(8)), 0, (1, 3, 0, 0), max_len=50)  # another step: other keys
    assert not torch.equal(whole.uniform, other.uniform)


def test_ties_and_fewer_tokens_than_n_on_a_rank():
    priority = torch.tensor([0.5, float("inf"), 0.5, 0.2], dtype=torch.float64)
    ids = torch.tensor([7, 1, 3, 9])

    class One:
        device = torch.device("cpu")

        def gather(self, x):
            return x

    assert lowest_over_ranks(priority, ids, 2, One()).tolist() == [False, False, True, True]  # 0.2, then id 3 of 0.5s
    assert lowest_over_ranks(priority, ids, 10, One()).tolist() == [True, False, True, True]  # never an inf


# ----------------------------------------------------------------------------------------------
# The sparse update asks the loss: a token it reads is never skipped.
# ----------------------------------------------------------------------------------------------


def update_gradient(cfg, model, batch, adv, old, idx):
    """The flat gradient train.accumulate_gradients leaves for mini-batch `idx`, with the loss's picks if it has any."""
    from accelerate import Accelerator

    import train

    model.zero_grad()
    accelerator = Accelerator(cpu=True)
    picks = train.pick_tokens(cfg, accelerator, adv, old, idx, (1, 1, 0, 0)) if loss.POLICY_LOSSES[
        cfg.algorithm.policy_loss].priority else None
    train.accumulate_gradients(cfg, accelerator, model, batch, adv, old, idx, picks)
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


@pytest.fixture(scope="module")
def tiny_update(tiny_policy_dir):
    """The tiny policy, a batch of 2 groups of 4 with A = 0 responses, and old log-probs off the policy's by 0.2."""
    from accelerate import Accelerator
    from transformers import AutoModelForCausalLM

    import train
    from infra.policy import Policy
    from rollout import Batch

    model = Policy(AutoModelForCausalLM.from_pretrained(tiny_policy_dir, dtype=torch.float64))
    g = torch.Generator().manual_seed(1)
    responses = [torch.randint(3, 300, (3 + k,), generator=g).tolist() for k in range(8)]
    batch = Batch([[5, 6, 7]] * 4 + [[8, 9]] * 4, responses, [""] * 8, torch.zeros(2, 4),
                  torch.zeros(2, 4, dtype=torch.bool), torch.zeros(2, 4))
    adv = torch.tensor([1.0, 0.0, -1.0, 0.0, 0.0, 0.0, 2.0, -0.5])
    cfg = config.from_dict({}, ["rollout.n=4", "trainer.train_batch_size=2", "trainer.mini_batch_size=2",
                                "reward.overlong_buffer_len=0", "model.dtype=float64", "deepspeed.zero_stage=0"])
    old = train.old_logprobs(cfg, Accelerator(cpu=True), model, batch, list(range(8)))
    old = train.Logprobs({i: (lp + 0.2 * torch.rand(len(lp), generator=g), e) for i, (lp, e) in old.rows.items()})
    return model, batch, adv, old


@pytest.mark.parametrize("name, settings", [
    ("kl-cov", dict(kl_cov_ratio=0.3, kl_cov_coef=1.0)),  # its penalty acts on the A = 0 tokens it picks
    ("clip-cov", dict(CLIP_COV, clip_cov_ratio=0.3)),  # its statistic reads them; its gradient does not
    ("gspo", dict(clip_eps_low=3e-4, clip_eps_high=4e-4)),
])
def test_the_sparse_update_never_drops_a_token_the_loss_reads(tiny_update, name, settings, monkeypatch):
    import train

    model, batch, adv, old = tiny_update
    agg = ["algorithm.loss_agg=seq-mean-token-mean"] if name == "gspo" else []
    sparse, dense = (loss_config(name, "rollout.n=4", "trainer.train_batch_size=2", "trainer.mini_batch_size=2",
                                 "reward.overlong_buffer_len=0", "model.dtype=float64", "deepspeed.zero_stage=0",
                                 f"trainer.sparse_update={on}", *agg, **settings) for on in ("true", "false"))
    if name == "kl-cov":  # the pick holds a token of an A = 0 response, or this test would prove nothing
        from accelerate import Accelerator

        picked, _ = train.pick_tokens(sparse, Accelerator(cpu=True), adv, old, list(range(8)), (1, 1, 0, 0))
        assert any(picked[i].any() for i in range(8) if adv[i] == 0)
    torch.testing.assert_close(update_gradient(sparse, model, batch, adv, old, list(range(8))),
                               update_gradient(dense, model, batch, adv, old, list(range(8))))
    if name == "kl-cov":  # had KL-Cov declared that it reads no A = 0 token, the shortcut would drop its penalty
        monkeypatch.setitem(loss.POLICY_LOSSES, name, loss.POLICY_LOSSES[name].__class__(
            **{**vars(loss.POLICY_LOSSES[name]), "reads_zero_adv": "no"}))
        assert not torch.allclose(update_gradient(sparse, model, batch, adv, old, list(range(8))),
                                  update_gradient(dense, model, batch, adv, old, list(range(8))))


def test_a_loss_that_reads_picked_a0_tokens_has_their_old_logprobs():
    from infra.passes import needs_old_pass
    from rollout import Batch

    cfg = config.from_dict({}, ["rollout.n=4", "trainer.train_batch_size=2", "trainer.mini_batch_size=1"])
    batch = Batch([[1]] * 8, [[2, 3]] * 8, [""] * 8, torch.zeros(2, 4), torch.zeros(2, 4, dtype=torch.bool),
                  torch.zeros(2, 4))
    adv = torch.tensor([1.0, 0, 0, 0, 0, -1.0, 0, 0])
    assert 0 not in needs_old_pass(cfg, batch, adv, first=4)  # clip-higher: the first mini-batch's own forward has it
    # KL-Cov: any A = 0 response of a later mini-batch may be picked, so its ratio needs the sampling-time log-probs
    # (the first mini-batch's ratios come from their own forward)
    assert needs_old_pass(cfg, batch, adv, first=4, reads_zero_adv="selected") == [4, 5, 6, 7]
    assert needs_old_pass(cfg, batch, adv, first=4) == [1, 2, 3, 4, 5, 6, 7]  # clip-higher: 5, and A = 0 for entropy


# ----------------------------------------------------------------------------------------------
# Every loss with every baseline, TIS and every aggregation it admits; the others refused in one line.
# ----------------------------------------------------------------------------------------------

LOSS_SETTINGS = {"clip-higher": dict(clip_eps_low=0.2, clip_eps_high=0.28, clip_c=10.0),
                 "clip-cov": dict(CLIP_COV, clip_cov_ratio=2e-4), "kl-cov": dict(kl_cov_ratio=2e-3, kl_cov_coef=1.0),
                 "gspo": dict(clip_eps_low=3e-4, clip_eps_high=4e-4)}
BASELINES = [["algorithm.baseline=mean", "algorithm.K=null"], [], ["algorithm.adv_mask=pos"],
             ["algorithm.adv_mask=neg"]]


@pytest.mark.parametrize("name", LOSS_SETTINGS)
def test_every_loss_with_every_baseline_tis_and_aggregation(name):
    for agg in loss.AGGREGATIONS:
        for baseline in BASELINES:
            args = (*baseline, "algorithm.tis_cap=2.0", f"algorithm.loss_agg={agg}")
            if agg in loss.POLICY_LOSSES[name].aggregations:
                assert loss_config(name, *args, **LOSS_SETTINGS[name]).algorithm.loss_agg == agg
            else:
                with pytest.raises(config.ConfigError, match=f"`algorithm.loss_agg` must be seq-mean-token-mean for "
                                                             f"policy loss {name}, got {agg}"):
                    loss_config(name, *args, **LOSS_SETTINGS[name])
    missing = dict(LOSS_SETTINGS[name])
    dropped = missing.popitem()[0]
    with pytest.raises(config.ConfigError, match=f"`algorithm.{dropped}` must be set for policy loss {name}"):
        loss_config(name, *([] if name != "gspo" else ["algorithm.loss_agg=seq-mean-token-mean"]), **missing)


@pytest.mark.parametrize("name", LOSS_SETTINGS)
def test_tis_weights_scale_each_losss_tokens(name):
    settings = {k: v for k, v in LOSS_SETTINGS[name].items() if k in loss.settings_of(name)}
    selected = rows([1, 0, 0, 0, 1, 0]).bool()
    weight = torch.full((3,), 1 / 6, dtype=torch.float64)
    plain, _ = loss.policy_loss(LOGP, OLD, ADV, MASK, weight, None, name, selected, **settings)
    ones, _ = loss.policy_loss(LOGP, OLD, ADV, MASK, weight, torch.ones(3, 3, dtype=torch.float64), name, selected,
                               **settings)
    is_weight = torch.ones(3, 3, dtype=torch.float64)
    is_weight[0, 2] = 0.5  # the sampler gave this token more mass than the trainer: its term counts half
    halved, _ = loss.policy_loss(LOGP, OLD, ADV, MASK, weight, is_weight, name, selected, **settings)
    fn = loss.POLICY_LOSSES[name].terms
    terms = fn(LOGP, OLD, ADV[:, None], MASK, selected, **loss.taking(fn, settings))[0]
    assert torch.equal(plain, ones)
    assert (plain - halved).item() == pytest.approx(0.5 * terms[0, 2].item() / 6)
