"""bench/bench_reward_heldout.py's estimate, on a six-pair set computed by hand: each stratum's labelled
pairs stand for its pool pairs, today's flips count by their labels, an unlabelled flip or a pool that
differs from the set stops it."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import bench_reward_heldout  # noqa: E402

# id, gold, response, verify at sampling, Math-Verify, label (None: not sampled)
PAIRS = [
    ("p1", "5", "Answer: 5", False, True, True),  # disagree; verify today flips it to +1, as labelled
    ("p2", "7", "Answer: 8", False, True, False),  # disagree: Math-Verify's false positive
    ("p3", "3", "Answer: 3", True, True, True),  # agree_correct, labelled: weight 2
    ("p4", "4", "Answer: 4", True, True, None),
    ("p5", "9", "Answer: 1", False, False, False),  # agree_wrong, labelled: weight 2
    ("p6", "2", "Answer: 3", False, False, None),
]


def write_set(tmp_path: Path, pairs=PAIRS, response_of=None) -> tuple[Path, Path]:
    set_rows, pool_rows = [], []
    for i, gold, response, before, mv, label in pairs:
        sha = hashlib.sha256((gold + "\x00" + response).encode()).hexdigest()[:16]
        agree = "agree_correct" if before else "agree_wrong"
        stratum = None if label is None else "disagree" if before != mv else agree
        set_rows.append({"id": i, "sha": sha, "ours_before": before, "mathverify": mv, "stratum": stratum,
                         "label": label, "note": ""})
        pool_rows.append({"id": i, "gold": gold, "response": (response_of or {}).get(i, response), "truncated": False})
    (tmp_path / "s.jsonl").write_text("".join(json.dumps(r) + "\n" for r in set_rows))
    (tmp_path / "pool.jsonl").write_text("".join(json.dumps(r) + "\n" for r in pool_rows))
    return tmp_path / "s.jsonl", tmp_path / "pool.jsonl"


def run(set_file: Path, pool: Path, capsys) -> tuple[int, str]:
    code = bench_reward_heldout.main(["--set", str(set_file), "--pool", str(pool), "--workers", "1"])
    return code, capsys.readouterr().out


def test_the_estimate_reweights_the_strata_and_counts_each_flip_by_its_label(tmp_path, capsys):
    code, out = run(*write_set(tmp_path), capsys)
    # at sampling: p2, p3 (x2), p5 (x2) right = 5 of 6; p1 missed. Math-Verify: p1, p3 (x2), p5 (x2) right;
    # p2 accepted wrongly
    assert "verify at sampling   accuracy 0.833  false positives   0.0  misses    1.0" in out
    assert "Math-Verify 0.9.0    accuracy 0.833  false positives   1.0  misses    0.0" in out
    assert "verify today         accuracy 1.000  false positives   0.0  misses    0.0" in out  # p1's flip: +1/6
    assert "(1 verdicts flipped since sampling, 0 of them unlabelled)" in out and code == 0


def test_an_unlabelled_flip_is_listed_and_fails(tmp_path, capsys):
    pairs = [p if p[0] != "p4" else ("p4", "4", "Answer: 4", False, False, None) for p in PAIRS]
    code, out = run(*write_set(tmp_path, pairs), capsys)
    assert code == 1 and "unlabelled flip: p4 -> True" in out


def test_a_pool_that_differs_from_the_set_stops(tmp_path, capsys):
    with pytest.raises(SystemExit, match="1 pairs of set .* differ there .*first: p3"):
        run(*write_set(tmp_path, response_of={"p3": "Answer: 4"}), capsys)
