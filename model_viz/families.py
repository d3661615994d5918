"""The two models the pages show: Kimi-Linear and Kimi K3, each at the sizes a page needs.

A page where the model matters offers the choice (:func:`model_viz.ui.page_parts.model_family`) and
asks the chosen :class:`ModelFamily` for its configuration; nothing else compares the two names.

* ``small`` -- the random-weight model the engine scenarios run (``ModelConfig.tiny`` / ``k3_tiny``: the same
  widths, K3's layout and every K3 change on in the second);
* ``real`` -- the released model's sizes, for byte arithmetic only (``kimi_linear_48b`` / ``kimi_k3``);
* ``trained_kind`` -- the shipped trained model of that layout (``kda_ref.train.load_trained(kind=)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from kda_ref.model import ModelConfig


@dataclass(frozen=True)
class ModelFamily:
    key: str
    label: str  # i18n key of its name
    small: Callable[[], ModelConfig]
    real: Callable[[], ModelConfig]
    trained_kind: str
    small_name: str  # short names of the two sizes (three_states' configuration keys)
    real_name: str
    real_label: str  # i18n key of the released model's name ("Kimi-Linear-48B", "Kimi K3")


FAMILIES = {
    "kimi_linear": ModelFamily("kimi_linear", "common.family.kimi_linear", ModelConfig.tiny,
                               ModelConfig.kimi_linear_48b, "kimi_linear", "tiny", "48b",
                               "common.family.kimi_linear.real"),
    "k3": ModelFamily("k3", "common.family.k3", ModelConfig.k3_tiny, ModelConfig.kimi_k3, "k3", "k3_tiny", "k3",
                      "common.family.k3.real"),
}
DEFAULT_FAMILY = "kimi_linear"


def family(key: str) -> ModelFamily:
    """The family named ``key`` (``"kimi_linear"`` or ``"k3"``); ``ValueError`` for another name."""
    if key not in FAMILIES:
        raise ValueError(f"family: must be one of {sorted(FAMILIES)}, got {key!r}")
    return FAMILIES[key]
