"""Load and save Hugging Face Kimi-Linear checkpoints (``config.json`` + ``*.safetensors``).

Parameter names are the checkpoint's own (the names vLLM's ``kimi_linear.py`` ``load_weights``
and transformers' Kimi-Linear conversion mapping read), e.g.
``model.layers.0.self_attn.q_conv1d.weight [D, 1, W]``, ``...self_attn.A_log [1, 1, H, 1]``,
``...self_attn.dt_bias [H*D]``, ``...block_sparse_moe.experts.3.w1.weight``,
``...block_sparse_moe.gate.e_score_correction_bias``.

Two layouts of the dense (first ``first_k_dense_replace``) layers' MLP are read: Moonshot's release
names it ``model.layers.{i}.mlp.{gate,up,down}_proj.weight``; transformers' ``save_pretrained``
(5.x) writes ``model.layers.{i}.block_sparse_moe.{gate,up,down}_proj.weight`` (its Kimi-Linear
module keeps the dense MLP under the MoE attribute name).

Loading never trusts the folder before it has checked it, and never runs code from it:

1. ``config.json`` is parsed and type-checked (:class:`~kda_ref.model.config.ModelConfig`), and its
   size worked out from the numbers alone (:func:`~kda_ref.model.size.check_fits`): a model whose
   float32 weights do not fit in memory, or with an absurd number of tensors, is refused here;
2. the shard list comes from ``model.safetensors.index.json`` when present (a missing shard names
   its file) or from the ``*.safetensors`` files; every shard's **header** is read (names, shapes,
   dtypes, no tensor data); a name in two shards is an error naming both files;
3. the headers' tensor count is compared with the config's (a folder whose config describes 5,000
   layers beside a 4-layer file fails here, before a 5,000-layer model is built); then the model is
   built on the ``meta`` device (no memory) and every header is compared with it: missing,
   unexpected and mis-shaped tensors fail here, before anything is allocated;
4. only then are the shards read, one at a time, each tensor converted to float32 and assigned to
   its parameter (``load_state_dict(assign=True)``), so at most one shard is held beside the model.

safetensors is a data format (a JSON header and raw bytes): reading it cannot execute code, unlike a
pickle.

Every file of the folder must be a regular file (:mod:`kda_ref.utils.files`): a FIFO would block the
loader forever, a link to ``/dev/zero`` would read without end. One that is not is a
:class:`~kda_ref.model.config.ConfigError` naming ``path``, raised before the file is opened; the
index is read non-blocking and bounded (:data:`MAX_INDEX_BYTES`), the tokenizer's files too
(:func:`~kda_ref.tokenizer.load_tokenizer`). safetensors opens a shard by name itself, so each shard
is opened here first (checked, opened non-blocking, checked again) and safetensors is handed the name
of that open file (``/dev/fd/N``, :func:`~kda_ref.utils.files.fd_path`): a FIFO swapped in for the
shard by someone writing to the folder during the load is never opened.

:func:`save_pretrained` refuses a target file that exists and is not a regular file (a FIFO would
block ``config.json``'s writer) with a :class:`~kda_ref.model.config.ConfigError` naming ``path``.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Iterator

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from ..tokenizer import load_tokenizer
from ..utils.files import fd_path, open_regular, read_regular, refuse_non_regular
from .config import ConfigError, ModelConfig
from .model import HybridModel
from .size import check_fits, parameter_count

INDEX_FILE = "model.safetensors.index.json"
MAX_INDEX_BYTES = 64 << 20  # Kimi-Linear-48B's index is ~2 MB; one of a 1T-parameter MoE ~10 MB
_FLOAT_DTYPES = {"F64", "F32", "F16", "BF16"}


class CheckpointError(ValueError):
    """A checkpoint whose files or tensors do not fit the config (names the offending file or key)."""


def load_hf_state_dict(model: HybridModel, state: dict[str, torch.Tensor]) -> None:
    """Copy a Kimi-Linear state dict (either dense-MLP layout) into ``model``; any missing,
    unexpected or mis-shaped key is an error and leaves the model untouched."""
    state = dict(state)
    names = _match(model, {k: (tuple(v.shape), "tensor") for k, v in state.items()})
    own = model.state_dict()
    with torch.no_grad():
        for ck, mk in names.items():
            own[mk].copy_(state[ck].to(own[mk].dtype))
    if model.config.tie_word_embeddings and "lm_head.weight" not in names.values():
        own["lm_head.weight"].copy_(own["model.embed_tokens.weight"])


def save_pretrained(model: HybridModel, path: str | Path) -> Path:
    """Write ``config.json``, ``model.safetensors`` (checkpoint names) and a ``tokenizer_config.json``
    naming the byte-level tokenizer these models use (:mod:`kda_ref.tokenizer`) into ``path``."""
    from ..tokenizer import write_byte_tokenizer_config

    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    model.config.save(p / "config.json")
    tensors = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    refuse_non_regular(p / "model.safetensors", ConfigError)  # save_file renames a temporary file over it
    save_file(tensors, str(p / "model.safetensors"), metadata={"format": "pt"})
    write_byte_tokenizer_config(p, model.config, ConfigError)
    return p


# ---- the checks, before any tensor data is read ---------------------------------------------------------
def shard_files(folder: Path) -> list[Path]:
    """The checkpoint's safetensors files: the index's shards (each must exist in ``folder``), or
    every ``*.safetensors`` file of the folder (each checked to be a regular file before it is opened)."""
    index = folder / INDEX_FILE
    if not index.exists():
        files = sorted(folder.glob("*.safetensors"))
        if not files:
            raise CheckpointError(f"path: no *.safetensors files in {folder}")
        return files
    wmap = _read_weight_map(index)
    files = []
    for name in dict.fromkeys(wmap.values()):
        if Path(name).name != name:
            raise CheckpointError(f"{INDEX_FILE}: shard {name!r} is not a file name inside the checkpoint folder")
        if not (folder / name).exists():
            held = sum(v == name for v in wmap.values())
            raise CheckpointError(f"{name}: shard missing from {folder} (the index puts {held} tensors in it)")
        files.append(folder / name)
    return files


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


def checkpoint_names(config: ModelConfig, name: str) -> str:
    """The model's parameter name for a checkpoint tensor name (transformers' dense-MLP layout mapped)."""
    parts = name.split(".")
    if (len(parts) == 6 and parts[:2] == ["model", "layers"] and parts[3] == "block_sparse_moe"
            and parts[4] in ("gate_proj", "up_proj", "down_proj") and parts[2].isdigit()
            and not config.is_moe_layer(int(parts[2]))):
        return ".".join([*parts[:3], "mlp", *parts[4:]])
    return name


def _match(model: HybridModel, tensors: dict[str, tuple[tuple[int, ...], str]]) -> dict[str, str]:
    """Checkpoint name -> model name for every tensor; raises :class:`CheckpointError` unless the
    checkpoint gives exactly the model's tensors with its shapes."""
    want = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    names: dict[str, str] = {}
    for ck in tensors:
        if ck.endswith("rotary_emb.inv_freq"):
            continue
        mk = checkpoint_names(model.config, ck)
        if mk in names.values():
            other = next(c for c, m in names.items() if m == mk)
            raise CheckpointError(f"{ck}: the same tensor as {other} (both layouts of the dense MLP given)")
        names[ck] = mk
    have = set(names.values())
    if model.config.tie_word_embeddings and "lm_head.weight" not in have:
        have.add("lm_head.weight")
    missing, unexpected = sorted(set(want) - have), sorted(have - set(want))
    if missing:
        raise CheckpointError(f"state_dict: missing {len(missing)} tensors, e.g. {missing[:3]}")
    if unexpected:
        raise CheckpointError(f"state_dict: unexpected {len(unexpected)} tensors, e.g. {unexpected[:3]}")
    for ck, mk in names.items():
        shape, dtype = tensors[ck]
        if shape != want[mk]:
            raise CheckpointError(f"{ck}: shape {shape} does not match the config's {want[mk]}")
        if dtype != "tensor" and dtype not in _FLOAT_DTYPES:
            raise CheckpointError(f"{ck}: dtype {dtype} is not a float type")
    return names


