"""``kda_ref.trace``: typed trace events, tracers, and the JSONL trace format.

Every stage of the engine reports what it did as small typed events (:mod:`kda_ref.trace.events`, one
class per ``kind``); the visualizer reads them back. Nothing here depends on the rest of ``kda_ref``
(but ``kda_ref.utils``, which depends on nothing: the bounded reader of trace files) or on
``model_viz`` (only the standard library, plus torch inside :func:`summarize_tensor`), so any layer may
import it. Emit with ``if tracer.enabled: tracer.emit(KernelDispatch(...))``; record with
:class:`TraceRecorder`, read back with :func:`read_jsonl`, export with :func:`to_chrome_trace`.

Design notes: ``docs/trace.md`` (the table of event kinds: ``docs/trace.md#event-types``).
"""

from . import chrome, events, jsonl, recorder, summary
from .chrome import *  # noqa: F403
from .events import *  # noqa: F403
from .jsonl import *  # noqa: F403
from .recorder import *  # noqa: F403
from .summary import *  # noqa: F403

__all__ = [*chrome.__all__, *events.__all__, *jsonl.__all__, *recorder.__all__, *summary.__all__]
