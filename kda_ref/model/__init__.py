"""The hybrid KDA + MLA model (Kimi-Linear architecture), its config, batch metadata and caches."""

from .batch import ForwardBatch
from .layer_state import HybridCacheTensors, RequestCache
from .config import ConfigError, ModelConfig
from .model import HybridModel
from .output import BoundaryStates, ForwardOutput, GateProbe, LayerRecord
from .size import ModelSizeError, check_fits, model_bytes, parameter_count
from .weights import CheckpointError, load_hf_state_dict, load_pretrained, save_pretrained

__all__ = [
    "BoundaryStates", "CheckpointError", "ConfigError", "ForwardBatch", "ForwardOutput", "GateProbe",
    "HybridCacheTensors", "HybridModel", "LayerRecord", "ModelConfig", "ModelSizeError", "RequestCache", "check_fits",
    "load_hf_state_dict", "load_pretrained", "model_bytes", "parameter_count", "save_pretrained",
]
