"""The serving engine: requests, scheduler, model runner, and the ``LLM`` entry point."""

from ..utils.lazy import lazy_exports

# loaded on first use (kda_ref.utils.lazy): importing one module of the package imports no other
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    '.config': ['CacheConfig', 'EngineConfig', 'ParallelConfig', 'SchedulerConfig', 'StaticDecodeConfig'],
    '.llm': ['LLM'],
    '.request': ['OutputKind', 'Request', 'RequestDelta', 'RequestError', 'RequestOutput', 'RequestStatus',
                 'SamplingParams'],
    '.scheduler': ['Scheduler', 'SchedulerOutput'],
})
