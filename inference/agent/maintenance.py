"""Maintenance: the organizer's merges and splits proposed by rule, with no model (`doxa organize --maintain`).

Questions drift: a model organizing messages one at a time asks "What does Maya eat?" and, a month
later, "What does Maya usually eat?"; or it keeps one question where two answers keep being true
together (docs/design.md §7). Maintenance looks over the whole store, deterministically, and
proposes the ``question_merge`` and ``question_split`` records that would fix it; a person (or
``--apply-above``) applies them through the ordinary ingest path, so each is recorded in
``organizer_ops`` and undone with ``doxa undo`` like any operation. The SQL is in
:mod:`doxa.data.maintenance`, which also keeps the proposals (table ``proposed_ops``).

**Duplicates** (a proposed merge). A pair of active questions with the same subject is a candidate
when all three hold (a model organizing one message at a time names the kind anew each time, so a
duplicate it makes usually carries another kind — "diet" and "food" —: kinds need not match, but a
pair of different kinds must clear the higher bars of :data:`OTHER_KIND_SIMILARITY_MIN` and, for two
open questions, share a value; the merged question keeps ``into``'s kind):

1. *their texts say the same*: the Jaccard index ``|A ∩ B| / |A ∪ B|`` of their content words is at
   least :data:`TEXT_SIMILARITY_MIN`. Content words: the text's words (lower-cased, split on anything
   not a letter or digit, :func:`doxa.data.text.words`), a final ``s`` dropped from words longer than
   three letters (``eats`` → ``eat``), without search's stop words (:data:`doxa.data.search.STOPWORDS`),
   without :data:`HEDGES` (``usually``, ``currently``: how often or since when, not what is asked) and
   without the words of the subject's name and aliases (every question about Maya says "Maya");
2. *their options correspond*: options map by normalised name (their content-free word form: case,
   punctuation and spacing aside, the final-``s`` rule); two closed questions need at least two mapped
   options (two yes/no questions always have), two open ones none (a merge lists the values of both);
   an open and a closed question are not proposed (write that merge by hand);
3. *their readings agree*: among the messages one reader read against both questions where both readings
   pick an answer (an option at ≥ 0.5), the share whose answers map to each other (argmax through the
   option map) is at least :data:`AGREEMENT_MIN`. With no such message the rule has nothing to refuse.

Its score is ``0.5·similarity + 0.25·coverage + 0.25·agreement``, where coverage is the mapped options
over the larger option list (1 for open questions) and agreement is ½ when no message was read against
both (no evidence either way). The merge goes *from* the question with fewer readings (the newer one on
a tie, then the later id) *into* the other, with the option map found.

**Split** (answers that keep being true together). For an active choice question with at least
:data:`MIN_SPLIT_MESSAGES` messages, each message's readings are averaged per option, and for each
pair of options ``(i, j)`` neither of which was settled or rejected:

- a message *supports both* when ``p_i ≥ 0.3`` and ``p_j ≥ 0.3`` (:data:`SUPPORT`);
- a message *asserts one* when ``p_i ≥ 0.5`` (:data:`ASSERT`) while ``p_j < 0.3``;
- in time order, the messages asserting one of the two switch between them ``w`` times. The first
  switch is what an honest change looks like (she moved); every later one says the older answer is
  still true. The pair's co-support is ``c = #both + max(0, w − 1)``.

The pair is co-supported when ``c ≥`` :data:`MIN_CO_SUPPORT` and its co-support events (the messages
supporting both, and those of the switches after the first) fall on at least :data:`MIN_DAYS` distinct
days; its score is ``c / n``, ``n`` the messages supporting both or asserting one: the share of the
evidence about the two answers that says both are true. The question's score is its best pair's.

The proposed split makes one yes/no question per co-supported answer ("What does Maya like? — is
“tulips” one of the answers?", id ``QUESTION.<answer>``, kind ``KIND.<answer>``), the answer mapping to
``yes``; a message goes to each of those questions whose answer it supports (≥ 0.3), its readings
carried through that map (the rest of their mass becomes ``unclear``). The question's other answers stay
together in a question like the old one (id ``QUESTION.other``, open if the old one was), which gets the
messages supporting one of them; a closed question left with one other answer makes that one a yes/no
question too. A question with an option named ``yes`` or ``no`` is not proposed (the same-named
options would map by themselves).

Everything is vectorised in SQL and numpy; the loops run over candidate pairs and option pairs only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations
from typing import TYPE_CHECKING, Any

import numpy as np

from doxa.data import maintenance
from doxa.data.errors import IngestError, StoreError
from doxa.data.maintenance import APPLIED, PROPOSED, Proposal
from doxa.data.search import STOPWORDS
from doxa.data.text import words

if TYPE_CHECKING:
    from doxa.inference.read.memory import Memory

#: Who proposes (``proposed_by``, and the ``by`` of the records it writes).
PROPOSED_BY = "doxa-maintenance"
#: Words of how often or since when: they qualify a question without changing what it asks.
HEDGES = frozenset("""usually currently now really generally typically normally often still ever always
    mostly mainly these days nowadays today lately recently actually exactly""".split())
TEXT_SIMILARITY_MIN = 0.5
#: Two questions of different kinds must share more of their words ("What is my job?" and "What was my
#: first job?" share half: another question, which a different kind says).
OTHER_KIND_SIMILARITY_MIN = 0.75
AGREEMENT_MIN = 0.5
#: A reading picks an answer when one option has at least this probability.
PICKS = 0.5
MERGE_WEIGHTS = (0.5, 0.25, 0.25)  # similarity, coverage, agreement
SUPPORT = 0.3
ASSERT = 0.5
MIN_CO_SUPPORT = 3
MIN_DAYS = 2
MIN_SPLIT_MESSAGES = MIN_CO_SUPPORT


# ---------------------------------------------------------------------------- words
def _stem(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def content_words(text: str, drop: frozenset[str] | set[str] = frozenset()) -> set[str]:
    """The content words of a question's text (the module docstring, rule 1)."""
    kept = (_stem(w) for w in words(text) if w not in STOPWORDS and w not in HEDGES)
    return {w for w in kept if w not in drop and w not in HEDGES}


