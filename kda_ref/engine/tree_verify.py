"""Verifying a draft tree after the step's forward, level by level, each node from its parent's state.

Article concept ``spec.state_rollback`` (``docs/article.md#s6-4``), for a tree. The step's forward runs the request's last
committed token (the tree's root) as a plain decode, so the request's slot and pages hold the state
and KV after the root. Then every level of the tree runs as one decode batch: a node gets a scratch
state slot holding its parent's state and conv window, and scratch copies of its parent's tail KV
pages (the page of the root's position onwards), so siblings -- same position, different tokens --
never write into each other's state or KV. The logits of every node come out of its decode row.

After acceptance (:func:`kda_ref.spec.tree.accept_tree`) :meth:`TreeStep.commit` copies the state of
the last kept node into the request's slot and that node's KV rows of the kept positions into the
request's pages -- SGLang commits the state at each request's last accepted tree node
(``update_mamba_state_after_mtp_verify`` with tree-aware ``last_correct_step_indices``, PR #27463)
and compacts the accepted branch's KV (``move_kv_cache``). :meth:`TreeStep.release` frees the
scratch. SGLang verifies a tree in one forward with a tree attention mask and a recurrent kernel
that follows parent indices; here each level is one batched forward through the engine's decode
step: the same states and logits, ``depth`` forwards instead of one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..memory import PageKind, UnifiedMemoryPool
from ..model import HybridModel
from ..model.batch import ForwardBatch
from ..model.cache import PAD_PAGE
from ..model.output import BoundaryStates
from ..spec.tree import DraftTree, TreeAccept


@dataclass
class TreeStep:
    tree: DraftTree
    root_logits: torch.Tensor  # [V] after the root (the last committed token)
    node_logits: torch.Tensor  # [len(tree), V] after each node
    slots: list[int]  # scratch state slot per node
    pages: list[list[int]]  # scratch tail pages per node: page indices tail_start, tail_start + 1, ...
    tail_start: int  # index of the page holding the root's position
    context: int  # the root's position (tokens cached before it)
    root_slot: int  # the request's slot: the state after the root until commit
    result: TreeAccept | None = None
    released: bool = False

    def tokens(self) -> list[int]:
        """The accepted nodes' tokens, then the next token."""
        return [self.tree.tokens[i] for i in self.result.path] + [self.result.next_token]

    def logits(self) -> torch.Tensor:
        """``[1 + j, V]``: the logits that produced each emitted token."""
        return torch.cat([self.root_logits[None], self.node_logits[self.result.path]])

    def accepted_states(self, pool: UnifiedMemoryPool, n: int, kept: int) -> dict:
        """The states strictly inside the ``kept`` tokens (root and kept nodes), per KDA layer, as the
        prefix cache takes them from a speculative step: after the root (the request's slot, before
        :meth:`commit`) and after each kept node but the last. Never a state after a rejected node."""
        if kept <= 1:
            return {}
        t = pool.tensors
        idx = torch.tensor([self.root_slot] + [self.slots[i] for i in self.result.path[:kept - 2]], dtype=torch.long)
        return {layer: BoundaryStates(seq_ids=torch.tensor([n]), positions=[torch.arange(1, kept) + self.context],
                                      recurrent=t.recurrent[li, idx].clone(), conv=t.conv[li, idx].clone())
                for layer, li in t.kda_index.items()}

    def commit(self, pool: UnifiedMemoryPool, req, kept: int) -> None:
        """The request continues after ``kept`` tokens (root and ``kept - 1`` nodes): the last kept
        node's state and conv window into its slot, those nodes' KV rows into its pages."""
        j = kept - 1
        if j < 1:
            return  # only the root: the forward already wrote its state and KV
        node = self.result.path[j - 1]
        pool.copy_state(self.slots[node], req.slot)
        t, ps = pool.tensors, pool.tensors.page_size
        pos = torch.arange(self.context + 1, self.context + 1 + j)  # the kept nodes' positions
        src = torch.tensor(self.pages[node], dtype=torch.long)[pos // ps - self.tail_start]
        dst = torch.tensor(req.pages, dtype=torch.long)[pos // ps]
        t.kv[:, dst, pos % ps] = t.kv[:, src, pos % ps]

    def release(self, pool: UnifiedMemoryPool) -> None:
        if self.released:
            return
        self.released = True
        pool.free(PageKind.KDA_STATE, self.slots)
        pool.free(PageKind.MLA_KV, [p for ps in self.pages for p in ps])


def run_tree(model: HybridModel, pool: UnifiedMemoryPool, req, tree: DraftTree, root_logits: torch.Tensor,
             on_dispatch=None) -> TreeStep | None:
    """Every node of ``tree`` run after ``req``'s root (its token at position ``num_computed_tokens``,
    just forwarded); None when the pool has no room for the scratch (the step then keeps the root's
    sampled token, as plain decoding)."""
    t, ps = pool.tensors, pool.tensors.page_size
    root = req.num_computed_tokens  # the root's position: the forward has not advanced the request yet
    s = root // ps
    tails = [(root + d) // ps - s + 1 for d in tree.depths]  # pages each node's copy spans
    if not pool.can_alloc(PageKind.KDA_STATE, len(tree)) or not pool.can_alloc(PageKind.MLA_KV, sum(tails)):
        return None
    slots = pool.alloc(PageKind.KDA_STATE, len(tree), owner=req.req_id)
    pages = [pool.alloc(PageKind.MLA_KV, c, owner=req.req_id) for c in tails]
    step = TreeStep(tree, root_logits, torch.empty(len(tree), root_logits.shape[-1], device=root_logits.device), slots, pages, s, root, req.slot)
    dev = t.kv.device
    try:
        for d in range(1, tree.depth + 1):
            level = tree.level(d)
            rows = []
            for i in level:
                p = tree.parents[i]
                pool.copy_state(req.slot if p < 0 else slots[p], slots[i])
                src = req.pages[s:s + 1] if p < 0 else pages[p]
                t.kv[:, pages[i][:len(src)]] = t.kv[:, src]  # the parent's tail (root: the root's page)
                rows.append(req.pages[:s] + pages[i])
            width = max(len(r) for r in rows)
            batch = ForwardBatch(
                cu_seqlens=torch.arange(len(level) + 1, device=dev),
                context_lens=torch.full((len(level),), root + d, dtype=torch.long, device=dev),
                state_indices=torch.tensor([slots[i] for i in level], dtype=torch.long, device=dev),
                block_table=torch.tensor([r + [PAD_PAGE] * (width - len(r)) for r in rows], dtype=torch.long,
                                         device=dev))
            ids = torch.tensor([tree.tokens[i] for i in level], dtype=torch.long, device=dev)
            out = model.forward_batch(ids, batch, t, logits="last", on_dispatch=on_dispatch)
            step.node_logits[level] = out.logits.float()
    except Exception:
        step.release(pool)
        raise
    return step
