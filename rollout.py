"""Group sampling: G responses per prompt from the current policy, scored, filtered by DAPO's
dynamic sampling, pooled over ranks and dealt as this rank's share of the training batch.

    engine = make_sampler(cfg.rollout, model, tokenizer, max_model_len)  # model: the HF model
    engine.sync_weights(model)                       # once per step: the policy's current weights
    out = generate(engine, prompt_ids, n=G, seed=s)  # -> Rollout, prompt-major; any number of calls
    engine.sleep()                                   # once per step, before the update
    collected = collect_batch(cfg, accelerator, engine, tokenizer, prompts, sampler, step, keep_rate)
    collected.batch                                  # one step's batch, this rank's share (a `Collected`)

The samplers live in infra/: "hf" (infra/hf_sampler.py) draws from the training model itself; "vllm"
(infra/vllm_sampler.py) is a colocated engine with its own copy of the weights, which
`sync_weights` overwrites. Both return raw token rows; `generate` cuts them at EOS into a `Rollout`.

Choices, numbered (a departure from the paper or verl says so; reasons in docs/algorithm.md, "Choices by module"):
1. Data parallel: each rank samples its share of every generation batch; the first `train_batch_size` groups
   kept over all ranks, in generation order (as DAPO), are dealt mini-batch by mini-batch (`deal_groups`).
2. Generation calls are seeded by their global index (`generate_share`, `sampling_seed`), not by rank.
3. `trainer.adaptive_gen_batch` sizes each generation batch from dynamic sampling's running keep rate
   (`KeepRate`); off in the paper configs, which keep verl's fixed `gen_batch_size`.
4. Dynamic sampling filters on verdicts (`acc`, as DAPO), not rewards, up to `algorithm.max_num_gen_batches`
   (`dynamic_sampling_keep`).
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass

import torch

import reward
from infra.wire import from_wire, to_wire

# ----------------------------------------------------------------------------------------------
# The records: a call's responses, one prompt's group, this rank's batch
# ----------------------------------------------------------------------------------------------

PER_TOKEN_FIELDS = ("rollout_logp", "policy_logp", "policy_entropy")


@dataclass(kw_only=True)
class PerToken:
    """Values per response token, where a sampler reports them: one list per response, one value per
    token (EOS included), else None."""

    rollout_logp: list[list[float]] | None = None  # the sampler's log-probs of the sampled tokens (vLLM)
    policy_logp: list[list[float]] | None = None  # the policy's own log softmax(z / T)[token] (HF)
    policy_entropy: list[list[float]] | None = None  # and its entropy at each token (HF)

    def per_token(self, rows: slice) -> dict:
        """The per-token fields of responses `rows`, for a record holding a part of these."""
        return {name: getattr(self, name)[rows] for name in PER_TOKEN_FIELDS if getattr(self, name) is not None}

    @staticmethod
    def joined(parts: list[PerToken]) -> dict:
        """The per-token fields of several records, in order; a field is kept only if every part has it."""
        values = {name: [getattr(p, name) for p in parts] for name in PER_TOKEN_FIELDS}
        return {name: [x for v in vs for x in v] for name, vs in values.items() if all(v is not None for v in vs)}


@dataclass
class Rollout(PerToken):
    """P*G sampled responses, prompt-major: response k belongs to prompt k // G."""

    response_ids: list[list[int]]  # (P*G) token lists, EOS included when generated
    truncated: list[bool]  # (P*G) hit max_response_len before EOS


def concat(parts: list[Rollout]) -> Rollout:
    """Several calls' rollouts as one, in order."""
    return Rollout([r for p in parts for r in p.response_ids], [t for p in parts for t in p.truncated],
                   **PerToken.joined(parts))


def split_responses(new_tokens: list[list[int]], eos_ids: list[int]) -> Rollout:
    """Cut each generated row after its first EOS; a row without one is truncated.

    >>> split_responses([[5, 6, 2, 0, 0], [7, 8, 9]], eos_ids=[2]).response_ids
    [[5, 6, 2], [7, 8, 9]]
    """
    responses, truncated = [], []
    eos = set(eos_ids)
    for row in new_tokens:
        end = next((t + 1 for t, tok in enumerate(row) if tok in eos), None)
        responses.append(row[:end] if end is not None else row)
        truncated.append(end is None)
    return Rollout(response_ids=responses, truncated=truncated)


