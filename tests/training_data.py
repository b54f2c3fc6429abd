"""Small stores for the training tests: a crowd labelling items, some workers biased."""

from __future__ import annotations

import numpy as np

SENT_AT = "2026-03-02T09:00:00Z"


def crowd_records(*, n_items: int = 60, n_workers: int = 12, n_biased: int = 0, accuracy: float = 0.8,
                  gold_share: float = 0.3, seed: int = 0, set_name: str = "birds") -> tuple[list[dict], dict]:
    """Workers label every item yes/no; ``n_biased`` of them say "yes" 90% of the time whatever
    the truth. Gold of ``gold_share`` of the items is settled. Returns (records, truth)."""
    rng = np.random.default_rng(seed)
    truth = rng.random(n_items) < 0.45  # True = yes
    acc = np.clip(rng.normal(accuracy, 0.08, n_workers), 0.55, 0.97)
    records: list[dict] = [{"type": "subject", "id": set_name, "name": set_name}]
    for w in range(n_workers):
        records.append({"type": "source", "id": f"w{w}", "layers": ["crowd", set_name]})
    for i in range(n_items):
        records.append({"type": "question", "id": f"{set_name}.{i}", "subject": set_name, "kind": set_name,
                        "text": f"item {i}?", "shape": "yes_no", "options": ["yes", "no"]})
    n = 0
    for w in range(n_workers):
        biased = w < n_biased
        for i in range(n_items):
            if biased:
                says_yes = rng.random() < 0.9
            else:
                says_yes = truth[i] if rng.random() < acc[w] else not truth[i]
            label = "yes" if says_yes else "no"
            records.append({"type": "message", "id": f"m{n}", "source": f"w{w}", "sent_at": SENT_AT,
                            "text": f"worker {w} says item {i}: {label}"})
            records.append({"type": "reading", "message": f"m{n}", "question": f"{set_name}.{i}", "reader": "label",
                            "probs": {"yes": float(says_yes), "no": float(not says_yes)}, "unclear": 0.0,
                            "unrelated": 0.0, "one_off": 0.0})
            n += 1
    gold = rng.permutation(n_items)[: int(round(gold_share * n_items))]
    for i in sorted(gold.tolist()):
        records.append({"type": "settlement", "question": f"{set_name}.{i}", "answer": "yes" if truth[i] else "no",
                        "at": SENT_AT, "how": "outcome"})
    info = {"truth": truth, "accuracy": acc, "biased": np.arange(n_workers) < n_biased, "gold": set(gold.tolist())}
    return records, info


def crowd_store(path: str = ":memory:", **kwargs):
    from doxa.data.store import Store

    records, info = crowd_records(**kwargs)
    store = Store.open(path)
    store.ingest_records(records)
    return store, info
