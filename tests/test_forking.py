"""The README's "Forking" recipes stay true: each block, run exactly as printed, does what its section says.

A new baseline: the code block is pasted into advantage.py's source where the README says (right after the BASELINES
registry) and the whole file run as a fresh module, so a block that only works elsewhere fails here; its registry
replaces advantage.BASELINES for the test. The config block must open on what it does (tests/test_repo.py's rule for
configs/), load through the real config loader (its `base:` resolves in configs/) and validate against that registry,
and its K must reach the baseline through compute_advantages; the test block is then run. The example must stay small:
under 30 lines of code and config.

A new loss term and a new reward: each block is executed into a copy of loss.py's / reward.py's namespace with private
copies of the registries (so nothing leaks into other tests), as a fork appends it to the file, then driven through
the code that uses it. Deliberately broken blocks must fail the same checks.
"""

import ast
import json
import re
import types
from pathlib import Path

import pytest
import torch

import advantage
import config
import test_repo

REPO = Path(__file__).resolve().parents[1]


def section_blocks(title: str) -> tuple[str, list[tuple[str, str]]]:
    """The text of the README section `## {title}` and its fenced code blocks as (language, text)."""
    text = (REPO / "README.md").read_text()
    section = text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    return section, re.findall(r"```(\w+)\n(.*?)```", section, flags=re.S)


def forking_blocks() -> dict[str, str]:
    """The fenced code blocks of the README's new-baseline section, by role."""
    _, blocks = section_blocks("Forking: a new baseline, end to end")
    assert [lang for lang, _ in blocks] == ["python", "yaml", "python"], "the new-baseline recipe lost a block"
    return {"code": blocks[0][1], "config": blocks[1][1], "test": blocks[2][1]}


def paste_into_advantage(block: str, after_registry: bool = True) -> dict:
    """advantage.py's source with `block` pasted right after the BASELINES registry (or, after_registry=False, right
    before it, next to the baseline functions), run as a fresh module: its namespace."""
    source = (REPO / "advantage.py").read_text()
    (registry,) = [node for node in ast.parse(source).body  # `BASELINES: dict[...] = {...}`
                   if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "BASELINES"]
    lines = source.splitlines(keepends=True)
    at = registry.end_lineno if after_registry else registry.lineno - 1
    module = types.ModuleType("advantage_with_the_readme_block")
    exec(compile("".join(lines[:at]) + "\n\n" + block + "\n\n" + "".join(lines[at:]), "advantage.py", "exec"),
         module.__dict__)
    return module.__dict__


def test_the_readme_forking_example_runs_as_written(monkeypatch, tmp_path):
    section, _ = section_blocks("Forking: a new baseline, end to end")
    assert "right after the `BASELINES` registry" in section  # where the README says to paste it: as pasted here
    blocks = forking_blocks()
    forked = paste_into_advantage(blocks["code"])  # 1. the new baseline, where a fork adds it to advantage.py
    monkeypatch.setattr(advantage, "BASELINES", forked["BASELINES"])  # the README's entry is there
    assert advantage.settings_of("lower_mean") == ["K"]  # a baseline that takes K

    path = tmp_path / "configs" / "tiny_lower_mean.yaml"  # 2. the variant config, as a file of configs/
    path.parent.mkdir()
    path.write_text(blocks["config"])
    monkeypatch.setattr(test_repo, "REPO", tmp_path)
    test_repo.test_every_script_bench_and_config_opens_on_what_it_does()  # it opens on what it does
    cfg = config.load(str(path))  # through the real loader
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
    assert (f"That is {counts['code']} lines of code, {counts['config']} of config "
            f"and a {counts['test']}-line test") in section


def test_the_baseline_checks_fail_on_a_misplaced_block_or_an_unlabelled_config(monkeypatch, tmp_path):
    """Pasted next to the baseline functions, above the registry, the block cannot register (NameError); a config
    without its opening comment fails the configs/ layout rule."""
    blocks = forking_blocks()
    with pytest.raises(NameError, match="BASELINES"):
        paste_into_advantage(blocks["code"], after_registry=False)
    (tmp_path / "configs").mkdir()
    unlabelled = "".join(line for line in blocks["config"].splitlines(keepends=True) if not line.startswith("#"))
    (tmp_path / "configs" / "tiny_lower_mean.yaml").write_text(unlabelled)
    monkeypatch.setattr(test_repo, "REPO", tmp_path)
    with pytest.raises(AssertionError, match="does not open on what it does"):
        test_repo.test_every_script_bench_and_config_opens_on_what_it_does()


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


# ----------------------------------------------------------------------------------------------
# A new reward: one reward.REWARDS entry appended to reward.py, chosen by `reward.mode`
# ----------------------------------------------------------------------------------------------


