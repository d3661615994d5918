"""The checkpoint codecs by name (``checkpoint_dtype=``), imported when one is looked up.

:mod:`.checkpoint_store` defines the codecs; this registry names them, so that the engine's configuration
offers their names (and ``kda-ref serve`` makes its flags) without importing torch.
"""

from __future__ import annotations

from ..utils.lazy import LazyRegistry

CHECKPOINT_CODECS = LazyRegistry({name: f"kda_ref.memory.checkpoint_store:{name.upper()}"
                                  for name in ("fp32", "bf16", "int8")})
CHECKPOINT_DTYPES = tuple(CHECKPOINT_CODECS)  # ("fp32", "bf16", "int8")


def checkpoint_codec(dtype):
    """The registered codec of a checkpoint dtype name (or a :class:`~kda_ref.memory.checkpoint_store.CheckpointCodec`
    itself); ``ValueError`` naming ``checkpoint_dtype`` for an unknown one."""
    from .checkpoint_store import CheckpointCodec

    if isinstance(dtype, CheckpointCodec):
        return dtype
    codec = CHECKPOINT_CODECS.get(dtype) if isinstance(dtype, str) else None
    if codec is None:
        compressed = tuple(n for n, c in CHECKPOINT_CODECS.items() if not c.shares_state_slots)
        raise ValueError(f"checkpoint_dtype: must be 'fp32' or one of {compressed}, got {dtype!r}")
    return codec


def checkpoint_bytes(config, codec, conv_dtype=None) -> int:
    """Bytes of one checkpoint (all KDA layers of ``config``) in ``codec`` (a name or a codec), the conv window
    in ``conv_dtype`` (None: fp32): :meth:`~kda_ref.memory.checkpoint_store.CheckpointCodec.checkpoint_bytes`."""
    codec = checkpoint_codec(codec)
    return codec.checkpoint_bytes(config) if conv_dtype is None else codec.checkpoint_bytes(config, conv_dtype)
