"""Load and save Hugging Face Kimi-Linear checkpoints and Kimi K3 release folders (``config.json`` +
``*.safetensors``, sharded with ``model.safetensors.index.json`` or not).

Tensor names are the checkpoint's own (vLLM 0.32.0
``vllm/models/kimi_k3/nvidia/model.py::KimiLinearForCausalLM.load_weights``); how a release names them
is :mod:`kda_ref.model.layout`. Loading never trusts the folder before it has checked it and never runs
code from it: config size (:func:`~kda_ref.model.size.check_fits`), shard headers and index
(:func:`check_weight_map`), a ``meta``-device model compared with the headers, then one shard at a time,
then the values. Every file must be a regular file, else a :class:`~kda_ref.model.config.ConfigError`
naming ``path`` (also from :func:`save_pretrained`). Design notes: ``docs/model.md#loading-a-checkpoint``.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Iterator

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from ..tokenizer import load_tokenizer
from ..ops.mxfp4 import MXFP4Error
from ..utils.files import create_regular, fd_path, open_regular, read_regular, refuse_non_regular
from .config import ConfigError, ModelConfig
from .layout import SCALE, LayoutError, Source, checkpoint_name, plan_sources, release_tensors, text_name
from .model import HybridModel
from .size import check_fits, parameter_count

INDEX_FILE = "model.safetensors.index.json"
MAX_INDEX_BYTES = 64 << 20  # Kimi-Linear-48B's index is ~2 MB; one of a 1T-parameter MoE ~10 MB


class CheckpointError(ValueError):
    """A checkpoint whose files or tensors do not fit the config (names the offending file or key)."""


def load_hf_state_dict(model: HybridModel, state: dict[str, torch.Tensor]) -> None:
    """Copy a checkpoint's state dict (its names, in the layout of ``model.config``: Kimi-Linear's,
    either dense-MLP layout, or K3's release) into ``model``; any missing, unexpected, mis-shaped or
    absurd tensor is an error and leaves the model untouched."""
    plan = _plan(model, {k: (tuple(v.shape), _dtype_name(v)) for k, v in state.items()})
    built = {mk: _build(src, state) for mk, src in plan.items()}
    _check_values(model, built)
    own = model.state_dict()
    with torch.no_grad():
        for mk, t in built.items():
            own[mk].copy_(t.to(own[mk].dtype))
    if model.config.tie_word_embeddings and "lm_head.weight" not in plan:
        own["lm_head.weight"].copy_(own["model.embed_tokens.weight"])
    model.clear_fused_weights()


def _dtype_name(t: torch.Tensor) -> str:
    """The safetensors name of ``t``'s dtype (the headers' vocabulary)."""
    return {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
            torch.uint8: "U8"}.get(t.dtype, str(t.dtype))


def save_pretrained(model: HybridModel, path: str | Path, max_shard_bytes: int = 4 << 30) -> Path:
    """Write ``config.json``, the weights (checkpoint names, in the layout of ``model.config``) and a
    ``tokenizer_config.json`` naming the byte-level tokenizer these models use (:mod:`kda_ref.tokenizer`)
    into ``path``. Kimi-Linear: one ``model.safetensors``. K3: the release layout -- the multimodal
    wrapper's config, tensors under ``language_model.``, MXFP4 routed experts (each must lie on the
    grid: :meth:`~kda_ref.model.HybridModel.round_experts_to_mxfp4`), shards of at most
    ``max_shard_bytes`` named ``model-0000i-of-0000n.safetensors`` and ``model.safetensors.index.json``."""
    from ..tokenizer import write_byte_tokenizer_config

    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    try:
        tensors = release_tensors(model.config, state)
    except LayoutError as e:
        raise CheckpointError(str(e)) from None
    model.config.save(p / "config.json")
    if not model.config.is_k3:
        refuse_non_regular(p / "model.safetensors", ConfigError)  # save_file renames a temporary file over it
        _save_file(tensors, p / "model.safetensors")
    else:
        _save_shards(tensors, p, max_shard_bytes)
    write_byte_tokenizer_config(p, model.config, ConfigError)
    return p


def _save_file(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """safetensors' ``save_file``, the file then given the mode the umask allows, as the folder's other files
    (it writes a private temporary file and renames it: 0600, which another user reading the checkpoint hit)."""
    save_file(tensors, str(path), metadata={"format": "pt"})
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


def _save_shards(tensors: dict[str, torch.Tensor], p: Path, max_shard_bytes: int) -> None:
    """``tensors`` in shards of at most ``max_shard_bytes`` (a larger tensor alone in its shard) plus the index."""
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, t in tensors.items():
        nbytes = t.numel() * t.element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = t
        size += nbytes
    n = len(shards)
    weight_map = {}
    for i, shard in enumerate(shards, 1):
        fname = f"model-{i:05d}-of-{n:05d}.safetensors"
        refuse_non_regular(p / fname, ConfigError)
        _save_file(shard, p / fname)
        weight_map.update(dict.fromkeys(shard, fname))
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    with create_regular(p / INDEX_FILE, ConfigError) as f:
        f.write(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2).encode("utf-8"))


# ---- the checks, before any tensor data is read ---------------------------------------------------------
def shard_files(folder: Path) -> tuple[list[Path], dict[str, str] | None]:
    """The checkpoint's safetensors files and the index's ``weight_map`` (None without an index): the
    index's shards (each must exist in ``folder``), or every ``*.safetensors`` file of the folder (each
    checked to be a regular file before it is opened)."""
    index = folder / INDEX_FILE
    if not index.exists():
        files = sorted(folder.glob("*.safetensors"))
        if not files:
            raise CheckpointError(f"path: no *.safetensors files in {folder}")
        return files, None
    wmap = _read_weight_map(index)
    files = []
    for name in dict.fromkeys(wmap.values()):
        if Path(name).name != name:
            raise CheckpointError(f"{INDEX_FILE}: shard {name!r} is not a file name inside the checkpoint folder")
        if not (folder / name).exists():
            held = sum(v == name for v in wmap.values())
            raise CheckpointError(f"{name}: shard missing from {folder} (the index puts {held} tensors in it)")
        files.append(folder / name)
    return files, wmap


def check_weight_map(wmap: dict[str, str], headers: dict[str, tuple[tuple[int, ...], str, Path]]) -> None:
    """The index must say where every tensor is: each tensor of the shards listed under the shard that holds
    it, and nothing listed that no shard holds. A folder whose index and shards disagree was assembled wrong
    (a shard from another upload, a tensor added without its entry); this loader refuses it, naming the
    tensor. vLLM reads the index only for its list of shard files
    (``model_loader/weight_utils.py::filter_duplicate_safetensors_files``) and would load such a folder."""
    for name, (_, _, f) in headers.items():
        listed = wmap.get(name)
        if listed is None:
            raise CheckpointError(f"{name}: in {f.name} but not in {INDEX_FILE}'s weight_map")
        if listed != f.name:
            raise CheckpointError(f"{name}: {INDEX_FILE} puts it in {listed}; it is in {f.name}")
    ghosts = [n for n in wmap if n not in headers]
    if ghosts:
        raise CheckpointError(f"{ghosts[0]}: {INDEX_FILE} lists it (and {len(ghosts) - 1} more) but no shard holds it")


def _read_weight_map(index: Path) -> dict[str, str]:
    """The ``weight_map`` (tensor name -> shard file) of ``model.safetensors.index.json``: a regular file
    of at most :data:`MAX_INDEX_BYTES` (else a :class:`ConfigError` naming ``path``) holding valid JSON."""
    try:
        raw = read_regular(index, MAX_INDEX_BYTES, ConfigError, f"a {INDEX_FILE}")
    except OSError as e:  # no permission, a broken disk
        raise ConfigError(f"path: cannot read {index} ({e.strerror or e})") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as e:  # not UTF-8, bad JSON, nesting too deep
        raise CheckpointError(f"{INDEX_FILE}: not valid JSON ({type(e).__name__}: {str(e)[:200]})") from None
    wmap = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(wmap, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in wmap.items()):
        raise CheckpointError(f"{INDEX_FILE}: needs a 'weight_map' object of tensor name -> shard file")
    return wmap


@contextlib.contextmanager
def _opened_shard(f: Path) -> Iterator[str]:
    """Open the shard ``f`` as a regular file (else a :class:`ConfigError` naming ``path``; never
    blocks) and yield a name for safetensors that opens that very file (``/dev/fd/N``): safetensors
    opens by name, and the folder's entry may have become a FIFO since it was checked."""
    try:
        handle = open_regular(f, ConfigError)
    except OSError as e:  # gone since it was listed, no permission
        raise ConfigError(f"path: cannot read {f} ({e.strerror or e})") from None
    with handle:
        yield fd_path(handle, f)


