"""The one engine configuration: flat keywords and the nested object are the same engine; every field is
checked in one place before anything is allocated; rollback strategies and drafters are objects."""

from __future__ import annotations

import pytest

from kda_ref import LLM, EngineConfig, ModelConfig, SamplingParams
from kda_ref.cache import BlockCacheOptions, RadixCacheOptions
from kda_ref.engine.config import (CacheConfig, ParallelConfig, SchedulerConfig, StaticDecodeConfig, field_specs,
                                   flat_keywords)
from kda_ref.model.verify_record import VERIFY_RECORDS, WRITE_SLOTS
from kda_ref.speculative import STRATEGIES, NgramDrafter, PerStepStates, SpecConfig

PROMPTS = [[1, 2, 3, 1, 2, 3, 1, 2, 3, 1], [7, 8, 9, 7, 8, 9]]


def test_flat_keywords_build_the_nested_configuration():
    cfg = EngineConfig.from_kwargs(max_num_seqs=3, memory_budget_bytes=8 << 20, prefix_cache="radix",
                                   checkpoint_policy="every_n", checkpoint_interval=128, speculative="ngram",
                                   num_speculative_tokens=2, spec_state="slots", static_decode=True,
                                   context_parallel_size=2, cp_backend="threads", seed=5)
    assert cfg.scheduler == SchedulerConfig(max_num_seqs=3)
    assert cfg.cache.prefix_cache == RadixCacheOptions(checkpoint_policy="every_n", checkpoint_interval=128)
    assert cfg.cache.page_size is None and cfg.cache.pool_page_size == 1  # implied by the radix cache
    assert cfg.speculative == SpecConfig(method="ngram", num_speculative_tokens=2, state="slots")
    assert cfg.static == StaticDecodeConfig(enabled=True)
    assert cfg.parallel == ParallelConfig(context_parallel_size=2, cp_backend="threads")
    assert cfg.seed == 5
    assert EngineConfig.from_kwargs(**cfg.to_kwargs()) == cfg  # the flat form round-trips
    assert cfg.replace(max_num_seqs=4).scheduler.max_num_seqs == 4 and cfg.replace().cache == cfg.cache


BY_HAND = [  # (flat keywords, the nested configuration written out by hand)
    (dict(), EngineConfig()),
    (dict(prefix_cache="block", block_size=32, hash_unit=16, retention_interval=0, max_num_seqs=4),
     EngineConfig(scheduler=SchedulerConfig(max_num_seqs=4),
                  cache=CacheConfig(prefix_cache=BlockCacheOptions(block_size=32, hash_unit=16, retention_interval=0)))),
    (dict(speculative="ngram", num_speculative_tokens=3, spec_state="replay", static_decode=True),
     EngineConfig(speculative=SpecConfig(method="ngram", num_speculative_tokens=3, state="replay"),
                  static=StaticDecodeConfig(enabled=True))),
]


@pytest.mark.parametrize("kw,nested", BY_HAND, ids=["default", "block", "spec-static"])
def test_flat_keywords_and_a_nested_config_written_by_hand_are_one_engine(kw, nested):
    assert EngineConfig.from_kwargs(**kw) == nested
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    plain = LLM(ModelConfig.micro()).generate(PROMPTS, params)  # caching and speculation change no answer
    got = LLM(ModelConfig.micro(), config=nested).generate(PROMPTS, params)
    assert [o.token_ids for o in got] == [o.token_ids for o in plain]


@pytest.mark.parametrize("kw", [
    dict(prefix_cache="block", block_size=48, hash_unit=16, eviction="marconi"),
    dict(prefix_cache=BlockCacheOptions(block_size=32, hash_unit=8)),
    dict(speculative="draft", draft_model=ModelConfig.micro(), num_speculative_tokens=2),
    dict(static_decode=True, speculative="ngram", spec_state="slots"),
    dict(context_parallel_size=2, cp_backend="threads", cp_min_tokens=64, page_size=32),
], ids=["block", "block-object", "draft-model", "static-spec", "cp"])
def test_every_configuration_round_trips_and_replace_changes_any_keyword(kw):
    cfg = EngineConfig.from_kwargs(**kw)
    assert EngineConfig.from_kwargs(**cfg.to_kwargs()) == cfg and cfg.replace() == cfg
    if cfg.cache.prefix_cache is not None:
        assert cfg.replace(block_size=64).cache.prefix_cache.block_size == 64
    if cfg.speculative is not None:
        assert cfg.replace(num_speculative_tokens=4).speculative.num_speculative_tokens == 4


