"""Train the small hybrid KDA + MLA model that ships with the package (``kda_ref/assets/trained_tiny``).

``python -m kda_ref.train --help`` is the command line; :func:`train` the function. The shipped
weights load with :func:`load_trained`. See ``docs/training.md`` for the recipe and its metrics.
"""

from __future__ import annotations

import json
from pathlib import Path

# the torch-using parts load on first use (PEP 562), so `kda-ref train --help` answers before torch loads
_DATA = ("Corpus", "RecallSample", "build_corpus", "corpus_hash", "held_out_recall", "make_recall", "recall_stream")
_LOOP = ("evaluate", "make_batch", "recall_accuracy", "text_loss", "train", "write_release")
_RECIPE = ("Recipe", "shipped_model_config")


def __getattr__(name: str):
    if name in _DATA:
        from . import data as module
    elif name in _LOOP:
        from . import loop as module
    elif name in _RECIPE:
        from . import recipe as module
    else:
        raise AttributeError(f"module 'kda_ref.train' has no attribute {name!r}")
    value = globals()[name] = getattr(module, name)
    return value


TRAINED_DIR = Path(__file__).resolve().parent.parent / "assets" / "trained_tiny"


def trained_path() -> Path:
    """Folder of the shipped trained model (``config.json``, ``model.safetensors``, ``recipe.json``)."""
    return TRAINED_DIR


def load_trained(backend: str = "torch", chunk_size: int = 64):
    """The shipped trained model (a :class:`~kda_ref.model.HybridModel` in eval mode)."""
    from ..model import load_pretrained

    if not (TRAINED_DIR / "model.safetensors").is_file():
        raise FileNotFoundError(f"no trained weights at {TRAINED_DIR} (run `python -m kda_ref.train`)")
    model = load_pretrained(TRAINED_DIR, backend=backend, chunk_size=chunk_size)
    return model.eval()


def trained_info() -> dict:
    """The shipped ``recipe.json``: recipe, seed, data hash, final metrics, wall time, versions."""
    return json.loads((TRAINED_DIR / "recipe.json").read_text())


def trained_recipe():
    """The shipped model's :class:`~kda_ref.train.recipe.Recipe`."""
    from .recipe import Recipe

    return Recipe.from_dict(trained_info()["recipe"])


def trained_corpus():
    """The exact text the shipped model was trained on (snapshot shipped beside the weights)."""
    from .data import Corpus

    info = trained_info()
    return Corpus.from_text((TRAINED_DIR / "corpus.txt").read_text(encoding="utf-8"), info["data"]["files"])


__all__ = [
    "Corpus", "RecallSample", "Recipe", "TRAINED_DIR", "build_corpus", "corpus_hash", "evaluate",
    "held_out_recall", "load_trained", "make_batch", "make_recall", "recall_accuracy", "recall_stream",
    "shipped_model_config", "text_loss", "train", "trained_corpus", "trained_info", "trained_path",
    "trained_recipe", "write_release",
]
