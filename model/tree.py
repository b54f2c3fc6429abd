"""The source tree: every layer of every source path is a node (docs/design.md §2, "Source trust is hierarchical").

A source ``business/about-other/email/marketing/bloom-florist`` contributes the nodes
``business``, ``business/about-other``, …, and its leaf (the full path). Nodes are
numbered parents-before-children (by depth, then path), so the hierarchical prior

    logit α_node = logit α_parent + σ_depth · ε_node

can be evaluated one depth at a time with a vectorised gather from the parents.
Depth-1 nodes (top layers) hang off a virtual root whose logit is a model parameter.

Everything here is numpy string and index arithmetic over the *distinct* source
paths; no loop runs per reading.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SEPARATOR = "/"


@dataclass
class SourceTree:
    """Nodes of the layer tree, parents before children.

    ``paths[i]`` is node ``i``'s path; ``parent[i]`` its parent's index (``-1`` for a
    top layer, whose parent is the virtual root); ``depth[i]`` is 1 for a top layer.
    """

    paths: np.ndarray  # (V,) str
    parent: np.ndarray  # (V,) int64
    depth: np.ndarray  # (V,) int64

    @classmethod
    def from_paths(cls, source_paths: np.ndarray | list[str]) -> tuple["SourceTree", np.ndarray]:
        """Build the tree holding every prefix of ``source_paths``.

        Returns the tree and, for each input path, the index of its leaf node.
        """
        given = np.asarray(source_paths, dtype=str)
        if given.size == 0:
            empty = np.zeros(0, dtype=np.int64)
            return cls(paths=np.zeros(0, dtype=str), parent=empty, depth=empty.copy()), empty.copy()
        leaves, leaf_of_input = np.unique(given, return_inverse=True)
        collected = [leaves]
        current = leaves
        while current.size:
            parents = np.char.rpartition(current, SEPARATOR)[:, 0]
            parents = np.unique(parents[parents != ""])
            if parents.size:
                collected.append(parents)
            current = parents
        nodes = np.unique(np.concatenate(collected))
        depth = np.char.count(nodes, SEPARATOR).astype(np.int64) + 1
        order = np.lexsort((nodes, depth))
        nodes, depth = nodes[order], depth[order]

        parent_paths = np.char.rpartition(nodes, SEPARATOR)[:, 0]
        sorter = np.argsort(nodes)
        found = np.searchsorted(nodes, parent_paths, sorter=sorter)
        found = sorter[np.clip(found, 0, len(nodes) - 1)]
        parent = np.where(parent_paths == "", -1, found).astype(np.int64)

        tree = cls(paths=nodes, parent=parent, depth=depth)
        return tree, tree.index_of(leaves)[leaf_of_input]

    # ------------------------------------------------------------------ lookups
    @property
    def n_nodes(self) -> int:
        return int(self.paths.shape[0])

    @property
    def max_depth(self) -> int:
        return int(self.depth.max()) if self.n_nodes else 0

    def index_of(self, paths: np.ndarray | list[str]) -> np.ndarray:
        """Node index of each path; raises KeyError naming the first path not in the tree."""
        paths = np.asarray(paths, dtype=str)
        sorter = np.argsort(self.paths)
        pos = np.clip(np.searchsorted(self.paths, paths, sorter=sorter), 0, max(self.n_nodes - 1, 0))
        index = sorter[pos] if self.n_nodes else np.zeros(paths.shape, dtype=np.int64)
        missing = (self.paths[index] != paths) if self.n_nodes else np.ones(paths.shape, dtype=bool)
        if missing.any():
            raise KeyError(f"source path {paths[missing][0]!r} is not in the tree")
        return index.astype(np.int64)

    def levels(self) -> list[np.ndarray]:
        """Node indices per depth (1, 2, …): evaluate the prior one level at a time."""
        bounds = np.searchsorted(self.depth, np.arange(1, self.max_depth + 2))
        return [np.arange(bounds[d], bounds[d + 1]) for d in range(self.max_depth)]

    def ancestors(self, nodes: np.ndarray) -> np.ndarray:
        """``(len(nodes), max_depth)`` matrix: column ``d`` is the depth-``d+1`` ancestor (or itself), -1 past it."""
        nodes = np.asarray(nodes, dtype=np.int64)
        out = np.full((nodes.shape[0], self.max_depth), -1, dtype=np.int64)
        current = nodes.copy()
        while True:
            live = current >= 0
            if not live.any():
                break
            out[np.flatnonzero(live), self.depth[current[live]] - 1] = current[live]
            current = np.where(live, self.parent[np.maximum(current, 0)], -1)
        return out

    def subtree_counts(self, leaf_per_row: np.ndarray) -> np.ndarray:
        """How many rows (e.g. messages) fall under each node, given each row's leaf."""
        per_leaf = np.bincount(np.asarray(leaf_per_row, dtype=np.int64), minlength=self.n_nodes)
        counts = per_leaf.astype(np.int64)
        # children before parents: push counts up one depth at a time, deepest first
        for level in reversed(self.levels()):
            has_parent = level[self.parent[level] >= 0]
            np.add.at(counts, self.parent[has_parent], counts[has_parent])
        return counts