@pytest.mark.parametrize("kw,match", [
    (dict(max_num_seqs=0), r"^max_num_seqs: must be an int in \[1, 4096\]"),
    (dict(max_num_seqs=4097), r"^max_num_seqs: must be an int in \[1, 4096\], got 4097"),
    (dict(max_num_seqs=2**40, static_decode=True), r"^max_num_seqs: must be an int in \[1, 4096\]"),
    (dict(max_num_batched_tokens=(1 << 20) + 1), r"^max_num_batched_tokens: must be an int in \[1, 1048576\]"),
    (dict(mixed_batch="both"), "^mixed_batch: must be one of"),
    (dict(checkpoint_dtype="fp8"), "^checkpoint_dtype: must be one of \\('fp32', 'bf16', 'int8'\\)"),
    (dict(cp_timeout=float("nan")), "^cp_timeout: must be a positive, finite number of seconds"),
    (dict(static_decode="yes"), "^static_decode: must be True or False"),
    (dict(backend="cuda"), "^backend: must be one of"),
    (dict(max_batch=2), "^max_batch: not an argument of LLM .*did you mean"),
    (dict(page_size=1, prefix_cache="block"), "^page_size: "),
    (dict(spec_state="slots"), "^spec_state: given without speculative"),
])
def test_every_setting_is_checked_in_one_place(kw, match):
    with pytest.raises(ValueError, match=match):
        EngineConfig.from_kwargs(**kw)


def test_config_and_keywords_do_not_mix_and_a_config_must_be_one():
    with pytest.raises(ValueError, match="^config: given with the keywords"):
        LLM(ModelConfig.micro(), config=EngineConfig(), max_num_seqs=2)
    with pytest.raises(ValueError, match="^config: expected an EngineConfig"):
        LLM(ModelConfig.micro(), config={"max_num_seqs": 2})
    with pytest.raises(ValueError, match="^scheduler: expected a SchedulerConfig"):
        EngineConfig(scheduler={"max_num_seqs": 2})


def test_model_dependent_settings_are_checked_against_the_model_before_the_pool(monkeypatch):
    from kda_ref.engine import llm as llm_mod
    from kda_ref.model import HybridModel

    built = []
    monkeypatch.setattr(llm_mod, "UnifiedMemoryPool", lambda *a, **k: built.append(1))
    model = HybridModel(ModelConfig.micro(), chunk_size=32)
    with pytest.raises(ValueError, match="^chunk_size: 64 contradicts"):
        LLM(model, chunk_size=64)
    with pytest.raises(ValueError, match="^track_interval: must be a positive multiple of the chunk size 32"):
        LLM(model, prefix_cache="radix", track_interval=48)
    assert not built


def test_every_documented_field_says_what_it_is_and_every_flat_keyword_is_accepted():
    for part in (EngineConfig, SchedulerConfig, CacheConfig, StaticDecodeConfig, ParallelConfig):
        specs = field_specs(part)
        assert specs and all(s["doc"] for s in specs)
    names = flat_keywords()
    assert len(names) == len(set(names))
    for name in ("static_decode", "checkpoint_policy", "retention_interval", "spec_tree_width", "cp_timeout"):
        assert name in names
    assert "enabled" not in names  # the static part's field is LLM's static_decode


