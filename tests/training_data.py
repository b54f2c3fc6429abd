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


def robust_records(*, n_items: int = 180, gold_share: float = 0.12, seed: int = 0) -> tuple[list[dict], dict]:
    """Yes/no items, all at one time, for the robust-trust tests. Layers (true reliability):

    - ``expert`` (4 sources, 0.85): label the settled items and a sixth of the rest;
    - ``forum`` (4 sources, 0.4): label every item, a little worse than chance;
    - ``club`` (4 sources, 0.7): on settled items each is right 70% of the time on its own;
      on the other items they agree with one another, all stating one answer that is
      right 70% of the time (self-agreement with no settled check);
    - ``social``: 3 established members (0.85) label the settled items, and 40
      newcomers with one message each, always wrong, on settled items (a campaign).
    """
    rng = np.random.default_rng(seed)
    truth = rng.random(n_items) < 0.5
    settled = np.zeros(n_items, dtype=bool)
    settled[rng.permutation(n_items)[: int(round(gold_share * n_items))]] = True
    records: list[dict] = [{"type": "subject", "id": "set", "name": "set"}]
    labels: list[tuple[str, int, bool]] = []  # (source, item, says yes)

    def honest(p: float, item: int) -> bool:
        return bool(truth[item]) if rng.random() < p else not bool(truth[item])

    sources = {f"expert-{i}": ["expert"] for i in range(4)}
    sources.update({f"forum-{i}": ["forum"] for i in range(4)})
    sources.update({f"club-{i}": ["club"] for i in range(4)})
    sources.update({f"social-{i}": ["social"] for i in range(3)})
    extra = rng.permutation(np.flatnonzero(~settled))[: (~settled).sum() // 6]
    for item in range(n_items):
        for i in range(4):
            if settled[item] or item in extra:
                labels.append((f"expert-{i}", item, honest(0.85, item)))
            labels.append((f"forum-{i}", item, honest(0.4, item)))
        if settled[item]:
            labels += [(f"club-{i}", item, honest(0.7, item)) for i in range(4)]
            labels += [(f"social-{i}", item, honest(0.85, item)) for i in range(3)]
        else:
            shared = honest(0.7, item)
            labels += [(f"club-{i}", item, shared) for i in range(4)]
    for n, item in enumerate(rng.choice(np.flatnonzero(settled), size=40, replace=True).tolist()):
        sources[f"newcomer-{n}"] = ["social"]
        labels.append((f"newcomer-{n}", item, not bool(truth[item])))
    records += [{"type": "source", "id": sid, "layers": layers} for sid, layers in sources.items()]
    records += [{"type": "question", "id": f"set.{i}", "subject": "set", "kind": "item", "text": f"item {i}?",
                 "shape": "yes_no", "options": ["yes", "no"]} for i in range(n_items)]
    for n, (sid, item, yes) in enumerate(labels):
        records.append({"type": "message", "id": f"m{n}", "source": sid, "sent_at": SENT_AT,
                        "text": f"{sid} says item {item}: {'yes' if yes else 'no'}"})
        records.append({"type": "reading", "message": f"m{n}", "question": f"set.{item}", "reader": "label",
                        "probs": {"yes": float(yes), "no": float(not yes)}, "unclear": 0.0, "unrelated": 0.0,
                        "one_off": 0.0})
    records += [{"type": "settlement", "question": f"set.{i}", "answer": "yes" if truth[i] else "no",
                 "at": SENT_AT, "how": "outcome"} for i in np.flatnonzero(settled).tolist()]
    return records, {"truth": truth, "settled": settled}
