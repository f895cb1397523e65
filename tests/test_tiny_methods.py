"""scripts/tiny_methods.py on made-up runs: the table's numbers against hand computation, a method's own metrics
only, a missing run left out, the doc's marked block replaced with everything outside it kept, and each Table 2
config's loss settings as overrides that load."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("tiny_methods", ROOT / "scripts" / "tiny_methods.py")
tiny_methods = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tiny_methods)


def write_run(folder: Path, steps: int, extra: dict) -> None:
    folder.mkdir(parents=True)
    rows = []
    for step in range(1, steps + 1):
        row = {"step": step, "reward/acc": step / 10, "policy/entropy": 0.1 * step, "adv/zero_frac": 0.5, **extra}
        if step in (1, steps):
            row |= {"eval/test/pass@1": 0.3 if step == 1 else 0.5, "eval/test/pass@4": 0.7}
        rows.append(row)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_table_by_hand(tmp_path):
    write_run(tmp_path / "kl-cov_QAE", 20, {"loss/cov_selected": 0.002, "loss/clip_frac_high": 9.0})
    text = tiny_methods.table(tmp_path)
    lines = text.splitlines()
    assert len(lines) == 3  # header, rule, the one run there
    # acc: first 10% = steps 1-2 -> (0.1 + 0.2) / 2; last = steps 19-20 -> 1.95; entropy mean over 1..20 = 1.05
    assert lines[2] == "| kl-cov | QAE | 0.300 -> 0.500 | 0.700 | 0.150 -> 1.950 | 1.050 | 0.50 | cov_selected 0.002 |"


def test_the_doc_block_is_replaced_and_the_rest_kept(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(f"before\n{tiny_methods.BEGIN}\nold table\n{tiny_methods.END}\nafter\n")
    tiny_methods.put_into(doc, "| new |")
    assert doc.read_text() == f"before\n{tiny_methods.BEGIN}\n| new |\n{tiny_methods.END}\nafter\n"


@pytest.mark.parametrize("method", tiny_methods.METHODS)
def test_each_methods_overrides_load_over_the_tiny_config(method):
    import config

    for base in tiny_methods.BASELINES.values():
        algo = config.load(base, tiny_methods.policy_loss_overrides(tiny_methods.METHODS[method])).algorithm
        assert algo.policy_loss == method and algo.baseline == config.load(base).algorithm.baseline
