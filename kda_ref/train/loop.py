"""The training loop: AdamW, warmup + cosine schedule, gradient clipping, periodic evaluation and a
resumable checkpoint (model + optimizer + step + RNG state + metric history).

The batch of step ``s`` is a pure function of ``(recipe.seed, s)`` (see :func:`make_batch`), so a
run killed after any checkpoint and restarted with the same checkpoint path continues exactly as
the uninterrupted run would (``tests/test_trained_model.py::test_resume_matches_uninterrupted``).
"""

from __future__ import annotations

import json
import math
import platform
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from ..model import ForwardBatch, HybridModel, save_pretrained
from ..utils.files import open_regular, replaced_whole
from .data import (IGNORE, Batch, Corpus, build_corpus, held_out_recall, lm_labels, pack, recall_stream,
                   text_chunks, text_window)
from .recipe import Recipe

LN2 = math.log(2.0)


# ---- batches & loss ------------------------------------------------------------------------------
def make_batch(recipe: Recipe, corpus: Corpus, step: int) -> Batch:
    """Step ``step``'s packed batch: MQAR sequences (``recall_fraction`` of the tokens), then text windows."""
    seqs = []
    budget = recipe.tokens_per_step * recipe.recall_fraction
    used, j = 0, 0
    while used < budget:
        s = recall_stream(recipe.seed, step * 10_000 + j, recipe.min_pairs, recipe.max_pairs)
        seqs.append((s.ids, s.labels, "recall"))
        used += len(s.ids)
        j += 1
    n_text = round(recipe.tokens_per_step * (1 - recipe.recall_fraction) / recipe.text_len)
    gen = torch.Generator().manual_seed(recipe.seed * 1_000_000_007 + 500_000_000 + step)
    for _ in range(n_text):
        ids = text_window(corpus.train, gen, recipe.text_len)
        seqs.append((ids, lm_labels(ids), "text"))
    return pack(seqs)


def batch_loss(model: HybridModel, batch: Batch, recall_weight: float = 1.0, mtp_weight: float = 0.0):
    """``(loss, {"text": mean CE, "recall": mean answer CE[, "mtp": mean MTP CE]})`` for one packed batch.
    ``mtp_weight``: the weight of the first MTP layer's loss (:func:`mtp_loss`)."""
    fb = ForwardBatch.prefill(batch.seq_lens)
    h = model.hidden_states(batch.ids, fb) if mtp_weight else None  # shared by the head and the MTP layer
    logits = model(batch.ids, batch=fb) if h is None else model.head(h)
    kind = torch.cat([torch.full((n,), k == "recall") for n, k in zip(batch.seq_lens, batch.kinds)])
    parts, loss = {}, 0.0
    for name, mask, w in (("text", ~kind, 1.0), ("recall", kind, recall_weight)):
        lab = batch.labels.masked_fill(~mask, IGNORE)
        if (lab != IGNORE).any():
            ce = F.cross_entropy(logits.float(), lab, ignore_index=IGNORE)
            parts[name] = ce.detach().item()
            loss = loss + w * ce
    if h is not None:
        ce = mtp_loss(model, batch, h)
        parts["mtp"] = ce.detach().item()
        loss = loss + mtp_weight * ce
    return loss, parts


def mtp_shift(batch: Batch) -> tuple[torch.Tensor, list[int], torch.Tensor]:
    """What the MTP layer sees in a packed batch: ``(rows [M]`` -- every position but each sequence's last,
    the lengths ``n - 1``, ``labels [M])`` -- row ``t``'s label is the main label at ``t + 1`` (the token
    at ``t + 2`` where that one carries loss), so the MTP layer learns what the main head learns, one
    token further."""
    rows, lens, labels = [], [], []
    start = 0
    for n in batch.seq_lens:
        rows.append(torch.arange(start, start + n - 1))
        labels.append(batch.labels[start + 1:start + n])
        lens.append(n - 1)
        start += n
    return torch.cat(rows), lens, torch.cat(labels)


