"""The hybrid KDA + MLA model (Kimi-Linear architecture), its config, batch metadata and caches."""

from ..utils.lazy import lazy_exports

# loaded on first use (kda_ref.utils.lazy): importing one module of the package imports no other
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    '.batch': ['ForwardBatch'],
    '.layer_state': ['HybridCacheTensors', 'RequestCache'],
    '.config': ['ConfigError', 'ModelConfig'],
    '.model': ['HybridModel'],
    '.output': ['BoundaryStates', 'ForwardOutput', 'GateProbe', 'LayerRecord'],
    '.size': ['ModelSizeError', 'check_fits', 'model_bytes', 'parameter_count'],
    '.weights': ['CheckpointError', 'load_hf_state_dict', 'load_pretrained', 'save_pretrained'],
})
