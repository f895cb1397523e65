"""The README stays true: its file map names what exists, and CI runs its test command."""

import ast
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def file_map() -> set[str]:
    """The paths the README's file table names (a row may name several: `tiny/`, `data/`)."""
    rows = re.findall(r"^\| (`[^|]+`) \|", README, flags=re.M)
    return {name for row in rows for name in re.findall(r"`([^`]+)`", row)}


def packages() -> list[Path]:
    return sorted(p.parent for p in REPO.glob("*/__init__.py"))


def test_every_listed_file_exists():
    missing = [p for p in file_map() if "*" not in p and not (REPO / p.rstrip("/")).exists()]
    assert not missing, f"README lists files that do not exist: {missing}"


def test_every_module_package_and_folder_is_listed():
    listed = file_map()
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    folders = {f"{path.split('/')[0]}/" for path in tracked if "/" in path and not path.startswith(".")}
    wanted = [p.name for p in REPO.glob("*.py")] + sorted(folders)
    unlisted = [p for p in wanted if p not in listed]
    assert not unlisted, f"README's file map does not mention: {unlisted}"


def test_every_script_bench_and_config_opens_on_what_it_does():
    """A folder is one README row, so each of its files says what it does in its first lines."""
    for path in [*REPO.glob("scripts/*.py"), *REPO.glob("bench/*.py"), *REPO.glob("scripts/*.sh"),
                 *REPO.glob("configs/**/*.yaml")]:
        text = path.read_text()
        head = ast.get_docstring(ast.parse(text)) if path.suffix == ".py" else "".join(
            line for line in text.splitlines()[:4] if line.startswith("#") and not line.startswith("#!"))
        assert head and len(head) > 40, f"{path.relative_to(REPO)} does not open on what it does"


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


# ----------------------------------------------------------------------------------------------
# The layout: the six components at the root, the rest in packages below them, no import circle.
# ----------------------------------------------------------------------------------------------

COMPONENTS = {"train", "rollout", "reward", "advantage", "loss", "eval"}


def project_modules() -> dict[str, Path]:
    """Every module of the project: the root's and the packages' (scripts, benches and tests excluded)."""
    found = {p.stem: p for p in REPO.glob("*.py")}
    for package in packages():
        found |= {f"{package.name}.{p.stem}": p for p in package.glob("*.py") if p.stem != "__init__"}
    return found


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The project modules a file imports anywhere in it (top level or inside a function)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found |= {n for n in names if n in modules}
    return found


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imports_of(path, set(modules)) - {name} for name, path in modules.items()}


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of the graph, as the path that closes it, or None."""
    done, path = set(), []

    def visit(node):
        if node in path:
            return path[path.index(node):] + [node]
        if node in done:
            return None
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if circle := visit(nxt):
                return circle
        path.pop()
        done.add(node)
        return None

    return next((c for node in sorted(graph) if (c := visit(node))), None)


def test_the_root_holds_the_six_components_and_the_config():
    assert {p.stem for p in REPO.glob("*.py")} == COMPONENTS | {"config"}


def test_no_import_circle_among_the_project_modules():
    circle = find_circle(import_graph())
    assert circle is None, f"import circle: {' -> '.join(circle)}"


def test_the_circle_check_can_fail(tmp_path):
    """The two circles the layout once had: one through a lazy import, one by a package's module."""
    (tmp_path / "a.py").write_text("def f():\n    import b\n")
    (tmp_path / "b.py").write_text("from a import f\n")
    graph = {name: imports_of(tmp_path / f"{name}.py", {"a", "b"}) for name in ("a", "b")}
    assert find_circle(graph) == ["a", "b", "a"]
    assert find_circle({"reward": {"verifier.pool"}, "verifier.pool": {"reward"}}) is not None


def test_the_packages_stand_below_the_components():
    for name, deps in import_graph().items():
        if name.startswith("infra."):
            assert not deps & COMPONENTS, f"{name} imports the component(s) {sorted(deps & COMPONENTS)}"
        if name.startswith("verifier."):
            assert all(d.startswith("verifier.") for d in deps), f"{name} imports {sorted(deps)} outside verifier/"


def test_no_module_is_over_400_lines():
    long = {name: n for name, p in project_modules().items() if (n := len(p.read_text().splitlines())) > 400}
    assert not long, f"modules over 400 lines: {long}"


# ----------------------------------------------------------------------------------------------
# Prose that stays true in a fork: one-line choices in the docstrings, their reasons in
# docs/algorithm.md, no file citing another file's choice by number.
# ----------------------------------------------------------------------------------------------

ALGORITHM_MD = REPO / "docs" / "algorithm.md"
CHOICE_REFERENCE = re.compile(r"[\w/]+\.py(?:'s)? (?:choice|departure|rule)s? \d")


