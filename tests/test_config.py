"""config.py: loading, typed overrides, clear errors, round trip."""

import subprocess
import sys
from pathlib import Path

import pytest

import config
from config import Config, ConfigError, dump, from_dict, load, loads

REPO = Path(__file__).resolve().parents[1]
ALL_CONFIGS = sorted(p.name for p in (REPO / "configs").glob("*.yaml"))


@pytest.mark.parametrize("name", ALL_CONFIGS)
def test_every_shipped_config_loads_and_round_trips(name):
    cfg = load(name)
    assert loads(dump(cfg)) == cfg
    assert isinstance(cfg, Config)


def test_paper_config_values():
    cfg = load("qwen3_8b_qae.yaml")
    assert cfg.algorithm.K == 0.4 and cfg.rollout.n == 16
    assert cfg.trainer.train_batch_size // cfg.trainer.mini_batch_size == 16
    assert cfg.optim.lr == 1e-6 and isinstance(cfg.optim.lr, float)
    dapo = load("qwen3_8b_dapo")  # ".yaml" optional
    assert dapo.algorithm.K is None
    dapo.algorithm.K, dapo.trainer.output_dir = 0.4, cfg.trainer.output_dir
    assert dapo == cfg  # identical but for K (and where it writes)


def test_bare_name_resolves_against_configs_from_any_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load("qwen3_8b_qae.yaml").algorithm.K == 0.4
    (tmp_path / "mine.yaml").write_text("algorithm:\n  K: 0.2\n")
    assert load("mine.yaml").algorithm.K == 0.2  # a path relative to the cwd wins


def test_typed_overrides():
    cfg = from_dict({}, ["algorithm.K=0.6", "trainer.total_steps=3", "optim.lr=1e-6", "optim.betas=[0.9, 0.95]",
                         "logging.wandb=true", "data.train_files=/tmp/x y.jsonl", "trainer.gen_batch_size=null"])
    assert cfg.algorithm.K == 0.6 and cfg.trainer.total_steps == 3
    assert cfg.optim.lr == 1e-6 and cfg.optim.betas == (0.9, 0.95)
    assert cfg.logging.wandb is True and cfg.data.train_files == "/tmp/x y.jsonl"
    assert cfg.trainer.gen_batch_size is None
    assert from_dict({}, ["algorithm.K=null"]).algorithm.K is None
    assert isinstance(from_dict({}, ["optim.weight_decay=0"]).optim.weight_decay, float)


@pytest.mark.parametrize(
    "data, overrides, message",
    [
        ({"algorithm": {"k": 0.4}}, [], "unknown config key `algorithm.k` (did you mean `algorithm.K`?)"),
        ({}, ["trainer.K=0.3"], "unknown config key `trainer.K` (did you mean `algorithm.K`?)"),
        ({"K": 0.3}, [], "unknown config key `K` (did you mean `algorithm.K`?)"),
        ({}, ["algorithm.clip_eps_hi=0.3"], "did you mean `algorithm.clip_eps_high`?"),
        ({"algorithmm": {}}, [], "did you mean `algorithm`?"),
        ({}, ["K=0.3"], "must name `section.key`"),
        ({}, ["algorithm.K"], "must look like `section.key=value`"),
        ({}, ["algorithm.K=abc"], "config key `algorithm.K` must be float, got 'abc' (str)"),
        ({}, ["rollout.n=2.5"], "config key `rollout.n` must be int, got 2.5"),
        ({}, ["logging.wandb=yes please"], "config key `logging.wandb` must be bool"),
        ({}, ["rollout.backend=vlm"], "did you mean `vllm`?"),
        ({}, ["optim.betas=[0.9]"], "config key `optim.betas` must be a list of 2 numbers"),
        ({"algorithm": 3}, [], "config section `algorithm` must be a mapping"),
    ],
)
def test_unknown_keys_and_wrong_types(data, overrides, message):
    with pytest.raises(ConfigError) as e:
        from_dict(data, overrides)
    assert message in str(e.value)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["algorithm.K=1.5"], "`algorithm.K` must be null or strictly between 0 and 1, got 1.5"),
        (["algorithm.K=0"], "`algorithm.K` must be null or strictly between 0 and 1"),
        (["algorithm.K=1.0"], "`algorithm.K` must be null or strictly between 0 and 1"),
        (["rollout.n=1"], "`rollout.n` must be >= 2 for a group baseline, got 1"),
        (["trainer.mini_batch_size=30"], "`trainer.mini_batch_size` (30) must divide `trainer.train_batch_size` (512)"),
        (["rollout.max_response_len=0", "reward.overlong_buffer_len=0"], "`rollout.max_response_len` must be a positive length"),
        (["data.max_prompt_len=-5"], "`data.max_prompt_len` must be a positive length"),
        (["trainer.micro_batch_max_tokens=1000"], "must hold one full sequence"),
        (["reward.overlong_buffer_len=30000"], "`reward.overlong_buffer_len` must be in [0"),
        (["algorithm.dynamic_sampling=false"], "set it to null or to trainer.train_batch_size"),
        (["rollout.top_p=0"], "`rollout.top_p` must be in (0, 1]"),
        (["data.prompt_template=Solve it"], "must contain `{problem}`"),
    ],
)
def test_cross_field_checks(overrides, message):
    with pytest.raises(ConfigError) as e:
        from_dict({}, overrides)
    assert message in str(e.value)


def test_dynamic_sampling_off_with_matching_batch_is_fine():
    cfg = from_dict({}, ["algorithm.dynamic_sampling=false", "trainer.gen_batch_size=null"])
    assert cfg.algorithm.dynamic_sampling is False


def test_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="config file `nope.yaml` not found.*available: .*qwen3_8b_qae.yaml"):
        load("nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("algorithm: [unclosed\n")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        load(str(bad))
    bad.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="must hold a mapping of sections"):
        load(str(bad))


def test_round_trip_of_non_default_values():
    cfg = from_dict({}, ["algorithm.K=null", "optim.betas=[0.8, 0.9]", "reward.workers=3", "data.prompt_template=Q: {problem}\nA:"])
    text = dump(cfg)
    assert loads(text) == cfg
    assert "K: null" in text


@pytest.mark.parametrize(
    "args, message",
    [
        (["--config", "missing_file.yaml"], "config file `missing_file.yaml` not found"),
        (["--config", "qwen3_8b_qae.yaml", "algorithm.K=1.5"], "strictly between 0 and 1, got 1.5"),
        (["--config", "qwen3_8b_qae.yaml", "algorithm.KK=0.5"], "did you mean `algorithm.K`?"),
    ],
)
def test_cli_bad_config_is_one_clear_line(args, message):
    proc = subprocess.run([sys.executable, str(REPO / "config.py"), *args], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: ") and message in proc.stderr


def test_cli_prints_resolved_config():
    proc = subprocess.run([sys.executable, str(REPO / "config.py"), "--config", "qwen3_8b_qae.yaml", "algorithm.K=0.6"],
                          capture_output=True, text=True, cwd=REPO, check=True)
    assert loads(proc.stdout).algorithm.K == 0.6


def test_tiny_dapo_differs_from_tiny_qae_only_in_K():
    qae, dapo = load("tiny_qae.yaml"), load("tiny_dapo.yaml")
    assert qae.algorithm.K == 0.4 and dapo.algorithm.K is None
    dapo.algorithm.K, dapo.trainer.output_dir = qae.algorithm.K, qae.trainer.output_dir
    assert dapo == qae
