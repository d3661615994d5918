"""kda_ref: a runnable reference engine for serving hybrid KDA (Kimi Delta Attention) + MLA models.

    from kda_ref import LLM, SamplingParams, ModelConfig, EngineConfig

The names below are imported on first use (PEP 562), so that ``kda-ref --help`` and the command
line's argument errors answer before torch is imported. The engine never imports the visualizer
(:mod:`model_viz`).
"""

__all__ = ["EngineConfig", "LLM", "ModelConfig", "OutputKind", "RequestDelta", "RequestOutput", "SamplingParams"]
__version__ = "0.1.0"


def __getattr__(name: str):
    if name in ("EngineConfig", "LLM", "OutputKind", "RequestDelta", "RequestOutput", "SamplingParams"):
        from . import engine as module
    elif name == "ModelConfig":
        from . import model as module
    else:
        raise AttributeError(f"module 'kda_ref' has no attribute {name!r}")
    value = globals()[name] = getattr(module, name)
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
