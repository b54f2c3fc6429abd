"""Evidence loading: the few-question path and the bulk path give the same arrays.

`doxa belief` and `doxa context` load a few questions by their ids (or their subjects'),
`doxa beliefs` and the nightly job load every question at once; the two paths are written
differently for speed (data/evidence_sql.py) and must agree row for row.
"""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pytest

import doxa
import records
from doxa.inference.evaluation.world import generate_world
from doxa.inference.evaluation.world_config import WorldConfig


@pytest.fixture(scope="module")
def world_store():
    world = generate_world(WorldConfig.preset("tiny"))
    memory = doxa.open(":memory:", log_reads=False)
    memory.ingest(world.records)
    # the world has no rejections: add some, before and after the cut used below
    qt = memory.store.question_table()
    memory.ingest([records.rejection(qid, options[-1], day)
                   for qid, options, day in zip(qt.ids[:6].tolist(), qt.options[:6], ["2024-04-01", "2024-06-01"] * 3)])
    yield memory.store
    memory.close()


def _rows(evidence, questions):
    """Each counted reading as a comparable tuple, keyed by question id."""
    qt = evidence.questions
    out = {}
    for i in range(evidence.n_readings):
        qid = qt.ids[evidence.q[i]]
        if qid in questions:
            out.setdefault(qid, []).append((
                round(float(evidence.t[i]), 9), evidence.source[i], evidence.reader[i],
                tuple(np.round(evidence.probs[i, :qt.n_options[evidence.q[i]]], 12)),
                float(evidence.unclear[i]), float(evidence.unrelated[i]), float(evidence.one_off[i]),
                None if evidence.message is None else evidence.message[i]))
    return out


def _outcomes(evidence, questions):
    ids = evidence.questions.ids
    settled = sorted((ids[q], float(t), int(a)) for q, t, a in zip(evidence.settle_q, evidence.settle_t,
                                                                   evidence.settle_answer) if ids[q] in questions)
    rejected = sorted((ids[q], float(t), int(a)) for q, t, a in zip(evidence.reject_q, evidence.reject_t,
                                                                    evidence.reject_answer) if ids[q] in questions)
    return settled, rejected


@pytest.mark.parametrize("at", [None, datetime(2024, 5, 1)])  # the tiny world spans 2024-01 to 2024-08
def test_a_few_questions_load_exactly_as_they_do_among_all(world_store, at):
    every = world_store.load_evidence(at, with_messages=True)
    ids = every.questions.ids
    rng = np.random.default_rng(0)
    busiest = ids[np.argsort(-np.bincount(every.q, minlength=len(ids)))[:5]].tolist()
    settled = ids[np.unique(every.settle_q)[:5]].tolist() if len(every.settle_q) else []
    rejected = ids[np.unique(every.reject_q)[:3]].tolist() if len(every.reject_q) else []
    chosen = sorted(set(busiest + settled + rejected + rng.choice(ids, 10, replace=False).tolist()))
    assert rejected and settled  # the cases that matter are in the sample
    few = world_store.load_evidence(at, chosen, with_messages=True)
    assert few.questions.ids.tolist() == chosen
    assert _rows(few, set(chosen)) == _rows(every, set(chosen))
    assert _outcomes(few, set(chosen)) == _outcomes(every, set(chosen))
    # the few path also hands over the messages' texts; they are the stored ones
    texts = dict(world_store.execute("SELECT id, text FROM messages").fetchall())
    assert [texts[m] for m in few.message] == few.message_text.tolist()


def test_questions_by_subject_are_those_subjects_questions(world_store):
    every = world_store.load_evidence(None)
    subjects = sorted({s for s in every.questions.subjects.tolist() if s})[:3]
    by_subject = world_store.load_evidence(None, subjects=subjects)
    wanted = {q for q, s in zip(every.questions.ids.tolist(), every.questions.subjects.tolist()) if s in subjects}
    assert set(by_subject.questions.ids.tolist()) == wanted and wanted
    assert _rows(by_subject, wanted) == _rows(every, wanted)


def test_the_loaded_evidence_scores_the_same_beliefs_either_way(world_store):
    memory = doxa.inference.read.memory.Memory(world_store, log_reads=False)
    at = datetime(2024, 5, 1)
    every = memory.beliefs(at=at)
    chosen = every.question_ids[::7].tolist()
    few = memory.beliefs(at=at, question_ids=chosen)
    position = {q: i for i, q in enumerate(every.question_ids.tolist())}
    np.testing.assert_allclose(few.probs, every.probs[[position[q] for q in chosen]], atol=1e-12)
