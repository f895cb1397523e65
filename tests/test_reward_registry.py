"""reward.py's registry of rewards (REWARDS): the contract an entry keeps, the config and score_batch's bounded path
for an entry that is not verify's own. No worker process starts here: verifier.pool.run_checks is replaced by a
recording stand-in (tests/test_reward.py drives the real pool)."""

import pytest

import config
import reward
from verifier import pool


def test_the_shipped_modes_are_entries_with_todays_scores():
    assert sorted(reward.REWARDS) == ["dapo", "verify"]
    assert reward.score_verify(r"so $\boxed{1{,}000}$", "1000") == (True, 1.0, "1{,}000")
    assert reward.score_dapo(r"so $\boxed{1000}$", "1000") == (False, -1.0, "[INVALID]")  # no `Answer:` line
    assert reward.score("Answer: 7", "7", mode="dapo") == reward.RewardResult(True, 1.0, "7")


def test_an_unknown_mode_is_one_line_naming_the_registered_ones():
    for call in (lambda: reward.score("Answer: 1", "1", mode="strict"),
                 lambda: reward.score_batch(["Answer: 1"], ["1"], mode="strict")):
        with pytest.raises(ValueError, match=r"^config key `reward.mode` must be one of \['dapo', 'verify'\], "
                                             r"got 'strict' \(the names in reward.REWARDS\)$"):
            call()
    with pytest.raises(config.ConfigError, match=r"`reward.mode` must be one of \['dapo', 'verify'\], got 'strict'"):
        config.from_dict({}, ["reward.mode=strict"])
    assert config.from_dict({}, ["reward.mode=dapo"]).reward.mode == "dapo"


@pytest.mark.parametrize("out, message", [
    ((True,), r"must return \(verdict, score\) or \(verdict, score, pred\), got \(True,\)"),
    (True, r"must return \(verdict, score\)"),
    ((1.0, True), r"returned the verdict 1.0; it must be a bool"),  # (score, verdict): swapped
    ((1, 1.0), r"returned the verdict 1; it must be a bool"),
    ((True, True), r"returned the score True; it must be a finite number"),
    ((True, float("nan")), r"returned the score nan"),
    ((True, "1"), r"returned the score '1'"),
])
def test_an_entry_that_breaks_the_contract_stops_naming_it(monkeypatch, out, message):
    monkeypatch.setattr(reward, "REWARDS", reward.REWARDS | {"broken": lambda response, gold, truncated: out})
    with pytest.raises(TypeError, match=r"reward entry 'broken' " + message):
        reward.score("Answer: 1", "1", mode="broken")
    with pytest.raises(TypeError, match=r"reward entry 'broken' " + message):
        reward.score_batch(["Answer: 1"], ["1"], mode="broken")


def two_checks(response, gold, truncated):
    """A fork-like entry that makes two math checks in turn: the answer, then half of it against half the gold."""
    pred = reward.extract_answer(response, truncated)
    ok = pred is not None and reward.bounded_verdict(pred, gold)
    ok = ok and reward.bounded_verdict(rf"\frac{{{pred}}}{{2}}", rf"\frac{{{gold}}}{{2}}")
    return ok, 0.5 if ok else 0.0  # no pred: eval.py's records get None


def test_an_entrys_math_checks_go_to_the_pool_once_per_pair_and_a_killed_check_is_unequal(monkeypatch):
    """Each check the string work cannot decide reaches verifier.pool.run_checks (the killable workers), each distinct
    pair once per round; the entry is called again with the answers; a killed check (None) counts as unequal and marks
    the item timed out, without its pred. An integer gold never reaches the pool."""
    asked = []

    def stand_in(jobs, timeout_s, workers):  # the pool's answers: x + y is a timeout, the rest equal
        asked.append(sorted(jobs.values()))
        return {k: None if "x + y" in pred else True for k, (pred, gold) in jobs.items()}

    monkeypatch.setattr(pool, "run_checks", stand_in)
    monkeypatch.setattr(reward, "REWARDS", reward.REWARDS | {"two-checks": two_checks})
    responses = [r"\boxed{2a}", r"\boxed{a+a}", r"\boxed{a+a}", r"\boxed{x + y}", r"\boxed{7}", "none"]
    golds = ["2a", "2a", "2a", "z", "7", "1"]
    results = reward.score_batch(responses, golds, mode="two-checks")
    assert [(r.acc, r.score, r.timeout) for r in results] == [
        (True, 0.5, False), (True, 0.5, False), (True, 0.5, False), (False, 0.0, True), (True, 0.5, False),
        (False, 0.0, False)]
    assert results[3].pred is None
    assert asked == [[("a+a", "2a"), ("x + y", "z")],  # round 1: 2a is decided as text, a+a asked once for two items
                     [(r"\frac{a+a}{2}", r"\frac{2a}{2}")]]  # round 2: the second check; equal texts need no pool
    verify = reward.score_batch(responses[:4], golds[:4])  # verify mode: one round, the same killed check
    assert [(r.acc, r.pred, r.timeout) for r in verify] == [(True, "2a", False), (True, "a+a", False),
                                                            (True, "a+a", False), (False, None, True)]
    assert asked[-1] == [("a+a", "2a"), ("x + y", "z")]


def test_score_runs_the_math_check_in_this_process(monkeypatch):
    monkeypatch.setattr(pool, "run_checks", None)  # score() never uses the pool
    assert reward.score(r"\boxed{a+a}", "2a") == reward.RewardResult(True, 1.0, "a+a")
    assert reward.bounded_verdict("0.5", r"\frac{1}{2}") and not reward.bounded_verdict("0.6", r"\frac{1}{2}")