def generate(engine, prompt_ids: list[list[int]], n: int, seed: int) -> Rollout:
    """n responses per prompt from either sampler, cut at EOS, per-token values cut alike."""
    rows, per_token = engine.sample(prompt_ids, n=n, seed=seed)  # (P*n) raw rows, prompt-major
    out = split_responses(rows, engine.eos_ids)
    for name, values in per_token.items():
        setattr(out, name, [v[: len(r)] for v, r in zip(values, out.response_ids)])
    return out


def make_sampler(rollout_cfg, model, tokenizer, max_model_len: int, from_disk: bool = False):
    """The sampler named by `rollout.backend`; `model` is the HF model, `max_model_len` the longest
    prompt plus response it must hold (vLLM sizes its KV cache by it). from_disk (vLLM, evaluation):
    the engine reads the weights at model.name_or_path itself, and `model` may be a shell without weights."""
    if rollout_cfg.backend == "hf":
        from infra.hf_sampler import HFSampler

        return HFSampler(model, tokenizer, rollout_cfg)
    from infra.vllm_sampler import VLLMSampler  # vLLM is imported only where its engine is built

    return VLLMSampler(model, tokenizer, rollout_cfg, max_model_len, from_disk)


# ----------------------------------------------------------------------------------------------
# One step's batch: generate, score, dynamic sampling, pooled over ranks
# ----------------------------------------------------------------------------------------------


def sampling_seed(seed: int, step: int, call: int, gen_batch: int) -> int:
    """Seed of one generation call: a function of where it is in the run, not of history."""
    key = hashlib.blake2b(f"{seed}/{step}/{call}/{gen_batch}".encode(), digest_size=8).digest()
    return int.from_bytes(key, "little") >> 1  # < 2**63


class DynamicSamplingError(RuntimeError):
    """Too few prompt groups with mixed correctness after algorithm.max_num_gen_batches batches."""


@dataclass
class Group(PerToken):
    """One prompt's G scored responses (the per-token fields: one list per response)."""

    prompt_ids: list[int]
    answer: str
    response_ids: list[list[int]]  # (G)
    reward: torch.Tensor  # (G,) shaped reward
    acc: torch.Tensor  # (G,) bool, the verifier's verdict
    penalty: torch.Tensor  # (G,) the overlong penalty inside `reward`


@dataclass
class Batch(PerToken):
    """This rank's training batch: P prompts x G responses, prompt-major (response k of prompt k // G)."""

    prompt_ids: list[list[int]]  # (P*G) prompt of each response
    response_ids: list[list[int]]  # (P*G)
    answers: list[str]  # (P*G) ground truth
    reward: torch.Tensor  # (P, G) shaped reward
    acc: torch.Tensor  # (P, G) bool, verifier's verdict
    penalty: torch.Tensor  # (P, G) the overlong penalty inside `reward`

    @staticmethod
    def of(groups: list[Group]) -> Batch:
        G = len(groups[0].response_ids)
        return Batch([g.prompt_ids for g in groups for _ in range(G)], [r for g in groups for r in g.response_ids],
                     [g.answer for g in groups for _ in range(G)],
                     torch.stack([g.reward for g in groups]), torch.stack([g.acc for g in groups]),
                     torch.stack([g.penalty for g in groups]), **PerToken.joined(groups))


