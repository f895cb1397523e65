"""loss.py against hand-computed values, gradient checks, chunked-versus-naive equivalence."""

import math

import pytest
import torch

from infra.logprobs import logprob_entropy, token_logprobs, token_logprobs_from_hidden
from loss import AGGREGATIONS, MiniBatchCounts, clip_higher_token_loss, policy_loss


def test_logprobs_hand_computed():
    # One position, V = 3, logits (0, ln 2, ln 3) -> softmax (1/6, 2/6, 3/6).
    logits = torch.tensor([[[0.0, math.log(2), math.log(3)]]])
    logp, ent = token_logprobs(logits, torch.tensor([[2]]))
    assert logp.item() == pytest.approx(math.log(0.5))
    assert ent.item() == pytest.approx(-sum(p * math.log(p) for p in (1 / 6, 2 / 6, 3 / 6)))
    # Temperature 2: logits halved -> softmax of (0, ln 2 / 2, ln 3 / 2) ~ (1, sqrt 2, sqrt 3).
    logp_t, _ = token_logprobs(logits, torch.tensor([[0]]), temperature=2.0)
    assert logp_t.item() == pytest.approx(-math.log(1 + math.sqrt(2) + math.sqrt(3)))


def test_the_reference_is_the_textbook_formula():
    # logprob_entropy on the whole (B, T, V), the chunked paths' reference below, against log_softmax
    # and -sum p log p written out.
    g = torch.Generator().manual_seed(5)
    logits, targets = torch.randn(3, 11, 97, generator=g, dtype=torch.float64) * 4, torch.randint(0, 97, (3, 11))
    logq = torch.log_softmax(logits / 0.7, dim=-1)  # (B, T, V) float64
    logp, ent = logprob_entropy(logits, targets, temperature=0.7)
    torch.testing.assert_close(logp.double(), logq.gather(-1, targets[..., None])[..., 0], atol=1e-5, rtol=0)
    torch.testing.assert_close(ent.double(), -(logq.exp() * logq).sum(-1), atol=1e-5, rtol=0)


@pytest.mark.parametrize("chunk", [1, 7, 64, None])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_equals_naive(chunk, temperature):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 11, 97, generator=g) * 4  # (B, T, V)
    targets = torch.randint(0, 97, (3, 11), generator=g)
    ref_logp, ref_ent = logprob_entropy(logits, targets, temperature)
    logp, ent = token_logprobs(logits, targets, temperature, chunk_tokens=chunk)
    torch.testing.assert_close(logp, ref_logp, atol=1e-5, rtol=0)
    torch.testing.assert_close(ent, ref_ent, atol=1e-5, rtol=0)


def test_bf16_logits_are_upcast():
    g = torch.Generator().manual_seed(1)
    logits = (torch.randn(2, 5, 300, generator=g) * 3).bfloat16()
    targets = torch.randint(0, 300, (2, 5), generator=g)
    logp, ent = token_logprobs(logits, targets, chunk_tokens=3)
    ref_logp, ref_ent = logprob_entropy(logits, targets)
    assert logp.dtype == torch.float32
    torch.testing.assert_close(logp, ref_logp, atol=1e-5, rtol=0)
    torch.testing.assert_close(ent, ref_ent, atol=1e-5, rtol=0)


