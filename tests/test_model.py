"""The generative story's pieces: the source tree, the tree product, and the torch filter
against the numpy scorer (the same beliefs from the same parameters)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from doxa.inference.read import scorer
from doxa.inference.learn.document import derived_from_document, document_from_values
from doxa.model.belief_model import derive
from doxa.model import chains as tree_product
from doxa.model.chains import _TreeProduct, chain_log_marginal, make_chains
from doxa.model.events import EventStream
from doxa.model.filter import filter_evidence
from doxa.model.latents import point_latents
from doxa.model.structure import ModelStructure
from doxa.inference.evaluation.simulate import SimulationConfig, simulate_evidence
from doxa.model.tree import SourceTree


# ---------------------------------------------------------------------------- tree
layer = st.sampled_from(["a", "b", "c", "person", "web"])
paths = st.lists(st.lists(layer, min_size=1, max_size=4).map("/".join), min_size=1, max_size=12)


@given(paths)
@settings(max_examples=60, deadline=None)
def test_tree_holds_every_prefix_with_its_parent(source_paths):
    tree, leaf = SourceTree.from_paths(source_paths)
    assert tree.paths[leaf].tolist() == source_paths
    expected = {"/".join(p.split("/")[:i]) for p in source_paths for i in range(1, p.count("/") + 2)}
    assert set(tree.paths.tolist()) == expected
    for i, path in enumerate(tree.paths.tolist()):
        assert tree.depth[i] == path.count("/") + 1
        parent = tree.parent[i]
        if tree.depth[i] == 1:
            assert parent == -1
        else:
            assert parent < i  # parents come first
            assert tree.paths[parent] == path.rsplit("/", 1)[0]
    for d, level in enumerate(tree.levels(), start=1):
        assert (tree.depth[level] == d).all()


def test_tree_counts_messages_under_each_node_and_lists_ancestors():
    tree, leaf = SourceTree.from_paths(["a/x/s1", "a/x/s2", "a/y/s3", "b/s4"])
    rows = leaf[np.array([0, 0, 1, 2, 3, 3, 3])]
    counts = dict(zip(tree.paths.tolist(), tree.subtree_counts(rows).tolist()))
    assert counts == {"a": 4, "b": 3, "a/x": 3, "a/y": 1, "b/s4": 3, "a/x/s1": 2, "a/x/s2": 1, "a/y/s3": 1}
    anc = tree.ancestors(tree.index_of(["a/x/s1", "b"]))
    assert tree.paths[anc[0]].tolist() == ["a", "a/x", "a/x/s1"]
    assert anc[1, 0] == tree.index_of(["b"])[0] and (anc[1, 1:] == -1).all()
    with pytest.raises(KeyError, match="nowhere"):
        tree.index_of(["nowhere"])


# ---------------------------------------------------------------------------- filters
@pytest.fixture(scope="module")
def small_evidence():
    evidence, _ = simulate_evidence(SimulationConfig(n_questions=150, length_skew=1.0, seed=5))
    # two rejections: the filter and the scorer zero those options after their time
    evidence.reject_q = np.array([0, 3])
    evidence.reject_t = np.array([evidence.t.min(), evidence.t.max()])
    evidence.reject_answer = np.array([1, 0])
    return evidence


def random_point(structure, confusion: bool, seed: int):
    g = torch.Generator().manual_seed(seed)
    latents = point_latents(structure, {"reader_log_temperature": [0.4], "rate_loc": -4.5,
                                           "trust_logit": 1.0 + torch.randn(structure.n_nodes, generator=g,
                                                                            dtype=torch.float64)},
                               confusion=confusion)
    for k in structure.pairs if confusion else ():
        name = f"confusion_offset_{k}"
        latents[name] = torch.randn(latents[name].shape, generator=g, dtype=torch.float64)
    return derive(structure, latents)


def document_of(structure, derived):
    return document_from_values(
        structure, trust=derived.trust.numpy(), confusion={k: v.numpy() for k, v in derived.confusion.items()},
        priors={k: v[:-1].numpy() for k, v in derived.prior_table.items()}, rate=derived.rate.numpy(),
        temperature=(1 / derived.inv_temperature).numpy())


@pytest.mark.parametrize("confusion", [False, True])
def test_torch_filter_gives_the_scorers_beliefs(small_evidence, confusion):
    structure = ModelStructure.from_evidence(small_evidence)
    derived = random_point(structure, confusion, seed=1)
    document = document_of(structure, derived)
    at = small_evidence.at + 45.0  # decay after the last event too
    ours, _ = filter_evidence(small_evidence, structure, derived, at=at)
    theirs = scorer.score(small_evidence, document, at=at, calibrate=False)
    np.testing.assert_allclose(scorer.apply_rejections(small_evidence, ours.belief), theirs.raw, atol=1e-6)
    # and through the document, as training reads its own published parameters back
    again, _ = filter_evidence(small_evidence, structure, derived_from_document(structure, document), at=at)
    np.testing.assert_allclose(again.belief, ours.belief, atol=1e-9)
    _, log_marginal, _ = scorer.forward_filter(*scorer.question_priors(small_evidence, document),
                                               *scorer.events(small_evidence,
                                                              scorer.model_inputs(small_evidence, document).likelihood),
                                               at)
    np.testing.assert_allclose(ours.log_marginal, log_marginal, atol=1e-6)


@pytest.mark.parametrize("confusion", [False, True])
@pytest.mark.parametrize("merge", [False, True])
def test_tree_product_equals_the_sequential_filter(small_evidence, confusion, merge, monkeypatch):
    monkeypatch.setattr(tree_product, "SETTLEMENT_LEAK", 0.0)
    structure = ModelStructure.from_evidence(small_evidence)
    derived = random_point(structure, confusion, seed=2)
    result, _ = filter_evidence(small_evidence, structure, derived)
    stream = EventStream.from_evidence(small_evidence, structure)
    chains = make_chains(stream, structure, dtype=torch.float64, merge=merge)
    assert sum(c.n_slots for c in chains) <= 2 * len(stream)  # padding at most doubles the work
    total = np.full(len(structure.question_k), np.nan)
    for group in chains:
        total[group.question.numpy()] = chain_log_marginal(group, derived).detach().numpy()
    has = ~np.isnan(total)
    np.testing.assert_allclose(total[has], result.log_marginal[has], rtol=1e-9, atol=1e-9)
    # a subsample laid out afresh gives the same per-question values
    group = chains[-1]
    pick = torch.as_tensor(np.random.default_rng(0).choice(group.n_questions, size=7, replace=False))
    part = group.take(pick)
    np.testing.assert_allclose(chain_log_marginal(part, derived).detach().numpy(),
                               result.log_marginal[part.question.numpy()], atol=1e-9)


def test_tree_product_gradient_matches_finite_differences():
    size_log2 = np.array([3, 2, 2, 1, 0, 0])
    sizes = 1 << size_log2
    offset = np.r_[0, np.cumsum(sizes)[:-1]]
    g = torch.Generator().manual_seed(3)
    a = torch.rand(3, 3, int(sizes.sum()), dtype=torch.float64, generator=g, requires_grad=True)
    prior = torch.rand(3, len(sizes), dtype=torch.float64, generator=g)

    def log_marginal(x):
        products, scales = _TreeProduct.apply(x, size_log2, offset)
        return (products * prior[None]).sum((0, 1)).log() + scales

    assert torch.autograd.gradcheck(log_marginal, (a,))


def test_point_latents_set_trust_exactly(small_evidence):
    structure = ModelStructure.from_evidence(small_evidence)
    wanted = torch.linspace(-2, 3, structure.n_nodes, dtype=torch.float64)
    derived = derive(structure, point_latents(structure, {"trust_logit": wanted}))
    torch.testing.assert_close(derived.trust_logit, wanted)


def test_stated_trust_is_the_prior_mean_of_its_leaf():
    evidence, _ = simulate_evidence(SimulationConfig(n_questions=20, seed=1))
    evidence.sources.trust = np.where(np.arange(len(evidence.sources.ids)) == 0, 0.95, np.nan)
    structure = ModelStructure.from_evidence(evidence)
    derived = derive(structure, point_latents(structure))  # every offset at 0
    leaf = structure.leaf_of_source[0]
    assert float(derived.trust[leaf]) == pytest.approx(0.95)
    others = np.setdiff1d(np.arange(structure.n_nodes), [leaf])
    assert torch.allclose(derived.trust[others], derived.trust[others][0].expand(len(others)))


# ---------------------------------------------------------------------------- open questions
def open_some(evidence, seed: int = 0):
    """The same evidence with a third of its questions open: each one's last option becomes
    ``unlisted``, and about a third of its readings leave one listed value unnamed (as a reading
    written before that value was added does), their column copying the ``unlisted`` mass."""
    from dataclasses import replace

    from doxa.data.evidence import OPEN_KEY_MARK, UNLISTED, QuestionTable

    rng = np.random.default_rng(seed)
    qt = evidence.questions
    is_open = (np.arange(len(qt.ids)) % 3 == 0) & (qt.n_options >= 2)
    options = [[*o[:-1], UNLISTED] if is_open[i] else o for i, o in enumerate(qt.options)]
    keys = np.asarray([OPEN_KEY_MARK + k if is_open[i] else k for i, k in enumerate(qt.options_key.tolist())],
                      dtype=object)
    questions = QuestionTable(ids=qt.ids, subjects=qt.subjects, kinds=qt.kinds, texts=qt.texts, shapes=qt.shapes,
                              options=options, n_options=qt.n_options, options_key=keys, is_open=is_open)
    k = qt.n_options[evidence.q]
    probs = evidence.probs.copy()
    unnamed = np.zeros(probs.shape, dtype=bool)
    rows = np.flatnonzero(is_open[evidence.q] & (k >= 3) & (rng.random(len(k)) < 0.35))
    column = rng.integers(0, k[rows] - 1)  # a listed value, never the last state
    unnamed[rows, column] = True
    probs[rows, column] = probs[rows, k[rows] - 1]
    return replace(evidence, questions=questions, probs=probs, unnamed=unnamed), is_open


def test_open_questions_torch_filter_tree_product_and_scorer_agree(small_evidence, monkeypatch):
    """Model = scorer on open questions: base rates from θ (the Chinese-restaurant form) and readings
    whose unnamed values read as ``unlisted``, in the torch filter, the tree product and the scorer."""
    monkeypatch.setattr(tree_product, "SETTLEMENT_LEAK", 0.0)
    evidence, is_open = open_some(small_evidence)
    structure = ModelStructure.from_evidence(evidence)
    assert structure.question_open.sum() == is_open.sum() and not structure.question_canonical[is_open].any()
    g = torch.Generator().manual_seed(3)
    latents = point_latents(structure, {"reader_log_temperature": [0.4], "rate_loc": -4.5,
                                        "new_value_weight": 0.2 + 3 * torch.rand(structure.n_kinds, generator=g,
                                                                                 dtype=torch.float64),
                                        "trust_logit": 1.0 + torch.randn(structure.n_nodes, generator=g,
                                                                         dtype=torch.float64)})
    derived = derive(structure, latents)
    document = document_from_values(
        structure, trust=derived.trust.numpy(), confusion={},
        priors={k: v[:-1].numpy() for k, v in derived.prior_table.items()}, rate=derived.rate.numpy(),
        temperature=(1 / derived.inv_temperature).numpy(), new_value_weight=derived.new_value_weight.numpy())
    at = evidence.at + 30.0
    ours, _ = filter_evidence(evidence, structure, derived, at=at)
    theirs = scorer.score(evidence, document, at=at, calibrate=False)
    np.testing.assert_allclose(scorer.apply_rejections(evidence, ours.belief), theirs.raw, atol=1e-6)
    # an open question's base rates: uniform before any event; after its last, the Chinese restaurant
    # over the values its evidence named, each by how surely (doxa.model.named_values), worked out here
    # reading by reading with plain floats
    before, _ = scorer.question_priors(evidence, document)
    after = scorer.model_inputs(evidence, document).prior
    for i in np.flatnonzero(is_open)[:5].tolist():
        n = int(evidence.questions.n_options[i]) - 1
        np.testing.assert_allclose(before[i, :n + 1], 1 / (n + 1), rtol=1e-12)
        m = [0.0] * n
        for row in np.flatnonzero(evidence.q == i).tolist():
            covered = [not (evidence.unnamed[row, j]) for j in range(n + 1)]
            total = sum(float(evidence.probs[row, j]) for j in range(n + 1) if covered[j])
            clear = (1 - min(1.0, evidence.unclear[row] + evidence.unrelated[row])) * (1 - evidence.one_off[row])
            for j in range(n):
                if covered[j]:
                    m[j] = max(m[j], float(evidence.probs[row, j]) / total * clear)
        for row in np.flatnonzero(evidence.settle_q == i).tolist():
            if evidence.settle_answer[row] < n:
                m[evidence.settle_answer[row]] = 1.0
        theta = float(derived.new_value_weight[structure.question_kind[i]])
        named, fresh = sum(m), theta / (sum(m) + theta) / (n + 1 - sum(m))
        np.testing.assert_allclose(after[i, :n + 1], [mj / (named + theta) + fresh * (1 - mj) for mj in m] + [fresh],
                                   rtol=1e-9)
    # the tree product of the fit gives the sequential filter's marginal likelihood
    stream = EventStream.from_evidence(evidence, structure)
    total = np.full(len(structure.question_k), np.nan)
    for group in make_chains(stream, structure, dtype=torch.float64):
        total[group.question.numpy()] = chain_log_marginal(group, derived).detach().numpy()
    has = ~np.isnan(total)
    np.testing.assert_allclose(total[has], ours.log_marginal[has], rtol=1e-9, atol=1e-9)
    # unnamed values read exactly as unlisted: equal likelihoods in every reading that left them out
    like = scorer.model_inputs(evidence, document).likelihood
    rows, cols = np.nonzero(evidence.unnamed)
    last = evidence.questions.n_options[evidence.q[rows]] - 1
    np.testing.assert_allclose(like[rows, cols], like[rows, last], rtol=1e-12)
