"""Paged MLA decode: torch reference vs a dense computation, Triton kernel vs the reference.

The kernel tests run under Triton's interpreter on CPU (conftest sets TRITON_INTERPRET=1).
"""

from __future__ import annotations

import pytest
import torch

from kda_ref.ops.mla_paged import check_paged_mla_inputs, paged_mla_decode_ref
from kda_ref.ops.triton.mla_decode import paged_mla_decode
from kda_ref.utils import cdiv


def make_case(gen, lens, H=4, Dc=64, Dp=16, page_size=16, dtype=torch.float32, spare_cols=2):
    """Random decode inputs; the latent rows are drawn dense per sequence, then scattered to pages.

    Physical pages are shuffled, page 0 is a reserved PAD page that no sequence uses, and it is
    filled with NaN together with the unused tail slots of every last page: reading any of them
    would poison the output. Block-table entries past a sequence's pages point at page 0.
    """
    N = len(lens)
    D = Dc + Dp
    need = [cdiv(L, page_size) for L in lens]
    num_pages = 1 + sum(need) + 1  # PAD page + used pages + one never-mapped page
    kv_cache = torch.full((num_pages, page_size, D), float("nan"), dtype=torch.float32)
    kv_cache[-1] = 0.0  # finite, but mapped by nobody
    phys = (torch.randperm(num_pages - 1, generator=gen) + 1).tolist()
    block_table = torch.zeros(N, max(need) + spare_cols, dtype=torch.int32)
    dense = []
    for n, L in enumerate(lens):
        rows = torch.randn(L, D, generator=gen)
        dense.append(rows)
        for j in range(need[n]):
            page = phys.pop()
            block_table[n, j] = page
            chunk = rows[j * page_size : (j + 1) * page_size]
            kv_cache[page, : chunk.shape[0]] = chunk
    q_latent = torch.randn(N, H, Dc, generator=gen)
    q_pe = torch.randn(N, H, Dp, generator=gen)
    seq_lens = torch.tensor(lens, dtype=torch.int32)
    scale = (Dc + Dp) ** -0.5
    cast = lambda t: t.to(dtype)  # noqa: E731
    return dict(
        q_latent=cast(q_latent),
        q_pe=cast(q_pe),
        kv_cache=cast(kv_cache),
        block_table=block_table,
        seq_lens=seq_lens,
        scale=scale,
    ), [cast(r) for r in dense]


def dense_attention(args, dense):
    """No paging: each sequence's own rows, plain softmax attention, float64."""
    Dc = args["q_latent"].shape[-1]
    outs = []
    for n, rows in enumerate(dense):
        rows = rows.double()
        keys = rows  # [L, Dc + Dp]: latent key with the shared positional key appended
        values = rows[:, :Dc]  # the value is the latent c_kv
        q = torch.cat([args["q_latent"][n], args["q_pe"][n]], dim=-1).double()  # [H, Dc + Dp]
        p = torch.softmax(args["scale"] * q @ keys.T, dim=-1)
        outs.append(p @ values)
    return torch.stack(outs)


# ----------------------------------------------------------------------------- reference


@pytest.mark.parametrize("page_size", [1, 4, 16])
def test_reference_matches_dense(gen, page_size):
    args, dense = make_case(gen, [1, 16, 37, 5, 48], page_size=page_size)
    out = paged_mla_decode_ref(**args)
    assert out.shape == args["q_latent"].shape and out.dtype == torch.float32
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), dense_attention(args, dense), atol=1e-5, rtol=1e-5)


def test_reference_length_one_returns_the_single_row(gen):
    args, dense = make_case(gen, [1, 1], H=3)
    out = paged_mla_decode_ref(**args)
    for n in range(2):
        torch.testing.assert_close(out[n], dense[n][0, :64].expand(3, 64))


# ----------------------------------------------------------------------------- kernel


