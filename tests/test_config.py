"""config.py: loading, typed overrides, clear errors, round trip."""

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

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
    dapo = load("qwen3_8b_dapo")  # ".yaml" optional; a few lines over `base: qwen3_8b_qae.yaml`
    assert dapo.algorithm.baseline == "mean" and dapo.algorithm.K is None and dapo.algorithm.regime_K == 0.4
    dapo.algorithm.baseline, dapo.algorithm.K, dapo.trainer.output_dir = "quantile", 0.4, cfg.trainer.output_dir
    assert dapo == cfg  # identical but for the baseline (and where it writes)


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
    assert from_dict({}, ["algorithm.baseline=mean", "algorithm.K=null"]).algorithm.K is None
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
        (["rollout.max_response_len=0", "reward.overlong_buffer_len=0"],
         "`rollout.max_response_len` must be a positive length"),
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
    cfg = from_dict({}, ["algorithm.baseline=mean", "algorithm.K=null", "optim.betas=[0.8, 0.9]", "reward.workers=3",
                         "data.prompt_template=Q: {problem}\nA:"])
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


def test_tiny_dapo_differs_from_tiny_qae_only_in_the_baseline():
    qae, dapo = load("tiny_qae.yaml"), load("tiny_dapo.yaml")
    assert qae.algorithm.K == 0.4 and dapo.algorithm.K is None and dapo.algorithm.baseline == "mean"
    dapo.algorithm.baseline, dapo.algorithm.K, dapo.trainer.output_dir = ("quantile", qae.algorithm.K,
                                                                          qae.trainer.output_dir)
    dapo.algorithm.quantile_of = qae.algorithm.quantile_of  # the mean of the shaped rewards, as DAPO
    assert dapo == qae


# Table 2's rows: each "+ QAE" config and its partner with the group-mean baseline (paper section 5.1: "+ QAE" changes
# only the baseline). The 30B-A3B pair is checked once its configs exist.
TABLE2_PAIRS = [("qwen3_8b_qae.yaml", "qwen3_8b_dapo.yaml"), ("qwen3_8b_clip_cov_qae.yaml", "qwen3_8b_clip_cov.yaml"),
                ("qwen3_8b_kl_cov_qae.yaml", "qwen3_8b_kl_cov.yaml"),
                ("qwen3_30b_a3b_gspo_qae.yaml", "qwen3_30b_a3b_gspo.yaml")]


@pytest.mark.parametrize("qae, partner", TABLE2_PAIRS)
def test_each_table2_qae_config_differs_from_its_partner_only_in_the_baseline(qae, partner):
    if not (REPO / "configs" / qae).exists():
        pytest.skip(f"{qae} is not shipped yet")
    a, b = load(qae), load(partner)
    assert (a.algorithm.baseline, a.algorithm.K, b.algorithm.baseline, b.algorithm.K) == ("quantile", 0.4, "mean", None)
    assert differing_keys(a, b) == {"algorithm.baseline", "algorithm.K", "trainer.output_dir"}


def test_the_table2_configs_are_the_methods_of_their_rows():
    algo = {name: load(name).algorithm for pair in TABLE2_PAIRS for name in pair
            if (REPO / "configs" / name).exists()}
    assert {name: a.policy_loss for name, a in algo.items()} == {
        **{name: "clip-higher" for name in TABLE2_PAIRS[0]}, **{name: "clip-cov" for name in TABLE2_PAIRS[1]},
        **{name: "kl-cov" for name in TABLE2_PAIRS[2]},
        **{name: "gspo" for name in TABLE2_PAIRS[3] if name in algo}}
    clip_cov, kl_cov = algo["qwen3_8b_clip_cov_qae.yaml"], algo["qwen3_8b_kl_cov_qae.yaml"]
    assert (clip_cov.clip_cov_ratio, clip_cov.clip_cov_lb, clip_cov.clip_cov_ub) == (2e-4, 1.0, 5.0)  # authors' 7B
    assert (clip_cov.clip_eps_low, clip_cov.clip_eps_high, clip_cov.clip_c) == (1.0, 1.0, None)
    assert (kl_cov.kl_cov_ratio, kl_cov.kl_cov_coef, kl_cov.clip_eps_low, kl_cov.clip_c) == (2e-3, 1.0, None, None)
    for name in TABLE2_PAIRS[3]:
        if name in algo:  # GSPO's clip ranges (verl's GSPO recipe, the QAE paper's GSPO runs), its sequence mean
            assert (algo[name].clip_eps_low, algo[name].clip_eps_high, algo[name].loss_agg) == (
                3e-4, 4e-4, "seq-mean-token-mean")


