"""The names the docs cite exist in the code: every backticked dotted name in README.md and docs/*.md whose first part
is a project module (`loss.POLICY_LOSSES`, `infra.passes.needs_old_pass`, `passes.needs_old_pass`) or a project class
(`StopRequest.agreed`) resolves, attribute by attribute; config keys (`algorithm.K`) and file names are not names;
a first part that is neither a project name nor an importable module must be one of the other projects' names the
docs cite (FOREIGN), so a renamed or removed module of this project is caught too."""

import dataclasses
import importlib
import importlib.util
import inspect
import re
from pathlib import Path

import pytest

import config
from infra.config_loader import all_keys

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
NAME = re.compile(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(\))?`")
FILES = {"py", "md", "yaml", "yml", "json", "jsonl", "txt", "pt", "png", "safetensors", "sh", "toml", "whl", "parquet",
         "bin", "gguf"}
# Other projects' modules and objects the docs cite by a short name (DeepSpeed's, vLLM's, transformers', torch's,
# verl's), and placeholders (`module.function`, `section.key`, `engine.cfg` of a sampler instance); anything else that
# neither resolves nor imports is a stale name of this project.
FOREIGN = {"CacheConfig", "DeepSpeedEngine", "F", "RoutedExperts", "VllmConfig", "ZeRoTraceMode", "data_types",
           "distributed_c10d", "experts", "masking_utils", "math_dapo", "mlp", "np", "parameter_offload", "stage3",
           "zero", "zero_optimization", "module", "section", "engine"}
ROOT_MODULES = ["train", "rollout", "reward", "advantage", "loss", "eval", "config"]


def project_names() -> dict[str, str]:
    """Short name -> module: the root modules, the packages, their modules (`passes` -> infra.passes)."""
    names = {m: m for m in ROOT_MODULES} | {"infra": "infra", "verifier": "verifier"}
    for package in ("infra", "verifier"):
        for path in sorted((REPO / package).glob("*.py")):
            if path.stem != "__init__":
                names.setdefault(path.stem, f"{package}.{path.stem}")
    return names


def project_classes(modules: dict[str, str]) -> dict[str, object]:
    """Classes the project's modules define, by name (`Batch` -> rollout.Batch)."""
    found = {}
    for module in set(modules.values()):
        for name, obj in vars(importlib.import_module(module)).items():
            if inspect.isclass(obj) and obj.__module__ == module:
                found.setdefault(name, obj)
    return found


def has(obj, attr: str) -> bool:
    """An attribute, or a dataclass field or annotated field without a class-level default."""
    fields = {f.name for f in dataclasses.fields(obj)} if dataclasses.is_dataclass(obj) else set()
    return hasattr(obj, attr) or attr in fields or attr in getattr(obj, "__annotations__", {})


def problem(name: str, modules: dict, classes: dict, keys: set) -> str | None:
    """Why a cited name does not resolve, or None."""
    parts = name.split(".")
    if parts[-1] in FILES or name in keys or parts[0] in {k.split(".")[0] for k in keys} - set(modules):
        return None
    if parts[0] in modules:
        module, rest = modules[parts[0]], parts[1:]
        if rest and modules.get(rest[0]) == f"{parts[0]}.{rest[0]}":  # infra.passes.X
            module, rest = f"{parts[0]}.{rest[0]}", rest[1:]
        obj = importlib.import_module(module)
    elif parts[0] in classes:
        obj, rest = classes[parts[0]], parts[1:]
    elif parts[0] in FOREIGN or importlib.util.find_spec(parts[0]) is not None:
        return None
    else:
        return f"`{parts[0]}` is no module or class of this project (nor another project's the docs cite)"
    for attr in rest:
        if not has(obj, attr):
            return f"{obj.__name__ if hasattr(obj, '__name__') else obj} has no `{attr}`"
        obj = getattr(obj, attr, None)
    return None


def cited_problems(text: str) -> list[str]:
    modules, keys = project_names(), set(all_keys(config.Config))
    classes = project_classes(modules)
    return [f"{m.group(1)}: {why}" for m in NAME.finditer(text) if (why := problem(m.group(1), modules, classes, keys))]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_name_a_doc_cites_exists(doc):
    assert not cited_problems(doc.read_text()), f"{doc.name} cites names the code lacks"


def test_the_name_check_can_fail():
    assert cited_problems("`loss.POLICY_LOSSES`, `passes.needs_old_pass`, `algorithm.K`, `Batch.acc`, `a.yaml`") == []
    assert cited_problems("`loss.no_such_loss`") == ["loss.no_such_loss: loss has no `no_such_loss`"]
    assert cited_problems("`benchmarks.pass_at_k`")[0].startswith("benchmarks.pass_at_k: `benchmarks` is no module")
    assert cited_problems("`infra.passes.gone`") == ["infra.passes.gone: infra.passes has no `gone`"]


RUN_PATH = re.compile(r"runs/([A-Za-z0-9_.-]+)/(?:checkpoints|eval)\b")


def run_path_problems(text: str, written: set[str]) -> list[str]:
    """`runs/NAME/checkpoints` or `runs/NAME/eval` whose NAME no shipped config writes (`X` is a placeholder)."""
    return sorted({m.group(0) for m in RUN_PATH.finditer(text) if m.group(1) not in written | {"X"}})


def test_every_run_folder_an_example_names_is_one_a_shipped_config_writes():
    import subprocess

    written = {Path(config.load(p.name).trainer.output_dir).name for p in (REPO / "configs").glob("*.yaml")}
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    examples = [name for name in tracked if name.endswith((".py", ".md", ".sh")) and not name.startswith("tests/")]
    found = {name: problems for name in examples if (problems := run_path_problems((REPO / name).read_text(), written))}
    assert not found, f"examples name run folders no shipped config writes: {found}"
    assert run_path_problems("eval.py --model runs/qae/checkpoints/step_000300/model", written) == [
        "runs/qae/checkpoints"]  # the check can fail