def test_rollback_strategies_are_objects_the_engine_asks():
    assert {s.record for s in STRATEGIES.values()} == set(VERIFY_RECORDS)  # each kind of record has its strategy
    for s in STRATEGIES.values():  # a strategy that writes per-position slots holds k more; only per-step states branch
        assert s.extra_slots(3) == (3 if s.record.writes_slots else 0)
        assert s.supports_trees == (s.record.keeps_step_states and not s.record.writes_slots)
    llm = LLM(ModelConfig.micro(), speculative="ngram", spec_state="slots", num_speculative_tokens=2)
    assert llm.scheduler.extra_state_slots() == 2 and llm.runner.record is WRITE_SLOTS
    assert isinstance(llm.scheduler.drafter, NgramDrafter) and llm.scheduler.drafter.supports_trees


def test_a_custom_strategy_is_a_policy_hook():
    """A subclass passed as ``spec_state`` commits instead of the built-in one (the app's broken-rollback
    demonstration works this way); answers still come from the target's logits."""
    calls = []

    class Counting(PerStepStates):
        def commit(self, pool, out, kept, requests):
            calls.append(dict(kept))
            return super().commit(pool, out, kept, requests)

    params = SamplingParams(max_tokens=12, ignore_eos=True)  # the tiny model's answers repeat: n-grams match
    want = LLM(ModelConfig.tiny()).generate(PROMPTS, params)
    got = LLM(ModelConfig.tiny(), speculative="ngram", spec_state=Counting()).generate(PROMPTS, params)
    assert [o.token_ids for o in got] == [o.token_ids for o in want]
    assert calls and all(k >= 1 for kept in calls for k in kept.values())
    with pytest.raises(ValueError, match="^spec_state: must be one of"):
        LLM(ModelConfig.micro(), speculative="ngram", spec_state="rewind")


def test_the_disaggregated_engines_take_the_same_config():
    from kda_ref.disagg import DisaggregatedLLM

    cfg = EngineConfig.from_kwargs(max_num_seqs=2, prefix_cache="block", block_size=32)
    d = DisaggregatedLLM(ModelConfig.micro(), config=cfg)
    assert all(e.engine_config.cache == cfg.cache for e in (*d.prefills, *d.decodes))
    params = SamplingParams(max_tokens=5, ignore_eos=True)
    assert [o.token_ids for o in d.generate(PROMPTS, params)] == \
        [o.token_ids for o in LLM(ModelConfig.micro(), config=cfg).generate(PROMPTS, params)]
    with pytest.raises(ValueError, match="^config: given with the keywords"):
        DisaggregatedLLM(ModelConfig.micro(), config=cfg, seed=1)


def test_the_block_options_object_is_accepted_whole():
    opts = BlockCacheOptions(block_size=32, hash_unit=16)
    assert EngineConfig.from_kwargs(prefix_cache=opts).cache.prefix_cache is opts
    with pytest.raises(ValueError, match="^options: "):
        EngineConfig.from_kwargs(prefix_cache=opts, block_size=64)


def test_a_new_checkpoint_policy_is_one_class(monkeypatch):
    """Registered under a name, a CheckpointPolicy subclass is a checkpoint_policy like the built-in ones:
    it decides, the radix cache does the work, and the answers do not change."""
    from kda_ref.cache.radix import policies

    class EveryOtherChunk(policies.CheckpointPolicy):
        name = "every_other_chunk"

        def wants(self, rec, position):
            return position % 128 == 0

    monkeypatch.setitem(policies.CHECKPOINT_POLICIES, EveryOtherChunk.name, EveryOtherChunk)
    prompt = list(range(300))
    params = SamplingParams(max_tokens=4, ignore_eos=True)
    llm = LLM(ModelConfig.micro(), prefix_cache="radix", checkpoint_policy="every_other_chunk")
    first = llm.generate([prompt], params)[0]
    again = llm.generate([prompt[:290]], params)[0]  # a hit at 256, the last multiple of 128 before 289
    assert llm.stats()["cached_prompt_tokens"] == 256
    assert first.token_ids == LLM(ModelConfig.micro()).generate([prompt], params)[0].token_ids
    assert again.token_ids == LLM(ModelConfig.micro()).generate([prompt[:290]], params)[0].token_ids