def test_variant_configs_are_a_few_lines_over_their_base():
    for name in ("tiny_dapo.yaml", "qwen3_8b_dapo.yaml", "qwen3_8b_clip_cov.yaml", "qwen3_8b_kl_cov.yaml"):
        keys = [line for line in (REPO / "configs" / name).read_text().splitlines() if line.startswith("  ")]
        assert len(keys) <= 4, (name, keys)


def test_base_chain_merges_key_by_key_and_errors_name_the_file(tmp_path):
    (tmp_path / "a.yaml").write_text("base: tiny_qae.yaml\nalgorithm:\n  K: 0.6\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\ntrainer:\n  total_steps: 3\n")
    cfg = load(str(tmp_path / "b.yaml"))
    assert cfg.algorithm.K == 0.6 and cfg.trainer.total_steps == 3  # from a.yaml and b.yaml
    assert cfg.trainer.train_batch_size == 16 and cfg.algorithm.clip_eps_high == 0.28  # from tiny_qae.yaml
    assert load(str(tmp_path / "b.yaml"), ["algorithm.K=0.2"]).algorithm.K == 0.2  # the command line wins
    (tmp_path / "c.yaml").write_text("base: a.yaml\nalgorithm:\n  KK: 0.5\n")
    with pytest.raises(ConfigError, match=r"unknown config key `algorithm.KK` \(set in `.*c.yaml`\) "
                                          r"\(did you mean `algorithm.K`\?\)"):
        load(str(tmp_path / "c.yaml"))
    (tmp_path / "d.yaml").write_text("base: a.yaml\nrollout:\n  n: 1\n")
    with pytest.raises(ConfigError, match="`rollout.n` must be >= 2"):
        load(str(tmp_path / "d.yaml"))
    (tmp_path / "e.yaml").write_text("base: e.yaml\n")
    with pytest.raises(ConfigError, match="is its own base"):
        load(str(tmp_path / "e.yaml"))
    (tmp_path / "f.yaml").write_text("base: nowhere.yaml\n")
    with pytest.raises(ConfigError, match="config file `nowhere.yaml` not found"):
        load(str(tmp_path / "f.yaml"))


@pytest.mark.parametrize("overrides, message", [
    (["algorithm.baseline=median"], "`algorithm.baseline` must be one of ['mean', 'quantile'], got 'median'"),
    (["algorithm.K=null"], "`algorithm.K` must be set (0 < K < 1) for the quantile baseline, got null"),
    (["algorithm.baseline=mean"], "`algorithm.K` (0.4) is not used by the mean baseline, which takes no K; set it "
                                  "to null"),
    (["algorithm.baseline=mean", "algorithm.K=null", "algorithm.adv_mask=pos"],
     "it needs config key `algorithm.baseline` = 'quantile', got 'mean'"),
    (["algorithm.adv_mask=neg", "algorithm.quantile_of=verdict"],
     "cannot go with config key `algorithm.adv_mask` = 'neg', which sets each response's"),
    (["algorithm.regime_K=1.5"], "`algorithm.regime_K` must be null or strictly between 0 and 1, got 1.5"),
    (["algorithm.quantile_of=score"], "`algorithm.quantile_of` must be one of"),
])
def test_baseline_choice_is_explicit(overrides, message):
    with pytest.raises(ConfigError) as e:
        from_dict({}, overrides)
    assert message in str(e.value)


