"""The README stays true: its file map names what exists, and CI runs its test command."""

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def file_map() -> set[str]:
    return set(re.findall(r"^\| `([^`]+)` \|", README, flags=re.M))


def test_every_listed_file_exists():
    missing = [p for p in file_map() if not (REPO / p.rstrip("/")).exists()]
    assert not missing, f"README lists files that do not exist: {missing}"


def packages() -> list[Path]:
    return sorted(p.parent for p in REPO.glob("*/__init__.py"))


def test_every_module_config_and_bench_is_listed():
    listed = file_map()
    wanted = [p.name for p in REPO.glob("*.py")] + [f"{p.name}/" for p in packages()]
    wanted += [str(p.relative_to(REPO))
               for p in [*REPO.glob("configs/**/*.yaml"), *REPO.glob("bench/*.py"), *REPO.glob("scripts/*")]
               if p.name != "__pycache__"]
    unlisted = [p for p in wanted if p not in listed]
    assert not unlisted, f"README's file map does not mention: {unlisted}"


def test_ci_runs_the_readme_test_command():
    ci_command = (REPO / ".ci/run").read_text().strip().splitlines()[-1]
    assert f"    {ci_command}\n" in README, "the last line of .ci/run must be the README's test command, verbatim"


def test_requirements_pin_each_package_once():
    """The demo set (requirements-cpu.txt) and the test set (requirements-test.txt, which includes
    it) pin every package with ==, each in one file only, so the two cannot disagree."""
    assert "-r requirements-cpu.txt" in (REPO / "requirements-test.txt").read_text().splitlines()
    seen: dict[str, str] = {}
    for name in ("requirements-cpu.txt", "requirements-test.txt"):
        for line in (REPO / name).read_text().splitlines():
            spec = line.split("#")[0].split(";")[0].strip()
            if not spec or spec.startswith("-r"):
                continue
            assert "==" in spec, f"{name}: {spec!r} is not pinned with =="
            package = re.sub(r"[-_.]+", "-", spec.split("==")[0].split("[")[0]).lower()
            assert package not in seen, f"{package} is pinned in both {seen[package]} and {name}"
            seen[package] = name


def test_each_package_docstring_maps_its_modules():
    """A package is one README row; its __init__.py docstring names every module it holds."""
    assert packages(), "no package found"
    for package in packages():
        doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text()))
        assert doc, f"{package.name}/__init__.py has no docstring"
        unnamed = [p.name for p in package.glob("*.py") if p.name != "__init__.py" and p.name not in doc]
        assert not unnamed, f"{package.name}/__init__.py's docstring does not name {unnamed}"
