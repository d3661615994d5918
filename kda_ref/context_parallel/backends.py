"""The context-parallel backends by name, and which device each can serve: read by the engine's configuration
(``cp_backend``), which imports this without torch; :mod:`.launch` starts them."""

from __future__ import annotations

CP_BACKENDS = ("gloo", "nccl", "threads")  # gloo / nccl processes, or threads of this process


def backend_problem(backend, device_type: str) -> str | None:
    """Why ``backend`` cannot run a model on ``device_type`` (``"cpu"``, ``"cuda"``), or ``None``: the one
    place that knows the backends (:meth:`~kda_ref.engine.config.EngineConfig.check_model` asks it before the
    pools are built, :func:`~kda_ref.context_parallel.launch.context_parallel_prefill` before it starts)."""
    if backend not in CP_BACKENDS:
        return f"must be one of {CP_BACKENDS}, got {backend!r}"
    if backend == "nccl" and device_type != "cuda":
        return f"'nccl' moves CUDA tensors and the model is on the {device_type}; use 'gloo' (processes) or 'threads'"
    return None
