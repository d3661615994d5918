"""Deprecated: the old name of :mod:`kda_ref.context_parallel.torchrun`; ``python -m kda_ref.parallel.torchrun``
still runs it (with a warning), and importing it warns (next release: gone)."""

if __name__ == "__main__":
    import warnings

    from kda_ref.context_parallel.torchrun import main

    warnings.warn("kda_ref.parallel.torchrun is now kda_ref.context_parallel.torchrun; the old name goes in the "
                  "next release", DeprecationWarning, stacklevel=1)
    raise SystemExit(main())

from ..utils.renamed import forward_to  # noqa: E402

forward_to(__name__, "kda_ref.context_parallel.torchrun")