def docstring_choices(text: str) -> list[str]:
    """The numbered items of a module docstring's "Choices" list, as written (line breaks kept)."""
    doc = ast.get_docstring(ast.parse(text)) or ""
    if not re.search(r"^Choices\b", doc, flags=re.M):
        return []
    listed = re.split(r"^Choices\b.*$", doc, maxsplit=1, flags=re.M)[1].strip("\n").split("\n\n")[0]
    return [item.strip() for item in re.split(r"^\d+\. ", listed, flags=re.M)[1:]]


def one_line(text: str) -> str:
    return " ".join(text.split())


def docs_choices(doc: str) -> dict[str, list[str]]:
    """docs/algorithm.md's "Choices by module": per module path, the bold first sentence of each item."""
    section = doc.split("\n## Choices by module", 1)[1].split("\n## ", 1)[0]
    found = {}
    for block in re.split(r"^### ", section, flags=re.M)[1:]:
        path = re.match(r"\[([^\]]+)\]", block).group(1)
        found[path] = [" ".join(m.split()) for m in re.findall(r"^\d+\. \*\*(.+?)\*\*", block, flags=re.M | re.S)]
    return found


def test_each_choice_is_one_line_and_docs_algorithm_gives_its_reasons():
    """A choice is at most two docstring lines; docs/algorithm.md lists it verbatim with its reasons."""
    listed = docs_choices(ALGORITHM_MD.read_text())
    for path in project_modules().values():
        rel, choices = str(path.relative_to(REPO)), docstring_choices(path.read_text())
        long = [number for number, choice in enumerate(choices, 1) if choice.count("\n") > 1]
        assert not long, f"{rel}: choices {long} are over two lines; keep the choice, move the why to docs/algorithm.md"
        if choices:
            assert listed.get(rel) == [one_line(c) for c in choices], \
                f"docs/algorithm.md, Choices by module, does not list {rel}'s choices verbatim"
        else:
            assert rel not in listed, f"docs/algorithm.md lists choices of {rel}, whose docstring has none"


def test_the_choice_checks_can_fail():
    text = '"""Doc.\n\nChoices, numbered:\n1. One.\n2. Two,\n   wrapped\n   thrice.\n\nAfter.\n"""\n'
    assert docstring_choices(text) == ["One.", "Two,\n   wrapped\n   thrice."]
    doc = "\n## Choices by module\n\n### [a.py](../a.py)\n\n1. **One.** Why.\n2. **Two,\n   wrapped.** Why.\n\n## Z\n"
    assert docs_choices(doc) == {"a.py": ["One.", "Two, wrapped."]}
    cited = ["see train" + ".py choice 10", "reward" + ".py's choices 1-3"]  # split: this file must not match
    assert all(CHOICE_REFERENCE.search(text) for text in cited)


def test_no_file_cites_another_files_choice_by_number():
    """Numbers move when a fork edits a list: point at the function or config key instead."""
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    hits = [f"{name}: {m.group(0)}" for name in tracked if name.endswith((".py", ".md", ".yaml", ".sh"))
            for m in CHOICE_REFERENCE.finditer((REPO / name).read_text())]
    assert not hits, "choices cited by number across files:\n" + "\n".join(hits)


def test_the_cpu_torch_comes_from_pytorchs_index_before_the_demo_set():
    """requirements-torch-cpu.txt names PyTorch's CPU index by its https address, as its only index, for the same
    torch build requirements-cpu.txt pins (which PyPI lacks, so that file alone stops instead of pulling CUDA torch);
    scripts/setup.sh installs it first, alone, without dependencies; no requirement file names a local folder."""
    torch_cpu = (REPO / "requirements-torch-cpu.txt").read_text().splitlines()
    assert "--index-url https://download.pytorch.org/whl/cpu" in torch_cpu
    pins = {n: [x.split("#")[0].strip() for x in (REPO / n).read_text().splitlines() if x.startswith("torch==")]
            for n in ("requirements-torch-cpu.txt", "requirements-cpu.txt")}
    assert pins["requirements-torch-cpu.txt"] == pins["requirements-cpu.txt"] == ["torch==2.13.0+cpu"]
    setup = (REPO / "scripts" / "setup.sh").read_text()
    first, rest = setup.index("--no-deps -r requirements-torch-cpu.txt"), setup.index('pip install "${sets[@]}"')
    assert first < rest
    for path in REPO.glob("requirements*.txt"):
        local = re.search(r"(?<![\w/])/(opt|tmp|home|root|work)/", path.read_text())
        assert not local, f"{path.name} names a folder of some machine: {local.group(0)}"
    proc = subprocess.run(["bash", str(REPO / "scripts" / "setup.sh"), "all"], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("error: say what to set up")
