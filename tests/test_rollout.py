"""rollout.py's pieces that need no sampler: DAPO's dynamic-sampling filter, and a group's round trip
through the all-gather's wire format (infra.wire); reward.shaped_rewards, its one call into reward.py."""

import pickle

import torch

import config
import reward
from infra.wire import from_wire, to_wire
from rollout import Group, dynamic_sampling_keep


def test_dynamic_sampling_keep():
    acc = torch.tensor([[1, 0, 1, 1], [1, 1, 1, 1], [0, 0, 0, 0], [0, 0, 0, 1]])
    assert dynamic_sampling_keep(acc).tolist() == [True, False, False, True]
    assert dynamic_sampling_keep(torch.tensor([[True]])).tolist() == [False]


def test_a_group_survives_the_wire():
    group = Group([5, 6, 7], "42", [[1, 2, 3], [4]], torch.tensor([1.0, -1.5]), torch.tensor([True, False]),
                  torch.tensor([0.0, -0.5]), rollout_logp=[[-0.1, -0.25, 0.0], [-2.0]])
    wire = pickle.loads(pickle.dumps(to_wire(group)))  # what gather_object does to it
    back = from_wire(Group, wire)
    assert back.prompt_ids == [5, 6, 7] and back.answer == "42" and back.response_ids == [[1, 2, 3], [4]]
    assert back.rollout_logp == [[-0.1, -0.25, 0.0], [-2.0]] and back.policy_logp is None
    assert all(torch.equal(getattr(back, k), getattr(group, k)) for k in ("reward", "acc", "penalty"))
    assert wire["response_ids"][0].dtype == torch.int32  # tokens travel as int32, per-token values as float64
    assert wire["rollout_logp"][0].dtype == torch.float64


def test_shaped_rewards_are_the_score_plus_the_overlong_penalty():
    cfg = config.RewardConfig(mode="verify", overlong_buffer_len=4, overlong_penalty_factor=0.5)
    r = reward.shaped_rewards(["Answer: 7", "Answer: 7", "Answer: 8"], ["7", "7", "7"], [3, 8, 10],
                              [False, False, True], cfg, max_response_len=10)
    assert r.acc == [True, True, False] and r.score == [1.0, 1.0, -1.0]
    assert r.penalty == [0.0, -0.25, -0.5] and r.reward == [1.0, 0.75, -1.5] and r.timeouts == 0
    off = reward.shaped_rewards(["Answer: 7"], ["7"], [10], [True], config.RewardConfig(overlong_buffer_len=0), 10)
    assert off.penalty == [0.0] and off.reward == off.score