def mtp_loss(model: HybridModel, batch: Batch, h: torch.Tensor) -> torch.Tensor:
    """Mean CE of MTP layer 0 over ``batch``: from the main model's hidden states ``h [T, d]`` at ``t``
    and the token at ``t + 1``, the token at ``t + 2`` (:func:`mtp_shift`; DeepSeek-V3 section 2.2)."""
    rows, lens, labels = mtp_shift(batch)
    logits, _ = model.mtp[0].predict(h[rows], batch.ids[rows + 1], ForwardBatch.prefill(lens), model.dispatcher)
    return F.cross_entropy(logits.float(), labels, ignore_index=IGNORE)


@torch.no_grad()
def mtp_accuracy(model: HybridModel, batch: Batch) -> float:
    """Top-1 accuracy of MTP layer 0 on ``batch``'s loss-bearing tokens (the token after next)."""
    h = model.hidden_states(batch.ids, ForwardBatch.prefill(batch.seq_lens))
    rows, lens, labels = mtp_shift(batch)
    logits, _ = model.mtp[0].predict(h[rows], batch.ids[rows + 1], ForwardBatch.prefill(lens), model.dispatcher)
    m = labels != IGNORE
    return float((logits.argmax(-1)[m] == labels[m]).float().mean()) if bool(m.any()) else 0.0


# ---- evaluation ----------------------------------------------------------------------------------
@torch.no_grad()
def recall_accuracy(model: HybridModel, samples, batch_size: int = 32) -> float:
    """Fraction of query answers predicted exactly (argmax) over the MQAR ``samples``."""
    hit = tot = 0
    for i in range(0, len(samples), batch_size):
        chunk = samples[i:i + batch_size]
        b = pack([(s.ids, s.labels, "recall") for s in chunk])
        pred = model(b.ids, batch=ForwardBatch.prefill(b.seq_lens)).argmax(-1)
        m = b.labels != IGNORE
        hit += int((pred[m] == b.labels[m]).sum())
        tot += int(m.sum())
    return hit / max(tot, 1)


@torch.no_grad()
def text_loss(model: HybridModel, text: bytes, length: int = 256, batch_size: int = 16) -> float:
    """Mean next-byte cross entropy (nats) over non-overlapping ``<bos>``-prefixed chunks of ``text``
    (the prediction of the first byte after ``<bos>`` included)."""
    chunks = text_chunks(text, length)
    tot, n = 0.0, 0
    for i in range(0, len(chunks), batch_size):
        b = pack([(c, lm_labels(c), "text") for c in chunks[i:i + batch_size]])
        logits = model(b.ids, batch=ForwardBatch.prefill(b.seq_lens))
        m = b.labels != IGNORE
        tot += float(F.cross_entropy(logits[m].float(), b.labels[m], reduction="sum"))
        n += int(m.sum())
    return tot / max(n, 1)


def evaluate(model: HybridModel, recipe: Recipe, corpus: Corpus, recall_count: int | None = None,
             train_text: bool = False) -> dict:
    """Held-out MQAR answer accuracy and held-out text loss / bits per byte (``train_text``: also
    the bits per byte on the training text, which shows how much of the small corpus is memorised)."""
    was = model.training
    model.eval()
    samples = held_out_recall(recipe.seed, recall_count or recipe.eval_recall_count, recipe.min_pairs, recipe.max_pairs)
    acc = recall_accuracy(model, samples)
    held = text_loss(model, corpus.held_out, recipe.text_len)
    out = {"recall_accuracy": acc, "recall_chance": 1 / 26, "text_loss_held_out": held,
           "bits_per_byte_held_out": held / LN2}
    if model.config.num_nextn_predict_layers:  # the MTP layer's top-1 on held-out text and recall
        chunks = text_chunks(corpus.held_out, recipe.text_len)[:16]
        out["mtp_accuracy_held_out_text"] = mtp_accuracy(model, pack([(c, lm_labels(c), "text") for c in chunks]))
        out["mtp_accuracy_recall"] = mtp_accuracy(model, pack([(s.ids, s.labels, "recall") for s in samples[:64]]))
    if train_text:
        out["bits_per_byte_train_text"] = text_loss(model, corpus.train, recipe.text_len) / LN2
    model.train(was)
    return out


