"""Verifying a draft tree in one forward: the root and every node as one row, each token from its parent.

Article concept ``spec.state_rollback`` (``docs/article.md#s6-4``), for a tree. :func:`tree_plan` runs the request's
last committed token and the tree's ``N`` nodes, breadth-first, as one row of ``1 + N`` tokens through
:meth:`HybridModel.verify_step`: each token's recurrence and short conv continue from its parent's, its attention
sees its ancestors. After :func:`kda_ref.speculative.tree.accept_tree`, :meth:`TreeStep.commit` keeps the state
after the last kept token and moves the kept nodes' KV rows (:meth:`~kda_ref.engine.request_memory.RequestMemory.free_pages_beyond`
frees the rest). Counterparts: SGLang's ``fused_sigmoid_gating_delta_rule_update_kernel`` (``retrieve_parent_token``),
``update_mamba_state_after_mtp_verify``, ``move_kv_cache``; vLLM 0.32.0 verifies chains only (its GDN / KDA
kernels follow no parent index). Design notes: ``docs/spec_decode.md#tree-drafts``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..memory import UnifiedMemoryPool
from ..model import HybridModel
from ..model.batch import DecodePlan
from ..model.output import BoundaryStates
from ..model.verify_record import KEEP_STATES
from ..speculative.tree import DraftTree, TreeAccept


def tree_layout(tree: DraftTree, width: int) -> tuple[tuple[int, ...], torch.Tensor, torch.Tensor]:
    """The root (token 0) and the tree's nodes (token ``1 + i``) as one row: ``(parents, conv_index,
    visible)``. ``parents[t]``: the token ``t`` continues from (``-1``: the committed state). ``conv_index
    [L, width]``: the rows of ``cat(committed window [width - 1], the row's inputs [L])`` token ``t``'s
    short conv reads, oldest first -- its branch, then the committed window past the root.
    ``visible [L, L]``: token ``t`` attends to token ``s`` (``s`` is ``t`` or one of its ancestors)."""
    parents = (-1,) + tuple(0 if p < 0 else 1 + p for p in tree.parents)
    L = len(parents)
    conv_index, visible = [], torch.zeros(L, L, dtype=torch.bool)
    for t in range(L):
        taps, cur, past_root = [], t, 0
        for _ in range(width):  # newest first: the token itself, its parent, ..., then the committed window
            if cur >= 0:
                taps.append(width - 1 + cur)
                visible[t, cur] = True
                cur = parents[cur]
            else:
                past_root += 1
                taps.append(width - 1 - past_root)
        while cur >= 0:  # ancestors beyond the conv's reach are still attended to
            visible[t, cur] = True
            cur = parents[cur]
        conv_index.append(taps[::-1])
    return parents, torch.tensor(conv_index, dtype=torch.long), visible


def tree_plan(tree: DraftTree, context: int, slot: int, pages: list[int], page_size: int, width: int,
              device: torch.device) -> DecodePlan:
    """The :class:`DecodePlan` of one request's tree step: the root at position ``context`` and the nodes
    after it, breadth-first, their KV rows written into ``pages`` (which must cover ``context + 1 +
    len(tree)`` tokens), the committed state read from ``slot``."""
    parents, conv_index, visible = tree_layout(tree, width)
    L = len(parents)
    P = (context + L - 1) // page_size + 1  # pages holding the prefix, the root and the nodes
    if P > len(pages):
        raise RuntimeError(f"tree step: the request holds {len(pages)} pages, its {L} tree tokens after "
                           f"{context} cached ones need {P}")
    pos = torch.arange(P * page_size)  # [Lk] every position of those pages
    new = pos - context  # the tree token a position holds (0: the root), if in [0, L)
    inside = (new >= 0) & (new < L)
    seen = (pos < context)[None, :].expand(L, -1).clone()  # [L, Lk] the prefix, for every token
    seen[:, inside] = visible[:, new[inside]]  # and each token's own branch
    bias = torch.zeros(1, L, P * page_size).masked_fill_(~seen[None], float("-inf"))
    write = [pages[(context + t) // page_size] * page_size + (context + t) % page_size for t in range(L)]
    to = lambda x: x.to(device)  # noqa: E731
    return DecodePlan(cu_seqlens=to(torch.tensor([0, L])), state_indices=to(torch.tensor([slot])),
                      kv_write=to(torch.tensor(write)), kv_pages=to(torch.tensor([pages[:P]])), kv_bias=to(bias),
                      kv_pad=to((pos >= context + L)[None, :, None]), kv_lens=to(torch.tensor([context + L])),
                      block_table=to(torch.tensor([pages])), tokens=L, context_lens=to(torch.tensor([context])),
                      parents=parents, conv_index=to(conv_index))


@dataclass
class TreeStep:
    tree: DraftTree
    rows: torch.Tensor  # [1 + len(tree), V] fp32 logits: after the root (row 0), after node i (row 1 + i)
    step_states: dict[int, BoundaryStates]  # KDA layer -> the state and conv window after every token (same rows)
    pages: list[int]  # the request's pages at the step: node i's KV row at position context + 1 + i
    context: int  # the root's position (tokens cached before it)
    root_slot: int  # the request's slot: its committed state until commit
    result: TreeAccept | None = None

    @property
    def root_logits(self) -> torch.Tensor:
        return self.rows[0]

    @property
    def node_logits(self) -> torch.Tensor:
        return self.rows[1:]

    def tokens(self) -> list[int]:
        """The accepted nodes' tokens, then the next token."""
        return [self.tree.tokens[i] for i in self.result.path] + [self.result.next_token]

    def logits(self) -> torch.Tensor:
        """``[1 + j, V]``: the logits that produced each emitted token."""
        return torch.cat([self.root_logits[None], self.node_logits[self.result.path]])

    def _state(self, pool: UnifiedMemoryPool, row: int) -> tuple[torch.Tensor, torch.Tensor]:
        layers = sorted(pool.tensors.kda_index, key=pool.tensors.kda_index.get)
        return (torch.stack([self.step_states[layer].recurrent[row] for layer in layers]),
                torch.stack([self.step_states[layer].conv[row] for layer in layers]))

    def node_state(self, pool: UnifiedMemoryPool, node: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The state after ``node``'s branch (``-1``: after the root), every KDA layer in the pool's order:
        ``(recurrent [layers, H, K, V], conv [layers, 3D, W-1])``."""
        return self._state(pool, 1 + node)

    def _kv_rows(self, pool: UnifiedMemoryPool, positions: torch.Tensor) -> torch.Tensor:
        ps = pool.tensors.page_size
        return pool.tensors.kv[:, torch.tensor(self.pages, dtype=torch.long)[positions // ps], positions % ps]

    def node_kv(self, pool: UnifiedMemoryPool, node: int) -> torch.Tensor:
        """The KV rows of ``node``'s branch (root's child first, up to the node): ``[mla layers, depth,
        ...]``, where the step wrote them (before :meth:`commit` moves the kept ones)."""
        return self._kv_rows(pool, self.context + 1 + torch.tensor(self.tree.path(node), dtype=torch.long))

    def accepted_states(self, pool: UnifiedMemoryPool, n: int, kept: int) -> dict:
        """The states strictly inside the ``kept`` tokens (root and kept nodes), per KDA layer, as the
        prefix cache takes them from a speculative step: after the root and after each kept node but the
        last. Never a state after a rejected node."""
        if kept <= 1:
            return {}
        rows = torch.tensor([0] + [1 + i for i in self.result.path[:kept - 2]], dtype=torch.long)
        return {layer: BoundaryStates(seq_ids=torch.tensor([n]), positions=[torch.arange(1, kept) + self.context],
                                      recurrent=self.step_states[layer].recurrent[rows],
                                      conv=self.step_states[layer].conv[rows].to(pool.tensors.conv.dtype))
                for layer in pool.tensors.kda_index}

    def commit(self, pool: UnifiedMemoryPool, req, kept: int) -> None:
        """The request continues after ``kept`` tokens (the root and ``kept - 1`` nodes): the state after
        the last of them into its slot, the kept nodes' KV rows to the accepted branch's positions."""
        j = kept - 1
        pool.write_active(req.slot, *self._state(pool, 0 if j == 0 else 1 + self.result.path[j - 1]))
        if j == 0:
            return
        src = self.context + 1 + torch.tensor(self.result.path[:j], dtype=torch.long)
        dst = torch.arange(self.context + 1, self.context + 1 + j)
        if torch.equal(src, dst):  # the branch of first children: already in place
            return
        rows = self._kv_rows(pool, src)  # read every source before writing any destination (a copy)
        ps = pool.tensors.page_size
        pool.tensors.kv[:, torch.tensor(req.pages, dtype=torch.long)[dst // ps], dst % ps] = rows


def run_tree(model: HybridModel, pool: UnifiedMemoryPool, req, tree: DraftTree, on_dispatch=None) -> TreeStep:
    """The root (``req``'s token at position ``num_computed_tokens``, its last committed one) and every node
    of ``tree`` verified in one forward (see the module docstring); the request's committed state is
    read, not written, and the tree's KV rows go into its pages after the root's."""
    t = pool.tensors
    context = req.num_computed_tokens
    ids = [req.token_at(context)] + list(tree.tokens)
    width = t.conv.shape[-1] + 1  # the short conv's kernel width W (the pool keeps W - 1 inputs)
    plan = tree_plan(tree, context, req.slot, list(req.pages), t.page_size, width, t.kv.device)
    dispatcher = model.dispatcher if on_dispatch is None else model.dispatcher.with_hook(on_dispatch)
    out = model.verify_step(torch.tensor(ids, dtype=torch.long, device=t.kv.device), plan, t, KEEP_STATES, dispatcher)
    return TreeStep(tree, out.logits.float(), out.step_states, list(req.pages), context, req.slot)