def text_similarity(a: str, b: str, drop: set[str]) -> tuple[float, set[str]]:
    """Jaccard index of the content words of ``a`` and ``b``, and the words they share."""
    wa, wb = content_words(a, drop), content_words(b, drop)
    if not wa and not wb:
        return (1.0 if words(a) == words(b) else 0.0), set()
    return len(wa & wb) / len(wa | wb), wa & wb


def option_key(option: str) -> str:
    """An option's normalised name: its words, lower-cased, each under the final-``s`` rule."""
    return " ".join(map(_stem, words(option)))


def option_map(old: list[str], new: list[str]) -> dict[str, str]:
    """``old``'s options → ``new``'s with the same normalised name (the first such, where two share one)."""
    by_key: dict[str, str] = {}
    for o in new:
        by_key.setdefault(option_key(o), o)
    return {o: by_key[option_key(o)] for o in old if option_key(o) in by_key}


def _slug(option: str) -> str:
    return "-".join(words(option))[:40].strip("-")


# ---------------------------------------------------------------------------- duplicates
def _agreement(p_src: np.ndarray, p_dst: np.ndarray, src: list[str], dst: list[str],
               omap: dict[str, str]) -> tuple[int, int]:
    """(messages where both readings pick an answer, those whose answers map to each other)."""
    if not len(p_src) or not p_src.shape[1] or not p_dst.shape[1]:  # no message, or an open question of no value
        return 0, 0
    a, b = np.nan_to_num(p_src, nan=0.0), np.nan_to_num(p_dst, nan=0.0)
    both = (a.max(axis=1) >= PICKS) & (b.max(axis=1) >= PICKS)
    mapped = np.array([dst.index(omap[o]) if o in omap else -1 for o in src])
    agree = both & (mapped[a.argmax(axis=1)] == b.argmax(axis=1))
    return int(both.sum()), int(agree.sum())


