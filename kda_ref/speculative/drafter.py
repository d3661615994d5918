"""``Drafter``: what proposes draft tokens -- the one interface the scheduler drafts through.

SGLang: ``speculative/ngram_worker.py``, ``eagle_worker.py`` (0.5.23: ``eagle_worker_v2.py``); vLLM:
``v1/spec_decode/ngram_proposer.py``, ``eagle.py`` (each behind one "propose" call). Subclasses register under their
``speculative=`` name in :mod:`.drafters`; :class:`~kda_ref.speculative.SpecConfig` checks the options against the
class, never the name. Design notes: ``docs/spec_decode.md#the-drafter-contract``.
"""

from __future__ import annotations

import difflib
from abc import ABC, abstractmethod

CAPABILITIES = ("needs_model", "needs_target", "needs_hidden", "looks_up_suffixes", "supports_trees")


class Drafter(ABC):
    """What the engine drafts through. The class attributes say what a drafter needs and offers; the
    engine reads them directly, so each has a default here, and a subclass that sets an unknown
    capability-like name (``need_hidden``) is refused when the class is made, not silently ignored.

    * ``needs_model``: ``speculative=`` needs ``draft_model`` (a small model; :class:`SpecConfig` checks it)
    * ``needs_target``: :meth:`build` is given the served model (K3's MTP layer is the target's own)
    * ``needs_hidden``: the engine hands it the target's hidden rows after each step (:meth:`observe`)
    * ``looks_up_suffixes``: it takes ``prompt_lookup_min`` / ``prompt_lookup_max`` (prompt lookup)
    * ``supports_trees``: it has :meth:`propose_tree` (``spec_tree_width > 1``)
    """

    needs_model: bool = False
    needs_target: bool = False
    needs_hidden: bool = False
    looks_up_suffixes: bool = False
    supports_trees: bool = False

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        for name, value in vars(cls).items():
            if isinstance(value, bool) and name not in CAPABILITIES and not name.startswith("_"):
                near = difflib.get_close_matches(name, CAPABILITIES, n=1)
                raise TypeError(f"{cls.__name__}.{name}: not a drafter capability ({', '.join(CAPABILITIES)})"
                                + (f"; did you mean {near[0]}?" if near else ""))
        if cls.supports_trees and cls.propose_tree is Drafter.propose_tree:
            raise TypeError(f"{cls.__name__}: supports_trees is set but propose_tree is not defined")
        if cls.needs_hidden and cls.observe is Drafter.observe:
            raise TypeError(f"{cls.__name__}: needs_hidden is set but observe is not defined")
        _refuse_misspelt_methods(cls)

    @classmethod
    def build(cls, spec, draft_model=None, max_tokens: int = 0, target=None) -> "Drafter":
        """The drafter a :class:`~kda_ref.speculative.SpecConfig` asks for (``drafters.make_drafter``):
        ``draft_model`` loaded for one that ``needs_model``, ``target`` the served model for one that
        ``needs_target``; ``max_tokens`` a request's longest prompt + output + k. A drafter registered in
        :data:`~kda_ref.speculative.drafters.DRAFTERS` defines it; one only handed to a scheduler (tests) need not."""
        raise TypeError(f"{cls.__name__} defines no build(), so it cannot be named in speculative=")

    @abstractmethod
    def propose(self, seq_id: int, tokens: list[int], k: int) -> list[int]:
        """Up to ``k`` draft tokens to follow ``tokens`` (the request's prompt and output so far)."""

    @abstractmethod
    def release(self, seq_id: int) -> None:
        """Forget the request (it finished, was aborted or preempted)."""

    def propose_tree(self, seq_id: int, tokens: list[int], k: int, width: int):
        """Up to ``width`` candidate continuations of at most ``k`` tokens as a
        :class:`~kda_ref.speculative.tree.DraftTree` (asked only of a drafter that ``supports_trees``)."""
        raise NotImplementedError(f"{type(self).__name__} proposes chains only")

    def observe(self, seq_id: int, start: int, hidden) -> None:
        """The target's hidden rows ``[m, d]`` of positions ``start ..`` just committed (called only for a
        drafter that ``needs_hidden``)."""

    def compile_steps(self, gemm: bool = False) -> None:
        """The engine runs its fixed-shape steps compiled (``torch_compile=True``, :class:`~kda_ref.LLM` calls
        this once): a drafter whose drafts are model steps may compile them too (the MTP layer's), the way
        the engine's are (``gemm``: ``compile_gemm``, :func:`kda_ref.utils.compiling.compile_and_run`);
        default: nothing to compile."""

    def cache_bytes_for(self, num_tokens: int) -> int:
        """Bytes the drafter keeps for one request of ``num_tokens`` tokens outside the engine's pool
        (counted in admission's peak; 0: it keeps none)."""
        return 0


def _refuse_misspelt_methods(cls) -> None:
    """A public method of a drafter subclass named like one of the contract's but not one (``obsrve``,
    ``cache_bytes_fr``) is a TypeError: the engine would never call it and the default would run instead."""
    contract = [n for n, v in vars(Drafter).items() if callable(v) and not n.startswith("_")]
    for name, value in vars(cls).items():
        if name.startswith("_") or name in contract or not callable(value):
            continue
        near = difflib.get_close_matches(name, contract, n=1, cutoff=0.85)
        if near:
            raise TypeError(f"{cls.__name__}.{name}: not a Drafter method; did you mean {near[0]}? (a method "
                            f"the engine calls must have its name: {', '.join(sorted(contract))})")
