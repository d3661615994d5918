"""Deprecated: the old name of :mod:`kda_ref.state_trace` (renamed in 2026-12 because ``inspect`` shadowed
the standard library's module). Importing it warns; it goes in the next release."""

import warnings

from .state_trace import (KDAStateTrace, RecoveryCurve, forward_states, invert_step,  # noqa: F401
                          recover_backwards, recovery_curve, trace_kda_states)

warnings.warn("kda_ref.inspect is now kda_ref.state_trace; the old name goes in the next release",
              DeprecationWarning, stacklevel=2)