@pytest.mark.triton
@pytest.mark.parametrize(
    "page_size, block_n",
    [(16, 16), (16, 32), (1, 16), (8, 32)],
    ids=["page16-tile16", "page16-tile32", "page1", "page8-tile-spans-pages"],
)
def test_kernel_matches_reference_fp32(gen, page_size, block_n):
    args, dense = make_case(gen, [1, 16, 37, 5], H=4, Dc=64, Dp=16, page_size=page_size)
    ref = paged_mla_decode_ref(**args)
    out = paged_mla_decode(**args, block_n=block_n)
    assert out.shape == ref.shape and out.dtype == torch.float32
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.double(), dense_attention(args, dense), atol=1e-5, rtol=1e-5)


@pytest.mark.triton
def test_kernel_fp16(gen):
    args, _ = make_case(gen, [3, 16, 29], H=4, Dc=64, Dp=16, dtype=torch.float16)
    ref = paged_mla_decode_ref(**args)
    out = paged_mla_decode(**args)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out.float(), ref.float(), atol=2e-3, rtol=1e-2)


@pytest.mark.triton
@pytest.mark.parametrize("block_dv", [None, 128], ids=["one-output-block", "four-output-blocks"])
def test_kernel_full_size_latent_tiling(gen, block_dv):
    # The 48B model's sizes: Dc = kv_lora_rank = 512, Dp = 64. Scores are tiled over Dc in
    # blocks of 64 (8 steps); with block_dv=128 the output is spread over 4 programs per head block.
    args, _ = make_case(gen, [20, 45], H=4, Dc=512, Dp=64, page_size=16)
    ref = paged_mla_decode_ref(**args)
    out = paged_mla_decode(**args, block_d=64, block_dv=block_dv)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.triton
def test_kernel_more_heads_than_a_block_and_strided_inputs(gen):
    # H = 20 needs two head blocks of 16 (the second one mostly masked); q_latent, q_pe and the
    # block table are non-contiguous views and the block table is int64.
    args, _ = make_case(gen, [7, 33], H=20, Dc=48, Dp=8, page_size=16)
    ref = paged_mla_decode_ref(**args)
    strided = dict(args)
    strided["q_latent"] = args["q_latent"].transpose(1, 2).contiguous().transpose(1, 2)
    strided["q_pe"] = torch.stack([args["q_pe"], args["q_pe"]], dim=-1)[..., 0]
    bt = torch.zeros(args["block_table"].shape[1], 2, dtype=torch.int64)
    bt[:] = args["block_table"].T
    strided["block_table"] = bt.T
    assert not strided["q_latent"].is_contiguous() and not strided["block_table"].is_contiguous()
    assert not strided["q_pe"].is_contiguous()
    out = paged_mla_decode(**strided)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------- which rows count


def _impls():
    return [
        pytest.param(paged_mla_decode_ref, id="reference"),
        pytest.param(paged_mla_decode, id="triton", marks=pytest.mark.triton),
    ]


@pytest.mark.parametrize("impl", _impls())
def test_only_rows_within_seq_len_matter(gen, impl):
    args, _ = make_case(gen, [21, 9], page_size=16)
    args["kv_cache"] = torch.nan_to_num(args["kv_cache"], nan=0.0)
    base = impl(**args)
    bt, kv = args["block_table"], args["kv_cache"]

    # Sequence 0 has 21 tokens: its row 21 is slot 5 of its second page. Change it (and the
    # unused page 0, and every row of the never-mapped page): the output must not move.
    outside = kv.clone()
    outside[int(bt[0, 1]), 5] = 1e4
    outside[0] = 1e4
    outside[-1] = 1e4
    same = impl(**{**args, "kv_cache": outside})
    torch.testing.assert_close(same, base, atol=0, rtol=0)

    # Row 20 (last valid token of sequence 0) does count, through both c_kv and k_pe; sequence
    # 1 is untouched.
    inside = kv.clone()
    inside[int(bt[0, 1]), 4] += 0.5
    moved = impl(**{**args, "kv_cache": inside})
    assert (moved[0] - base[0]).abs().max() > 1e-3
    torch.testing.assert_close(moved[1], base[1], atol=0, rtol=0)

    # Only the positional part of a valid row changed: still moves the scores, hence the output.
    inside_pe = kv.clone()
    inside_pe[int(bt[1, 0]), 8, 64:] += 1.0
    moved_pe = impl(**{**args, "kv_cache": inside_pe})
    assert (moved_pe[1] - base[1]).abs().max() > 1e-3