def read_headers(files: list[Path]) -> dict[str, tuple[tuple[int, ...], str, Path]]:
    """``name -> (shape, safetensors dtype, file)`` from the shards' headers (no tensor data)."""
    out: dict[str, tuple[tuple[int, ...], str, Path]] = {}
    for f in files:
        try:
            with _opened_shard(f) as name, safe_open(name, framework="pt") as sf:
                for k in sf.keys():
                    sl = sf.get_slice(k)
                    if k in out:
                        raise CheckpointError(f"{k}: defined in two shards, {out[k][2].name} and {f.name}")
                    out[k] = (tuple(sl.get_shape()), str(sl.get_dtype()), f)
        except (CheckpointError, ConfigError):
            raise
        except Exception as e:  # truncated or not a safetensors file
            raise CheckpointError(f"{f.name}: not a readable safetensors file ({type(e).__name__}: {str(e)[:200]})") from None
    return out


def _plan(model: HybridModel, headers: dict[str, tuple[tuple[int, ...], str]]) -> dict[str, Source]:
    """:func:`~kda_ref.model.layout.plan_sources` for ``model``, its errors as :class:`CheckpointError`."""
    want = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    try:
        return plan_sources(model.config, headers, want)
    except LayoutError as e:
        raise CheckpointError(str(e)) from None


