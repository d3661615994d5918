"""kda_ref: a runnable reference engine for serving hybrid KDA (Kimi Delta Attention) + MLA models.

    from kda_ref import LLM, SamplingParams, ModelConfig, EngineConfig

The names below are imported on first use (PEP 562), so that ``kda-ref --help`` and the command
line's argument errors answer before torch is imported. The engine never imports the visualizer
(:mod:`model_viz`).
"""

from .utils.lazy import lazy_exports

__version__ = "0.1.0"

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    ".engine": ["EngineConfig", "LLM", "OutputKind", "RequestDelta", "RequestOutput", "SamplingParams"],
    ".model": ["ModelConfig"],
})
