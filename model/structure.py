"""What the latent variables of the story are indexed by: the source tree, kinds, readers, confusion pairs."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from doxa.data.evidence import OPEN_KEY_MARK, Evidence

from .logistic import logit
from .tree import SourceTree


@dataclass
class ModelStructure:
    """What the latent variables are indexed by: source tree, kinds, readers, confusion pairs.

    Built from the readings alone, so it is the same whichever settlements a fit
    sees (a held-out fold can warm-start from the full fit).
    """

    tree: SourceTree
    leaf_of_source: np.ndarray  # (S,) node of each evidence source
    stated_logit: np.ndarray  # (V,) logit of the user-stated trust of a leaf; NaN where none
    node_messages: np.ndarray  # (V,) readings under each node
    ancestors: np.ndarray  # (V, D) ancestor (or self) at each depth, -1 past the node
    kinds: np.ndarray  # (n_kinds,) str
    kind_options: list[list[str]]
    kind_k: np.ndarray  # (n_kinds,) option count of each kind's canonical options
    kind_slot: np.ndarray  # (n_kinds,) row of the kind in its option-count group
    question_kind: np.ndarray  # (Q,)
    question_k: np.ndarray  # (Q,)
    question_canonical: np.ndarray  # (Q,) bool: the question has its kind's options (never an open one)
    readers: np.ndarray  # (R,) str
    pairs: dict[int, "PairTable"] = field(default_factory=dict)  # K → (node, kind) pairs
    #: (Q,) bool: open (value) questions: their base rates come from θ of their kind, not a table
    question_open: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))

    @property
    def n_nodes(self) -> int:
        return self.tree.n_nodes

    @property
    def max_depth(self) -> int:
        return self.tree.max_depth

    @property
    def n_kinds(self) -> int:
        return int(self.kinds.shape[0])

    def kinds_with_k(self, k: int) -> np.ndarray:
        return np.flatnonzero(self.kind_k == k)

    @property
    def open_kinds(self) -> np.ndarray:
        """(n_kinds,) bool: kinds with an open question (they get a θ)."""
        out = np.zeros(self.n_kinds, dtype=bool)
        out[self.question_kind[self.question_open]] = True
        return out

    @property
    def group_ks(self) -> list[int]:
        return sorted(int(k) for k in np.unique(self.kind_k))

    @classmethod
    def from_evidence(cls, evidence: Evidence) -> "ModelStructure":
        qt = evidence.questions
        tree, leaf_of_source = SourceTree.from_paths(evidence.sources.paths.astype(str))
        stated = np.full(tree.n_nodes, np.nan)
        trust = np.asarray(evidence.sources.trust, dtype=np.float64)
        has = np.isfinite(trust)
        clipped = np.clip(trust[has], 1e-3, 1 - 1e-3)
        stated[leaf_of_source[has]] = logit(clipped)
        leaf_per_reading = leaf_of_source[evidence.source_index] if evidence.n_readings else np.zeros(0, np.int64)

        kinds, question_kind = np.unique(qt.kinds.astype(str), return_inverse=True)
        # canonical options of a kind: the option list most of its questions use
        keys, key_of_question, key_count = np.unique(qt.options_key.astype(str), return_inverse=True,
                                                     return_counts=True)
        kind_of_key = np.zeros(len(keys), dtype=np.int64)
        kind_of_key[key_of_question] = question_kind
        key_open = np.char.startswith(keys.astype(str), OPEN_KEY_MARK) if len(keys) else np.zeros(0, dtype=bool)
        best = np.lexsort((keys, -key_count, key_open, kind_of_key))  # per kind: closed, most used, then by name
        first_of_kind = best[np.r_[0, np.flatnonzero(np.diff(kind_of_key[best])) + 1]]
        canonical_key = np.empty(len(kinds), dtype=np.int64)
        canonical_key[kind_of_key[first_of_kind]] = first_of_kind
        representative = np.zeros(len(keys), dtype=np.int64)
        representative[key_of_question] = np.arange(len(key_of_question))
        kind_rep_question = representative[canonical_key]
        kind_options = [list(qt.options[i]) for i in kind_rep_question.tolist()]
        kind_k = np.asarray(qt.n_options, dtype=np.int64)[kind_rep_question]
        kind_slot = np.zeros(len(kinds), dtype=np.int64)
        for k in np.unique(kind_k):
            members = np.flatnonzero(kind_k == k)
            kind_slot[members] = np.arange(len(members))
        question_open = np.asarray(qt.is_open, dtype=bool)
        # an open question's states are its own values: it shares no base-rate table or confusion matrix
        question_canonical = (key_of_question == canonical_key[question_kind]) & ~question_open

        structure = cls(
            tree=tree,
            leaf_of_source=leaf_of_source,
            stated_logit=stated,
            node_messages=tree.subtree_counts(leaf_per_reading),
            ancestors=tree.ancestors(np.arange(tree.n_nodes)),
            kinds=kinds,
            kind_options=kind_options,
            kind_k=kind_k,
            kind_slot=kind_slot,
            question_kind=question_kind.astype(np.int64),
            question_k=np.asarray(qt.n_options, dtype=np.int64),
            question_canonical=question_canonical,
            question_open=question_open,
            readers=np.asarray(evidence.readers, dtype=str),
        )
        structure.pairs = PairTable.build_all(structure, evidence)
        return structure


@dataclass
class PairTable:
    """(node, kind) pairs that carry a confusion matrix, for kinds with ``K`` options.

    Every (leaf, kind) with a reading on a question in the kind's canonical options,
    and all ancestors of those leaves for the same kind.
    """

    k: int
    node: np.ndarray  # (n,)
    kind: np.ndarray  # (n,)
    ancestors: np.ndarray  # (n, D) pair index of the ancestor pair at each depth, -1 past it
    keys: np.ndarray  # (n,) sorted node * n_kinds + kind

    def lookup(self, node: np.ndarray, kind: np.ndarray, n_kinds: int) -> np.ndarray:
        """Pair index of each (node, kind), -1 where there is none."""
        key = np.asarray(node, dtype=np.int64) * n_kinds + np.asarray(kind, dtype=np.int64)
        if len(self.keys) == 0:
            return np.full(key.shape, -1, dtype=np.int64)
        pos = np.clip(np.searchsorted(self.keys, key), 0, len(self.keys) - 1)
        return np.where(self.keys[pos] == key, pos, -1).astype(np.int64)

    @classmethod
    def build_all(cls, structure: ModelStructure, evidence: Evidence) -> dict[int, "PairTable"]:
        if evidence.n_readings == 0:
            return {}
        qk = structure.question_kind[evidence.q]
        canonical = structure.question_canonical[evidence.q]
        leaves = structure.leaf_of_source[evidence.source_index]
        n_kinds = structure.n_kinds
        out: dict[int, PairTable] = {}
        for k in structure.group_ks:
            if k < 2:
                continue
            rows = canonical & (structure.kind_k[qk] == k)
            if not rows.any():
                continue
            leaf_kind = np.unique(leaves[rows] * n_kinds + qk[rows])
            leaf, kind = leaf_kind // n_kinds, leaf_kind % n_kinds
            anc = structure.ancestors[leaf]  # (m, D)
            node_all = anc.reshape(-1)
            kind_all = np.repeat(kind, anc.shape[1])
            keep = node_all >= 0
            keys = np.unique(node_all[keep] * n_kinds + kind_all[keep])
            table = cls(k=k, node=keys // n_kinds, kind=keys % n_kinds,
                        ancestors=np.zeros((0, 0), dtype=np.int64), keys=keys)
            anc_nodes = structure.ancestors[table.node]
            anc_pairs = table.lookup(np.maximum(anc_nodes, 0), np.repeat(table.kind[:, None], anc_nodes.shape[1], 1),
                                     n_kinds)
            table.ancestors = np.where(anc_nodes >= 0, anc_pairs, -1)
            out[k] = table
        return out