def test_admit_prefilled_refuses_a_request_it_cannot_take_and_holds_nothing():
    """The public install of a prefilled state (disaggregation's decode side) checks before it allocates:
    an admitted request, an unknown id, a state of the wrong shape leave the pool as it was."""
    from kda_ref.engine import RequestError
    from kda_ref.model.layer_state import BoundaryState

    llm = LLM(ModelConfig.micro(), seed=0)
    ids = [1, 2, 3, 4, 5]
    donor = LLM(ModelConfig.micro(), seed=0)
    got = []
    donor.add_finish_listener(lambda r: got.append(donor.pool.tensors.read_boundary(r.slot, r.pages, len(ids))))
    donor.generate([ids], SamplingParams(max_tokens=1))
    free = llm.pool.free_bytes
    with pytest.raises(RequestError, match="^req_id: no request 7"):
        llm.admit_prefilled(7, got[0], 9)
    rid = llm.enqueue(ids, None, SamplingParams(max_tokens=3))
    bad = BoundaryState(recurrent={}, conv=got[0].conv, kv=got[0].kv)
    with pytest.raises(RequestError, match="^state: recurrent must map"):
        llm.admit_prefilled(rid, bad, 9)
    short = BoundaryState(recurrent=got[0].recurrent, conv=got[0].conv, kv={k: v[:3] for k, v in got[0].kv.items()})
    with pytest.raises(RequestError, match="^state: the MLA layers' cached rows cover 3 tokens, the prompt has 5"):
        llm.admit_prefilled(rid, short, 9)  # it would decode over rows that were never written
    for token in (2.5, True, -3, llm.model.config.vocab_size, "9"):
        with pytest.raises(RequestError, match="^first_token: must be a token id"):
            llm.admit_prefilled(rid, got[0], token)
    for state in ("abc", b"\x00" * 7):
        with pytest.raises(RequestError, match="^sampler_state: "):
            llm.admit_prefilled(rid, got[0], 9, state)
    assert llm.pool.free_bytes == free
    llm.admit_prefilled(rid, got[0], 9)
    with pytest.raises(RequestError, match="is not queued untouched"):
        llm.admit_prefilled(rid, got[0], 9)  # already running: nothing taken twice
    while llm.has_unfinished():
        llm.step()
    assert llm.pool.is_empty()


def test_a_custom_drafter_without_trees_is_asked_for_chains_only():
    from kda_ref.speculative import Drafter

    class Repeat(Drafter):
        def propose(self, seq_id, tokens, k):
            return tokens[-k:]

        def release(self, seq_id):
            pass

    llm = LLM(ModelConfig.micro(), speculative="ngram", spec_tree_width=2)
    llm.scheduler.drafter = Repeat()  # supports_trees keeps the contract's default (False)
    with pytest.raises(TypeError, match="^drafter: expected a kda_ref.speculative.Drafter"):
        llm.scheduler.drafter = object()
    params = SamplingParams(max_tokens=8, ignore_eos=True)
    want = LLM(ModelConfig.micro()).generate(PROMPTS, params)
    assert [o.token_ids for o in llm.generate(PROMPTS, params)] == [o.token_ids for o in want]


def test_a_checkpoint_policy_object_is_a_policy_hook():
    """As ``spec_state`` takes a strategy, ``checkpoint_policy`` takes a CheckpointPolicy object: nothing is
    registered, and the radix cache asks it as it asks the built-in ones."""
    from kda_ref.cache.radix import policies

    class EveryOtherChunk(policies.CheckpointPolicy):
        def wants(self, rec, position):
            return position % 128 == 0

    prompt = list(range(300))
    params = SamplingParams(max_tokens=4, ignore_eos=True)
    llm = LLM(ModelConfig.micro(), prefix_cache="radix", checkpoint_policy=EveryOtherChunk())
    first = llm.generate([prompt], params)[0]
    llm.generate([prompt[:290]], params)
    assert llm.stats()["cached_prompt_tokens"] == 256
    assert first.token_ids == LLM(ModelConfig.micro()).generate([prompt], params)[0].token_ids
    with pytest.raises(ValueError, match="^checkpoint_policy: must be one of .* or a CheckpointPolicy"):
        LLM(ModelConfig.micro(), prefix_cache="radix", checkpoint_policy=object())
