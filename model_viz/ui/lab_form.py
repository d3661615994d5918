"""The Lab's engine settings form, drawn from the configuration's documented fields.

:func:`engine_form` renders one input per field :func:`model_viz.scenarios.lab.form_fields` offers --
a checkbox for a bool, a select box for a field with choices, a number input bounded by the field's
documented range otherwise -- and returns ``LLM``'s keywords (:func:`~model_viz.scenarios.lab.engine_kwargs`).
Nothing here knows a field by name: a field added to the configuration with its documentation appears
in the form. Called twice by the Lab page (configuration A and B), with different widget keys.
"""

from __future__ import annotations

from ..i18n import t
from ..scenarios import lab
from .step_control import lang_keyed_choice

GROUP_LABEL = {"scheduler": "lab.group.scheduler", "cache": "lab.group.cache", "radix": "lab.group.radix",
               "block": "lab.group.block", "speculative": "lab.group.speculative", "static": "lab.group.static"}
CACHE_LABEL = {"none": "lab.cache.none", "radix": "lab.cache.radix", "block": "lab.cache.block"}
# each offered field's help in both languages (a field without one shows its English documentation)
FIELD_HELP = {
    "max_num_seqs": "lab.field.max_num_seqs", "max_num_batched_tokens": "lab.field.max_num_batched_tokens",
    "mixed_batch": "lab.field.mixed_batch", "memory_budget_bytes": "lab.field.memory_budget_bytes",
    "checkpoint_dtype": "lab.field.checkpoint_dtype", "checkpoint_policy": "lab.field.checkpoint_policy",
    "checkpoint_interval": "lab.field.checkpoint_interval",
    "max_checkpoints_per_path": "lab.field.max_checkpoints_per_path", "track_interval": "lab.field.track_interval",
    "block_size": "lab.field.block_size", "hash_unit": "lab.field.hash_unit",
    "mamba_cache_mode": "lab.field.mamba_cache_mode", "retention_interval": "lab.field.retention_interval",
    "partial_hits": "lab.field.partial_hits", "eviction": "lab.field.eviction",
    "marconi_alpha": "lab.field.marconi_alpha", "replay_granularity": "lab.field.replay_granularity",
    "speculative": "lab.field.speculative",
    "num_speculative_tokens": "lab.field.num_speculative_tokens", "spec_state": "lab.field.spec_state",
    "spec_tree_width": "lab.field.spec_tree_width", "prompt_lookup_min": "lab.field.prompt_lookup_min",
    "prompt_lookup_max": "lab.field.prompt_lookup_max", "static_decode": "lab.field.static_decode",
}
# what the two forms start from: A the SGLang-style radix cache, B no cache but n-gram speculation
SUGGESTED = {"A": {"prefix_cache": "radix"}, "B": {"prefix_cache": "none", "speculative": "ngram"}}


def field_input(spec: dict, key: str, default=None):
    """One input for a documented field (``spec`` from :func:`~model_viz.scenarios.lab.form_fields`),
    labelled with ``LLM``'s keyword."""
    import streamlit as st

    value = spec["default"] if default is None else default
    label = spec["key"]
    help_ = t(FIELD_HELP[label]) if label in FIELD_HELP else spec["doc"]
    if spec.get("kind") == "bool":
        return st.checkbox(label, value=bool(value), help=help_, key=key)
    if "choices" in spec:
        choices = list(spec["choices"])
        return st.selectbox(label, choices, index=choices.index(value), help=help_, key=key)
    if spec.get("kind") in ("float", "number"):
        return st.number_input(label, min_value=float(spec.get("min", 0.0)), value=float(value), help=help_, key=key)
    lo, hi = spec.get("min", 1), spec.get("max")
    if spec.get("range_text"):
        help_ = f"{help_} ({spec['range_text'].removeprefix('that is ')})"
    return st.number_input(label, min_value=lo, max_value=hi, value=value, step=1, help=help_, key=key,
                           placeholder="None" if spec.get("optional") else None)


def engine_form(prefix: str, defaults: dict | None = None) -> dict:
    """The settings of one configuration; ``prefix`` keeps two forms' widgets apart. Returns ``LLM``'s keywords."""
    import streamlit as st

    defaults = defaults or {}
    groups = lab.form_fields()
    cache = lang_keyed_choice(st.radio, f"{prefix}prefix_cache", t("lab.cache_label"), lab.PREFIX_CACHES,
                              defaults.get("prefix_cache", "none"), horizontal=True,
                              format_func=lambda c: t(CACHE_LABEL[c]) if c in CACHE_LABEL else c)
    spec_on = st.checkbox(t("lab.spec_label"), value=bool(defaults.get("speculative")), key=f"{prefix}spec")
    shown = ["scheduler", "cache", "static"] + [g for g in groups if g == cache] + \
        (["speculative"] if spec_on else [])  # a cache's options group is named after its kind
    values = {}
    for group in shown:
        label = t(GROUP_LABEL[group]) if group in GROUP_LABEL else group
        with st.expander(label, expanded=group in (cache, "speculative")):
            cols = st.columns(2)
            for j, spec in enumerate(groups[group]):
                with cols[j % 2]:
                    values[spec["key"]] = field_input(spec, f"{prefix}{spec['key']}", defaults.get(spec["key"]))
    return lab.engine_kwargs(values, cache, spec_on)