COUNT_SLACK = 64  # tensors a checkpoint may miss or add and still be named one by one


def _check_tensor_count(config: ModelConfig, headers: dict) -> None:
    """The headers must hold about as many tensors as the config describes (an MXFP4 pair counts as one,
    K3's vision tensors not at all): O(tensors), before the model is built, so that a config of 5,000
    layers beside a 4-layer file fails here and not after building 5,000 layers. A difference of at most
    :data:`COUNT_SLACK` tensors beyond the ones a checkpoint may leave out (a tied ``lm_head``, the
    routers' correction biases) passes, to be named tensor by tensor with the shapes
    (:func:`~kda_ref.model.layout.plan_sources`): a missing, extra or mis-shaped tensor is named."""
    _, want = parameter_count(config)
    try:
        text = [t for t in (text_name(config, k) for k in headers) if t is not None]
    except LayoutError as e:
        raise CheckpointError(str(e)) from None
    have = sum(not (t.endswith("rotary_emb.inv_freq") or t.endswith(SCALE)) for t in text)
    moe_layers = max(0, config.num_hidden_layers - config.first_k_dense_replace) if config.num_experts else 0
    optional = int(config.tie_word_embeddings) + moe_layers + (config.num_nextn_predict_layers if config.num_experts else 0)
    if not want - optional - COUNT_SLACK <= have <= want + COUNT_SLACK:
        raise CheckpointError(f"config: describes a model of {want:,} tensors; the checkpoint holds {have:,}")