# ---- schedule & optimizer ------------------------------------------------------------------------
def warmup_cosine(step: int, steps: int, lr: float, warmup: int, min_ratio: float) -> float:
    """Linear warmup to ``lr`` over ``warmup`` steps, then cosine to ``lr * min_ratio`` at ``steps``."""
    if step < warmup:
        return lr * (step + 1) / warmup
    t = min(max((step - warmup) / max(1, steps - warmup), 0.0), 1.0)
    return lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * t)))


def lr_at(recipe: Recipe, step: int) -> float:
    """The recipe's learning rate at ``step`` (:func:`warmup_cosine`)."""
    return warmup_cosine(step, recipe.steps, recipe.lr, recipe.warmup_steps, recipe.min_lr_ratio)


def make_optimizer(model: HybridModel, recipe: Recipe) -> torch.optim.AdamW:
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        # matrices decay; norms, gate parameters (A_log, dt_bias), conv kernels and embeddings do not
        (decay if p.dim() == 2 and "embed_tokens" not in name else no_decay).append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": recipe.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=recipe.lr, betas=recipe.betas)


def add_dropout(model: HybridModel, p: float) -> list:
    """Dropout (active in ``model.train()`` only) on the embedding output and on the output of every
    attention and feed-forward block, added with forward hooks so the model code stays untouched.
    Returns the hook handles (``h.remove()`` takes it out again)."""
    if p <= 0:
        return []

    def hook(mod, inp, out):  # a KDA layer returns (hidden, record): drop out the hidden part
        if isinstance(out, tuple):
            return (F.dropout(out[0], p, mod.training), *out[1:])
        return F.dropout(out, p, mod.training)
    mods = [model.model.embed_tokens]
    for layer in model.model.layers:
        mods.append(layer.self_attn)
        mods.append(layer.block_sparse_moe if hasattr(layer, "block_sparse_moe") else layer.mlp)
    return [m.register_forward_hook(hook) for m in mods]


# ---- checkpoint ----------------------------------------------------------------------------------
def save_checkpoint(path: Path, model, opt, step: int, recipe: Recipe, history: list, wall: float, data_hash: str,
                    ema: dict | None = None):
    """Write the run's state to ``path`` whole or not at all (:func:`~kda_ref.utils.files.replaced_whole`: a
    kill mid-write leaves the previous checkpoint intact, a FIFO is never opened). ``ema``: the smoothed
    training losses, so that a resumed run reports what an uninterrupted one would."""
    state = {
        "model": model.state_dict(), "optimizer": opt.state_dict(), "step": step,
        "rng": torch.get_rng_state(), "recipe": recipe.to_dict(), "history": history,
        "wall_time_s": wall, "data_sha256": data_hash, "ema": dict(ema or {}),
    }
    with replaced_whole(path, CheckpointFileError) as f:
        torch.save(state, f)


class CheckpointFileError(ValueError):
    """A training checkpoint that is not one ``save_checkpoint`` wrote (names the file)."""


CHECKPOINT_KEYS = ("model", "optimizer", "step", "rng", "recipe", "history", "wall_time_s", "data_sha256")