def test_derived_values_are_resolved_in_the_saved_config():
    mean = from_dict({}, ["algorithm.baseline=mean", "algorithm.K=null"])
    assert mean.algorithm.regime_K == 0.4 and "regime_K: 0.4" in dump(mean)  # what the logged regime fractions use
    assert from_dict({}, ["algorithm.K=0.6"]).algorithm.regime_K == 0.6
    assert from_dict({}, ["algorithm.K=0.6", "algorithm.regime_K=0.3"]).algorithm.regime_K == 0.3


def field_docs(source: str) -> dict[str, str | None]:
    """`section.field` -> the string under each field of config.py's section dataclasses (None if none)."""
    import ast

    docs = {}
    for cls in ast.parse(source).body:
        if isinstance(cls, ast.ClassDef) and cls.name.endswith("Config") and cls.name != "Config":
            for node, after in zip(cls.body, cls.body[1:] + [None]):
                if isinstance(node, ast.AnnAssign):
                    is_doc = isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    docs[f"{cls.name}.{node.target.id}"] = after.value.value if is_doc else None
    return docs


def test_every_config_field_has_a_one_line_doc():
    # The README's and config.py's promise: "a one-line doc under every field".
    docs = field_docs((REPO / "config.py").read_text())
    sections = [getattr(Config(), f.name) for f in dataclasses.fields(Config)]
    assert len(docs) == sum(len(dataclasses.fields(section)) for section in sections)  # every field found
    assert not [name for name, doc in docs.items() if doc is None], "fields without a doc"
    assert not [name for name, doc in docs.items() if "\n" in doc], "field docs over one line"
    two_lines = '@dataclass\nclass XConfig:\n    a: int = 1\n    """One\n    two."""\n    b: int = 2\n'
    assert field_docs(two_lines) == {"XConfig.a": "One\n    two.", "XConfig.b": None}  # what the check catches


def differing_keys(a: Config, b: Config) -> set[str]:
    """`section.key` of every value two resolved configs disagree on."""
    return {f"{s.name}.{f.name}" for s in dataclasses.fields(Config) for f in dataclasses.fields(getattr(a, s.name))
            if getattr(getattr(a, s.name), f.name) != getattr(getattr(b, s.name), f.name)}


def claimed_differences(header: str) -> dict[str, set[str]]:
    """What a config's opening comment claims: {other config: the `section.key` (or `section.*`) names in
    its sentence "... differs from configs/OTHER.yaml ... ."}."""
    text = " ".join(line.lstrip("#").strip() for line in header.splitlines() if line.startswith("#"))
    return {other: set(re.findall(r"`([a-z]+\.(?:\w+|\*))`", sentence))
            for other, sentence in re.findall(r"differs from configs/([\w.]+\.yaml)(.*?)\.(?:\s|$)", text)}


def test_a_config_comment_naming_what_differs_is_true():
    # "It differs from configs/X.yaml only in `a.b` ...": every named key differs in the resolved configs, and
    # every key that differs is named (`section.*` names a whole section).
    checked = 0
    for name in ALL_CONFIGS:
        header = (REPO / "configs" / name).read_text().split("\n\n", 1)[0]
        for other, named in claimed_differences(header).items():
            differ = differing_keys(load(name), load(other))
            sections = {n.split(".")[0] for n in named if n.endswith(".*")}
            assert {n for n in named if not n.endswith(".*")} <= differ, f"{name} names keys that equal {other}'s"
            unnamed = {k for k in differ if k not in named and k.split(".")[0] not in sections}
            assert not unnamed, f"{name}'s comment does not name what differs from {other}: {sorted(unnamed)}"
            checked += 1
    assert checked >= 8  # tiny_qae, tiny_dapo, smollm2_dapo, qwen3_8b_dapo and the Clip-Cov, KL-Cov pairs claim it


def test_the_difference_check_can_fail():
    header = "# It differs from configs/tiny_qae.yaml only in `algorithm.baseline`.\n"
    assert claimed_differences(header) == {"tiny_qae.yaml": {"algorithm.baseline"}}
    assert differing_keys(load("tiny_dapo.yaml"), load("tiny_qae.yaml")) > {"algorithm.baseline"}  # so it is untrue
