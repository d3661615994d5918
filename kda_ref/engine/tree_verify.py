"""Verifying a draft tree after the step's forward: every root-to-leaf path as one row of a verify batch.

Article concept ``spec.state_rollback`` (``docs/article.md#s6-4``), for a tree. The step's forward runs
the request's last committed token (the tree's root) as a plain decode, so the request's slot and
pages hold the state and KV after the root. Then one more forward verifies the whole tree: each of
the tree's ``W`` root-to-leaf paths is one sequence of a uniform verify batch (paths shorter than the
tree's depth padded with their last token), every row starting from the root's state -- the verify
reads the request's slot and writes no state -- and writing its KV into its own copy of the tail
pages (the page of the root's position onwards), so siblings -- the same position, different tokens
-- never see each other. The verify keeps the state after every token of every row; a node's state,
logits and KV are those of the first path that contains it (a shared prefix is computed once per
path through it: redundant work, but one batched forward instead of one per tree level).

After acceptance (:func:`kda_ref.spec.tree.accept_tree`) :meth:`TreeStep.commit` copies the state
after the last kept node into the request's slot and that path's KV rows of the kept positions into
the request's pages -- SGLang commits the state at each request's last accepted tree node
(``update_mamba_state_after_mtp_verify`` with tree-aware ``last_correct_step_indices``, PR #27463)
and compacts the accepted branch's KV (``move_kv_cache``). :meth:`TreeStep.release` frees the scratch
pages. Where we differ: SGLang verifies the root and the tree in one forward, with a tree attention
mask and a recurrent kernel that follows each node's parent index, so every node is computed once;
here the root is decoded first and the tree runs as ``W`` chains.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..memory import PageKind, UnifiedMemoryPool
from ..model import HybridModel
from ..model.batch import ForwardBatch
from ..model.output import BoundaryStates
from ..spec.tree import DraftTree, TreeAccept


@dataclass
class TreeStep:
    tree: DraftTree
    root_logits: torch.Tensor  # [V] after the root (the last committed token)
    node_logits: torch.Tensor  # [len(tree), V] after each node
    paths: list[list[int]]  # the root-to-leaf paths, one verify row each
    row_of: list[int]  # node -> its row in the verify output: path_of[node] * tree.depth + depths[node] - 1
    path_of: list[int]  # node -> the first path containing it
    step_states: dict[int, BoundaryStates]  # KDA layer -> the state and conv window after every verified token
    pages: list[list[int]]  # scratch tail pages per path: page indices tail_start, tail_start + 1, ...
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

    def node_state(self, pool: UnifiedMemoryPool, node: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The state after ``node``'s branch, every KDA layer in the pool's order: ``(recurrent
        [layers, H, K, V], conv [layers, 3D, W-1])``."""
        row = self.row_of[node]
        layers = sorted(pool.tensors.kda_index, key=pool.tensors.kda_index.get)
        return (torch.stack([self.step_states[layer].recurrent[row] for layer in layers]),
                torch.stack([self.step_states[layer].conv[row] for layer in layers]))

    def node_kv(self, pool: UnifiedMemoryPool, node: int) -> torch.Tensor:
        """The KV rows of ``node``'s branch (the positions after the root up to the node's):
        ``[mla layers, depths[node], ...]``, from its path's scratch pages."""
        t, ps = pool.tensors, pool.tensors.page_size
        pos = torch.arange(self.context + 1, self.context + 1 + self.tree.depths[node])
        pages = torch.tensor(self.pages[self.path_of[node]], dtype=torch.long)[pos // ps - self.tail_start]
        return t.kv[:, pages, pos % ps]

    def accepted_states(self, pool: UnifiedMemoryPool, n: int, kept: int) -> dict:
        """The states strictly inside the ``kept`` tokens (root and kept nodes), per KDA layer, as the
        prefix cache takes them from a speculative step: after the root (the request's slot, before
        :meth:`commit`) and after each kept node but the last, all from the last kept node's path.
        Never a state after a rejected node."""
        if kept <= 1:
            return {}
        t = pool.tensors
        last = self.result.path[kept - 2]  # the last kept node (kept counts the root)
        first = self.row_of[last] - (self.tree.depths[last] - 1)  # its path's first row
        rows = torch.arange(first, first + kept - 2)  # after the kept nodes but the last
        return {layer: BoundaryStates(
                    seq_ids=torch.tensor([n]), positions=[torch.arange(1, kept) + self.context],
                    recurrent=torch.cat([t.recurrent[li, self.root_slot][None], self.step_states[layer].recurrent[rows]]),
                    conv=torch.cat([t.conv[li, self.root_slot][None],
                                    self.step_states[layer].conv[rows].to(t.conv.dtype)]))
                for layer, li in t.kda_index.items()}

    def commit(self, pool: UnifiedMemoryPool, req, kept: int) -> None:
        """The request continues after ``kept`` tokens (root and ``kept - 1`` nodes): the last kept
        node's state and conv window into its slot, those nodes' KV rows into its pages."""
        j = kept - 1
        if j < 1:
            return  # only the root: the forward already wrote its state and KV
        node = self.result.path[j - 1]
        pool.write_active(req.slot, *self.node_state(pool, node))
        t, ps = pool.tensors, pool.tensors.page_size
        pos = torch.arange(self.context + 1, self.context + 1 + j)  # the kept nodes' positions
        src = torch.tensor(self.pages[self.path_of[node]], dtype=torch.long)[pos // ps - self.tail_start]
        dst = torch.tensor(req.pages, dtype=torch.long)[pos // ps]
        t.kv[:, dst, pos % ps] = t.kv[:, src, pos % ps]

    def release(self, pool: UnifiedMemoryPool) -> None:
        if self.released:
            return
        self.released = True
        pool.free(PageKind.MLA_KV, [p for ps in self.pages for p in ps])


def run_tree(model: HybridModel, pool: UnifiedMemoryPool, req, tree: DraftTree, root_logits: torch.Tensor,
             on_dispatch=None) -> TreeStep | None:
    """Every root-to-leaf path of ``tree`` verified in one forward after ``req``'s root (its token at
    position ``num_computed_tokens``, just forwarded); None when the pool has no room for the scratch
    pages (the step then keeps the root's sampled token, as plain decoding)."""
    t, ps = pool.tensors, pool.tensors.page_size
    root = req.num_computed_tokens  # the root's position: the forward has not advanced the request yet
    s, depth = root // ps, tree.depth
    paths = [tree.path(leaf) for leaf in tree.leaves()]
    W, tail = len(paths), (root + depth) // ps - s + 1  # rows; pages each row's copy spans
    if not pool.can_alloc(PageKind.MLA_KV, W * tail):
        return None
    pages = [pool.alloc(PageKind.MLA_KV, tail, owner=req.req_id) for _ in paths]
    dev = t.kv.device
    try:
        t.kv[:, [p[0] for p in pages]] = t.kv[:, req.pages[s:s + 1]]  # the root's page: the rows up to the root
        ids = [[tree.tokens[i] for i in path] + [tree.tokens[path[-1]]] * (depth - len(path)) for path in paths]
        batch = ForwardBatch(
            cu_seqlens=torch.arange(0, W * depth + 1, depth, device=dev),
            context_lens=torch.full((W,), root + 1, dtype=torch.long, device=dev),
            state_indices=torch.full((W,), req.slot, dtype=torch.long, device=dev),  # read, never written
            block_table=torch.tensor([req.pages[:s] + p for p in pages], dtype=torch.long, device=dev),
            verify=True, verify_keep="states")
        out = model.forward_batch(torch.tensor([x for r in ids for x in r], dtype=torch.long, device=dev), batch, t,
                                  logits="all", on_dispatch=on_dispatch)
    except Exception:
        pool.free(PageKind.MLA_KV, [p for ps_ in pages for p in ps_])
        raise
    path_of = [-1] * len(tree)
    for r, path in enumerate(paths):
        for i in path:
            if path_of[i] < 0:
                path_of[i] = r
    row_of = [path_of[i] * depth + tree.depths[i] - 1 for i in range(len(tree))]
    return TreeStep(tree, root_logits, out.logits.float()[row_of], paths, row_of, path_of, out.step_states,
                    pages, s, root, req.slot)