@dataclass
class KeepRate:
    """The running fraction of generated groups that dynamic sampling keeps, and the generation
    batch it suggests (choice 3). Counts decay by 0.9 per generation batch."""

    kept: float = 0.0
    generated: float = 0.0

    def update(self, kept: int, generated: int) -> None:
        self.kept, self.generated = 0.9 * self.kept + kept, 0.9 * self.generated + generated

    def batch_size(self, needed: int, cap: int, world: int) -> int:
        """Prompts to generate for `needed` more groups: needed / rate + 25%, within [needed, cap], a multiple
        of world."""
        if not self.generated:
            return cap
        want = math.ceil(1.25 * needed / max(self.kept / self.generated, 0.05))
        return min(-(-max(want, needed) // world) * world, cap)


@dataclass
class Seen:
    """Every response generated this step on this rank, kept by dynamic sampling or not (for the metrics)."""

    reward: list[float]  # shaped reward
    acc: list[bool]  # the verifier's verdict
    lengths: list[int]  # response tokens
    truncated: list[bool]  # cut at rollout.max_response_len
    timeouts: int  # verifications past reward.timeout_s
    groups: int  # prompt groups generated
    kept: int  # of them, kept by dynamic sampling
    sizes: list[int]  # each generation batch's prompts, all ranks


@dataclass
class Collected:
    """What collect_batch returns: this rank's training batch, what was generated, and the time it took."""

    batch: Batch
    seen: Seen
    gen_batches: int  # generation batches dynamic sampling needed
    rollout_s: float  # seconds generating
    reward_s: float  # seconds verifying


def dynamic_sampling_keep(acc: torch.Tensor) -> torch.Tensor:
    """DAPO dynamic sampling: keep a prompt only if its responses' correctness is not all equal
    (std > 0). Uses `acc`, not the shaped score, as DAPO's `metric: acc`. (P, G) -> (P,) bool.

    >>> dynamic_sampling_keep(torch.tensor([[1, 0, 0], [1, 1, 1], [0, 0, 0]]))
    tensor([ True, False, False])
    """
    acc = acc.bool()  # (P, G)
    return acc.any(dim=1) & ~acc.all(dim=1)  # (P,)


def collect_batch(cfg, accelerator, engine, tokenizer, prompts, sampler, step,
                  keep_rate: KeepRate | None = None) -> Collected:
    """Generate, score and filter until `train_batch_size` groups with mixed correctness exist over
    all ranks; returns this rank's share (choice 1), what was generated, and timings."""
    trainer, G, world, rank = cfg.trainer, cfg.rollout.n, accelerator.num_processes, accelerator.process_index
    gen_size = trainer.train_batch_size
    if cfg.algorithm.dynamic_sampling:
        gen_size = trainer.gen_batch_size or trainer.train_batch_size
    adaptive = keep_rate is not None and trainer.adaptive_gen_batch and cfg.algorithm.dynamic_sampling
    kept: list[list[Group]] = []  # per generation batch, this rank's kept groups
    counts: list[list[int]] = []  # per generation batch, every rank's number of kept groups
    outs, scored, sizes, rollout_s, reward_s = [], [], [], 0.0, 0.0  # per generation batch, this rank's
    for gen_batch in range(1, cfg.algorithm.max_num_gen_batches + 1):
        needed = trainer.train_batch_size - sum(map(sum, counts))
        size = keep_rate.batch_size(needed, gen_size, world) if adaptive else gen_size  # the same on every rank
        gen_share = size // world
        idx = sampler.next(size)[rank * gen_share : (rank + 1) * gen_share]  # all ranks draw the same list
        group = [prompts[i] for i in idx]
        t0 = time.perf_counter()
        out = generate_share(engine, [p.prompt_ids for p in group], G, cfg, step, rank, gen_batch)
        t1 = time.perf_counter()
        texts = tokenizer.batch_decode(out.response_ids, skip_special_tokens=True)
        r = reward.shaped_rewards(texts, [p.answer for p in group for _ in range(G)],
                                  [len(ids) for ids in out.response_ids], out.truncated, cfg.reward,
                                  cfg.rollout.max_response_len)
        rollout_s, reward_s = rollout_s + t1 - t0, reward_s + time.perf_counter() - t1

        reward_pg = torch.tensor(r.reward, dtype=torch.float32).view(len(group), G)  # (P, G)
        acc_pg = torch.tensor(r.acc).view(len(group), G)  # (P, G)
        penalty_pg = torch.tensor(r.penalty, dtype=torch.float32).view(len(group), G)  # (P, G)
        keep = torch.ones(len(group), dtype=torch.bool)  # (P,)
        if cfg.algorithm.dynamic_sampling:
            keep = dynamic_sampling_keep(acc_pg)  # (P,) mixed correctness
        rows = lambda i: slice(i * G, (i + 1) * G)  # noqa: E731  the responses of prompt i
        kept.append([Group(group[i].prompt_ids, group[i].answer, out.response_ids[rows(i)], reward_pg[i], acc_pg[i],
                           penalty_pg[i], **out.per_token(rows(i)))
                     for i in keep.nonzero().flatten().tolist()])
        outs, scored, sizes = outs + [out], scored + [r], sizes + [size]
        counts.append(accelerator.gather(torch.tensor([len(kept[-1])], device=accelerator.device)).tolist())
        if keep_rate is not None:
            keep_rate.update(sum(counts[-1]), size)
        if sum(map(sum, counts)) >= trainer.train_batch_size:  # every rank sees the same counts: all stop together
            break
    else:
        raise DynamicSamplingError(
            f"dynamic sampling kept {sum(map(sum, counts))} of {sum(sizes)} prompt groups after "
            f"{cfg.algorithm.max_num_gen_batches} generation batches, fewer than the {trainer.train_batch_size} "
            "needed: every other group was all-correct or all-wrong. Raise algorithm.max_num_gen_batches or "
            "trainer.gen_batch_size, lower trainer.train_batch_size, or check the reward on a few completions."
        )
    seen = Seen([x for r in scored for x in r.reward], [x for r in scored for x in r.acc],
                [len(ids) for o in outs for ids in o.response_ids], [t for o in outs for t in o.truncated],
                sum(r.timeouts for r in scored), sum(s // world for s in sizes), sum(map(len, kept)), sizes)
    return Collected(Batch.of(deal_groups(cfg, accelerator, kept, counts)), seen, gen_batch, rollout_s, reward_s)


def deal_groups(cfg, accelerator, kept: list[list[Group]], counts: list[list[int]]) -> list[Group]:
    """This rank's groups of the training batch (choice 1).

    The batch is the first `train_batch_size` kept groups in generation order (batch, then rank,
    then position), as one process would keep them. Global group g sits in mini-batch
    g // m (m = mini_batch_size) at slot g % m, which rank (g % m) // (m / W) trains.
    """
    trainer, world, rank = cfg.trainer, accelerator.num_processes, accelerator.process_index
    per_rank = trainer.mini_batch_size // world  # groups of each mini-batch per rank
    mine, g = [], 0  # (global position, group) of this rank's kept groups in the batch
    for batch_kept, batch_counts in zip(kept, counts):
        for r, n in enumerate(batch_counts):
            if r == rank:
                mine += [(g + j, group) for j, group in enumerate(batch_kept[:n]) if g + j < trainer.train_batch_size]
            g += n
    if world > 1:
        from accelerate.utils import gather_object

        mine = gather_object([(pos, to_wire(group)) for pos, group in mine])  # every rank's, on every rank
        mine = [(pos, from_wire(Group, wire)) for pos, wire in mine]
    return [group for pos, group in sorted(mine, key=lambda x: x[0])
            if (pos % trainer.mini_batch_size) // per_rank == rank]


def generate_share(engine, prompt_ids: list[list[int]], G: int, cfg, step: int, rank: int, gen_batch: int) -> Rollout:
    """This rank's share of a generation batch, `rollout.prompts_per_call` prompts per call.

    Call j of rank r is global call r * calls_per_rank + j and is seeded by that index, so a
    single process with prompts_per_call = share / W samples what W processes sample.
    """
    per_call = cfg.rollout.prompts_per_call or len(prompt_ids)
    calls_per_rank = -(-len(prompt_ids) // per_call)
    parts = [generate(engine, prompt_ids[c : c + per_call], n=G,
                      seed=sampling_seed(cfg.trainer.seed, step, rank * calls_per_rank + c // per_call, gen_batch))
             for c in range(0, len(prompt_ids), per_call)]
    return concat(parts)

