"""kda_ref: a runnable reference engine for serving hybrid KDA (Kimi Delta Attention) + MLA models.

    from kda_ref import LLM, SamplingParams, ModelConfig

The engine never imports the visualizer (:mod:`model_viz`).
"""

from .engine import LLM, RequestOutput, SamplingParams
from .model import ModelConfig

__all__ = ["LLM", "ModelConfig", "RequestOutput", "SamplingParams"]
__version__ = "0.1.0"
