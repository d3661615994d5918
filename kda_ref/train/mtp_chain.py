"""Teach a K3 model's MTP layer to read its own output: the chained drafts it makes when served.

:func:`chained_mtp_losses` unrolls the recursion that :class:`~kda_ref.speculative.mtp_drafter.MTPDrafter` runs
(as vLLM and SGLang run DeepSeek-V3's and K3's MTP layer) over a packed batch, ``depths`` deep, with ground-truth
tokens standing in for the drafts; the loss is the mean over depths. :func:`finetune_mtp_chain` trains the MTP
layer alone (every other weight frozen) and rounds its routed experts back onto the MXFP4 grid.
Design notes: ``docs/training.md#the-mtp-layer-fine-tuned-for-chained-drafts``
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from ..model import ForwardBatch, HybridModel, save_pretrained
from .data import IGNORE, Corpus, lm_labels, pack, text_chunks
from .loop import make_batch, mtp_shift, warmup_cosine
from .recipe import Recipe

MAX_DEPTHS = 8


def _next_depth(x, ids, labels, lens):
    """The rows of the next depth from this one's outputs ``x``: per sequence, position ``t`` reads the output
    at ``t - 1`` (each sequence's last output and first token / label go); sequences left empty drop."""
    keep_x, keep_tok, new_lens, start = [], [], [], 0
    for n in lens:
        if n > 1:
            keep_x.append(torch.arange(start, start + n - 1))
            keep_tok.append(torch.arange(start + 1, start + n))
            new_lens.append(n - 1)
        start += n
    if not new_lens:
        return None
    a, b = torch.cat(keep_x), torch.cat(keep_tok)
    return x[a], ids[b], labels[b], new_lens


def chained_mtp_outputs(model: HybridModel, batch, h: torch.Tensor, depths: int):
    """``[(logits, labels)]`` per depth (module docstring) for a packed ``batch`` whose main model's hidden
    states are ``h [T, d]``; fewer than ``depths`` when the sequences are too short to chain further."""
    if isinstance(depths, bool) or not isinstance(depths, int) or not 1 <= depths <= MAX_DEPTHS:
        raise ValueError(f"depths: must be an int in [1, {MAX_DEPTHS}], got {depths!r}")
    rows, lens, labels = mtp_shift(batch)
    hidden, ids = h[rows], batch.ids[rows + 1]  # depth 1: h_t and the token at t + 1
    out = []
    for _ in range(depths):
        logits, x = model.mtp[0].predict(hidden, ids, ForwardBatch.prefill(lens), model.dispatcher)
        out.append((logits, labels))
        nxt = _next_depth(x, ids, labels, lens)
        if nxt is None:
            break
        hidden, ids, labels, lens = nxt
    return out


def chained_mtp_losses(model: HybridModel, batch, h: torch.Tensor, depths: int) -> list[torch.Tensor]:
    """The cross entropy of each depth (:func:`chained_mtp_outputs`)."""
    return [F.cross_entropy(lg.float(), lab, ignore_index=IGNORE) for lg, lab in chained_mtp_outputs(model, batch, h, depths)]


@torch.no_grad()
def chained_mtp_accuracy(model: HybridModel, text: bytes, length: int, depths: int, chunks: int = 16) -> list[float]:
    """Top-1 accuracy of each depth on the first ``chunks`` ``length``-byte chunks of ``text`` (held-out
    prose: what the model never trained on)."""
    batch = pack([(c, lm_labels(c), "text") for c in text_chunks(text, length)[:chunks]])
    h = model.hidden_states(batch.ids, ForwardBatch.prefill(batch.seq_lens))
    accs = []
    for logits, labels in chained_mtp_outputs(model, batch, h, depths):
        m = labels != IGNORE
        accs.append(float((logits.argmax(-1)[m] == labels[m]).float().mean()) if bool(m.any()) else 0.0)
    return accs


def finetune_mtp_chain(model: HybridModel, recipe: Recipe, corpus: Corpus, *, depths: int = 3, steps: int = 400,
                       lr: float = 1e-3, progress: bool = True) -> dict:
    """Train ``model.mtp[0]`` alone on :func:`chained_mtp_losses` for ``steps`` steps (AdamW, warmup then
    cosine to a tenth of ``lr``), on the recipe's batches numbered after its own training's (text it saw,
    in new windows). Returns ``{"depths", "steps", "lr", "wall_time_s", "before", "after"}`` with the
    held-out per-depth accuracy before and after."""
    if not model.config.num_nextn_predict_layers:
        raise ValueError("model: it has no MTP layer (num_nextn_predict_layers is 0)")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps: must be an int >= 1, got {steps!r}")
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    params = list(model.mtp[0].parameters())
    for p in params:
        p.requires_grad_(True)
    before = chained_mtp_accuracy(model, corpus.held_out, recipe.text_len, depths)
    opt = torch.optim.AdamW(params, lr=lr, betas=recipe.betas, weight_decay=recipe.weight_decay)
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=steps, desc="mtp chain", dynamic_ncols=True, mininterval=2.0)
    t0 = time.perf_counter()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = warmup_cosine(step, steps, lr, max(1, steps // 20), 0.1)
        batch = make_batch(recipe, corpus, recipe.steps + step)
        with torch.no_grad():
            h = model.hidden_states(batch.ids, ForwardBatch.prefill(batch.seq_lens))
        losses = chained_mtp_losses(model, batch, h, depths)
        loss = sum(losses) / len(losses)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, recipe.grad_clip)
        opt.step()
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=" / ".join(f"{float(x):.2f}" for x in losses))
    wall = time.perf_counter() - t0
    if bar is not None:
        bar.close()
    for p in params:
        p.requires_grad_(False)
    with torch.no_grad():  # the release stores routed experts in MXFP4: the MTP layer's go back onto the grid
        model.round_experts_to_mxfp4()  # (the base's are on it already: unchanged) and fused weights rebuild
    after = chained_mtp_accuracy(model, corpus.held_out, recipe.text_len, depths)
    return {"depths": depths, "steps": steps, "lr": lr, "wall_time_s": round(wall, 1),
            "held_out_accuracy_by_depth_before": before, "held_out_accuracy_by_depth_after": after}


def write_mtp_chain_release(model: HybridModel, source, result: dict, out) -> Path:
    """The fine-tuned model as a release in ``out``: its weights (:func:`~kda_ref.model.save_pretrained`; the
    base's tensors are the source's, untouched), the source's ``recipe.json`` with ``result`` under
    ``"mtp_chain"`` (the training that made the base stays recorded as it was), and its ``corpus.txt``."""
    src, dst = Path(source), Path(out)
    save_pretrained(model, dst)
    info = json.loads((src / "recipe.json").read_text())
    info["mtp_chain"] = result
    (dst / "recipe.json").write_text(json.dumps(info, indent=2, ensure_ascii=False))
    if src.resolve() != dst.resolve():
        shutil.copyfile(src / "corpus.txt", dst / "corpus.txt")
    return dst