def reward_recipe() -> tuple[str, str]:
    """The README's new-reward block and the mode its text selects (`reward.mode=NAME`)."""
    section, blocks = section_blocks("Forking: a new reward")
    assert [lang for lang, _ in blocks] == ["python"], "the new-reward recipe lost its block"
    (mode,) = set(re.findall(r"`reward\.mode=([\w.-]+)`", section))
    return blocks[0][1], mode


def check_reward_recipe(block: str, mode: str, monkeypatch, tmp_path) -> list[tuple]:
    """The block appended to (a copy of) reward.py, then the mode through the config loader, the training step's call
    (shaped_rewards -> score_batch, whose math checks go to the worker pool) and eval.py's --reward-mode. Returns the
    pairs the pool was asked."""
    import eval as ev
    import reward
    from infra.evalsets import benchmark_result, write_outputs
    from verifier import pool

    namespace = dict(vars(reward)) | {"REWARDS": dict(reward.REWARDS)}
    exec(block, namespace)  # as a fork appends it to reward.py
    monkeypatch.setattr(reward, "REWARDS", namespace["REWARDS"])
    cfg = config.from_dict({}, [f"reward.mode={mode}", "reward.overlong_buffer_len=0"])  # 1. the config
    assert cfg.reward.mode == mode

    asked, run_checks = [], pool.run_checks  # 2. the training step's call; the pool's jobs recorded
    monkeypatch.setattr(pool, "run_checks", lambda jobs, *args: asked.extend(jobs.values()) or run_checks(jobs, *args))
    responses = ["3 + 0 = 3.\nAnswer: 3", r"So it is $\boxed{3}$.", "Answer: 3\nI hope it is correct.", "Answer: 4",
                 "Half of it.\nAnswer: 0.5"]
    golds = ["3", "3", "3", "3", r"\frac{1}{2}"]
    shaped = reward.shaped_rewards(responses, golds, [9] * 5, [False] * 5, cfg.reward, max_response_len=10)
    assert shaped.acc == [True, False, False, False, True] and shaped.score == [1.0, -1.0, -1.0, -1.0, 1.0]
    assert [r.acc for r in reward.score_batch(responses, golds)] == [True, True, True, False, True]  # verify's

    rows = [{"problem_index": i, "problem_id": f"p{i}", "sample": 0, "answer": g, "response": r, "len": 9,
             "truncated": False, "pred": None, "acc": False, "timeout": False}
            for i, (r, g) in enumerate(zip(responses, golds))]  # 3. eval.py's flag, on saved generations
    write_outputs(tmp_path / "saved", {"model": "m", "benchmarks": {"b": benchmark_result(rows, [1], {
        "model": "m", "temperature": 0.7, "top_p": 1.0, "top_k": -1, "max_tokens": 10, "seed": 0})}}, {"b": rows})
    assert ev.resolve_args(ev.parse_args(["--reward-mode", mode]), cfg)[1]["reward_mode"] == mode
    ev.main(["--rescore", str(tmp_path / "saved" / "generations.jsonl"), "--reward-mode", mode, "--out",
             str(tmp_path / "rescored")])
    (bench,) = json.loads((tmp_path / "rescored" / "results.json").read_text())["benchmarks"].values()
    assert bench["settings"]["reward_mode"] == mode and [p["correct"] for p in bench["problems"]] == [1, 0, 0, 0, 1]
    return asked


def test_the_readme_reward_recipe_runs_as_written(monkeypatch, tmp_path, capsys):
    block, mode = reward_recipe()
    asked = check_reward_recipe(block, mode, monkeypatch, tmp_path)
    assert ("0.5", r"\frac{1}{2}") in asked  # the sympy check went to the killable workers
    assert capsys.readouterr().out.rstrip().endswith(f"answers scored by reward mode `{mode}`")
    lines = sum(1 for line in block.splitlines() if line.strip())
    assert lines <= 15, f"the new-reward recipe is {lines} lines; keep it short"


@pytest.mark.parametrize("broken, fails_with, match", [
    (lambda b, mode: re.sub(r"(.*)\n\n\n(REWARDS\[.*)", r"\2\n\n\n\1", b, flags=re.S), NameError,  # registered first
     "is not defined"),
    (lambda b, mode: b.replace("return ok, ", "return "), TypeError, "returned the verdict 1.0"),  # no verdict
    (lambda b, mode: b.replace("return ok, ", "return int(ok), "), TypeError, "verdict 1; it must be a bool"),
    (lambda b, mode: b.replace(f'REWARDS["{mode}"]', 'REWARDS["another-name"]'), config.ConfigError,  # not selectable
     r"`reward.mode` must be one of \['another-name', 'dapo', 'verify'\]"),
])
def test_a_broken_reward_recipe_fails_the_same_checks(monkeypatch, tmp_path, broken, fails_with, match):
    block, mode = reward_recipe()
    assert broken(block, mode) != block, "the README block changed; update the broken variants"
    with pytest.raises(fails_with, match=match):
        check_reward_recipe(broken(block, mode), mode, monkeypatch, tmp_path)
