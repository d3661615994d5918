"""Kernel backends by name: the one place that knows what ``"torch"`` and ``"triton"`` mean.

A :class:`KernelBackend` answers the questions a layer asks of its kernels (which MLA decode to run,
which chunk sizes the chunk kernel takes) so that no caller outside :mod:`kda_ref.ops` compares a
backend's name. :data:`KERNEL_BACKENDS` registers each once; :data:`BACKENDS` is their names.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KernelBackend:
    """One backend: ``name`` and what it runs.

    ``triton``: the Triton kernels (:mod:`kda_ref.ops.triton`, imported on first use: a GPU or
    ``TRITON_INTERPRET=1``) instead of the torch references. ``chunk_sizes``: the chunk sizes its chunk
    kernel takes (``None``: any power of two). ``uses_triton_mla_decode``: an MLA decode with one query
    per sequence over the paged latent rows runs the Triton kernel
    (:func:`~kda_ref.ops.triton.paged_mla_decode`) rather than the torch absorbed form.
    ``takes_pad_rows``: its decode and verify kernels take a static-shape step's ``PAD_SLOT_ID`` rows
    (:mod:`kda_ref.ops.pad_rows`); the Triton kernels check their slots on the host, which a captured
    step cannot. (Fields, not properties: the fused decode step reads them every layer.)"""

    name: str
    triton: bool = False
    chunk_sizes: tuple[int, ...] | None = None
    uses_triton_mla_decode: bool = False
    takes_pad_rows: bool = True

    def takes_chunk_size(self, chunk_size: int) -> bool:
        return self.chunk_sizes is None or chunk_size in self.chunk_sizes


TRITON_CHUNK_SIZES = (16, 32, 64)  # kda_ref.ops.triton.kda_chunk.CHUNK_SIZES (tl.dot needs >= 16)

KERNEL_BACKENDS: dict[str, KernelBackend] = {
    "torch": KernelBackend("torch"),
    "triton": KernelBackend("triton", triton=True, chunk_sizes=TRITON_CHUNK_SIZES, uses_triton_mla_decode=True,
                            takes_pad_rows=False),
}
BACKENDS = tuple(KERNEL_BACKENDS)


def kernel_backend(backend) -> KernelBackend:
    """The :class:`KernelBackend` of ``backend``: a name of :data:`BACKENDS`, a :class:`KernelBackend`, or
    anything holding one as ``.kernels`` (a :class:`~kda_ref.ops.dispatcher.KDAKernelDispatcher`)."""
    if isinstance(backend, KernelBackend):
        return backend
    kernels = getattr(backend, "kernels", None)
    if isinstance(kernels, KernelBackend):
        return kernels
    found = KERNEL_BACKENDS.get(backend) if isinstance(backend, str) else None
    if found is None:
        raise ValueError(f"backend: must be one of {BACKENDS}, got {backend!r}")
    return found