def _check_tensor_count(config: ModelConfig, headers: dict) -> None:
    """The headers must hold as many tensors as the config describes (up to a tied ``lm_head`` and the
    routers' correction biases, which a checkpoint may leave out): O(tensors), before the model is built,
    so that a config of 5,000 layers beside a 4-layer file fails here and not after building 5,000
    layers. A wrong shape with the right count is named tensor by tensor later (:func:`_match`)."""
    _, want = parameter_count(config)
    have = sum(not k.endswith("rotary_emb.inv_freq") for k in headers)
    moe_layers = max(0, config.num_hidden_layers - config.first_k_dense_replace) if config.num_experts else 0
    optional = int(config.tie_word_embeddings) + moe_layers
    if not want - optional <= have <= want:
        raise CheckpointError(f"config: describes a model of {want:,} tensors; the checkpoint holds {have:,}")


# ---- loading ------------------------------------------------------------------------------------------
def load_pretrained(path: str | Path, backend: str = "torch", chunk_size: int = 64) -> HybridModel:
    """Build a :class:`HybridModel` from a checkpoint folder (see the module docstring for the order
    of checks). Raises :class:`~kda_ref.model.config.ConfigError` / :class:`CheckpointError`."""
    p = Path(path)
    if not p.is_dir():
        raise ConfigError(f"path: {p} is not a folder")
    config = ModelConfig.from_json(p / "config.json")
    check_fits(config, page_size=None)
    files = shard_files(p)
    headers = read_headers(files)
    _check_tensor_count(config, headers)
    with torch.device("meta"):
        model = HybridModel(config, seed=None, backend=backend, chunk_size=chunk_size)
    names = _match(model, {k: (shape, dtype) for k, (shape, dtype, _) in headers.items()})
    by_file: dict[Path, list[str]] = {}
    for ck, mk in names.items():
        by_file.setdefault(headers[ck][2], []).append(ck)
    for f in files:  # one shard in memory at a time
        with _opened_shard(f) as name:
            shard = load_file(name)
        model.load_state_dict({names[ck]: shard[ck].to(torch.float32) for ck in by_file.get(f, [])},
                              strict=False, assign=True)
        del shard
    if config.tie_word_embeddings and "lm_head.weight" not in names.values():
        model.lm_head.weight = model.model.embed_tokens.weight
    left = [n for n, t in (*model.named_parameters(), *model.named_buffers()) if t.is_meta]
    if left:  # pragma: no cover - _match guarantees every tensor is given
        raise CheckpointError(f"state_dict: {len(left)} tensors were not loaded, e.g. {left[:3]}")
    model.clear_fused_weights()
    # (tokenizer or None, why not): LLM's tokenizer="auto" reads it; a tokenizer file that is not a
    # regular file, or too large, is a ConfigError like every other file of the folder
    model.tokenizer_info = load_tokenizer(p, ConfigError)
    return model
