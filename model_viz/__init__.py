"""model_viz: what the app's pages show, split by job; each page's pieces are named by its slug.

``scenarios/<slug>`` runs the engine on a canned scenario and checks every fact a page states
(``scenarios.common.require``); ``figures/<slug>`` draws it with plotly (and holds ``PAGE_CONCEPTS``);
``data/`` holds the UI strings and the concept map as JSON; ``ui/`` the shared widgets. What each part
may import from ``kda_ref`` is kept by ``tests/test_layering.py``; nothing here imports Streamlit at
module level, and ``kda_ref`` never imports ``model_viz``.

Design notes: ``docs/visualizer.md#the-parts-and-what-they-may-use``.
"""
