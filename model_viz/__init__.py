"""model_viz: turn ``kda_ref`` traces into figures, and map article concepts to source code.

Pure functions only (no Streamlit here): the pages under ``pages/`` call these and render what
they return, so everything a page shows can be tested without a browser.

* :mod:`model_viz.concepts` — the concept map (one source of truth: id -> title, explanation,
  our code, SGLang / vLLM counterparts, article section).
* :mod:`model_viz.i18n` — English / Chinese UI strings as data, :func:`model_viz.i18n.t`.
* :mod:`model_viz.state_figures` — plotly figures of KDA state evolution from a
  :class:`kda_ref.inspect.KDAStateTrace`.
* :mod:`model_viz.state_page` — the data side of the state-evolution page (prompt checks, model
  and trace construction).
"""

__all__ = ["concepts", "i18n", "state_figures", "state_page"]
