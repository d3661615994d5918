"""The model's seams: each piece written once, each name asked of its owner.

* the KDA and MLA layers compute their projections, gates and output once per form (the reference
  form and the fused one), and every path -- extend, decode, verify, a context-parallel rank -- calls
  those methods (checked on the source and on the numbers);
* backend names are compared only under ``kda_ref/ops``: the MLA layer asks a
  :class:`~kda_ref.ops.backend.KernelBackend` which decode to run;
* a checkpoint dtype is a codec object (:data:`~kda_ref.memory.codecs.CHECKPOINT_CODECS`) that
  knows its bytes, whether it shares the state slots, and how to quantise; the pool asks it;
* the pool's cache storage is built by :meth:`HybridCacheTensors.reserve`, not by ``__new__``.
"""

from __future__ import annotations

import ast
import pathlib
from dataclasses import dataclass

import pytest
import torch

from kda_ref.engine.config import CHECKPOINT_DTYPES
from kda_ref.memory import (CHECKPOINT_CODECS, CheckpointCodec, PageKind, UnifiedMemoryPool, VirtualPool,
                            checkpoint_codec)
from kda_ref.memory.checkpoint_store import CompressedCheckpoints
from kda_ref.memory.codecs import checkpoint_bytes
from kda_ref.model import HybridModel, ModelConfig, RequestCache
from kda_ref.model.layer_state import HybridCacheTensors
from kda_ref.model.size import cache_unit_bytes
from kda_ref.ops import KDAKernelDispatcher
from kda_ref.ops.backend import BACKENDS, KERNEL_BACKENDS, kernel_backend

ROOT = pathlib.Path(__file__).resolve().parents[1]
CFG = ModelConfig.micro()


def _functions_using(path: str, names: set[str]) -> dict[str, set[str]]:
    """``name -> the functions of path`` (qualified ``Class.method``) whose body mentions attribute or
    function ``name``."""
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    found: dict[str, set[str]] = {n: set() for n in names}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for sub in ast.walk(child):
                    name = sub.attr if isinstance(sub, ast.Attribute) else sub.id if isinstance(sub, ast.Name) else None
                    if name in found:
                        found[name].add(prefix + child.name)
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def _layer(model: HybridModel, kind: str):
    return next(layer.self_attn for layer in model.model.layers if layer.kind == kind)