def load_checkpoint(path: Path) -> dict:
    """Read a checkpoint written by :func:`save_checkpoint`. Loaded with ``weights_only=True``: torch's
    restricted unpickler builds only tensors and plain containers, so a crafted file cannot run code
    (it fails to load instead). Anything else is a :class:`CheckpointFileError`."""
    try:
        with open_regular(path, CheckpointFileError) as f:  # a FIFO or a device is refused, never read (it blocks)
            st = torch.load(f, map_location="cpu", weights_only=True)
    except CheckpointFileError:
        raise
    except Exception as e:  # noqa: BLE001 -- an unsafe, truncated or foreign file: refuse it, say why
        raise CheckpointFileError(f"checkpoint: {path} is not a training checkpoint this project can load safely "
                                  f"({type(e).__name__}: {str(e).splitlines()[0][:200]})") from None
    missing = [k for k in CHECKPOINT_KEYS if not isinstance(st, dict) or k not in st]
    if missing:
        raise CheckpointFileError(f"checkpoint: {path} lacks {missing} (not written by kda-ref train)")
    if not isinstance(st["rng"], torch.Tensor) or st["rng"].dtype != torch.uint8:
        raise CheckpointFileError(f"checkpoint: {path} has no valid RNG state")
    return st


def _resume(model, opt, st: dict, path: Path, steps: int) -> tuple[int, list, float, dict]:
    """Load a checkpoint's weights, optimizer and RNG into the fresh ``model`` / ``opt``; a checkpoint
    whose parts do not fit them (weights of another shape, ``"model": {}``, a step out of range) is a
    :class:`CheckpointFileError` naming the part."""
    step, history, wall = st["step"], st["history"], st["wall_time_s"]
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= steps:
        raise CheckpointFileError(f"checkpoint: {path} has step {step!r}, not an int in [0, {steps}]")
    if not isinstance(history, list) or isinstance(wall, bool) or not isinstance(wall, (int, float)):
        raise CheckpointFileError(f"checkpoint: {path} has a malformed history or wall time")
    _check_tensors(st, model, opt, path)
    for part, target in (("model", model), ("optimizer", opt)):
        try:
            target.load_state_dict(st[part])
        except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as e:
            raise CheckpointFileError(f"checkpoint: {path} has {part} state that does not fit the recipe's "
                                      f"{part} ({type(e).__name__}: {str(e).splitlines()[0][:160]})") from None
    torch.set_rng_state(st["rng"])
    ema = st.get("ema", {})  # absent from checkpoints written before 2026-12-07: the averages restart
    if not isinstance(ema, dict) or not all(isinstance(k, str) and isinstance(v, float) for k, v in ema.items()):
        raise CheckpointFileError(f"checkpoint: {path} has a malformed ema (the smoothed training losses)")
    return step, history, float(wall), dict(ema)


def _check_tensors(st: dict, model, opt, path: Path) -> None:
    """Each saved weight of the model's dtype and shape (``load_state_dict`` casts a float16 checkpoint
    silently), each optimizer moment of its parameter's shape (torch checks only the groups' sizes, and a
    wrong one failed at the first step): a :class:`CheckpointFileError` naming the tensor otherwise."""
    have = st["model"] if isinstance(st["model"], dict) else {}
    for name, want in model.state_dict().items():
        got = have.get(name)
        if isinstance(got, torch.Tensor) and (got.dtype != want.dtype or got.shape != want.shape):
            raise CheckpointFileError(f"checkpoint: {path} has model.{name} {got.dtype} {tuple(got.shape)}, the "
                                      f"recipe's model {want.dtype} {tuple(want.shape)}")
    params = [p for group in opt.param_groups for p in group["params"]]
    saved = st["optimizer"].get("state", {}) if isinstance(st["optimizer"], dict) else {}
    for i, state in (saved.items() if isinstance(saved, dict) else ()):
        if not isinstance(i, int) or not 0 <= i < len(params) or not isinstance(state, dict):
            continue  # load_state_dict names what does not fit
        for key, t in state.items():
            if isinstance(t, torch.Tensor) and t.dim() and t.shape != params[i].shape:
                raise CheckpointFileError(f"checkpoint: {path} has optimizer state {i}.{key} of shape "
                                          f"{tuple(t.shape)} for a parameter of {tuple(params[i].shape)}")


