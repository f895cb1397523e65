"""Every place that sends a reader to a part of a doc finds it there. In every tracked .py, .md, .yaml and .sh file:
`docs/<doc>.md, "Name"` (also `docs/<doc>.md "Name"`, `docs/<doc>.md ("Name")`, `[docs/<doc>.md](<doc>.md), "Name"`
and `... "Name" and "Other"`) names a heading of that doc, whole or up to its qualifier (`"Qwen3-14B"` names
"Qwen3-14B (configs/...)", `"Mixture of experts"` names "Mixture of experts: Qwen3-30B-A3B (...)");
`docs/<doc>.md section 5.1` names a numbered heading; `docs/<doc>.md note 2` an item of the doc's "Notes:" list; and
a Markdown link `](#anchor)` or `](<doc>.md#anchor)` an anchor GitHub makes from a heading of that file. A citation
split over lines of a comment or a docstring counts. (Examples here say <doc>, so that this file cites nothing.)"""

import re
import subprocess
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = r"docs/(\w+)\.md(?:\]\([^)\s]*\))?"  # a doc, perhaps as a Markdown link: [docs/gpu.md](gpu.md)
NAMED = re.compile(DOC + r"(?:,\s*|\s+\(?|\s*\()\"([^\"]{1,100})\"((?:\s*(?:,|and)\s*\"[^\"]{1,100}\")*)")
SECTION = re.compile(DOC + r",?\s+\(?section (\d+(?:\.\d+)*)")
NOTE = re.compile(DOC + r",?\s+\(?note (\d+)")
ANCHOR = re.compile(r"\]\(((?:[\w./-]+\.md)?)#([\w-]+)\)")


def flat(text: str) -> str:
    """One line: line breaks of comments and docstrings (with their `#` and indentation) as one space, `\\"` as `"`."""
    return re.sub(r"\n[ \t]*(?:#+(?![#\w]) ?)?[ \t]*", " ", text).replace('\\"', '"')


@cache
def headings(doc: str) -> list[str]:
    """The headings of docs/<doc>.md as rendered: link markup reduced to its text, backticks dropped."""
    path = REPO / "docs" / f"{doc}.md"
    if not path.exists():
        return []
    lines = [line for line in path.read_text().splitlines() if re.match(r"#{1,6} ", line)]
    return [re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", line.lstrip("#").strip()).replace("`", "") for line in lines]


def names_a_heading(doc: str, name: str) -> bool:
    return any(h == name or h.startswith((name + " (", name + ":")) for h in headings(doc))


def notes(doc: str) -> int:
    """How many items the doc's "Notes:" list holds (0 without one)."""
    text = (REPO / "docs" / f"{doc}.md").read_text() if (REPO / "docs" / f"{doc}.md").exists() else ""
    block = text.split("\nNotes:\n", 1)[1].split("\n\n#", 1)[0] if "\nNotes:\n" in text else ""
    return len(re.findall(r"^\d+\. ", block, flags=re.M))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but - and _ dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def problems(name: str, text: str) -> tuple[list[str], int]:
    """(each broken citation of file `name`, how many citations it holds)."""
    bad, count, line = [], 0, flat(text)
    for m in NAMED.finditer(line):
        for cited in [m.group(2), *re.findall(r"\"([^\"]+)\"", m.group(3))]:
            count += 1
            if not names_a_heading(m.group(1), cited):
                bad.append(f"{name}: docs/{m.group(1)}.md has no heading {cited!r}")
    for m in SECTION.finditer(line):
        count += 1
        number = m.group(2) + ("." if "." not in m.group(2) else "")
        if not any(h.startswith(number + " ") for h in headings(m.group(1))):
            bad.append(f"{name}: docs/{m.group(1)}.md has no section {m.group(2)}")
    for m in NOTE.finditer(line):
        count += 1
        if int(m.group(2)) > notes(m.group(1)):
            bad.append(f"{name}: docs/{m.group(1)}.md has no note {m.group(2)}")
    if name.endswith(".md"):
        for m in ANCHOR.finditer(text):
            count += 1
            target = (REPO / name).parent / m.group(1) if m.group(1) else REPO / name
            doc = target.resolve().relative_to(REPO).as_posix()
            found = doc.startswith("docs/") and m.group(2) in {slug(h) for h in headings(Path(doc).stem)}
            if not found and not (doc == "README.md" and m.group(2) in readme_anchors()):
                bad.append(f"{name}: no heading of {doc} has the anchor #{m.group(2)}")
    return bad, count


@cache
def readme_anchors() -> set[str]:
    return {slug(re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", line.lstrip("#").strip()).replace("`", ""))
            for line in (REPO / "README.md").read_text().splitlines() if re.match(r"#{1,6} ", line)}


def test_every_cited_section_exists():
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    bad, count = [], 0
    for name in tracked:
        if name.endswith((".py", ".md", ".yaml", ".yml", ".sh")) and (REPO / name).exists():
            found, n = problems(name, (REPO / name).read_text())
            bad, count = bad + found, count + n
    assert not bad, "citations of doc sections that do not exist:\n" + "\n".join(bad)
    assert count >= 40, f"only {count} citations found: has the way the files cite changed?"


def test_the_check_can_fail():
    gpu = "docs/" + "gpu.md"  # split: this file's own examples must not count as citations
    ok = (f'# as computed ({gpu}, "Memory: Qwen3-8B on 8 x 80 GiB"), timeouts in docs/algorithm.md,\n'
          f'# "infra/launch.py"; {gpu} "Self-checks" and "Smoke test"; docs/algorithm.md section 5.1; {gpu} note 2\n')
    assert problems("x.yaml", ok) == ([], 6)
    for right, wrong in (('"Memory: Qwen3-8B', '"Memory: Qwen3-9B'), ('"infra/launch.py"', '"Timeouts"'),
                         ('"Smoke test"', '"Smoke"'), ("section 5.1", "section 5.9"), ("note 2", "note 9")):
        assert len(problems("x.yaml", ok.replace(right, wrong))[0]) == 1, wrong
    assert problems("x.md", "see [Measured](#measured) and [runner](gpu.md#nothing-here)")[1] == 2
    assert len(problems("docs/x.md", "[a](#measured) [b](gpu.md#self-checks) [c](#nowhere)")[0]) == 2