# ----------------------------------------------------------------------------- validation


def _bad_cases():
    def mut(**changes):
        return changes

    return [
        ("q_latent", lambda a: mut(q_latent=a["q_latent"][0])),  # rank 2
        ("q_latent", lambda a: mut(q_latent=a["q_latent"].to(torch.int32))),
        ("q_pe", lambda a: mut(q_pe=a["q_pe"][:, :3])),  # H mismatch
        ("q_pe", lambda a: mut(q_pe=a["q_pe"][:1])),  # N mismatch
        ("kv_cache", lambda a: mut(kv_cache=a["kv_cache"][..., :-1])),  # Dc + Dp mismatch
        ("kv_cache", lambda a: mut(kv_cache=a["kv_cache"][0])),  # rank 2
        ("kv_cache", lambda a: mut(q_pe=a["q_pe"][..., :8])),  # Dp mismatch shows on the cache width
        ("block_table", lambda a: mut(block_table=a["block_table"].float())),
        ("block_table", lambda a: mut(block_table=a["block_table"][:1])),
        ("block_table", lambda a: mut(block_table=a["block_table"][0])),
        ("seq_lens", lambda a: mut(seq_lens=a["seq_lens"].float())),
        ("seq_lens", lambda a: mut(seq_lens=a["seq_lens"][:1])),
        ("seq_lens", lambda a: mut(seq_lens=torch.tensor([0, 9], dtype=torch.int32))),
        ("seq_lens", lambda a: mut(seq_lens=torch.tensor([21, 5 * 16 + 1], dtype=torch.int32))),
        ("block_table", lambda a: mut(block_table=_set(a["block_table"], 0, 1, a["kv_cache"].shape[0]))),
        ("block_table", lambda a: mut(block_table=_set(a["block_table"], 1, 0, -1))),
        ("scale", lambda a: mut(scale=float("nan"))),
        ("scale", lambda a: mut(scale=0.0)),
    ]


def _set(t, i, j, value):
    t = t.clone()
    t[i, j] = value
    return t


@pytest.mark.parametrize("name, mutate", _bad_cases())
def test_bad_inputs_raise_naming_the_argument(gen, name, mutate):
    args, _ = make_case(gen, [21, 9], page_size=16)
    assert args["block_table"].shape == (2, 4)  # 2 used pages + 2 spare columns
    with pytest.raises(ValueError, match=rf"^{name}:"):
        paged_mla_decode_ref(**{**args, **mutate(args)})


def test_unused_block_table_entries_are_not_checked(gen):
    args, _ = make_case(gen, [21, 9], page_size=16)
    bt = args["block_table"].clone()
    bt[0, 2:] = -7  # past sequence 0's two pages
    bt[1, 1:] = 10**6  # past sequence 1's one page
    check_paged_mla_inputs(**{**args, "block_table": bt})
    torch.testing.assert_close(
        paged_mla_decode_ref(**{**args, "block_table": bt}), paged_mla_decode_ref(**args)
    )


@pytest.mark.triton
@pytest.mark.parametrize("name, mutate", _bad_cases()[::3])
def test_kernel_validates_before_launch(gen, name, mutate):
    args, _ = make_case(gen, [21, 9], page_size=16)
    with pytest.raises(ValueError, match=rf"^{name}:"):
        paged_mla_decode(**{**args, **mutate(args)})


@pytest.mark.triton
def test_kernel_rejects_bad_block_sizes(gen):
    args, _ = make_case(gen, [3], page_size=16)
    with pytest.raises(ValueError, match="^block_n:"):
        paged_mla_decode(**args, block_n=24)
    with pytest.raises(ValueError, match="^block_h:"):
        paged_mla_decode(**args, block_h=8)
