"""model_viz: what the app's pages show, split by job. Each page has one slug (``app_pages/<slug>.py``)
and finds its pieces under the same name:

=====================  ==================================================================
``scenarios/<slug>``   runs the engine (or its caches, the simulator, the references) on a
                       canned scenario and returns plain data; every fact a page states is
                       checked here (``scenarios.common.require``)
``figures/<slug>``     turns that data into plotly figures, tables and sentences;
                       ``PAGE_CONCEPTS`` (the concepts the page explains) lives here
``data/``              the UI strings (keys ``<slug>.*``) and the concept map's prose, one JSON file
                       per language (``model_viz.i18n``, ``model_viz.concept_data``)
``ui/``                widgets shared by the pages (the step control, the concept panel, the
                       page table) and the render-time benchmark
=====================  ==================================================================

Shared: :mod:`model_viz.concepts` (the concept map, one source of truth: its data in
``model_viz/data/concepts*.json`` read by :mod:`model_viz.concept_data`, its record types in
:mod:`model_viz.concept_types`), :mod:`model_viz.i18n`,
``scenarios/common.py`` (the tiny model and the radix-cache scenarios several pages use),
``scenarios/engine_trace.py`` (run a traced engine, read a trace back into per-step views).

What each part may use of the engine (``tests/test_layering.py`` keeps it so):

* ``scenarios`` -- the engine's public API (``kda_ref.LLM``, ``SamplingParams``, ``ModelConfig``,
  ``kda_ref.model``), traces (``kda_ref.trace``), and the real functions a page demonstrates:
  ``kda_ref.cache`` (the block hashes and retention masks the state-block page replays, the
  boundary check the restore page breaks, the cost model), ``kda_ref.memory`` (page kinds),
  ``kda_ref.ops`` (the KDA references the segments page splits), ``kda_ref.sim`` and
  ``kda_ref.workloads`` (the density page), ``kda_ref.state_trace`` and ``kda_ref.train`` (the
  state-evolution page's states and recall probe), ``kda_ref.speculative`` (the speculative page's
  strategies and their storage arithmetic), ``kda_ref.context_parallel`` (the context-parallel page's maps, scan
  and byte arithmetic), ``kda_ref.disagg`` (the disaggregation page's handoff, checks and byte
  arithmetic), ``kda_ref.engine.config`` (the documented fields the Lab's settings form is built from),
  ``kda_ref.bench.checkpoints`` (the measurement of answers changed by lossy checkpoints, which the
  compressed-checkpoints page runs on demand), ``kda_ref.kv_events`` (the Live page's watcher of a vLLM or
  SGLang server: the subscriber, the forest, the metrics reader), ``kda_ref.tokenizer``, ``kda_ref.utils``;
* ``figures`` -- no engine: only types and arithmetic (``kda_ref.trace`` events,
  ``kda_ref.state_trace.KDAStateTrace``, ``kda_ref.model.ModelConfig``, ``kda_ref.cache.cost``),
  ``kda_ref.tokenizer``, ``kda_ref.utils``, and the page's own scenario module;
* ``ui`` -- nothing from ``kda_ref``.

Nothing here imports Streamlit at module level (``ui`` imports it inside the functions that draw),
so everything a page shows can be tested without a browser. ``kda_ref`` never imports ``model_viz``.
"""
