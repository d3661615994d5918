"""One step control for every page that has steps: previous / next / play-pause and a slider.

    i = step_control("hybrid_chain_step", last=n - 1, label=t("common.trace.step_label"))

The position lives in ``st.session_state[key]``; the buttons are ``{prefix}_prev`` / ``_next`` / ``_play``
/ ``_pause``, ``prefix`` defaulting to the page's slug. Play advances through a
``st.fragment(run_every=interval)`` timer. Pure helpers (:func:`clamp`, :func:`advance`) carry the
arithmetic; Streamlit is imported only inside the functions that need it.

Design notes: ``docs/visualizer.md#the-step-control``.
"""

from __future__ import annotations
from ..i18n import current_language, t


DEFAULT_INTERVAL_S = 1.2


def clamp(value, first: int, last: int, step: int = 1) -> int:
    """``value`` snapped to the grid ``first, first + step, ..., <= last`` (``first`` for ``None``)."""
    if step < 1:
        raise ValueError(f"step: must be >= 1, got {step}")
    if last < first:
        last = first
    top = first + ((last - first) // step) * step
    if value is None:
        return first
    v = int(value)
    if v <= first:
        return first
    if v >= top:
        return top
    return first + round((v - first) / step) * step


def advance(value, first: int, last: int, step: int = 1, delta: int = 1) -> int:
    """``delta`` grid positions from ``value``, clamped to the range."""
    return clamp(clamp(value, first, last, step) + delta * step, first, last, step)


def _keys(key: str, prefix: str | None) -> dict:
    p = prefix if prefix is not None else key.rsplit("_", 1)[0]
    return {"prev": f"{p}_prev", "next": f"{p}_next", "play": f"{p}_play", "pause": f"{p}_pause",
            "playing": f"_{key}__playing", "pending": f"_{key}__pending", "armed": f"_{key}__armed"}


def nearest_index(values: list[int], value) -> int:
    """The index of the last of the sorted ``values`` at or below ``value`` (0 when none is)."""
    if value is None:
        return 0
    return max((j for j, v in enumerate(values) if v <= value), default=0)


def step_control(key: str, *, last: int | None = None, first: int = 0, step: int = 1,
                 label: str | None = None, prefix: str | None = None, interval: float = DEFAULT_INTERVAL_S,
                 slider_format: str | None = None, prev_label: str | None = None, next_label: str | None = None,
                 values: list[int] | None = None) -> int:
    """Draw the control and return the current position (also in ``st.session_state[key]``).

    ``values``: the sorted numbers the slider shows instead of positions (a trace's engine step numbers,
    which need not be consecutive); the control then returns the index into ``values`` and
    ``st.session_state[key]`` holds the value shown."""
    import streamlit as st

    k = _keys(key, prefix)
    ss = st.session_state
    first, last, step, to_pos, to_val = _position_grid(ss, key, values, first, last, step)
    top = clamp(last, first, last, step)
    pos = to_pos(ss.get(key)) if key in ss else None

    # a timer tick asked for one advance: apply it before the slider exists
    if ss.pop(k["pending"], False) and ss.get(k["playing"]):
        pos = advance(pos, first, last, step)
    pos = clamp(pos, first, last, step)
    ss[key] = to_val(pos)
    if ss.get(k["playing"]) and (pos >= top or top == first):
        ss[k["playing"]] = False  # stop at the last frame
    playing = bool(ss.get(k["playing"]))
    _move, _play, _pause = _button_callbacks(ss, key, k, to_pos, to_val, first, last, step, top)

    c_prev, c_next, c_play, c_slider = st.columns([1.5, 1.5, 1.5, 7], vertical_alignment="bottom")
    c_prev.button(prev_label or t("common.prev"), key=k["prev"], on_click=_move, args=(-1,),
                  disabled=pos <= first, width="stretch")
    c_next.button(next_label or t("common.next"), key=k["next"], on_click=_move, args=(1,),
                  disabled=pos >= top, width="stretch")
    if playing:
        c_play.button(t("common.pause"), key=k["pause"], on_click=_pause, width="stretch", type="primary")
    else:
        c_play.button(t("common.play"), key=k["play"], on_click=_play, disabled=top == first, width="stretch")
    if top > first and values is not None:
        c_slider.select_slider(label or t("common.step_label"), options=values, key=key)
    elif top > first:
        kw = {"format": slider_format} if slider_format else {}
        c_slider.slider(label or t("common.step_label"), first, top, step=step, key=key, **kw)
    pos = clamp(to_pos(ss[key]), first, last, step)

    if playing:
        _start_ticker(key, k, interval)
    return pos


def _position_grid(ss, key: str, values: list[int] | None, first: int, last: int, step: int):
    """``(first, last, step, to_pos, to_val)``: the position grid and the maps between positions and shown values."""
    if values is not None:  # positions are indices into values; the widget shows and stores the values
        if not values:
            raise ValueError("values: must not be empty")
        first, last, step = 0, len(values) - 1, 1
        ss[key] = values[nearest_index(values, ss.get(key))] if key in ss else values[0]
    to_pos = (lambda v: nearest_index(values, v)) if values is not None else (lambda v: v)  # noqa: E731
    to_val = (lambda i: values[i]) if values is not None else (lambda i: i)  # noqa: E731
    return first, last, step, to_pos, to_val


def _button_callbacks(ss, key: str, k: dict, to_pos, to_val, first: int, last: int, step: int, top: int):
    """``(move, play, pause)``: the buttons' ``on_click`` callbacks, which change ``ss`` before the next run."""

    def _move(delta: int) -> None:
        ss[key] = to_val(advance(to_pos(ss.get(key)), first, last, step, delta))

    def _play() -> None:
        cur = clamp(to_pos(ss.get(key)), first, last, step)
        nxt = first if cur >= top else advance(cur, first, last, step)
        ss[key], ss[k["playing"]] = to_val(nxt), nxt < top

    def _pause() -> None:
        ss[k["playing"]] = False
        ss.pop(k["pending"], None)

    return _move, _play, _pause


def _start_ticker(key: str, k: dict, interval: float) -> None:
    """Run the play timer: a fragment that marks one advance pending and asks for a full rerun on each tick."""
    import streamlit as st

    ss = st.session_state
    ss[k["armed"]] = False

    @st.fragment(run_every=interval, key=f"{key}__tick")
    def _ticker() -> None:
        # the first call is part of the full run; every later call is a timer tick
        if ss.get(k["armed"]) and ss.get(k["playing"]):
            ss[k["pending"]] = True
            st.rerun()
        ss[k["armed"]] = True
        st.caption(t("common.playing", s=f"{interval:g}"))

    _ticker()


def lang_keyed_choice(widget, name: str, label: str, options, default, **kw):
    """A widget whose option labels depend on the language, keyed per language (``name_en`` /
    ``name_zh``): Streamlit treats relabelled options as a new widget (and would show no selection
    after a language switch), so the choice itself lives in the plain session key ``name`` and seeds
    the widget of the other language."""
    import streamlit as st

    lang = current_language()
    ss = st.session_state
    wkey = f"{name}_{lang}"
    if wkey not in ss or ss[wkey] not in options:
        keep = ss.get(name, default)
        ss[wkey] = keep if keep in options else default
    ss[name] = widget(label, options, key=wkey, **kw)
    return ss[name]
