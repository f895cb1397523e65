"""The plumbing under the six components (train, rollout, reward, advantage, loss, eval): loading,
batching, the samplers, launching, checkpoints and logging. Nothing here imports a component, so a
fork changes the algorithm at the root without reading this package.

    model.py          the policy model and tokenizer, checked before anything loads, then loaded
    policy.py         the log-prob forward DeepSpeed wraps: packed rows, the output layer in one call,
                      equal pass counts on every rank
    passes.py         the update's passes: which responses get a forward, packed micro-batches, the old
                      log-probs a pass leaves for later ones, the entropy metrics' sample
    selection.py      a selection of a mini-batch's tokens over every rank (the covariance losses' pick)
    logprobs.py       log-probabilities and entropy of sampled tokens, chunked: no (B, T, V) fp32 tensor
    optim.py          AdamW and its learning-rate schedule from the config
    data.py           prompts in, micro-batches out: the template, distinct rows, the resumable sampler,
                      token-budget micro-batches
    readers.py        reading and checking training and benchmark files (jsonl, json, parquet, hub sets)
    evalsets.py       benchmarks without a model: read, tokenized, pass@k estimated, results written
    hf_sampler.py     the HF sampler: the training model's own decoding loop, one prefill per prompt
    vllm_sampler.py   the colocated vLLM sampler: sleep mode, one weight sync per step from ZeRO-3
    launch.py         the accelerator: DeepSpeed ZeRO-3 from the config, launch checks, collective timeouts
    ending.py         how a run ends: a failure in one `error:` line, or every rank's teardown
    gpu_memory.py     `rollout.gpu_memory_utilization: auto`: vLLM's share of the card
    checkpoint.py     atomic, rotating, resumable checkpoints; a failed write in one line
    safe_state.py     trainer state as plain data, read only with torch's restricted unpickler
    reshard.py        a ZeRO-3 checkpoint's optimizer shards rebuilt for another number of processes
    stop.py           a stop asked for by SIGUSR1, SIGTERM or a STOP file, agreed by all ranks
    config_loader.py  reading configs: `base:` inheritance, typed overrides, errors naming the key
    config_checks.py  the config's cross-field checks and derived values, run on every config built
    cli.py            a bad command line in one `error:` line, exit code 2
    diagnostics.py    the advantage's statistics, gate violations, entropy split by advantage sign
    wire.py           records packed as a few flat tensors for the all-gather over ranks
    logger.py         every metric documented, one step's metrics from all ranks' records, JSONL, wandb
    plots.py          metrics.png: held-out pass@k first, then the per-step metrics smoothed over raw points
"""