def merge_proposals(store) -> list[Proposal]:
    """Every duplicate candidate (the module docstring) as a proposed ``question_merge``."""
    # the SQL's rough overlap (words of 3 letters or more) is held a quarter below the exact bar
    pairs = maintenance.duplicate_pairs(store, sorted(STOPWORDS | HEDGES), OTHER_KIND_SIMILARITY_MIN - 0.25)
    kept = []
    for pair in pairs:
        a, b = pair["a"], pair["b"]
        if a["open"] != b["open"]:
            continue
        drop = {_stem(w) for name in pair["subject_names"] for w in words(name or "")}
        similarity, shared_words = text_similarity(a["text"], b["text"], drop)
        if similarity >= (TEXT_SIMILARITY_MIN if a["kind"] == b["kind"] else OTHER_KIND_SIMILARITY_MIN):
            kept.append((pair, similarity, shared_words))
    shared = maintenance.shared_readings(store, [(p["a"]["id"], p["b"]["id"]) for p, _, _ in kept])
    out = []
    for pair, similarity, shared_words in kept:
        a, b = pair["a"], pair["b"]
        # from: fewer readings, then the newer, then the later id
        src, dst = _direction(a, b)
        omap = option_map(src["options"], dst["options"])
        if not a["open"] and len(omap) < 2:
            continue
        if a["open"] and a["kind"] != b["kind"] and not omap:
            continue  # two open questions of different kinds: only with a value in common
        coverage = 1.0 if a["open"] else len(omap) / max(len(a["options"]), len(b["options"]))
        p_a, p_b = shared.get((a["id"], b["id"]), (np.zeros((0, len(a["options"]))), np.zeros((0, len(b["options"])))))
        p_src, p_dst = (p_a, p_b) if src is a else (p_b, p_a)
        n, agree = _agreement(p_src, p_dst, src["options"], dst["options"], omap)
        agreement = agree / n if n else 0.5
        if n and agreement < AGREEMENT_MIN:
            continue
        w_text, w_cover, w_agree = MERGE_WEIGHTS
        score = w_text * similarity + w_cover * coverage + w_agree * agreement
        record = {"type": "question_merge",
                  "id": maintenance.free_operation_id(store, f"merge-{src['id']}-into-{dst['id']}"),
                  "into": dst["id"], "from": src["id"], "by": PROPOSED_BY}
        if omap:
            record["option_map"] = omap
        reasons = [
            ("same subject and kind" if a["kind"] == b["kind"] else
             f"same subject, kinds {src['kind']!r} and {dst['kind']!r} (the merge keeps {dst['kind']!r})")
            + f"; the texts share {similarity:.0%} of their content words"
            + (f" ({', '.join(sorted(shared_words))})" if shared_words else ""),
            (f"options correspond: {len(omap)} of {max(len(a['options']), len(b['options']))} map by name"
             if not a["open"] else f"both open: the merge lists the values of both ({len(omap)} shared)"),
            (f"readings agree on {agree} of {n} message(s) read against both" if n
             else "no message was read against both"),
            f"{src['id']} has {src['readings']} reading(s), {dst['id']} {dst['readings']}: "
            f"{src['id']} joins {dst['id']}",
        ]
        out.append(Proposal(f"merge:{a['id']}+{b['id']}", "question_merge", record, reasons, score))
    return out


