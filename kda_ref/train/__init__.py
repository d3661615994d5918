"""Train the small hybrid KDA + MLA model that ships with the package (``kda_ref/assets/trained_tiny``).

``python -m kda_ref.train --help`` is the command line; :func:`train` the function. The shipped
weights load with :func:`load_trained`. See ``docs/training.md`` for the recipe and its metrics.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..utils.lazy import lazy_exports

# the torch-using parts load on first use (PEP 562), so `kda-ref train --help` answers before torch loads
__getattr__, __dir__, _LAZY = lazy_exports(__name__, {
    ".data": ["Corpus", "RecallSample", "build_corpus", "corpus_hash", "held_out_recall", "make_recall",
              "recall_stream"],
    ".loop": ["evaluate", "make_batch", "recall_accuracy", "text_loss", "train", "write_release"],
    ".recipe": ["Recipe", "shipped_k3_config", "shipped_model_config"],
})


TRAINED_DIR = Path(__file__).resolve().parent.parent / "assets" / "trained_tiny"
# the shipped trained models by kind: the Kimi-Linear one (the default everywhere) and the K3 demo
TRAINED_DIRS = {"kimi_linear": TRAINED_DIR, "k3": TRAINED_DIR.parent / "trained_k3"}


def trained_path(kind: str = "kimi_linear") -> Path:
    """Folder of a shipped trained model (``config.json``, the weights, ``recipe.json``, ``corpus.txt``):
    ``"kimi_linear"`` (the default) or ``"k3"`` (Kimi K3's layout with one MTP layer, ``docs/training.md``)."""
    if kind not in TRAINED_DIRS:
        raise ValueError(f"kind: must be one of {sorted(TRAINED_DIRS)}, got {kind!r}")
    return TRAINED_DIRS[kind]


def load_trained(backend: str = "torch", chunk_size: int = 64, kind: str = "kimi_linear"):
    """A shipped trained model (a :class:`~kda_ref.model.HybridModel` in eval mode)."""
    from ..model import load_pretrained

    folder = trained_path(kind)
    if not (folder / "recipe.json").is_file():
        raise FileNotFoundError(f"no trained weights at {folder} (run `python -m kda_ref.train`)")
    model = load_pretrained(folder, backend=backend, chunk_size=chunk_size)
    return model.eval()


def trained_info(kind: str = "kimi_linear") -> dict:
    """A shipped ``recipe.json``: recipe, seed, data hash, final metrics, wall time, versions."""
    return json.loads((trained_path(kind) / "recipe.json").read_text())


def trained_recipe(kind: str = "kimi_linear"):
    """A shipped model's :class:`~kda_ref.train.recipe.Recipe`."""
    from .recipe import Recipe

    return Recipe.from_dict(trained_info(kind)["recipe"])


def trained_corpus(kind: str = "kimi_linear"):
    """The exact text a shipped model was trained on (snapshot shipped beside the weights)."""
    from .data import Corpus

    info = trained_info(kind)
    return Corpus.from_text((trained_path(kind) / "corpus.txt").read_text(encoding="utf-8"), info["data"]["files"])


__all__ = sorted([*_LAZY, "TRAINED_DIR", "TRAINED_DIRS", "load_trained", "trained_corpus", "trained_info",
                  "trained_path", "trained_recipe"])