def test_from_hidden_equals_naive_with_gradients():
    g = torch.Generator().manual_seed(2)
    B, T, H, V = 2, 9, 16, 131
    hidden = torch.randn(B, T, H, generator=g, requires_grad=True)
    head = torch.nn.Linear(H, V, bias=False)
    targets = torch.randint(0, V, (B, T), generator=g)
    w = torch.rand(B, T, generator=g)  # an arbitrary downstream weighting

    logp, ent = token_logprobs_from_hidden(hidden, head, targets, temperature=0.8, chunk_tokens=4)
    ((logp * w).sum() + ent.sum()).backward()
    grad_h, grad_w = hidden.grad.clone(), head.weight.grad.clone()
    hidden.grad = None
    head.weight.grad = None

    ref_logp, ref_ent = logprob_entropy(head(hidden), targets, temperature=0.8)
    ((ref_logp * w).sum() + ref_ent.sum()).backward()
    torch.testing.assert_close(logp, ref_logp, atol=1e-5, rtol=0)
    torch.testing.assert_close(ent, ref_ent, atol=1e-5, rtol=0)
    torch.testing.assert_close(grad_h, hidden.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(grad_w, head.weight.grad, atol=1e-5, rtol=1e-5)


def test_logits_path_gradients_match_naive():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(2, 6, 50, generator=g, requires_grad=True)
    targets = torch.randint(0, 50, (2, 6), generator=g)
    token_logprobs(logits, targets, chunk_tokens=5)[0].sum().backward()
    grad = logits.grad.clone()
    logits.grad = None
    logprob_entropy(logits, targets)[0].sum().backward()
    torch.testing.assert_close(grad, logits.grad, atol=1e-6, rtol=1e-5)


def test_clip_higher_hand_computed():
    ratio = torch.tensor([[1.0, 1.5, 0.7, 0.5, 1.1, 20.0, 0.9]])
    adv = torch.tensor([[2.0, 2.0, 2.0, -1.0, -1.0, -1.0, -1.0]])
    loss = clip_higher_token_loss(ratio.log(), torch.zeros_like(ratio), adv)
    # A=2: rho=1 -> -2; rho=1.5 clipped at 1.28 -> -2.56; rho=.7 below 1-eps_low but A>0: -1.4.
    # A=-1: rho=.5 clipped at .8 -> .8; rho=1.1 -> 1.1; rho=20 dual-clipped at c=10; rho=.9 -> .9.
    expected = torch.tensor([[-2.0, -2.56, -1.4, 0.8, 1.1, 10.0, 0.9]])
    torch.testing.assert_close(loss, expected)


def test_clip_higher_gradients():
    ratio = torch.tensor([[1.0, 1.5, 0.7, 0.5, 1.1, 20.0, 1.2]], dtype=torch.float64)
    adv = torch.tensor([2.0, 2.0, 2.0, -1.0, -1.0, -1.0, 0.0], dtype=torch.float64).view(1, -1)
    logp = ratio.log().requires_grad_()
    clip_higher_token_loss(logp, torch.zeros_like(logp), adv).sum().backward()
    # d(-A*rho)/dlogp = -A*rho where unclipped; 0 where a clip bound is active; 0 where A = 0.
    expected = torch.tensor([[-2.0, 0.0, -1.4, 0.0, 1.1, 0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(logp.grad, expected)
    # And autograd's numeric check away from the kinks.
    lp = torch.tensor([[0.05, -0.1, 0.2]], dtype=torch.float64, requires_grad=True)
    a = torch.tensor([[1.5, -0.5, -2.0]], dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda x: clip_higher_token_loss(x, torch.zeros_like(x), a), (lp,))


def test_per_response_advantage_broadcasts():
    logp = torch.randn(3, 4)
    old = logp + 0.1 * torch.randn(3, 4)
    adv = torch.tensor([1.0, 0.0, -2.0])
    torch.testing.assert_close(
        clip_higher_token_loss(logp, old, adv), clip_higher_token_loss(logp, old, adv[:, None].expand(3, 4))
    )


def normaliser_case():
    """Two prompt groups (G = 2, then a group of one for simplicity of the hand sums): responses of
    2, 4 and 3 tokens whose token losses are 1, 2 and 3 (group A = responses 0, 1; group B = 2)."""
    lengths = torch.tensor([2.0, 4.0, 3.0])
    group_tokens = torch.tensor([6.0, 6.0, 3.0])
    loss_tok = torch.tensor([[1.0] * 4, [2.0] * 4, [3.0] * 4])  # (B, T)
    mask = (torch.arange(4)[None, :] < lengths[:, None]).float()  # (B, T)
    return lengths, group_tokens, loss_tok, mask, MiniBatchCounts(tokens=9, sequences=3, groups=2)


@pytest.mark.parametrize("name, expected", [
    ("token-mean", (2 * 1 + 4 * 2 + 3 * 3) / 9),  # every token of the mini-batch alike: 19/9
    ("group-token-mean", ((2 * 1 + 4 * 2) / 6 + (3 * 3) / 3) / 2),  # the paper's Z = the group's tokens: 7/3
    ("seq-mean-token-mean", (1 + 2 + 3) / 3),  # per response, then over responses: 2
    ("seq-mean-token-sum", (2 * 1 + 4 * 2 + 3 * 3) / 3),  # token sums over responses: 19/3
])
def test_normalisers_hand_computed(name, expected):
    lengths, group_tokens, loss_tok, mask, counts = normaliser_case()
    weight = AGGREGATIONS[name](lengths, group_tokens, counts)  # (B,)
    assert (loss_tok * mask * weight[:, None]).sum().item() == pytest.approx(expected)
    assert set(AGGREGATIONS) == {"token-mean", "group-token-mean", "seq-mean-token-mean", "seq-mean-token-sum"}


def test_normalisers_add_up_over_micro_batches_and_ranks():
    # Weights depend only on a response's own length, its group's tokens and the mini-batch's
    # counts, so the loss summed over any split of the responses equals the whole mini-batch's.
    g = torch.Generator().manual_seed(4)
    logp = torch.randn(6, 5, generator=g, dtype=torch.float64)
    old = logp + 0.3 * torch.randn(6, 5, generator=g, dtype=torch.float64)
    adv = torch.randn(6, generator=g, dtype=torch.float64)
    lengths = torch.tensor([5.0, 3, 4, 1, 2, 5], dtype=torch.float64)
    mask = (torch.arange(5)[None, :] < lengths[:, None]).double()
    group_tokens = lengths.view(3, 2).sum(1).repeat_interleave(2)
    counts = MiniBatchCounts(lengths.sum().item(), 6, 3)
    for name, fn in AGGREGATIONS.items():
        w = fn(lengths, group_tokens, counts)
        whole, _ = policy_loss(logp, old, adv, mask, w)
        parts = sum(policy_loss(logp[i : i + 2], old[i : i + 2], adv[i : i + 2], mask[i : i + 2], w[i : i + 2])[0]
                    for i in (0, 2, 4))
        torch.testing.assert_close(whole, parts, msg=name)


def test_policy_loss_metrics():
    ratio = torch.tensor([[1.0, 1.5, 0.5, 20.0], [1.1, 1.0, 1.0, 1.0]])
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0], [0.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0]])
    loss, m = policy_loss(ratio.log(), torch.zeros(2, 4), adv, mask, torch.full((2,), 1 / 5))
    assert loss.item() == pytest.approx((-1 - 1.28 + 0.8 + 10 + 0) / 5)
    assert m["clip_frac_high"].item() == 1  # sums over tokens: the logger divides by its declared count
    assert m["clip_frac_low"].item() == 1
    assert m["clip_frac_dual"].item() == 1
    assert m["ratio_max"].item() == pytest.approx(20.0)
    assert m["ratio_min"].item() == pytest.approx(0.5)
    assert m["ratio_mean"].item() == pytest.approx(1 + 1.5 + 0.5 + 20 + 1.1)
    k3 = sum(r - 1 - math.log(r) for r in (1, 1.5, 0.5, 20, 1.1))
    assert m["approx_kl"].item() == pytest.approx(k3, rel=1e-5)
    assert m["num_tokens"].item() == 5


def test_entropy_is_accurate_at_qwen_vocab_size():
    # Against an fp64 reference at V = 151,936: the chunked fp32 entropy stays within 5e-6.
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(1, 8, 151_936, generator=g) * 0.3
    targets = torch.randint(0, 151_936, (1, 8), generator=g)
    logp, ent = token_logprobs(logits, targets, chunk_tokens=3)
    p64 = torch.softmax(logits.double(), -1)
    ref_ent = -(p64 * p64.log()).sum(-1)
    ref_logp = torch.log_softmax(logits.double(), -1).gather(-1, targets[..., None]).squeeze(-1)
    assert (ent.double() - ref_ent).abs().max() < 5e-6
    assert (logp.double() - ref_logp).abs().max() < 5e-6


def test_tis_weights_scale_the_loss_per_token_and_ones_change_nothing():
    from loss import tis_weights

    g = torch.Generator().manual_seed(3)
    logp, old = -torch.rand(2, 5, generator=g), -torch.rand(2, 5, generator=g)
    adv, mask = torch.tensor([1.0, -0.5]), torch.ones(2, 5)
    weight = torch.full((2,), 1 / 10.0)  # token-mean over 10 tokens
    plain, _ = policy_loss(logp, old, adv, mask, weight)
    ones, _ = policy_loss(logp, old, adv, mask, weight, is_weight=torch.ones(2, 5))
    assert torch.equal(plain, ones)
    rollout = old.clone()
    rollout[0, 0] -= 5.0  # the sampler gave this token far less mass: weight exp(5) truncated at the cap
    w = tis_weights(old, rollout, cap=2.0)
    assert w[0, 0] == 2.0 and torch.allclose(w[1], torch.ones(5)) and not w.requires_grad
    weighted, _ = policy_loss(logp, old, adv, mask, weight, is_weight=w)
    from loss import clip_higher_token_loss

    per_token = clip_higher_token_loss(logp, old, adv)
    assert torch.allclose(weighted - plain, per_token[0, 0] * (2.0 - 1.0) / 10.0)


class CountingHead(torch.nn.Linear):
    """An output layer that counts its calls."""

    calls = 0

    def forward(self, x):
        CountingHead.calls += 1
        return super().forward(x)


@pytest.mark.parametrize("rows, chunk", [(12, 4), (12, 5), (2, 4), (1, 3), (7, 7)])
def test_chunks_of_at_most_chunk_tokens_rows_change_nothing(rows, chunk):
    # Each chunk is one head call forward and one in the checkpointed recompute; the values and
    # gradients are the unchunked computation's.
    g = torch.Generator().manual_seed(rows * 10 + chunk)
    head = CountingHead(8, 11).double()
    hidden = torch.randn(1, rows, 8, generator=g, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 11, (1, rows), generator=g)
    CountingHead.calls = 0
    logp, ent = token_logprobs_from_hidden(hidden, head, targets, temperature=0.8, chunk_tokens=chunk)
    (logp.sum() + 0.5 * ent.sum()).backward()
    assert CountingHead.calls == 2 * math.ceil(rows / chunk)
    ref_logp, ref_ent = logprob_entropy(head(hidden.detach()), targets, temperature=0.8)
    torch.testing.assert_close(logp, ref_logp)
    torch.testing.assert_close(ent, ref_ent)
    grad = hidden.grad.clone()
    hidden.grad = None
    l2, e2 = logprob_entropy(head(hidden), targets, temperature=0.8)
    (l2.sum() + 0.5 * e2.sum()).backward()
    torch.testing.assert_close(grad, hidden.grad)


def test_loss_metrics_are_combined_by_their_reduction_then_divided_by_their_denominator():
    from infra.logger import combine, loss_metrics
    from loss import COMMON_METRICS, METRICS, POLICY_LOSSES

    a = {"policy": 0.5, "clip_frac_high": 2.0, "ratio_mean": 7.5, "num_tokens": 6.0, "ratio_min": 0.8, "ratio_max": 1.3}
    b = {"policy": .25, "clip_frac_high": 1.0, "ratio_mean": 4.5, "num_tokens": 4.0, "ratio_min": 0.9, "ratio_max": 1.5}
    assert combine([a, b], METRICS) == {"policy": 0.75, "clip_frac_high": 3.0, "ratio_mean": 12.0, "num_tokens": 10.0,
                                        "ratio_min": 0.8, "ratio_max": 1.5}
    names = COMMON_METRICS + POLICY_LOSSES["clip-higher"].metrics
    m = loss_metrics([a, b, a], METRICS, names, mini_tokens=40.0, updates=2)  # three mini-batches' reports, any ranks
    assert m["loss/policy"] == pytest.approx(1.25 / 2)  # per optimizer step
    assert m["loss/clip_frac_high"] == pytest.approx(5.0 / 40.0)  # per mini-batch token, A = 0 ones included
    assert m["loss/ratio_mean"] == pytest.approx(19.5 / 16.0)  # per token in gradient passes
    assert m["loss/ratio_min"] == 0.8 and m["loss/ratio_max"] == 1.5 and m["loss/approx_kl"] == 0.0
    assert set(m) == {f"loss/{name}" for name in names}
    assert loss_metrics([], METRICS, names, mini_tokens=0.0, updates=0)["loss/ratio_min"] == 1.0  # no gradient pass
    gspo = {"seq_clip_frac": 1.0, "num_sequences": 4.0, "seq_ratio_max": 1.2}
    m = loss_metrics([gspo, gspo], METRICS, COMMON_METRICS + POLICY_LOSSES["gspo"].metrics, 1.0, 1)
    assert m["loss/seq_clip_frac"] == 0.25 and m["loss/seq_ratio_max"] == 1.2  # per response in gradient passes


SETTINGS = {"clip-higher": {}, "clip-cov": dict(clip_eps_low=1.0, clip_eps_high=1.0),
            "kl-cov": dict(kl_cov_coef=1.0), "gspo": dict(clip_eps_low=3e-4, clip_eps_high=4e-4)}


@pytest.mark.parametrize("name", SETTINGS)
def test_every_reported_metric_has_an_entry_in_the_table(name):
    from infra.logger import REDUCTIONS
    from loss import COMMON_METRICS, METRICS, POLICY_LOSSES

    _, m = policy_loss(torch.zeros(1, 3), torch.zeros(1, 3), torch.tensor([1.0]), torch.ones(1, 3), torch.ones(1),
                       name=name, selected=torch.zeros(1, 3, dtype=torch.bool), **SETTINGS[name])
    assert set(m) <= set(METRICS) and set(COMMON_METRICS) | {"num_tokens"} <= set(m)
    assert set(POLICY_LOSSES[name].metrics) <= set(METRICS)
    assert set(POLICY_LOSSES[name].metrics) - {"cov_selected", "cov_candidates"} <= set(m)  # those: train.pick_tokens
    for reduce, per, _ in METRICS.values():
        assert reduce in REDUCTIONS and per in (None, "num_tokens", "num_sequences", "mini_tokens", "updates")
