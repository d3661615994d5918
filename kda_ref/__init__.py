"""kda_ref: a runnable reference engine for serving hybrid KDA (Kimi Delta Attention) + MLA models.

The engine never imports the visualizer (:mod:`model_viz`).
"""

from .model import ModelConfig

__all__ = ["ModelConfig"]
__version__ = "0.1.0"