def _direction(a: dict[str, Any], b: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(from, into): from has fewer readings; on a tie it is the newer, then the later id."""
    def weight(q):  # larger: the better question to keep
        return (q["readings"], -q["created_at"].timestamp(), _reverse(q["id"]))
    return (a, b) if weight(a) < weight(b) else (b, a)


def _reverse(qid: str) -> tuple[int, ...]:
    """Orders ids backwards, so the earlier id weighs more (is kept)."""
    return tuple(-ord(c) for c in qid) + (0,)


# ---------------------------------------------------------------------------- splits
@dataclass
class _Pair:
    i: int
    j: int
    both: int
    switches: int
    co_support: int
    days: int
    n: int

    @property
    def score(self) -> float:
        return self.co_support / self.n


def _co_supported(probs: np.ndarray, days: np.ndarray, i: int, j: int) -> _Pair:
    """The split rule of the module docstring for options ``i`` and ``j`` (rows in time order)."""
    pi, pj = probs[:, i], probs[:, j]
    both = (pi >= SUPPORT) & (pj >= SUPPORT)
    only_i = (pi >= ASSERT) & (pj < SUPPORT)
    only_j = (pj >= ASSERT) & (pi < SUPPORT)
    single = np.flatnonzero(only_i | only_j)
    label = only_i[single]
    switch_at = np.flatnonzero(label[1:] != label[:-1]) + 1  # positions in ``single`` where the answer changes
    after_first = single[switch_at[1:]]
    co_days = np.unique(np.concatenate([days[both], days[after_first]]))
    co = int(both.sum()) + len(after_first)
    return _Pair(i, j, int(both.sum()), len(switch_at), co, len(co_days), int((both | only_i | only_j).sum()))


def split_proposals(store) -> list[Proposal]:
    """Every question whose answers keep being true together (the module docstring) as a proposed
    ``question_split``."""
    out = []
    for q in maintenance.split_evidence(store, MIN_SPLIT_MESSAGES):
        options = q["options"]
        if {option_key(o) for o in options} & {"yes", "no"}:
            continue
        supported = (q["probs"] >= SUPPORT).any(axis=0)  # an option no message supports pairs with nothing
        free = [k for k, o in enumerate(options) if o not in q["decided"] and supported[k]]
        found = [p for i, j in combinations(free, 2)
                 if (p := _co_supported(q["probs"], q["days"], i, j)).co_support >= MIN_CO_SUPPORT
                 and p.days >= MIN_DAYS]
        if found:
            out.append(_split_proposal(store, q, found))
    return out


def _split_proposal(store, q: dict[str, Any], found: list[_Pair]) -> Proposal:
    options, probs = q["options"], q["probs"]
    together = sorted({k for p in found for k in (p.i, p.j)})
    rest = [k for k in range(len(options)) if k not in together]
    if not q["open"] and len(rest) == 1:  # a closed question of one answer is no question: a yes/no one
        together, rest = together + rest, []
    taken = maintenance.question_ids_from(store, q["id"] + ".")

    def new_id(suffix: str) -> str:
        base = f"{q['id']}.{suffix}"
        candidate, n = base, 2
        while candidate in taken:
            candidate, n = f"{base}-{n}", n + 1
        taken.add(candidate)
        return candidate

    into, maps, targets = [], {}, []
    for k in together:
        slug = _slug(options[k]) or f"option-{k + 1}"
        qid = new_id(slug)
        into.append({"id": qid, "subject": q["subject"], "kind": f"{q['kind']}.{slug}", "shape": "yes_no",
                     "text": f"{q['text'].strip()} — is “{options[k]}” one of the answers?",
                     "options": ["yes", "no"]})
        maps[qid] = {options[k]: "yes"}
        targets.append((qid, probs[:, k] >= SUPPORT))
    if rest or q["open"]:
        qid = new_id("other")
        other = {"id": qid, "subject": q["subject"], "kind": q["kind"], "shape": "choice", "text": q["text"],
                 "options": [options[k] for k in rest]}
        if q["open"]:
            other["open"] = True
        into.append(other)
        if rest:
            targets.append((qid, (probs[:, rest] >= SUPPORT).any(axis=1)))
    chosen = np.column_stack([mask for _, mask in targets]) if targets else np.zeros((len(probs), 0), bool)
    names = [qid for qid, _ in targets]
    picked: dict[str, list[str]] = {}
    for row, col in zip(*np.nonzero(chosen)):  # the record's own entries, message by message
        picked.setdefault(q["messages"][row], []).append(names[col])
    assign = {m: qids[0] if len(qids) == 1 else qids for m, qids in picked.items()}
    for new in into:
        if new["subject"] is None:  # a question about no subject: its parts are about none either
            del new["subject"]
    record = {"type": "question_split", "id": maintenance.free_operation_id(store, f"split-{q['id']}"),
              "question": q["id"], "by": PROPOSED_BY, "into": into, "assign": assign, "option_map": maps}
    reasons = [f"“{options[p.i]}” and “{options[p.j]}” keep being true together: {p.both} message(s) support "
               f"both (each ≥ {SUPPORT}), the answer switched between them {p.switches} time(s) (the first may be "
               f"a change); {p.co_support} co-support event(s) on {p.days} day(s), {p.score:.0%} of the {p.n} "
               "message(s) about either" for p in found]
    reasons.append(f"{len(assign)} of {len(q['messages'])} message(s) carry to the new questions")
    return Proposal(f"split:{q['id']}", "question_split", record, reasons, max(p.score for p in found))


# ---------------------------------------------------------------------------- running it
@dataclass
class MaintenanceResult:
    """What one maintenance run found and did."""

    #: the proposals this run found that wait for a decision (new or refreshed), best first
    proposed: list[Proposal] = field(default_factory=list)
    #: ids of those proposed for the first time
    new: list[str] = field(default_factory=list)
    #: found again but decided before: id → applied | dismissed (not proposed again)
    decided: dict[str, str] = field(default_factory=dict)
    #: applied by ``apply_above``: what :func:`apply` returned
    applied: list[dict[str, Any]] = field(default_factory=list)
    #: above ``apply_above`` but refused by ingest: ``{"id", "error"}``
    not_applied: list[dict[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"proposed": [p.to_dict() for p in self.proposed], "new": list(self.new),
                "decided": dict(self.decided), "applied": list(self.applied), "not_applied": list(self.not_applied)}


def find(store) -> list[Proposal]:
    """Every candidate (merges, then splits), best score first; nothing is stored. One read session: the
    file is opened once, however many candidates."""
    with store.reading():
        return sorted(merge_proposals(store) + split_proposals(store), key=lambda p: (-p.score, p.id))


def maintain(memory: "Memory", *, apply_above: float | None = None) -> MaintenanceResult:
    """Find the candidates, store them as proposals (see :func:`doxa.data.maintenance.save_proposals`), and
    apply those scoring at least ``apply_above`` (best first; one ingest refuses — an earlier one merged its
    question away — is reported in ``not_applied``)."""
    store = memory.store
    found = find(store)
    before = maintenance.save_proposals(store, found, by=PROPOSED_BY)
    result = MaintenanceResult(new=[p.id for p in found if before.get(p.id) == "new"],
                               decided={i: s for i, s in before.items() if s not in ("new", PROPOSED)})
    if apply_above is not None:
        for p in found:
            if p.id in result.decided or p.score < apply_above:
                continue
            try:
                result.applied.append(apply(memory, p.id))
            except (IngestError, StoreError) as err:
                result.not_applied.append({"id": p.id, "error": str(err)})
    waiting = {p.id: p for p in maintenance.proposals(store, [p.id for p in found])}
    result.proposed = [waiting[p.id] for p in found if waiting[p.id].status == PROPOSED]
    return result


def apply(memory: "Memory", pid: str) -> dict[str, Any]:
    """Apply a waiting proposal: its record is ingested as any organizer operation (recorded in
    ``organizer_ops``, undone with ``doxa undo``) and the proposal marked applied in the same transaction.
    Its operation id moves to the first free ``…-2``, ``…-3`` where another operation took it since.
    Returns ``{"proposal", "op", "record", "added"}``."""
    store = memory.store
    found = maintenance.proposal(store, pid)
    if found.status != PROPOSED:
        raise StoreError(f"proposal {pid!r} is already {found.status}: " + (
            f"`doxa undo {found.record.get('id')}` reverses it" if found.status == APPLIED
            else "`doxa organize --maintain` proposes what the evidence shows now"))
    record = dict(found.record, id=maintenance.free_operation_id(store, found.record["id"]))
    added = memory.ingest([record], also=lambda con: maintenance.mark_applied(con, pid, record))
    return {"proposal": pid, "op": record["id"], "record": record, "added": added}


def dismiss(memory: "Memory", pid: str) -> Proposal:
    """Dismiss a waiting proposal: maintenance will not propose it again."""
    return maintenance.dismiss(memory.store, pid)


def proposals(memory: "Memory") -> list[Proposal]:
    """Every stored proposal: waiting ones first (best score first), then decided ones (latest first)."""
    return maintenance.proposals(memory.store)


__all__ = ["PROPOSED_BY", "MaintenanceResult", "find", "maintain", "apply", "dismiss", "proposals",
           "merge_proposals", "split_proposals", "content_words", "text_similarity", "option_map"]