def _hidden(T: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(T, CFG.hidden_size, generator=torch.Generator().manual_seed(seed))


# ---- 1. each piece of the layers written once ------------------------------------------------------------
KDA_PIECES = {  # what is computed -> the one method of KDAAttention that computes it (per form)
    "q_proj": {"KDAAttention.project"},
    "f_a_proj": {"KDAAttention.gates"}, "b_proj": {"KDAAttention.gates"},
    "forget_gate": {"KDAAttention.gates", "KDAAttention.project_fused"},  # the part: reference and fused form
    "out_gate": {"KDAAttention.output", "KDAAttention.project_fused"},
    "rms_norm_gated": {"KDAAttention.output"},
    "in_proj": {"KDAAttention.project_fused"}, "fg_b": {"KDAAttention.project_fused"},
    "L2NORM_EPS": {"KDAAttention.heads_fused"}, "l2norm": {"KDAAttention.split_heads"},
    "o_proj": {"KDAAttention.output", "KDAAttention.output_fused"}, "rms_norm_fast": {"KDAAttention.output_fused"},
    "causal_conv1d": {"KDAAttention.conv_heads"}, "causal_conv1d_update": {"KDAAttention.conv_heads"},
    # the variants' own pieces live in their parts (kda_ref.model.parts), never in the layer
    "kda_gate": set(), "kda_gate_lowerbound": set(), "softplus": set(), "g_a_proj": set(), "g_proj": set(),
}
MLA_PIECES = {
    "query": {"MLAAttention.queries", "MLAAttention.project_fused"},
    "kv_a_proj_with_mqa": {"MLAAttention.latents"},
    "o_proj": {"MLAAttention.output", "MLAAttention.output_fused"},
    "out_gate": {"MLAAttention.output", "MLAAttention.output_fused"},
    "in_proj": {"MLAAttention.project_fused"}, "w_uk": {"MLAAttention.project_fused", "MLAAttention._decode"},
    "w_uv_t": {"MLAAttention.output_fused"},
    "paged_mla_decode": {"MLAAttention.decode", "MLAAttention._decode"},  # the fused step's and the reference's
    "q_proj": set(), "q_a_proj": set(), "q_b_proj": set(), "g_proj": set(), "sigmoid": set(),
}
SWITCHES = ("gate_lower_bound", "use_full_rank_gate", "q_lora_rank", "mla_use_output_gate",
            "routed_expert_hidden_size", "latent_moe_use_norm")


def test_each_k3_switch_is_read_once_where_its_part_is_chosen():
    """A variant's switch is read where the layer's part is chosen (``kda_parts``, ``mla_parts``,
    ``make_moe``, a part's constructor), never on a forward path."""
    readers = {}
    for path in ("kda_ref/model/kda_layer.py", "kda_ref/model/mla_layer.py", "kda_ref/model/mlp.py",
                 "kda_ref/model/parts.py", "kda_ref/model/decoder.py", "kda_ref/model/model.py"):
        for name, fns in _functions_using(path, set(SWITCHES)).items():
            readers.setdefault(name, set()).update(f"{path.rsplit('/', 1)[1]}:{fn}" for fn in fns)
    assert readers == {
        "gate_lower_bound": {"parts.py:kda_parts"}, "use_full_rank_gate": {"parts.py:kda_parts"},
        "q_lora_rank": {"parts.py:mla_parts"}, "mla_use_output_gate": {"parts.py:mla_parts"},
        "routed_expert_hidden_size": {"mlp.py:make_moe", "mlp.py:LatentMoE.__init__"},
        "latent_moe_use_norm": {"mlp.py:LatentMoE.__init__"},
    }


@pytest.mark.parametrize("path,pieces", [("kda_ref/model/kda_layer.py", KDA_PIECES),
                                         ("kda_ref/model/mla_layer.py", MLA_PIECES)])
def test_each_piece_of_a_layer_is_computed_in_one_method(path, pieces):
    # the parameters' declarations (``__init__``) and the fused weights' builders name their sources
    builds = lambda fn: fn.endswith(".__init__") or fn.split(".")[-1].startswith(("fused_", "_fused_", "_build_fused"))  # noqa: E731
    got = {name: {fn for fn in fns if not builds(fn)} for name, fns in _functions_using(path, set(pieces)).items()}
    assert got == pieces


def test_the_context_parallel_rank_calls_the_layers_pieces_and_not_their_weights():
    src = (ROOT / "kda_ref/context_parallel/forward.py").read_text(encoding="utf-8")
    weights = {"q_proj", "k_proj", "v_proj", "f_a_proj", "f_b_proj", "b_proj", "g_a_proj", "g_b_proj", "o_proj",
               "g_proj", "q_a_proj", "q_b_proj",
               "o_norm", "A_log", "dt_bias", "kv_a_proj_with_mqa", "kv_b_proj", "rms_norm_gated", "causal_conv1d"}
    used = {n for n, fns in _functions_using("kda_ref/context_parallel/forward.py", weights).items() if fns}
    assert used == set(), f"parallel/forward.py re-implements the layers with {sorted(used)}"
    for piece in ("attn.project(x)", "attn.gates(x)", "attn.conv_heads(", "attn.output(o[0], x)", "attn.output(o, x)"):
        assert piece in src


@pytest.mark.parametrize("cfg", [CFG, ModelConfig.k3_micro()], ids=["kimi_linear", "k3"])
def test_the_fused_pieces_compute_what_the_reference_pieces_compute(cfg):
    m = HybridModel(cfg, seed=5).eval()
    attn, x = _layer(m, "kda"), _hidden(7)
    with torch.no_grad():
        w = attn.fused_weights()
        qkv, g, beta, gate = attn.project_fused(x, w)
        g_ref, beta_ref = attn.gates(x)
        torch.testing.assert_close(qkv, attn.project(x))
        torch.testing.assert_close(g, g_ref)
        torch.testing.assert_close(beta, beta_ref)
        y = torch.nn.functional.silu(qkv)
        q, k, v = attn.heads_fused(y)
        for a, b in zip((q, k, v), attn.split_heads(y)):
            torch.testing.assert_close(a, b[0])
        o = torch.randn(7, attn.num_heads, attn.head_dim, generator=torch.Generator().manual_seed(1))
        torch.testing.assert_close(attn.output_fused(o, gate, w), attn.output(o, x))

    mla = _layer(m, "mla")
    with torch.no_grad():
        mw = mla.fused_weights()
        q_lat, q_pe, rows, gate = mla.project_fused(x, mw)
        q_nope, q_pe_ref, rows_ref = mla.project(x)
        torch.testing.assert_close(q_pe, q_pe_ref)
        torch.testing.assert_close(rows, rows_ref)
        w_uk, w_uv_t = mw.w_uk, mw.w_uv_t
        torch.testing.assert_close(q_lat, torch.einsum("thd,hdc->thc", q_nope, w_uk))
        o_lat = torch.randn(7, mla.num_heads, mla.latent, generator=torch.Generator().manual_seed(2))
        o = torch.einsum("thc,hcv->thv", o_lat, w_uv_t)  # the value absorbed back
        torch.testing.assert_close(mla.output_fused(o_lat, gate, mw), mla.output(o, x))


def test_the_reference_pieces_keep_autograd():
    m = HybridModel(CFG, seed=5)
    attn, x = _layer(m, "kda"), _hidden(5).requires_grad_()
    q, k, v, conv = attn.conv_heads(attn.project(x), attn.conv_weight(), torch.tensor([0, 2, 5]))
    g, beta = attn.gates(x)
    assert conv.shape == (2, 3 * CFG.kda_dim, CFG.short_conv_kernel_size - 1)
    (attn.output(v[0], x).sum() + q.sum() + k.sum() + g.sum() + beta.sum()).backward()
    for p in (attn.q_proj.weight, attn.q_conv1d.weight, attn.A_log, attn.dt_bias, attn.g_b_proj.weight, x):
        assert p.grad is not None and p.grad.abs().sum() > 0


def test_decode_and_verify_allocate_no_weight_copies_per_step():
    """The fused weights are built once and reused (the fast path's speed): a decode step and a verify
    step read the same cached tensors as the step before."""
    m = HybridModel(CFG, seed=5).eval()
    rc = RequestCache(CFG, num_seqs=2, max_tokens=32)
    ids = torch.randint(1, CFG.vocab_size, (12,), generator=torch.Generator().manual_seed(3))
    b = rc.batch([6, 6])
    m.forward(ids, b, rc.tensors)
    rc.advance(b)
    attn = _layer(m, "kda")
    seen = []
    for t in range(2):
        b = rc.batch([1, 1])
        m.forward(ids[t:t + 2], b, rc.tensors)
        rc.advance(b)
        seen.append([t.data_ptr() for t in attn.fused_weights()])
    assert seen[0] == seen[1]


# ---- 2. backends asked of their owner ---------------------------------------------------------------------
def _compared_strings(path: pathlib.Path) -> set[str]:
    """String constants that ``path`` compares something with (``==``, ``!=``, ``in``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                for c in ast.walk(side):
                    if isinstance(c, ast.Constant) and isinstance(c.value, str):
                        out.add(c.value)
    return out


OWNED = ["kda_ref/model/kda_layer.py", "kda_ref/model/mla_layer.py", "kda_ref/model/parts.py", "kda_ref/model/layer_state.py",
         "kda_ref/context_parallel/forward.py", "kda_ref/memory/pool.py", "kda_ref/memory/checkpoint_store.py"]


@pytest.mark.parametrize("path", OWNED)
def test_no_backend_or_checkpoint_dtype_name_is_compared_outside_its_owner(path):
    names = set(BACKENDS) | set(CHECKPOINT_CODECS)
    assert _compared_strings(ROOT / path) & names == set()


def test_the_backend_objects_answer_the_layers_questions():
    assert BACKENDS == ("torch", "triton") and set(KERNEL_BACKENDS) == set(BACKENDS)
    torch_b, triton_b = kernel_backend("torch"), kernel_backend("triton")
    assert not torch_b.uses_triton_mla_decode and triton_b.uses_triton_mla_decode
    assert torch_b.takes_pad_rows and not triton_b.takes_pad_rows
    assert torch_b.takes_chunk_size(128) and not triton_b.takes_chunk_size(128) and triton_b.takes_chunk_size(16)
    for d in (KDAKernelDispatcher("torch"), KDAKernelDispatcher("triton", chunk_size=16)):
        assert kernel_backend(d) is d.kernels and d.uses_triton_mla_decode == d.kernels.triton
        assert d.with_hook(print).kernels is d.kernels and d.backend == d.kernels.name
    assert kernel_backend(triton_b) is triton_b
    with pytest.raises(ValueError, match="^backend: must be one of"):
        kernel_backend("cuda")
    with pytest.raises(ValueError, match="^backend:"):
        KDAKernelDispatcher(None)
    with pytest.raises(ValueError, match="^chunk_size: the Triton chunk kernel takes"):
        KDAKernelDispatcher("triton", chunk_size=128)


def _mla_decode_case():
    m = HybridModel(CFG, seed=2, fast_decode=False).eval()
    rc = RequestCache(CFG, num_seqs=3, max_tokens=40, page_size=4)
    ids = torch.randint(1, CFG.vocab_size, (30,), generator=torch.Generator().manual_seed(7))
    b = rc.batch([9, 5, 13])
    m.forward(ids[:27], b, rc.tensors)
    rc.advance(b)
    return m, rc


@pytest.mark.parametrize("backend", ["torch", pytest.param("triton", marks=pytest.mark.triton)])
def test_the_mla_layer_takes_a_name_a_backend_object_or_the_dispatcher(backend):
    m, rc = _mla_decode_case()
    mla = _layer(m, "mla")
    b = rc.batch([1, 1, 1])
    x = _hidden(3, seed=4)
    outs = []
    with torch.no_grad():
        for given in (backend, kernel_backend(backend), KDAKernelDispatcher(backend, chunk_size=16)):
            kv = rc.tensors.kv.clone()  # each call writes the step's rows; the same rows every time
            outs.append(mla(x, b, rc.tensors, backend=given))
            rc.tensors.kv.copy_(kv)
        ref = mla(x, b, rc.tensors, backend="torch")
    for o in outs:
        assert torch.equal(o, outs[0])
    torch.testing.assert_close(outs[0], ref, atol=1e-5, rtol=1e-5)


# ---- 3. checkpoint codecs ------------------------------------------------------------------------------
def test_the_codec_registry_is_the_engines_list_of_checkpoint_dtypes():
    assert tuple(CHECKPOINT_CODECS) == CHECKPOINT_DTYPES == ("fp32", "bf16", "int8")
    for name, codec in CHECKPOINT_CODECS.items():
        assert codec.name == name and checkpoint_codec(name) is codec and checkpoint_codec(codec) is codec
    with pytest.raises(ValueError, match="^checkpoint_dtype: must be 'fp32' or one of"):
        checkpoint_codec("fp8")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_each_codec_knows_its_bytes(dtype):
    c = CFG
    n, H, D = len(c.kda_layer_ids), c.linear_num_heads, c.linear_head_dim
    conv = 3 * c.kda_dim * (c.short_conv_kernel_size - 1) * torch.empty((), dtype=dtype).element_size()
    state = cache_unit_bytes(c, 16, torch.empty((), dtype=dtype).element_size())[0]
    assert CHECKPOINT_CODECS["fp32"].checkpoint_bytes(c, dtype) == state
    assert CHECKPOINT_CODECS["bf16"].checkpoint_bytes(c, dtype) == n * (H * D * D * 2 + conv)
    assert CHECKPOINT_CODECS["int8"].checkpoint_bytes(c, dtype) == n * (H * D * D + H * D * 4 + conv)
    for name, codec in CHECKPOINT_CODECS.items():
        assert checkpoint_bytes(c, name, dtype) == codec.checkpoint_bytes(c, dtype)


def test_the_codecs_quantise_and_dequantise():
    S = torch.randn(2, 3, 8, 6, generator=torch.Generator().manual_seed(0))  # [L, H, K, V]
    fp32, bf16, int8 = (CHECKPOINT_CODECS[n] for n in ("fp32", "bf16", "int8"))
    assert fp32.shares_state_slots and not fp32.lossy
    assert not bf16.shares_state_slots and not int8.shares_state_slots and bf16.lossy and int8.lossy
    assert torch.equal(fp32.dequantise(*fp32.quantise(S)), S)
    stored, scale = bf16.quantise(S)
    assert stored.dtype == torch.bfloat16 and scale is None
    assert torch.equal(bf16.dequantise(stored, None), S.to(torch.bfloat16).float())
    stored, scale = int8.quantise(S)
    assert stored.dtype == torch.int8 and scale.shape == (2, 3, 8, 1)  # one scale per (layer, head, key channel)
    torch.testing.assert_close(scale[..., 0], S.abs().amax(-1) / 127)
    back = int8.dequantise(stored, scale)
    assert ((back - S).abs() <= scale / 2 + 1e-7).all()


@dataclass(frozen=True)
class _Fp16Codec(CheckpointCodec):
    """A codec the registry does not hold: the pool takes any codec object and asks it."""

    shares_state_slots: bool = False
    recurrent_dtype: torch.dtype = torch.float16
    lossy: bool = True

    def quantise(self, recurrent):
        return recurrent.to(torch.float16), None


@pytest.mark.parametrize("codec", [*CHECKPOINT_CODECS, _Fp16Codec("fp16")])
def test_the_pool_asks_the_codec(codec):
    obj = checkpoint_codec(codec)
    pool = UnifiedMemoryPool(CFG, 4 << 20, page_size=8, checkpoint_dtype=codec)
    assert pool.codec is obj and pool.checkpoint_dtype == obj.name
    assert pool.sizes.of(PageKind.CHECKPOINT) == obj.checkpoint_bytes(CFG, torch.float32)
    assert pool.shared_checkpoint_slots == pool.donates_by_retag == obj.shares_state_slots
    assert (pool.compressed is None) == obj.shares_state_slots
    virtual = VirtualPool(CFG, 4 << 20, page_size=8, checkpoint_dtype=codec)  # bf16 conv windows
    assert virtual.sizes.of(PageKind.CHECKPOINT) == obj.checkpoint_bytes(CFG, torch.bfloat16)
    assert virtual.shared_checkpoint_slots == obj.shares_state_slots and virtual.checkpoint_dtype == obj.name
    (active,) = pool.alloc(PageKind.KDA_STATE, 1, "r")
    (ckpt,) = pool.alloc(PageKind.CHECKPOINT, 1, "cache")
    (back,) = pool.alloc(PageKind.KDA_STATE, 1, "r2")
    t = pool.tensors
    t.recurrent[:, active] = torch.randn(t.recurrent[:, active].shape, generator=torch.Generator().manual_seed(1))
    t.conv[:, active] = torch.randn(t.conv[:, active].shape, generator=torch.Generator().manual_seed(2))
    pool.checkpoint_from_active(active, ckpt)
    pool.restore_checkpoint(ckpt, back)
    want = obj.dequantise(*obj.quantise(t.recurrent[:, active]))
    assert torch.equal(t.recurrent[:, back], want)
    assert torch.equal(t.conv[:, back], t.conv[:, active])


def test_compressed_storage_refuses_the_exact_codec():
    with pytest.raises(ValueError, match="^codec: fp32 checkpoints are state slots"):
        CompressedCheckpoints(CFG, 4, checkpoint_codec("fp32"))
    with pytest.raises(ValueError, match="^codec: expected a CheckpointCodec"):
        CompressedCheckpoints(CFG, 4, "bf16")  # a name is looked up by the caller (checkpoint_codec)
    with pytest.raises(ValueError, match="^checkpoint_dtype:"):
        checkpoint_codec("fp8")


# ---- 4. the pool's storage through a constructor ----------------------------------------------------------
def test_the_pool_reserves_its_cache_through_the_classmethod():
    pool = UnifiedMemoryPool(CFG, 4 << 20, page_size=8, dtype=torch.bfloat16)
    t = pool.tensors
    assert type(t) is HybridCacheTensors
    fresh = HybridCacheTensors(CFG, pool.max_slots, pool.max_pages, 8, dtype=torch.bfloat16)
    for name in ("recurrent", "conv", "kv"):
        a, b = getattr(t, name), getattr(fresh, name)
        assert a.shape == b.shape and a.dtype == b.dtype and a.device == b.device
    assert (t.page_size, t.kda_index, t.mla_index, t.config) == (8, fresh.kda_index, fresh.mla_index, CFG)
    assert t.num_slots == pool.max_slots and t.num_pages == pool.max_pages


def test_reserve_checks_its_arguments_like_the_constructor():
    r = HybridCacheTensors.reserve(CFG, 3, 2, 4, dtype=torch.float32, device="cpu")
    assert r.recurrent.shape[1] == 3 and r.kv.shape[1:3] == (2, 4) and r.recurrent.device.type == "cpu"
    r.zero_pad_units()
    assert r.recurrent[:, 0].abs().sum() == 0 and r.kv[:, 0].abs().sum() == 0
    with pytest.raises(ValueError, match="^num_slots:"):
        HybridCacheTensors.reserve(CFG, 1, 2, 4)
    with pytest.raises(ValueError, match="^num_pages:"):
        HybridCacheTensors.reserve(CFG, 2, 1, 4)
    with pytest.raises(ValueError, match="^page_size:"):
        HybridCacheTensors.reserve(CFG, 2, 2, 0)


def test_the_pool_module_does_not_build_through_new():
    src = (ROOT / "kda_ref/memory/pool.py").read_text(encoding="utf-8")
    assert "__new__" not in src and "HybridCacheTensors.reserve(" in src
