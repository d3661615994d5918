"""The app's UI strings, one module per namespace (``common`` and one per page slug); each holds
``STRINGS: {key: {"en": ..., "zh": ...}}``. :mod:`model_viz.i18n` merges them and looks them up."""