# ---- the loop ------------------------------------------------------------------------------------
def train(recipe: Recipe, out_dir: str | Path | None = None, checkpoint: str | Path | None = None,
          corpus: Corpus | None = None, stop_after: int | None = None, progress: bool = True,
          threads: int | None = 1, log=None) -> dict:
    """Train ``recipe``; resume from ``checkpoint`` if it exists, keep it updated.

    ``stop_after``: stop (as if killed) once this many steps are done in total, after writing the
    checkpoint; a later call with the same ``checkpoint`` continues. When the run reaches
    ``recipe.steps`` and ``out_dir`` is given, the weights (``config.json`` and the safetensors in the
    model's layout: Kimi-Linear's, or K3's release with its experts rounded to MXFP4) and ``recipe.json`` (recipe, data hash, metrics, wall time, versions)
    are written there. Returns ``{"model", "step", "history", "metrics", "wall_time_s", "done"}``.
    """
    if threads is not None:
        torch.set_num_threads(threads)
    corpus = corpus or build_corpus()
    data_hash = corpus.sha256
    ckpt = Path(checkpoint) if checkpoint else None
    model, opt, step, history, wall, ema = _start_or_resume(recipe, ckpt, data_hash)
    end = recipe.steps if stop_after is None else min(recipe.steps, stop_after)
    hooks = add_dropout(model, recipe.dropout)
    model.train()
    bar = _progress_bar(recipe, step) if progress else None
    t_last = time.perf_counter()
    while step < end:
        parts, gnorm = _optimizer_step(model, opt, recipe, corpus, step)
        step += 1
        for k, v in parts.items():
            ema[k] = v if k not in ema else 0.95 * ema[k] + 0.05 * v
        now = time.perf_counter()
        wall += now - t_last
        t_last = now
        if bar is not None:
            _show_progress(bar, ema, gnorm)
        if step % recipe.eval_every == 0 or step == recipe.steps:
            msg = _evaluate_into_history(model, recipe, corpus, history, step, ema, wall)
            (bar.write if bar is not None else print)(msg) if log is None else log(msg)
            t_last = time.perf_counter()  # evaluation time does not count as training time
        if ckpt is not None and (step % recipe.checkpoint_every == 0 or step == end):
            save_checkpoint(ckpt, model, opt, step, recipe, history, wall, data_hash, ema)
            t_last = time.perf_counter()
    _end_run(model, bar, hooks)
    done = step >= recipe.steps
    result = {"model": model, "step": step, "history": history, "wall_time_s": wall, "done": done,
              "metrics": history[-1] if history else None, "data_sha256": data_hash}
    if done and out_dir is not None:
        write_release(model, recipe, corpus, history, wall, out_dir)
    return result


def _start_or_resume(recipe: Recipe, ckpt: Path | None, data_hash: str):
    """A seeded fresh model and optimizer, resumed from ``ckpt`` if it exists: ``(model, opt, step, history, wall,
    ema)``."""
    model = HybridModel(recipe.model_config(), seed=recipe.seed if recipe.init_seed is None else recipe.init_seed)
    opt = make_optimizer(model, recipe)
    step, history, wall, ema = 0, [], 0.0, {}
    torch.manual_seed(recipe.seed)
    if ckpt is not None and ckpt.exists():
        st = load_checkpoint(ckpt)
        if st["recipe"] != recipe.to_dict():
            raise ValueError(f"checkpoint: {ckpt} was written by a different recipe")
        if st["data_sha256"] != data_hash:
            raise ValueError(f"checkpoint: {ckpt} was trained on different text (sha256 {st['data_sha256'][:12]}…)")
        step, history, wall, ema = _resume(model, opt, st, ckpt, recipe.steps)
    return model, opt, step, history, wall, ema


def _progress_bar(recipe: Recipe, step: int):
    """A tqdm bar over the recipe's steps, starting at ``step``."""
    from tqdm import tqdm

    return tqdm(total=recipe.steps, initial=step, desc="train", dynamic_ncols=True, mininterval=2.0)


