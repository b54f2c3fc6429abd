"""Explanations: a belief term by term (docs/design.md §3, "Explanations").

Each stored reading of the question becomes an :class:`~doxa.inference.read.results.EvidenceTerm`:
its source and the trust ``α`` that source gets (and the node or rule it came from), the
reader's probabilities, and, for the readings that count,

    llr_top     = log L_i(top) − log mean_{j ≠ top} L_i(j)   its push toward the top answer
                                                               (:func:`doxa.inference.read.scorer.log_likelihood_ratio`)
    weight_left = exp(−λ (T − t_i))                            how much of it is left at the query time ``T``

Readings that do not count say why (``ignored``): another reader's reading of the same message
counts instead, the assistant's own messages are never evidence, and so on. The belief itself is
filtered from the evidence (tier 3 of :mod:`doxa.inference.read.tiers`), in the same read session
as the terms, so the two always describe the same evidence.
"""

from __future__ import annotations

import math
from datetime import datetime

from doxa.data.errors import StoreError
from doxa.data.evidence import UNLISTED
from doxa.data.store import Store
from doxa.data.times import to_days

from .params import trust_for_source, typed
from .results import BeliefList, EvidenceTerm, Explanation
from . import scorer, tiers


def explanation(store: Store, question_id: str, at: datetime, act_at: float) -> Explanation:
    """The belief in ``question_id`` at ``at`` term by term (see the module docstring); inside the
    caller's read session, so the terms and the belief come from the same evidence."""
    question = store.question(question_id)
    scored = tiers.filtered(store, [question_id], at, with_messages=True)
    evidence, params, inputs = scored.evidence, scored.params, scored.inputs
    document = typed(params)
    found = BeliefList(at, scored.beliefs, act_at)
    if not found:
        raise StoreError(f"question {question_id!r} is not active (merged or split)")
    belief = found[0]
    listed = list(question["options"])
    options = list(evidence.questions.options[0])  # an open question's states end with "unlisted"
    k = len(options)
    top_j = options.index(belief.top) if belief.top in options else 0
    rate = float(inputs.rate[0])
    t_query = to_days(at)
    counted = {}
    if evidence.message is not None:
        for row, mid in enumerate(evidence.message.tolist()):
            counted[mid] = row
    alpha_by_source = dict(zip(evidence.sources.ids.tolist(), zip(
        [float(a) for a in scorer.source_trust(evidence, document)[0]], inputs.trust_node.tolist())))
    terms = []
    for item in store.evidence_for_explain(question_id, at):
        row = counted.get(item["message"]) if item["ignored"] is None else None
        # what the reader gave: the values it named (NaN: one it left out) and, on an open question, unlisted
        reader_probs = {o: float(p) for o, p in zip(listed, item["probs"]) if p is not None and not math.isnan(p)}
        if bool(evidence.questions.is_open[0]):
            reader_probs[UNLISTED] = float(item["unlisted"])
        if row is not None and evidence.reader[row] != item["reader"]:
            row = None
            item["ignored"] = "another reader's reading of the same message counts instead"
        if item["ignored"] is None and row is None:
            item["ignored"] = "not counted"
        if row is not None:
            like = inputs.likelihood[row]
            llr = scorer.log_likelihood_ratio(like, top_j, k)
            weight = math.exp(-rate * max(t_query - evidence.t[row], 0.0))
            alpha, node = alpha_by_source.get(item["source"], (None, ""))
            if math.isnan(inputs.trust[row]):
                node = f"confusion matrix ({node})"
        elif item["is_assistant"]:
            llr = weight = alpha = None
            node = "never evidence"
        else:
            llr = weight = None
            stated = item["stated_trust"]
            alpha, node = trust_for_source(document, item["path"], stated)
        terms.append(EvidenceTerm(
            message=item["message"], sent_at=item["sent_at"].isoformat(), text=item["text"],
            source=item["source"], source_path=item["path"], trust=alpha, trust_from=node,
            reader=item["reader"], reader_probs=reader_probs, unclear=float(item["unclear"]),
            unrelated=float(item["unrelated"]), one_off=float(item["one_off"]),
            llr_top=llr, weight_left=weight, ignored=item["ignored"], changed=float(item["changed"]),
        ))
    prior = {o: float(inputs.prior[0, j]) for j, o in enumerate(options)}
    return Explanation(
        belief=belief, prior=prior, change_rate_per_day=rate,
        half_life_days=(math.log(2) / rate) if rate > 0 else None,
        terms=terms, settlements=store.settlements([question_id]),
        rejections=store.rejections(question_id), calibration=params["calibration"],
    )


__all__ = ["explanation"]
