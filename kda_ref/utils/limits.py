"""The ranges both the library and the command line check, in one torch-free place.

``kda-ref`` (:mod:`kda_ref.cli`) refuses a bad flag while parsing, before the engine, the model or torch load;
the library checks the same values with the same numbers, imported from here: :data:`SEED_RANGE`
(``EngineConfig.seed``, ``SamplingParams.seed``: what ``torch.Generator.manual_seed`` accepts);
:data:`MIN_TEMPERATURE`, :data:`MAX_TEMPERATURE` (``SamplingParams.temperature``); :data:`MAX_WORLD_SIZE`
(``context_parallel_prefill(world_size=)``, ``ParallelConfig.context_parallel_size``); :data:`MAX_CP_TIMEOUT_S`
(``context_parallel_prefill(timeout=)``, ``ParallelConfig.cp_timeout``). The command line's own, for values the
library takes but a command should not run: :data:`MAX_THREADS`, :data:`MAX_PROMPT_FILE_BYTES`, :data:`MAX_PATH_CHARS`.
"""

from __future__ import annotations

SEED_RANGE = (-(2**63), 2**64 - 1)  # what torch.Generator.manual_seed accepts
MIN_TEMPERATURE = 1e-5  # below it, logits / temperature overflows float32 (vLLM's greedy threshold _SAMPLING_EPS)
MAX_TEMPERATURE = 1e6  # flatter adds nothing, and the division stays in float32's range
MAX_WORLD_SIZE = 64  # ranks one context-parallel call starts
MAX_CP_TIMEOUT_S = 1e6  # seconds (11.6 days) before a silent rank is an error: the deadline stays a valid timestamp
MAX_NUM_SEQS = 4096  # requests running at once: vLLM's GPU defaults are 256-1024; more only builds huge buffers
MAX_BATCHED_TOKENS = 1 << 20  # tokens of one step: a million-token context in one chunk
MAX_CONTEXT_TOKENS = 1 << 24  # a model's max_position_embeddings and a request's max_tokens: 16x Kimi-Linear's 1M
MAX_BENCH_LENGTH = 1 << 20  # a benchmark's sequence length (past it the inputs alone need terabytes)

# the command line's own
MAX_THREADS = 1024  # torch intra-op threads: far above any machine's cores (torch's int argument overflows at 2**31)
# a prompt file for `kda-ref cp`: 1 MiB of UTF-8 is at most 1,048,576 byte tokens (+ BOS), the longest
# context of a Kimi-Linear checkpoint (max_position_embeddings); the model's own bound is checked once it is known
MAX_PROMPT_FILE_BYTES = 1 << 20
MAX_PATH_CHARS = 4096  # Linux's PATH_MAX: a longer path cannot name a file
# the longest suffix the n-gram drafter may try: a proposal costs at most this many token comparisons per
# earlier occurrence of the suffix, so it stays linear in the sequence (unbounded, 10**9 over 3,000 repeated
# tokens took 0.7 s a proposal); vLLM's users set 1 .. 5
MAX_PROMPT_LOOKUP = 64


def path_problem(text: str) -> str | None:
    """Why ``text`` cannot name a file before the OS is asked (a NUL byte, which ``open`` answers with a
    ``ValueError``; more than :data:`MAX_PATH_CHARS` characters), or ``None``."""
    if "\0" in text:
        return f"{text[:40]!r} contains a NUL byte, which no path can"
    if len(text) > MAX_PATH_CHARS:
        return f"a path of {len(text):,} characters is longer than any the OS takes ({MAX_PATH_CHARS})"
    return None


__all__ = ["MAX_BATCHED_TOKENS", "MAX_BENCH_LENGTH", "MAX_CONTEXT_TOKENS", "MAX_CP_TIMEOUT_S", "MAX_NUM_SEQS", "MAX_PATH_CHARS",
           "MAX_PROMPT_FILE_BYTES", "MAX_PROMPT_LOOKUP", "MAX_TEMPERATURE", "MAX_THREADS", "MAX_WORLD_SIZE", "MIN_TEMPERATURE",
           "SEED_RANGE", "path_problem"]