def _optimizer_step(model: HybridModel, opt, recipe: Recipe, corpus: Corpus, step: int):
    """One optimizer step on step ``step``'s batch at its learning rate: ``(loss parts, gradient norm)``."""
    for g in opt.param_groups:
        g["lr"] = lr_at(recipe, step)
    batch = make_batch(recipe, corpus, step)
    loss, parts = batch_loss(model, batch, recipe.recall_loss_weight, recipe.mtp_loss_weight)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.grad_clip)
    opt.step()
    return parts, gnorm


def _show_progress(bar, ema: dict, gnorm) -> None:
    """Advance the progress bar one step and show the smoothed losses and the gradient norm."""
    bar.update(1)
    bar.set_postfix(text=f"{ema.get('text', 0):.3f}", recall=f"{ema.get('recall', 0):.3f}", gn=f"{float(gnorm):.2f}",
                    **({"mtp": f"{ema['mtp']:.3f}"} if "mtp" in ema else {}))


def _evaluate_into_history(model: HybridModel, recipe: Recipe, corpus: Corpus, history: list, step: int,
                           ema: dict, wall: float) -> str:
    """Evaluate at ``step``, append the metrics to ``history`` and return the line that reports them."""
    m = evaluate(model, recipe, corpus)
    m.update(step=step, train_text_loss=ema.get("text"), train_recall_loss=ema.get("recall"), wall_time_s=wall)
    history.append(m)
    return (f"step {step}: held-out recall acc {m['recall_accuracy']:.3f} (chance {1/26:.3f}), "
            f"held-out {m['bits_per_byte_held_out']:.3f} bits/byte, {wall:.0f}s")


def _end_run(model: HybridModel, bar, hooks: list) -> None:
    """Close the progress bar (if any), take the dropout hooks out and put the model in eval mode."""
    if bar is not None:
        bar.close()
    for h in hooks:
        h.remove()
    model.eval()


def write_release(model: HybridModel, recipe: Recipe, corpus: Corpus, history: list, wall: float,
                  out_dir: str | Path) -> Path:
    """Weights + ``recipe.json`` (+ the exact corpus snapshot ``corpus.txt``) into ``out_dir``."""
    from .probe import best_memory_head, probe_summary

    model.eval()
    before = evaluate(model, recipe, corpus) if model.config.experts_mxfp4 else None
    if model.round_experts_to_mxfp4():  # the release stores the routed experts in MXFP4: the model as saved
        before = {f"{k}_before_mxfp4": v for k, v in before.items() if k != "recall_chance"}
    out = save_pretrained(model, out_dir)
    final = {**(history[-1] if history else {}), **evaluate(model, recipe, corpus, train_text=True), **(before or {})}
    probe = probe_summary(model, held_out_recall(recipe.seed, 24, recipe.min_pairs, recipe.max_pairs))
    layer, head = best_memory_head(probe)
    info = {
        "recipe": recipe.to_dict(),
        "seed": recipe.seed,
        "data": {"sha256_train_text": corpus.sha256, "train_bytes": len(corpus.train),
                 "held_out_bytes": len(corpus.held_out), "files": corpus.files,
                 "snapshot": "corpus.txt"},
        "metrics": final,
        "history": history,
        "probe": {"layer": layer, "head": head,
                  "mean_cos_per_head": {str(k): {n: [round(float(x), 4) for x in t] for n, t in d.items()}
                                        for k, d in probe.items()}},
        "wall_time_s": round(wall, 1),
        "num_parameters": model.num_parameters(),
        "weights_bytes": sum(f.stat().st_size for f in out.glob("*.safetensors")),
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "threads": torch.get_num_threads(),
    }
    (out / "recipe.json").write_text(json.dumps(info, indent=2, ensure_ascii=False))
    (out / "corpus.txt").write_text(corpus.to_text())
    return out
