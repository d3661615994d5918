"""What a prefix cache holds, as plain JSON: the radix tree's nodes, or the block table along one sequence.

The pages draw these (the checkpoint-tree page's ``tree_steps``, the Lab's ``block_steps``), and the
server's live trace sends them after each step that finished a request (:mod:`kda_ref.server.live`);
they are computed on the engine's side, so that both read one format. This module imports no cache: the
radix cache builds its snapshot with :func:`tree_step`, the block cache with its own
:meth:`~kda_ref.cache.block.BlockPrefixCache.block_units` (each cache's ``picture``).
"""

from __future__ import annotations

import collections
import hashlib
import itertools


def path_id(tokens) -> str:
    """A stable id for a token path (the same prefix gets the same id in every snapshot)."""
    return hashlib.blake2b(bytes(str(list(tokens)), "ascii"), digest_size=6).hexdigest()


def _node_dict(node, parent: str, start: int, pid: str) -> dict:
    return {"id": pid, "parent": parent, "key": list(node.key), "start": start, "end": start + len(node.key),
            "state": node.state, "kv_lock": node.kv_lock}


def _path_nodes(tree, tokens) -> list[dict]:
    """The nodes along ``tokens`` from the root (one dict lookup per node: the tree's size does not matter)."""
    out, node, start, parent, full = [], tree.root, 0, "root", ()
    while start < len(tokens) and tokens[start] in node.children:
        node = node.children[tokens[start]]
        full += tuple(node.key)
        pid = path_id(full)
        out.append(_node_dict(node, parent, start, pid))
        start, parent = start + len(node.key), pid
    return out


def tree_nodes(tree, max_nodes: int | None = None, path=None) -> list[dict]:
    """The radix tree as one dict per node (not the root), parents before children:
    ``{"id", "parent", "key", "start", "end", "state", "kv_lock"}``. With ``max_nodes``: the nodes along
    ``path`` (a token sequence) first, then the top of the tree breadth first, at most ``max_nodes`` in all
    (every kept node's parent is kept), and no more than ``max_nodes`` children ever looked at -- a
    snapshot of a tree of a million nodes costs what one of a few hundred does."""
    out = _path_nodes(tree, path) if path is not None and max_nodes is not None else []
    out = out[:max_nodes] if max_nodes is not None else out
    seen = {n["id"] for n in out}
    budget = [max_nodes if max_nodes is not None else -1]  # children left to look at (-1: no bound)

    def children(node):
        kids = node.children.values()
        if budget[0] >= 0:
            kids = list(itertools.islice(kids, budget[0]))
            budget[0] -= len(kids)
        return sorted(kids, key=lambda n: n.key[0])

    queue = collections.deque((c, "root", 0, ()) for c in children(tree.root))
    while queue and (max_nodes is None or len(out) < max_nodes):
        node, parent, start, path_ = queue.popleft()
        full = path_ + tuple(node.key)
        pid = path_id(full)
        if pid not in seen:
            out.append(_node_dict(node, parent, start, pid))
        queue += [(c, pid, start + len(node.key), full) for c in children(node)]
    return out


def tree_step(tree, prompt: list[int], output: list[int], req_id: int, label: str, steps: list[int],
              reused: int, max_nodes: int | None = None) -> dict:
    """The radix tree after request ``req_id`` finished (``reused``: its prompt tokens taken from the cache;
    ``steps``: ``[first, last]`` engine steps it covers), in the checkpoint-tree page's format."""
    return {"req_id": req_id, "label": label, "prompt": list(prompt), "output": list(output), "steps": list(steps),
            "reused": reused, "tree": tree_nodes(tree, max_nodes, [*prompt, *output])}


# the snapshot formats the pages draw, each the header key its snapshots go under: a cache's
# PrefixCache.picture returns one of them (a cache of a new format brings its reader in model_viz)
TREE_STEPS, BLOCK_STEPS = "tree_steps", "block_steps"
SNAPSHOT_FORMATS = (TREE_STEPS, BLOCK_STEPS)


def cache_picture(cache, prompt: list[int], output: list[int], req_id: int, label: str, steps: list[int],
                   reused: int = 0, max_nodes: int | None = None) -> tuple[str, dict] | None:
    """``(header key, snapshot)`` of what ``cache`` (a ``PrefixCache``) holds after request ``req_id``
    finished -- the radix tree, or the block table along its tokens -- or None for a cache without one:
    the cache's own :meth:`~kda_ref.cache.base.PrefixCache.picture`. The Lab
    (``model_viz.scenarios.lab``) and the server's live trace (``kda_ref.server.live``) both call it."""
    return cache.picture(prompt, output, req_id, label, steps, reused, max_nodes)