def _build(src: Source, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
    """``src.build(tensors)``, a bad MXFP4 pair (an E8M0 scale of 255, MXFP4's NaN) named."""
    try:
        return src.build(tensors)
    except MXFP4Error as e:
        raise CheckpointError(f"{src.names[-1]}: {e}") from None


def _check_values(model: HybridModel, built: dict[str, torch.Tensor]) -> None:
    """Values no model ships, each an error naming the tensor: a NaN or infinity anywhere, a non-zero
    value in K3's ``A_log`` padding (only the first ``num_heads`` are used: a release with more would
    mean the vector is read per channel, which no serving engine does)."""
    H = model.config.linear_num_heads
    for mk, t in built.items():
        if not bool(torch.isfinite(t).all()):
            bad = int((~torch.isfinite(t)).sum())
            raise CheckpointError(f"{checkpoint_name(model.config, mk)}: holds {bad} NaN or infinite values")
        if mk.endswith("A_log") and t.dim() == 1 and bool((t[H:] != 0).any()):
            raise CheckpointError(f"{checkpoint_name(model.config, mk)}: non-zero values past the first {H} "
                                  f"(num_heads); K3 ships A_log padded with zeros to the head dim")


# ---- loading ------------------------------------------------------------------------------------------
def _read_planned(model: HybridModel, plan: dict[str, Source], files: list[Path], headers: dict) -> None:
    """Read the shards one at a time and assign every planned tensor as soon as all its sources are read
    (an MXFP4 pair's halves may sit in two shards: the first half waits, a fraction of one weight)."""
    needed = {ck: mk for mk, src in plan.items() for ck in src.names}
    waiting: dict[str, torch.Tensor] = {}
    for f in files:
        mine = [ck for ck in needed if headers[ck][2] == f]
        if not mine:
            continue
        with _opened_shard(f) as name:
            shard = load_file(name)
        waiting.update((ck, shard[ck]) for ck in mine)
        del shard
        ready = {mk for mk in {needed[ck] for ck in mine} if all(n in waiting for n in plan[mk].names)}
        built = {mk: _build(plan[mk], waiting) for mk in ready}
        _check_values(model, built)
        model.load_state_dict(built, strict=False, assign=True)
        for mk in ready:
            for n in plan[mk].names:
                del waiting[n]
    if waiting:  # pragma: no cover - every pair's halves are in the headers, so they are read
        raise CheckpointError(f"state_dict: {len(waiting)} tensors read but never assigned, e.g. {list(waiting)[:3]}")


def load_pretrained(path: str | Path, backend: str = "torch", chunk_size: int = 64) -> HybridModel:
    """Build a :class:`HybridModel` from a checkpoint folder (see the module docstring for the order
    of checks). Raises :class:`~kda_ref.model.config.ConfigError` / :class:`CheckpointError`."""
    p = Path(path)
    if not p.is_dir():
        raise ConfigError(f"path: {p} is not a folder")
    config = ModelConfig.from_json(p / "config.json")
    check_fits(config, page_size=None)
    files, wmap = shard_files(p)
    headers = read_headers(files)
    if wmap is not None:
        check_weight_map(wmap, headers)
    _check_tensor_count(config, headers)
    with torch.device("meta"):
        model = HybridModel(config, seed=None, backend=backend, chunk_size=chunk_size)
    plan = _plan(model, {k: (shape, dtype) for k, (shape, dtype, _) in headers.items()})
    _read_planned(model, plan, files, headers)
    if config.tie_word_embeddings and "lm_head.weight" not in plan:
        model.lm_head.weight = model.model.embed_tokens.weight
    left = [n for n, t in (*model.named_parameters(), *model.named_buffers()) if t.is_meta]
    if left:  # pragma: no cover - plan_sources guarantees every tensor is given
        raise CheckpointError(f"state_dict: {len(left)} tensors were not loaded, e.g. {left[:3]}")
    model.clear_fused_weights()
    # (tokenizer or None, why not): LLM's tokenizer="auto" reads it; a tokenizer file that is not a
    # regular file, or too large, is a ConfigError like every other file of the folder
    model.tokenizer_info = load_tokenizer(p, ConfigError)
    return model
