"""The README's "Forking" example stays true: its code, config and test blocks, run as written.

The code block is executed into a copy of advantage.py's namespace with a private copy of the
BASELINES registry (so nothing leaks into other tests); the config block must load through the
real config loader (its `base:` resolves in configs/) and validate against that registry, and its
K must reach the baseline through compute_advantages; the test block is then run. The example must
stay small: under 30 lines of code and config.
"""

import re
from pathlib import Path

import pytest
import torch

import advantage
import config

REPO = Path(__file__).resolve().parents[1]


def forking_blocks() -> dict[str, str]:
    """The fenced code blocks of the README's Forking section, by language."""
    text = (REPO / "README.md").read_text()
    section = text.split("## Forking", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(\w+)\n(.*?)```", section, flags=re.S)
    assert [lang for lang, _ in blocks] == ["python", "yaml", "python"], "the Forking section lost a block"
    return {"code": blocks[0][1], "config": blocks[1][1], "test": blocks[2][1]}


def test_the_readme_forking_example_runs_as_written(monkeypatch, tmp_path):
    blocks = forking_blocks()
    monkeypatch.setattr(advantage, "BASELINES", dict(advantage.BASELINES))  # the README's entry goes here
    namespace = dict(vars(advantage))
    exec(blocks["code"], namespace)  # 1. the new baseline, as a fork would add it to advantage.py
    assert advantage.settings_of("lower_mean") == ["K"]  # a baseline that takes K

    path = tmp_path / "tiny_lower_mean.yaml"  # 2. the variant config, through the real loader
    path.write_text(blocks["config"])
    cfg = config.load(str(path))
    algo = cfg.algorithm
    assert algo.baseline == "lower_mean" and algo.K == 0.5 and cfg.trainer.train_batch_size == 16

    # The config's settings reach the baseline as train.py passes them: K = 0.5, not the default 0.4.
    reward = torch.tensor([[3.0, 0.0, 1.0, 2.0, 5.0, 4.0, 7.0, 6.0]])  # (1, 8), tiny_qae's G
    adv = advantage.compute_advantages(reward, K=algo.K, norm_by_std=False, quantile_rule=algo.quantile_rule,
                                       baseline=algo.baseline, penalty=torch.zeros_like(reward)
                                       if algo.quantile_of == "verdict" else None)
    assert torch.equal(adv, reward - 1.5)  # K = 0.5: the tail {0, 1, 2, 3}, b = 1.5 (K = 0.4 would give 1.0)
    with pytest.raises(config.ConfigError, match=r"`algorithm.K` must be set \(0 < K < 1\) for the lower_mean"):
        config.load(str(path), ["algorithm.K=null"])

    test_ns = {"torch": torch, "advantage": advantage}  # 3. the fork's test
    exec(blocks["test"], test_ns)
    (test_fn,) = [f for name, f in test_ns.items() if name.startswith("test_")]
    test_fn()

    counts = {key: sum(1 for line in block.splitlines() if line.strip()) for key, block in blocks.items()}
    assert counts["code"] + counts["config"] < 30
    readme = (REPO / "README.md").read_text()
    assert (f"That is {counts['code']} lines of code, {counts['config']} of config "
            f"and a {counts['test']}-line test") in readme


def test_without_the_entry_the_config_names_the_registered_baselines():
    with pytest.raises(config.ConfigError, match=r"must be one of \['mean', 'quantile'\], got 'lower_mean'"):
        config.from_dict({}, ["algorithm.baseline=lower_mean", "algorithm.K=0.5"])


def loss_metric_block() -> str:
    """The one code block of the README's "Forking: a new loss term and its metric" section."""
    text = (REPO / "README.md").read_text()
    section = text.split("## Forking: a new loss term and its metric", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(\w+)\n(.*?)```", section, flags=re.S)
    assert [lang for lang, _ in blocks] == ["python"], "the loss-metric recipe lost its block"
    return blocks[0][1]


def test_the_readme_loss_metric_recipe_edits_loss_py_only(monkeypatch, tiny_policy_dir):
    """The block, appended to (a copy of) loss.py's namespace, reaches the config, the update and the step's metrics
    with no other change: train.accumulate_gradients calls it on every response (it reads A = 0 tokens),
    infra.logger.loss_metrics divides its metric, the logger documents it."""
    from accelerate import Accelerator
    from transformers import AutoModelForCausalLM

    import loss
    import train
    from infra.logger import documented, loss_metrics
    from infra.policy import Policy
    from rollout import Batch

    namespace = dict(vars(loss)) | {"METRICS": dict(loss.METRICS), "POLICY_LOSSES": dict(loss.POLICY_LOSSES)}
    exec(loss_metric_block(), namespace)  # as a fork appends it to loss.py
    monkeypatch.setattr(loss, "METRICS", namespace["METRICS"])
    monkeypatch.setattr(loss, "POLICY_LOSSES", namespace["POLICY_LOSSES"])

    logp, old = torch.log(torch.tensor([[1.0, 1.5, 0.5]])), torch.zeros(1, 3)  # ratios 1, 1.5, 0.5
    adv, mask, weight = torch.tensor([1.0]), torch.tensor([[1, 1, 0]]), torch.tensor([0.5])
    plain, _ = loss.policy_loss(logp, old, adv, mask, weight)
    with_kl, metrics = loss.policy_loss(logp, old, adv, mask, weight, name="clip-higher-k2", clip_eps_low=0.2,
                                        clip_eps_high=0.28, clip_c=10.0)
    k2 = 0.5 * torch.log(torch.tensor(1.5)) ** 2  # the masked third token adds nothing
    assert metrics["kl_k2"].item() == pytest.approx(k2.item())
    assert (with_kl - plain).item() == pytest.approx(namespace["KL_COEF"] * 0.5 * k2.item(), rel=1e-4)

    cfg = config.from_dict({}, ["rollout.n=4", "trainer.train_batch_size=2", "trainer.mini_batch_size=2",
                                "reward.overlong_buffer_len=0", "algorithm.policy_loss=clip-higher-k2"])
    model = Policy(AutoModelForCausalLM.from_pretrained(tiny_policy_dir, dtype=torch.float32))
    g = torch.Generator().manual_seed(1)
    responses = [torch.randint(3, 300, (3 + k,), generator=g).tolist() for k in range(8)]
    batch = Batch([[5, 6, 7]] * 4 + [[8, 9]] * 4, responses, [""] * 8, torch.zeros(2, 4),
                  torch.zeros(2, 4, dtype=torch.bool), torch.zeros(2, 4))
    adv, accelerator = torch.tensor([1.0, 0.0, -1.0, 0.5, 0.0, 0.0, 2.0, -0.5]), Accelerator(cpu=True)
    old = train.old_logprobs(cfg, accelerator, model, batch, list(range(8)))
    old = train.Logprobs({i: (lp - 0.2, ent) for i, (lp, ent) in old.rows.items()})  # ratios off 1
    mini = train.accumulate_gradients(cfg, accelerator, model, batch, adv, old, list(range(8)))
    assert mini.losses["num_tokens"] == sum(map(len, responses))  # the A = 0 responses were not skipped
    names = loss.COMMON_METRICS + loss.POLICY_LOSSES["clip-higher-k2"].metrics
    logged = loss_metrics([mini.losses], loss.METRICS, names, mini.mini_tokens, updates=1)
    assert logged["loss/kl_k2"] == pytest.approx(0.5 * 0.2**2, rel=1e-4)  # every token's log-ratio is 0.2
    assert documented("loss/kl_k2")
