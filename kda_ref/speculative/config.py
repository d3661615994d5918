"""``SpecConfig``: what ``LLM(speculative=...)`` asks for, validated before anything is allocated.

The names follow vLLM's ``SpeculativeConfig`` (``method="ngram"`` or a draft model,
``num_speculative_tokens``, ``prompt_lookup_min`` / ``prompt_lookup_max``). ``state`` is how the KDA state survives a
rejection:

* ``"per_step"`` -- the verify forward keeps the recurrent state and the conv window after every
  draft token (SGLang's ``intermediate_ssm`` / ``intermediate_conv_window`` buffers written by the
  verify kernel, ``TritonKDAKernel.target_verify``); after acceptance the state of the last accepted
  token is copied into the request's slot;
* ``"slots"`` -- each request owns ``1 + k`` state slots; the verify writes the state after token t
  into slot t and the request continues from slot ``kept - 1``: nothing is copied at commit (vLLM:
  ``GDNAttentionMetadata.spec_state_indices_tensor`` holds ``num_spec + 1`` blocks per request and the
  next step reads block ``num_accepted_tokens - 1``). vLLM keeps one conv window widened by k and
  reads it at that offset; this engine stores one conv window per slot;
* ``"replay"`` -- ReplaySSM: the verify keeps no state at all, only each token's kernel inputs; the
  kept tokens are folded into the committed state afterwards (:mod:`kda_ref.speculative.replay`).

``tree_width > 1`` drafts a token tree (up to that many continuations, :mod:`kda_ref.speculative.tree`)
instead of a chain: n-gram drafting and ``"per_step"`` only -- each node's state is its parent's
stepped by one token, which ``"slots"`` (one slot per *position*) and ``"replay"`` (a chain of inputs
folded in order) cannot express.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath

from ..utils.config_fields import documented as _f
from .rollback import STRATEGIES, RollbackStrategy, rollback_strategy

SPEC_METHODS = ("ngram", "draft")
SPEC_STATES = tuple(STRATEGIES)  # "per_step", "slots", "replay"
MAX_SPECULATIVE_TOKENS = 16
MAX_TREE_WIDTH = 8
LOOKUP_MIN, LOOKUP_MAX = 1, 4  # the n-gram drafter's default suffix lengths
# the longest suffix the drafter may try: a proposal costs at most this many token comparisons per earlier
# occurrence of the suffix, so it stays linear in the sequence (unbounded, 10**9 over 3,000 repeated tokens
# took 0.7 s a proposal); vLLM's users set 1 .. 5
MAX_PROMPT_LOOKUP = 64


def _is_draft_model(v) -> bool:
    """A built model, a config, or a non-empty path (that it is a checkpoint folder is checked when loaded)."""
    from ..model import HybridModel, ModelConfig

    return isinstance(v, (HybridModel, ModelConfig)) or (isinstance(v, (str, PurePath)) and str(v).strip() != "")


def _int(name: str, v, lo: int, hi: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
        bound = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ValueError(f"{name}: must be an int {bound}, got {v!r}")
    return v


@dataclass(frozen=True)
class SpecConfig:
    method: str = _f("ngram", "the drafter: n-gram lookup in the request's own tokens, or a draft model",
                     choices=SPEC_METHODS, kind="str", flat="speculative")
    num_speculative_tokens: int = _f(3, "k: draft tokens verified per step", min=1, max=MAX_SPECULATIVE_TOKENS)
    state: str | RollbackStrategy = _f("per_step", "how the KDA state rolls back after a rejection",
                                       choices=SPEC_STATES, kind="str", flat="spec_state")
    prompt_lookup_min: int = _f(LOOKUP_MIN, "the shortest suffix n-gram the drafter matches", min=1,
                                max=MAX_PROMPT_LOOKUP)
    prompt_lookup_max: int = _f(LOOKUP_MAX, "the longest (tried first)", min=1, max=MAX_PROMPT_LOOKUP,
                                range_text=f"in [prompt_lookup_min, {MAX_PROMPT_LOOKUP}]")
    draft_model: object = _f(None, "speculative='draft': a HybridModel, ModelConfig or checkpoint folder",
                             kind="object", optional=True)
    tree_width: int = _f(1, "> 1: a draft tree with up to this many candidates per position (ngram, per_step)",
                         min=1, max=MAX_TREE_WIDTH, flat="spec_tree_width")

    @property
    def rollback(self) -> RollbackStrategy:
        """The :class:`~kda_ref.speculative.rollback.RollbackStrategy` of ``state``."""
        return rollback_strategy(self.state)

    def __post_init__(self) -> None:
        if self.method not in SPEC_METHODS:
            raise ValueError(f"speculative: must be one of {SPEC_METHODS} (or None), got {self.method!r}")
        _int("num_speculative_tokens", self.num_speculative_tokens, 1, MAX_SPECULATIVE_TOKENS)
        rollback_strategy(self.state)  # a name of SPEC_STATES or a RollbackStrategy
        _int("prompt_lookup_min", self.prompt_lookup_min, 1, MAX_PROMPT_LOOKUP)
        _int("prompt_lookup_max", self.prompt_lookup_max, self.prompt_lookup_min, MAX_PROMPT_LOOKUP)
        if (self.method == "draft") != (self.draft_model is not None):
            raise ValueError("draft_model: needed with speculative='draft', and only then")
        if self.draft_model is not None and not _is_draft_model(self.draft_model):
            raise ValueError(f"draft_model: expected a HybridModel, a ModelConfig or a checkpoint folder path, got "
                             f"{type(self.draft_model).__name__} {str(self.draft_model)[:40]!r}")
        _int("spec_tree_width", self.tree_width, 1, MAX_TREE_WIDTH)
        if self.tree_width > 1 and not self.rollback.supports_trees:
            raise ValueError(f"spec_tree_width: a draft tree needs spec_state='per_step' -- every node's state is "
                             f"its parent's stepped by its token; {self.rollback.name!r} keeps one state per position "
                             f"('slots') or replays a chain of inputs ('replay'), neither can hold siblings")
        if self.method != "ngram" and (self.prompt_lookup_min, self.prompt_lookup_max) != (LOOKUP_MIN, LOOKUP_MAX):
            raise ValueError("prompt_lookup_min / prompt_lookup_max: only the n-gram drafter looks up suffixes "
                             "(speculative='ngram')")
        if self.tree_width > 1 and self.method != "ngram":
            raise ValueError("spec_tree_width: draft trees come from the n-gram drafter (speculative='ngram')")


def spec_config(speculative, num_speculative_tokens=None, spec_state=None, **kw) -> SpecConfig | None:
    """``LLM``'s speculative arguments as one :class:`SpecConfig` (``None``: no speculation); a
    speculative argument without ``speculative``, or beside a ``SpecConfig`` (which already says
    everything), is an error, not silently ignored."""
    given = [n for n, v in (("num_speculative_tokens", num_speculative_tokens), ("spec_state", spec_state),
                            *kw.items()) if v is not None]
    name = {"tree_width": "spec_tree_width"}.get(given[0], given[0]) if given else None  # LLM's argument names
    if speculative is None:
        if given:
            raise ValueError(f"{name}: given without speculative=... (speculation is off)")
        return None
    if isinstance(speculative, SpecConfig):
        if given:
            raise ValueError(f"{name}: given beside speculative=SpecConfig(...); set it in the SpecConfig")
        return speculative
    args = {k: v for k, v in (("num_speculative_tokens", num_speculative_tokens), ("state", spec_state), *kw.items())
            if v is not None}
    # a shortest suffix given alone above the default longest one raises the longest to it (vLLM sets a
    # missing bound equal to the given one; here the default window 1 .. 4 stays otherwise)
    lo = args.get("prompt_lookup_min")
    if isinstance(lo, int) and "prompt_lookup_max" not in args and lo > LOOKUP_MAX:
        args["prompt_lookup_max"] = lo
    return SpecConfig(method=speculative, **args)
