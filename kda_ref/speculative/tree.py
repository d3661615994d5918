"""Tree drafts: several candidate tokens per position, verified node by node from the parent's state.

Article concept ``spec.state_rollback`` (``docs/article.md#s6-4``), for a tree. SGLang: ``--speculative-eagle-topk``,
``EagleVerifyInput``'s tree mask. :class:`DraftTree` (nodes breadth-first: token, parent -- ``-1`` the root --,
depth; :meth:`DraftTree.from_chains` merges chains into a trie), :func:`ngram_tree` (prompt lookup keeping up to
``width`` continuations, the readable scan), :func:`accept_tree` (greedy, or SpecInfer's multi-candidate
rejection sampling with deterministic drafts). Design notes: ``docs/spec_decode.md#tree-drafts``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .accept import _probs


@dataclass
class DraftTree:
    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)  # -1: a child of the root
    depths: list[int] = field(default_factory=list)  # 1 for the root's children

    @classmethod
    def from_chains(cls, chains: list[list[int]]) -> "DraftTree":
        """The trie of ``chains`` (each a token list after the root), nodes breadth-first."""
        children: dict[tuple[int, int], int] = {}  # (parent, token) -> node, while building
        nodes: list[tuple[int, int, int]] = []  # (token, parent, depth) in insertion order
        for chain in chains:
            parent = -1
            for d, tok in enumerate(chain, start=1):
                key = (parent, tok)
                if key not in children:
                    children[key] = len(nodes)
                    nodes.append((tok, parent, d))
                parent = children[key]
        order = sorted(range(len(nodes)), key=lambda i: (nodes[i][2], i))  # breadth-first, stable
        new = {old: i for i, old in enumerate(order)}
        tree = cls()
        for old in order:
            tok, parent, d = nodes[old]
            tree.tokens.append(tok)
            tree.parents.append(-1 if parent < 0 else new[parent])
            tree.depths.append(d)
        return tree

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def depth(self) -> int:
        return max(self.depths, default=0)

    def children(self, node: int) -> list[int]:
        """Children of ``node`` (``-1``: the root), in draft order."""
        return [i for i, p in enumerate(self.parents) if p == node]

    def path(self, node: int) -> list[int]:
        """The nodes from the root's child down to ``node``."""
        out = []
        while node >= 0:
            out.append(node)
            node = self.parents[node]
        return out[::-1]


def ngram_tree(tokens: list[int], k: int, width: int, min_n: int, max_n: int) -> DraftTree:
    """Prompt lookup keeping up to ``width`` distinct continuations of at most ``k`` tokens: longer
    suffix matches first, the most recent occurrence first within a length."""
    chains: list[list[int]] = []
    T = len(tokens)
    for n in range(min(max_n, T - 1), min_n - 1, -1):
        suffix = tokens[T - n:]
        for i in range(T - n - 1, -1, -1):
            if tokens[i:i + n] == suffix:
                cont = tokens[i + n:i + n + k]
                if cont and cont not in chains:
                    chains.append(cont)
                    if len(chains) == width:
                        return DraftTree.from_chains(chains)
    return DraftTree.from_chains(chains)


@dataclass(frozen=True)
class TreeAccept:
    path: list[int]  # accepted nodes, root's child first
    next_token: int  # the token after them (a correction, or a bonus at a leaf)


def accept_tree(root_logits: torch.Tensor, node_logits: torch.Tensor, tree: DraftTree, temperature: float,
                top_k: int, generator: torch.Generator | None) -> TreeAccept:
    """``root_logits [V]`` (after the last committed token), ``node_logits [len(tree), V]`` (after each
    node). Greedy at ``temperature == 0``, else rejection sampling over the candidates."""
    node, path = -1, []
    while True:
        logits = root_logits if node < 0 else node_logits[node]
        kids = tree.children(node)
        if temperature == 0:
            target = int(torch.argmax(logits))
            nxt = next((c for c in kids if tree.tokens[c] == target), None)
            if nxt is None:
                return TreeAccept(path, target)
        else:
            p = _probs(logits, temperature, top_k).clone()
            nxt = None
            for c in kids:
                tok = tree.tokens[c]
                mass = float(p.sum())
                if mass > 0 and float(torch.rand((), generator=generator)) < float(p[tok]) / mass:
                    nxt = c
                    break
                p[tok] = 0.0  # rejected: what is left of the target's distribution
            if nxt is None:
                if float(p.sum()) <= 0:  # every token the target allows was a rejected candidate: cannot
                    return TreeAccept(path, tree.tokens[kids[-1]])  # happen (each was accepted w.p. 1)
                return TreeAccept(path, int(torch.multinomial(p / p.sum(), 1, generator=generator)))
        path.append(nxt)
        node = nxt
