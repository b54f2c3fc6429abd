"""The seeded generated world: the Maya example at scale, with the truth known.

A world is a stream of docs/formats.md records (people, sources, questions, messages,
readings, settlements) drawn from *exactly* the generative story of docs/design.md §2, plus
the things the story does not model and doxa must withstand (copies of messages,
the assistant's own notes, planted false claims). Because every latent is kept in
:class:`WorldTruth`, a benchmark can score systems against the true current answer
and run doxa's scorer with the true parameters (:meth:`World.oracle_params`): the
ceiling.

The story itself — true answers over time, what a message states, what the reader reports —
is drawn by :mod:`.story` (the one generator, shared with :mod:`.simulate`). Around it, per
question ``q`` of kind ``k`` with options ``1..K``:

- truth: the answer process of :mod:`.story`, with ``π_k ~ Dirichlet`` and
  ``log λ_k ~ Normal`` unless the config pins them.
- sources: every prefix of a source's layer path is a node; ``logit α_node =
  logit α_parent + σ_depth · ε``, ``ε ~ N(0, 1)`` (depth 1 = top layer, whose parent
  is a root at ``logit α_root``; a leaf = one source, depth ``len(layers) + 1``).
  Nodes named in ``sources.trust`` are pinned to that value instead of drawn.
- messages about ``q`` arrive as a Poisson process (rate per kind × person activity);
  each picks a source group by share and a leaf by Zipf popularity. Per message the
  reader's ``u`` (unclear + unrelated) and ``o`` (one-off) are drawn from Beta mixtures;
  what it states and what the reader (``β``, ``τ`` from the config) reports follow
  :mod:`.story`. The model's inverse map is ``r̃ ∝ probs^(1/τ)``.

Together these give the per-message likelihood of docs/design.md §2,
``L(j) ∝ (u + (1-u)o)/K + (1-u)(1-o)(α r̃_j + (1-α)(1-r̃_j)/(K-1))``.

Outside the story: copies (same text, later, another source: one evidence unit in the
store), assistant notes (sources under ``assistant/…``: never evidence), planted
campaigns (bursts of confident false claims from brand-new sources in an
untrustworthy layer), and settlements (the then-current truth, observed). With the
``change_reports`` knob, true changes are also told by new sources, one message each over
consecutive days (:meth:`_Generator.change_reports`; the reporters themselves follow the story).

Open kinds (``kinds[].open``; docs/design.md §2, open questions): each question of the
kind has ``K = slots`` values of its own, drawn from the kind's pool, and lists them as
they are named. Its story runs over those slots: slot ``j`` is the ``j``-th distinct
value the truth takes (then values only wrong or vague statements name). Truth: ``z(0)``
is slot 0; changes arrive at rate ``λ_k`` as above, and at a change with ``n`` values
taken so far the answer is redrawn from the Chinese restaurant of the model's base rates,

    P(z = v_j) = 1/(n+θ_k)  (j = 1…n, the value it replaces included),   P(new v_{n+1}) = θ_k/(n+θ_k)

(once all ``K`` slots are taken, uniformly among them). What a message states is the
story above over the ``K`` slots. The records are an organizer's and a reader's view of
it: the question record lists only slot 0 and says ``"open": true``; a message whose
text first names a value is followed by an ``option_added`` record (by ``organizer``,
at the message's time); a reading names the values listed at that point and reads
``unlisted`` as one category, ``r̃ ~ Dirichlet(β·1 + e_c)`` over them (``c``: the stated
value's category, ``unlisted`` when it is not listed): given what the message states, a
reading is what the model assumes; a settlement names the true value, which the store adds when it is not
listed. The model's ``K`` is the values listed plus ``unlisted``, not the slots, so
its ``(1-α)/(K-1)`` for a wrong statement is near, not equal to, the world's: the
oracle is the ceiling on closed kinds and close to it on open ones.

All randomness comes from one ``numpy`` Generator tree seeded by ``config.seed``:
the same config gives the same records, byte for byte.

Around this module: the config and its presets (:mod:`.world_config`), the names and
small talk (:mod:`.world_names`), the truth kept for scoring (:mod:`.world_truth`).

Why one module of ~900 lines: the :class:`World` and the generator that builds it. The
generator's stages (people, sources, questions, messages, readings, copies, planted
campaigns, settlements) share one object's arrays and one tree of seeded streams, each
stage reading what the previous ones drew; split across modules, they would pass a dozen
arrays between files and make the byte-for-byte reproducibility depend on call order
across them.
"""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from doxa.model.logistic import logit, sigmoid

from .story import SECONDS_PER_DAY, AnswerTimelines, categorical, report, soft_reading, state
from .world_config import BetaMixture, ReaderConfig, WorldConfig, WorldConfigError, group_prefix
from .world_names import ALIASES, CLOSERS, FIRST_NAMES, LAST_NAMES, MONTHS, OPENERS, text_key
from .world_truth import PlantedCampaign, ReadingTruth, WorldTruth

# =============================================================================
# the world
# =============================================================================


@dataclass
class ChangeReport:
    """One true change told by new sources (``change_reports`` knob): the question, the day the
    answer changed to ``option``, and the reporters' sources, messages and days in order."""

    question: str
    day: float
    option: str
    sources: list[str]
    messages: list[str]
    days: list[float]


@dataclass
class World:
    """A generated stream and its truth. ``records`` are in stream order; ``record_days``
    gives each record's world day (``-inf`` for definitions; a reading has its message's)."""

    config: WorldConfig
    records: list[dict[str, Any]]
    record_days: np.ndarray
    truth: WorldTruth
    primary_reader: str
    #: the reported changes of the ``change_reports`` knob (empty without it)
    change_reports: list[ChangeReport] = field(default_factory=list)

    # ------------------------------------------------------------------ time
    @property
    def start(self) -> datetime:
        return self.truth.start

    @property
    def end(self) -> datetime:
        return self.start + timedelta(days=self.truth.days)

    @property
    def start_day(self) -> float:
        return 0.0

    @property
    def end_day(self) -> float:
        return float(self.truth.days)

    def day_of(self, moment: float | str | datetime | date) -> float:
        return self.truth.day_of(moment)

    def iso(self, day: float) -> str:
        """World day → ISO 8601 UTC string (second resolution), as in the records."""
        moment = self.start + timedelta(seconds=round(float(day) * SECONDS_PER_DAY))
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")

    def epoch_day(self, day: float) -> float:
        """World day → days since 1970-01-01 (the store's and scorer's time axis)."""
        return (self.start - datetime(1970, 1, 1)).total_seconds() / SECONDS_PER_DAY + float(day)

    # ------------------------------------------------------------------ replay
    @property
    def n_definitions(self) -> int:
        return int(np.searchsorted(self.record_days, -np.inf, side="right"))

    def records_until(self, day: float | str | datetime, since: float | str | datetime | None = None) -> list[dict]:
        """Records with world day in ``(since, day]``; definitions come with ``since=None``."""
        hi = int(np.searchsorted(self.record_days, self.day_of(day), side="right"))
        lo = 0 if since is None else int(np.searchsorted(self.record_days, self.day_of(since), side="right"))
        return self.records[lo:hi]

    def iter_days(self, step: float = 1.0, start: float | None = None) -> Iterator[tuple[float, list[dict]]]:
        """Replay: yield ``(day, records in (previous day, day])`` until the end.

        The first chunk holds the definitions and everything up to ``start`` (default
        ``step``); a harness ingests the chunk, then reads beliefs at ``day``.
        """
        if not step > 0:
            raise ValueError(f"step must be > 0 days, got {step}")
        day = float(step if start is None else start)
        previous: float | None = None
        while True:
            yield day, self.records_until(day, since=previous)
            if day >= self.end_day:
                return
            previous, day = day, min(day + step, self.end_day)

    def write_jsonl(self, path: str | Path, until: float | None = None) -> int:
        """Write the stream (to ``until``) as JSON Lines; returns the number of lines."""
        records = self.records if until is None else self.records_until(until)
        with open(path, "w", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")))
                handle.write("\n")
        return len(records)

    # ------------------------------------------------------------------ oracle
    def oracle_params(self) -> dict[str, Any]:
        """The params document (inference/read/params.py) holding the TRUE parameters.

        Trust covers every evidence node and leaf (not assistant nodes; not planted
        sources, which fall back to their layer's node like any new source). Intervals
        are points: ``lo == hi == mean``.
        """
        t = self.truth
        trust = {
            node: {"mean": alpha, "lo": alpha, "hi": alpha, "n": int(t.node_messages.get(node, 0))}
            for node, alpha in t.node_trust.items()
            if not node.startswith("assistant") and node.rsplit("/", 1)[-1] not in t.planted_sources
        }
        kinds = {
            kind: {
                "options": list(t.kind_options[kind]),
                "prior": list(t.prior[kind]),
                "change_rate": t.change_rate[kind],
                "half_life_days": math.log(2.0) / t.change_rate[kind],
            }
            for kind in t.prior
        }
        kinds.update(_open_kind_params(t))
        top = {node: a for node, a in t.node_trust.items() if t.node_depth[node] == 1 and node != "assistant"}
        rates = np.array(list(t.change_rate.values()))
        return {
            "trust": trust,
            "confusion": {},
            "kinds": kinds,
            "readers": {name: {"temperature": tau} for name, tau in t.reader_temperature.items()},
            "calibration": {"method": "none"},
            "defaults": {
                "change_rate": float(np.exp(np.log(rates).mean())),
                "trust": t.root_trust,
                "trust_by_top_layer": top,
            },
            "diagnostics": {
                "oracle": True,
                "world": self.config.name,
                "seed": self.config.seed,
                "sigma_by_depth": list(t.sigma_by_depth),
            },
        }

    # ------------------------------------------------------------------ planted claims
    def planted_records(
        self,
        question_id: str,
        wrong_option: str,
        n: int,
        day: float | str | datetime,
        *,
        start: int = 0,
        spacing_minutes: float = 1.0,
        tag: str | None = None,
    ) -> list[dict[str, Any]]:
        """``n`` planted claims that ``question_id`` is ``wrong_option``, each from a NEW source.

        Claim ``i`` (``start <= i < start + n``) is sent at ``day + i·spacing_minutes``
        from source ``<prefix>-<tag hash>-<i>`` under the planted layers, with a reading
        by the primary reader (``u`` and ``o`` from the low mixture parts: a clear,
        lasting claim). Claim ``i`` is the same whatever ``n``: growing ``n`` and
        ingesting again adds claims (ingest is idempotent). Returns source, message and
        reading records in that order per claim. ``wrong_option`` is the caller's choice;
        check :meth:`WorldTruth.answer_at` if it must be false.
        """
        if question_id not in self.truth.questions:
            raise KeyError(f"no question {question_id!r} in this world")
        if question_id in self.truth.open_values:  # its values are listed as the stream names them
            raise ValueError(f"{question_id} is an open question: planted claims are for closed questions")
        options = self.truth.questions[question_id]["options"]
        if wrong_option not in options:
            raise ValueError(f"{wrong_option!r} is not an option of {question_id}: {options}")
        if n < 0 or start < 0:
            raise ValueError("n and start must be >= 0")
        base_day = self.day_of(day)
        label = tag if tag is not None else f"{question_id}|{wrong_option}|{base_day:.6f}"
        return _planted_claims(
            world=self,
            question_id=question_id,
            stated=options.index(wrong_option),
            days=[base_day + i * spacing_minutes / 1440.0 for i in range(start, start + n)],
            indices=list(range(start, start + n)),
            label=label,
        )[0]


def _open_kind_params(t: WorldTruth) -> dict[str, dict[str, Any]]:
    """Open kinds' entries of the oracle: no options or base rates of their own (each question has its
    values), the true change rate and θ (docs/design.md §2, open questions)."""
    return {kind: {"options": [], "prior": [], "change_rate": t.change_rate[kind],
                   "half_life_days": math.log(2.0) / t.change_rate[kind], "new_value_weight": theta}
            for kind, theta in t.new_value_weight.items()}


def _planted_claims(world: World, question_id: str, stated: int, days: list[float], indices: list[int],
                    label: str) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """Source, message and reading records for planted claims; claim ``i`` depends only on (seed, label, i)."""
    cfg = world.config
    info = world.truth.questions[question_id]
    options = info["options"]
    kind = next(k for k in cfg.kinds if k.name == info["kind"])
    reader = next(r for r in cfg.readers if r.name == world.primary_reader)
    digest = zlib.crc32(label.encode("utf-8"))
    first_name = info["first_name"]
    records: list[dict[str, Any]] = []
    sources, messages = [], []
    for i, day in zip(indices, days):
        rng = np.random.default_rng([cfg.seed, digest, i])
        source_id = f"{cfg.planted.prefix}-{digest:08x}-{i:03d}"
        message_id = f"{source_id}.m"
        u = float(rng.beta(*cfg.reading.unclear.low))
        o = float(rng.beta(*cfg.reading.one_off.low))
        probs, unclear, unrelated = _read_one(rng, stated, len(options), reader, u,
                                              float(rng.beta(*cfg.reading.unrelated_fraction)))
        phrase = kind.phrases.get(options[stated], options[stated])
        body = kind.lasting.format(name=first_name, option=phrase)
        text = f"PSA: {body}! Everyone knows it. (posted by {source_id})"
        records.append({"type": "source", "id": source_id, "layers": list(cfg.planted.layers)})
        records.append({"type": "message", "id": message_id, "source": source_id,
                        "sent_at": world.iso(day), "text": text})
        records.append({"type": "reading", "message": message_id, "question": question_id,
                        "reader": reader.name, "reader_version": reader.version,
                        "probs": dict(zip(options, probs)), "unclear": unclear, "unrelated": unrelated,
                        "one_off": o})
        sources.append(source_id)
        messages.append(message_id)
    return records, sources, messages


def _read_one(rng: np.random.Generator, stated: int, k: int, reader: ReaderConfig, u: float,
              unrelated_fraction: float) -> tuple[list[float], float, float]:
    ks = np.array([k])
    calibrated = soft_reading(rng, np.array([stated]), ks, np.array([reader.beta]), width=k)
    probs, unclear, unrelated = report(calibrated, np.array([reader.temperature]), np.array([u]),
                                       np.array([unrelated_fraction]), ks)
    return probs[0, :k].tolist(), float(unclear[0]), float(unrelated[0])


# =============================================================================
# generation
# =============================================================================


def _beta_mixture(rng: np.random.Generator, mix: BetaMixture, n: int) -> np.ndarray:
    high = rng.random(n) < mix.share_high
    return np.where(high, rng.beta(*mix.high, size=n), rng.beta(*mix.low, size=n))


def _sigma(sigmas: list[float], depth: int) -> float:
    return sigmas[min(depth, len(sigmas)) - 1]


class _Generator:
    """One pass over the generative story; every stage draws from its own child Generator.

    Prefixes say what an attribute belongs to: ``r_*`` are the stages' random streams,
    ``m_*`` the messages' arrays, ``q_*`` the questions', ``reading_*`` the reading rows'."""

    def __init__(self, config: WorldConfig):
        self.cfg = config
        # the knobs added later (bias, compromise) draw from an eleventh stream: spawning one more
        # child leaves the first ten as they were, so an old config gives the same records
        streams = np.random.SeedSequence(config.seed).spawn(11)
        (self.r_kinds, self.r_people, self.r_trust, self.r_truth, self.r_msgs, self.r_read,
         self.r_copies, self.r_planted, self.r_settle, self.r_text, self.r_knobs) = [
            np.random.default_rng(s) for s in streams]
        self.horizon = int(round(config.days * SECONDS_PER_DAY))
        self.start = datetime(config.start.year, config.start.month, config.start.day)

    # ------------------------------------------------------------------ kinds
    def kinds(self) -> None:
        cfg = self.cfg
        self.kind_names = [k.name for k in cfg.kinds]
        # an open kind's questions each have `slots` values of their own (see open_values)
        self.k_of_kind = np.array([k.slots if k.open else len(k.options) for k in cfg.kinds], dtype=np.int64)
        self.k_max = int(self.k_of_kind.max())
        self.prior = np.zeros((len(cfg.kinds), self.k_max))
        self.rate = np.zeros(len(cfg.kinds))
        for i, kind in enumerate(cfg.kinds):
            k = int(self.k_of_kind[i])
            if kind.open:  # no base rates per slot: the Chinese restaurant of open_timelines redraws
                self.prior[i, :k] = 1.0 / k
            elif kind.prior is not None:
                p = np.asarray(kind.prior, dtype=float)
                self.prior[i, :k] = p / p.sum()
            else:
                self.prior[i, :k] = self.r_kinds.dirichlet(np.full(k, cfg.truth.prior_concentration))
            if kind.half_life_days is not None:
                self.rate[i] = math.log(2.0) / kind.half_life_days
            else:
                self.rate[i] = float(np.exp(self.r_kinds.normal(cfg.truth.change_rate_log_mean,
                                                                cfg.truth.change_rate_log_sd)))

    # ------------------------------------------------------------------ people
    def people(self) -> None:
        cfg, rng = self.cfg, self.r_people
        n = cfg.people.count
        pairs = rng.choice(len(FIRST_NAMES) * len(LAST_NAMES), size=n, replace=False)
        self.first = [FIRST_NAMES[p // len(LAST_NAMES)] for p in pairs.tolist()]
        self.last = [LAST_NAMES[p % len(LAST_NAMES)] for p in pairs.tolist()]
        self.person_ids = [f"{f}-{l}".lower() for f, l in zip(self.first, self.last)]
        shape = cfg.people.activity_shape
        self.activity = rng.gamma(shape, 1.0 / shape, size=n)
        lo, hi = cfg.people.questions_per_person
        q_person, q_kind = [], []
        self.q_start = np.zeros(n, dtype=np.int64)
        self.q_count = rng.integers(lo, hi + 1, size=n)
        for p in range(n):
            chosen = np.sort(rng.choice(len(cfg.kinds), size=int(self.q_count[p]), replace=False))
            self.q_start[p] = len(q_person)
            q_person.extend([p] * len(chosen))
            q_kind.extend(chosen.tolist())
        self.q_person = np.asarray(q_person, dtype=np.int64)
        self.q_kind = np.asarray(q_kind, dtype=np.int64)
        self.q_k = self.k_of_kind[self.q_kind]
        self.q_ids = [f"{self.person_ids[p]}.{self.kind_names[k]}" for p, k in zip(q_person, q_kind)]
        # relations: partners and siblings pair people off; friendships are a sparse random graph
        relations: list[tuple[int, int, str]] = []
        order = rng.permutation(n)
        n_partners = int(cfg.people.partner_share * n) // 2 * 2
        relations += [(int(order[i]), int(order[i + 1]), "partner") for i in range(0, n_partners, 2)]
        order = rng.permutation(n)
        n_siblings = int(cfg.people.sibling_share * n) // 2 * 2
        relations += [(int(order[i]), int(order[i + 1]), "sibling") for i in range(0, n_siblings, 2)]
        friends = rng.poisson(cfg.people.friends_mean / 2.0, size=n)
        seen = {(min(a, b), max(a, b)) for a, b, _ in relations}
        for a in range(n):
            for b in rng.choice(n, size=int(friends[a]), replace=True).tolist():
                key = (min(a, b), max(a, b))
                if a != b and key not in seen:
                    seen.add(key)
                    relations.append((a, b, "friend"))
        self.relations = relations

    # ------------------------------------------------------------------ sources
    def sources(self) -> None:
        cfg, rng = self.cfg, self.r_trust
        node_set: set[tuple[str, ...]] = set()
        for layers in [g.layers for g in cfg.sources.groups] + [cfg.planted.layers]:
            for d in range(1, len(layers) + 1):
                node_set.add(tuple(layers[:d]))
        nodes = sorted(node_set, key=lambda t: (len(t), "/".join(t)))
        sigmas = cfg.sources.sigma_by_depth
        root = logit(cfg.sources.root_trust)
        self.node_logit: dict[str, float] = {}
        self.node_depth: dict[str, int] = {}
        for node in nodes:
            path = "/".join(node)
            parent = self.node_logit["/".join(node[:-1])] if len(node) > 1 else root
            eps = rng.standard_normal()  # drawn for pinned nodes too, so pinning one leaves the rest unchanged
            pinned = cfg.sources.trust.get(path)
            self.node_logit[path] = float(logit(pinned)) if pinned is not None else parent + _sigma(sigmas, len(node)) * eps
            self.node_depth[path] = len(node)
        # leaves
        ids: list[str] = []
        paths: list[str] = []
        logits: list[float] = []
        group_of: list[int] = []
        self.group_leaf_start: list[int] = []
        self.group_popularity: list[np.ndarray] = []
        taken: set[str] = set()
        for g, group in enumerate(cfg.sources.groups):
            parent_path = "/".join(group.layers)
            sigma = _sigma(sigmas, len(group.layers) + 1)
            if group.leaves == "per_subject":
                suffix = group.prefix or group.layers[-1]
                names = [f"{pid}-{suffix}" for pid in self.person_ids]
                weights = np.ones(len(names))
            else:
                prefix = group_prefix(group)
                names = [prefix] if group.leaves == 1 else [f"{prefix}-{i:03d}" for i in range(group.leaves)]
                weights = (np.arange(1, len(names) + 1, dtype=float)) ** (-group.popularity)
                weights = weights[rng.permutation(len(names))]
            clash = taken.intersection(names)
            if clash:
                raise WorldConfigError(
                    f"sources.groups[{g}]: source id {sorted(clash)[0]!r} is used twice; give the group another prefix"
                )
            taken.update(names)
            eps = rng.standard_normal(len(names))
            self.group_leaf_start.append(len(ids))
            self.group_popularity.append(weights / weights.sum())
            ids.extend(names)
            paths.extend(f"{parent_path}/{name}" for name in names)
            logits.extend((self.node_logit[parent_path] + sigma * eps).tolist())
            group_of.extend([g] * len(names))
        self.source_ids = ids
        self.source_paths = paths
        self.source_logit = np.asarray(logits)
        self.source_group = np.asarray(group_of, dtype=np.int64)
        self.source_layers = [cfg.sources.groups[g].layers for g in group_of]
        self.group_assistant = np.array([g.layers[0] == "assistant" for g in cfg.sources.groups])
        self.group_per_subject = np.array([g.leaves == "per_subject" for g in cfg.sources.groups])
        # which group talks about which kind, by share
        weights = np.zeros((len(cfg.kinds), len(cfg.sources.groups)))
        for g, group in enumerate(cfg.sources.groups):
            for k, name in enumerate(self.kind_names):
                if group.kinds is None or name in group.kinds:
                    weights[k, g] = group.share
        self.kind_group_weights = weights
        stated = rng.random(len(ids)) < cfg.sources.stated_trust_share
        noisy = sigmoid(self.source_logit + cfg.sources.stated_trust_noise * rng.standard_normal(len(ids)))
        self.stated_trust = {
            ids[i]: round(float(noisy[i]), 3)
            for i in np.flatnonzero(stated & ~self.group_assistant[self.source_group]).tolist()
        }
        for g, group in enumerate(cfg.sources.groups):
            if group.stated_trust is not None and not self.group_assistant[g]:
                self.stated_trust.update({ids[i]: float(group.stated_trust)
                                          for i in np.flatnonzero(self.source_group == g).tolist()})
        self.source_knobs()

    def source_knobs(self) -> None:
        """Each source's favourite option per kind, bias, and compromise (day, trust); from ``r_knobs``."""
        cfg, rng = self.cfg, self.r_knobs
        n = len(self.source_ids)
        groups = cfg.sources.groups
        self.source_bias = np.array([groups[g].bias for g in self.source_group.tolist()]) if n else np.zeros(0)
        self.favourite = np.zeros((n, len(cfg.kinds)), dtype=np.int64)
        if self.source_bias.any():
            self.favourite = (rng.random((n, len(cfg.kinds))) * self.k_of_kind[None, :]).astype(np.int64)
        self.compromised_from = np.full(n, np.inf)  # seconds
        self.compromised_logit = np.zeros(n)
        for g, group in enumerate(groups):
            if group.compromised is None:
                continue
            members = np.flatnonzero(self.source_group == g)
            hit = members[rng.random(len(members)) < group.compromised.share]
            self.compromised_from[hit] = group.compromised.day * SECONDS_PER_DAY
            self.compromised_logit[hit] = logit(group.compromised.trust)

    def alpha_at(self, leaf: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Reliability of each (source, time): its α, or its compromised trust once compromised."""
        late = t >= self.compromised_from[leaf]
        return sigmoid(np.where(late, self.compromised_logit[leaf], self.source_logit[leaf]))

    def pick_leaves(self, rng: np.random.Generator, groups: np.ndarray, persons: np.ndarray) -> np.ndarray:
        leaves = np.zeros(groups.shape[0], dtype=np.int64)
        for g in range(len(self.cfg.sources.groups)):
            rows = np.flatnonzero(groups == g)
            if rows.size == 0:
                continue
            if self.group_per_subject[g]:
                leaves[rows] = self.group_leaf_start[g] + persons[rows]
            else:
                cum = np.cumsum(self.group_popularity[g])
                pick = np.searchsorted(cum / cum[-1], rng.random(rows.size), side="right")
                leaves[rows] = self.group_leaf_start[g] + np.minimum(pick, cum.size - 1)
        return leaves

    # ------------------------------------------------------------------ truth timelines
    def timelines(self) -> None:
        self.answers = AnswerTimelines.draw(self.r_truth, self.prior, self.rate, self.q_kind, self.cfg.days,
                                            self.horizon)
        self.open_timelines()

    def answer(self, q: np.ndarray, t: np.ndarray) -> np.ndarray:
        """True option index of questions ``q`` at seconds ``t`` (vectorised)."""
        return self.answers.answer(q, t)

    # ------------------------------------------------------------------ open kinds
    def open_timelines(self) -> None:
        """Open kinds: each question's own values, and its answers redrawn by the Chinese restaurant.

        Slot ``j`` of an open question is the ``j``-th distinct value its answer takes, then the
        values only wrong or vague statements name (``slots`` in all, drawn without replacement from
        the kind's pool). ``z_q(0)`` is slot 0; change events keep their Poisson times, and at a
        change with ``n`` values taken so far ``z`` is redrawn as each of them with ``1/(n+θ)``
        (possibly the value it replaces) and as a new one, slot ``n``, with ``θ/(n+θ)``; once every
        slot is taken, among them uniformly. Draws from a stream of its own (seeded by the config's
        seed and this stage's name) and only for a config with an open kind, so a config without
        one gives the records it gave before open kinds existed.
        """
        cfg = self.cfg
        self.q_open = np.array([cfg.kinds[k].open for k in self.q_kind.tolist()], dtype=bool)
        self.q_values: list[list[str]] = [[] for _ in self.q_ids]
        self._q_options: list[list[str]] | None = None
        if not self.q_open.any():
            return
        rng = np.random.default_rng([cfg.seed, zlib.crc32(b"open_kinds")])
        for i, kind in enumerate(cfg.kinds):
            if not kind.open:
                continue
            qs = np.flatnonzero(self.q_kind == i)
            # `slots` distinct values per question: the first columns of a random permutation of the pool
            picks = np.argsort(rng.random((qs.size, len(kind.options))), axis=1)[:, :kind.slots]
            for q, row in zip(qs.tolist(), np.asarray(kind.options, dtype=object)[picks].tolist()):
                self.q_values[q] = row
        a = self.answers
        a.initial[self.q_open] = 0
        events = np.flatnonzero(self.q_open[a.change_q])  # sorted by (question, time)
        if not events.size:
            return
        q_ev = a.change_q[events]
        first = np.r_[0, np.flatnonzero(np.diff(q_ev)) + 1]
        rank = np.arange(events.size) - np.repeat(first, np.diff(np.r_[first, events.size]))
        theta = np.array([k.new_value_weight for k in cfg.kinds])[self.q_kind]
        taken = np.ones(len(self.q_ids))  # n per question: slot 0 from the start
        for r in range(int(rank.max()) + 1):  # the r-th change of every open question at once
            ev = events[rank == r]
            q = a.change_q[ev]
            n, th = taken[q], theta[q]
            x = rng.random(ev.size) * (n + th)
            full = n >= self.q_k[q]
            new = (x >= n) & ~full
            old = np.minimum(np.floor(np.where(full, x * n / (n + th), x)), n - 1)
            a.change_value[ev] = np.where(new, n, old).astype(np.int64)
            taken[q] = n + new

    def question_options(self) -> list[list[str]]:
        """Each question's options: its kind's, or an open question's own values (every slot)."""
        if self._q_options is None:
            self._q_options = [self.q_values[q] if self.q_open[q] else self.cfg.kinds[k].options
                               for q, k in enumerate(self.q_kind.tolist())]
        return self._q_options

    def open_question_fields(self, q: int) -> dict[str, Any]:
        """An open question's record lists only its first value, and says it is open (closed: nothing)."""
        return {"options": [self.q_values[q][0]], "open": True} if self.q_open[q] else {}

    def open_truth_fields(self, q: int) -> dict[str, Any]:
        return {"open": True} if self.q_open[q] else {}

    def open_names(self, message_ids: list[str], position: np.ndarray, row_src: np.ndarray, row_msg: np.ndarray,
                   campaigns: list[PlantedCampaign]) -> tuple[dict[str, tuple[str, str]], dict[tuple[str, str], str]]:
        """What open questions' messages say: message id → (open question, value) for every message
        whose text names a value of one (a clear or one-off statement about it; not a vague one, nor an
        assistant's note, whose texts name no value an organizer would list; its copies; planted
        claims), and (message id, open question) → the value each reading's message states."""
        n_orig = self.m_q.size
        stated = self.reading_stated[:n_orig]  # the main reading row of message m is row m
        names = (self.q_open[self.m_q] & ~self.m_assistant & ((self.m_o > 0.5) | (self.m_u <= 0.5)))
        named: dict[str, tuple[str, str]] = {}
        for m in np.flatnonzero(names).tolist():
            q = int(self.m_q[m])
            named[message_ids[int(position[m])]] = (self.q_ids[q], self.q_values[q][int(stated[m])])
        for c, m in enumerate(self.c_orig.tolist()):
            if names[m]:
                named[message_ids[int(position[n_orig + c])]] = named[message_ids[int(position[m])]]
        rows = np.flatnonzero(self.q_open[self.reading_q[row_src]])
        says = {(message_ids[int(position[row_msg[r]])], self.q_ids[q]): self.q_values[q][s]
                for r, q, s in zip(rows.tolist(), self.reading_q[row_src[rows]].tolist(),
                                   self.reading_stated[row_src[rows]].tolist())}
        open_ids = {self.q_ids[q] for q in np.flatnonzero(self.q_open).tolist()}
        for camp in campaigns:
            if camp.question in open_ids:
                named.update({mid: (camp.question, camp.option) for mid in camp.messages})
                says.update({(mid, camp.question): camp.option for mid in camp.messages})
        return named, says

    def open_records(self, world: World, records: list[dict], days: list[float],
                     named: dict[str, tuple[str, str]], says: dict[tuple[str, str], str]
                     ) -> tuple[list[dict], list[float]]:
        """Lay the stream over open questions' growing option lists, as an organizer and a reader would.

        In stream order, each open question lists its first value from its creation; a message that
        first names a value is followed by an ``option_added`` record (by the organizer, at the
        message's time), before its readings; a settlement naming a value not listed adds it (the
        store does, docs/formats.md). A reading of an open question is the story's reading over its
        categories then, the values listed and ``unlisted`` (every value not listed): with ``c`` the
        category of the value its message states, ``r̃ ~ Dirichlet(β·1 + e_c)`` over them and
        ``probs, unlisted = (1-u)·normalise(r̃^τ)`` (``u``, ``unclear``, ``unrelated`` and ``one_off``
        as drawn for the message; the draws from a stream of their own). Lumping the unnamed values
        after the draw would not do: their summed mass is not one category's reading. Records the day
        each value was listed in ``world.truth.open_values``.
        """
        cfg = self.cfg
        t = world.truth
        t.new_value_weight = {k.name: float(k.new_value_weight) for k in cfg.kinds if k.open}
        listed = {self.q_ids[q]: [self.q_values[q][0]] for q in np.flatnonzero(self.q_open).tolist()}
        t.open_values = {qid: [(-math.inf, values[0])] for qid, values in listed.items()}
        out: list[dict] = []
        out_days: list[float] = []
        at: list[int] = []  # positions in `out` of open questions' readings, with their categories
        categories: list[list[str]] = []
        stated: list[int] = []
        for rec, day in zip(records, days):
            kind = rec["type"]
            if kind == "reading" and rec["question"] in listed:
                values = list(listed[rec["question"]])
                value = says[(rec["message"], rec["question"])]
                at.append(len(out))
                categories.append(values)
                stated.append(values.index(value) if value in values else len(values))  # else: unlisted
            out.append(rec)
            out_days.append(day)
            if kind == "message" and rec["id"] in named:
                qid, value = named[rec["id"]]
                if value not in listed[qid]:
                    listed[qid].append(value)
                    t.open_values[qid].append((day, value))
                    out.append({"type": "option_added", "question": qid, "option": value, "at": rec["sent_at"],
                                "by": "organizer"})
                    out_days.append(day)
            elif kind == "settlement" and rec["question"] in listed and rec["answer"] not in listed[rec["question"]]:
                listed[rec["question"]].append(rec["answer"])
                t.open_values[rec["question"]].append((day, rec["answer"]))
        if at:
            rng = np.random.default_rng([cfg.seed, zlib.crc32(b"open_readings")])
            readers = {r.name: r for r in cfg.readers}
            old = [out[i] for i in at]
            k = np.array([len(c) + 1 for c in categories], dtype=np.int64)
            u = np.array([r["unclear"] + r["unrelated"] for r in old])
            beta = np.array([readers[r["reader"]].beta for r in old])
            tau = np.array([readers[r["reader"]].temperature for r in old])
            calibrated = soft_reading(rng, np.asarray(stated, dtype=np.int64), k, beta, int(k.max()))
            probs, _, _ = report(calibrated, tau, u, np.zeros(len(at)), k)
            for i, rec, values, row in zip(at, old, categories, probs.tolist()):
                out[i] = {**{f: rec[f] for f in ("type", "message", "question", "reader", "reader_version")},
                          "probs": dict(zip(values, row[:len(values)])), "unlisted": row[len(values)],
                          **{f: rec[f] for f in ("unclear", "unrelated", "one_off")}}
        return out, out_days

    # ------------------------------------------------------------------ messages and readings
    def messages(self) -> None:
        cfg, rng = self.cfg, self.r_msgs
        rate = (np.array([k.message_rate for k in cfg.kinds])[self.q_kind]
                * self.activity[self.q_person] * cfg.message_rate_scale)
        counts = rng.poisson(rate * cfg.days)
        m_q = np.repeat(np.arange(len(self.q_ids)), counts)
        m_t = rng.integers(0, self.horizon, size=m_q.size)
        groups = categorical(rng, self.kind_group_weights, self.q_kind[m_q])
        leaves = self.pick_leaves(rng, groups, self.q_person[m_q])
        self.m_q, self.m_t, self.m_leaf = m_q, m_t, leaves
        self.m_assistant = self.group_assistant[groups]
        n = m_q.size
        # u and o are per message: the reader reads one text, whatever question it asks of it
        self.m_u = _beta_mixture(rng, cfg.reading.unclear, n)
        self.m_o = _beta_mixture(rng, cfg.reading.one_off, n)
        readers = np.array([r.share for r in cfg.readers])[None, :]
        self.m_reader = categorical(rng, readers, np.zeros(n, dtype=np.int64))

    def read(self, rng: np.random.Generator, q: np.ndarray, t: np.ndarray, alpha: np.ndarray,
             u: np.ndarray, o: np.ndarray, reader: np.ndarray, force: np.ndarray | None = None,
             leaf: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The message → stated option → reading part of the story, for many rows at once.

        ``leaf`` (the sending source of each row) applies its group's ``bias``.
        """
        n = q.size
        k = self.q_k[q]
        truth = self.answer(q, t)
        lean_to = None
        if leaf is not None and self.source_bias.any():
            favourite = self.favourite[leaf, self.q_kind[q]]
            leans = (self.r_knobs.random(n) < self.source_bias[leaf]) & (favourite != truth)
            lean_to = np.where(leans, favourite, -1)
        stated, noise = state(rng, truth, k, alpha, u, o, lean_to)
        if force is not None:
            stated = np.where(force >= 0, force, stated)
        beta = np.array([r.beta for r in self.cfg.readers])[reader]
        tau = np.array([r.temperature for r in self.cfg.readers])[reader]
        calibrated = soft_reading(rng, stated, k, beta, self.k_max)
        fraction = rng.beta(*self.cfg.reading.unrelated_fraction, size=n)
        probs, unclear, unrelated = report(calibrated, tau, u, fraction, k)
        return {"truth": truth, "stated": stated, "noise": noise, "probs": probs, "unclear": unclear,
                "unrelated": unrelated}

    def readings(self) -> None:
        cfg, rng = self.cfg, self.r_read
        n = self.m_q.size
        alpha = self.alpha_at(self.m_leaf, self.m_t)
        main = self.read(rng, self.m_q, self.m_t, alpha, self.m_u, self.m_o, self.m_reader, leaf=self.m_leaf)
        # cross readings: the same message read against another question of its subject
        person = self.q_person[self.m_q]
        cross = (rng.random(n) < cfg.reading.cross_rate) & (self.q_count[person] > 1)
        rows = np.flatnonzero(cross)
        local = self.m_q[rows] - self.q_start[person[rows]]
        span = self.q_count[person[rows]]
        other_q = self.q_start[person[rows]] + (local + 1 + rng.integers(0, np.maximum(span - 1, 1))) % span
        u_x = rng.beta(*cfg.reading.cross_unclear, size=rows.size)
        extra = self.read(rng, other_q, self.m_t[rows], alpha[rows], u_x, self.m_o[rows], self.m_reader[rows],
                          leaf=self.m_leaf[rows])
        self.reading_msg = np.concatenate([np.arange(n), rows])
        self.reading_q = np.concatenate([self.m_q, other_q])
        self.reading_role = np.concatenate([np.full(n, "main", dtype=object), np.full(rows.size, "cross", dtype=object)])
        self.reading_u = np.concatenate([self.m_u, u_x])
        self.reading_o = np.concatenate([self.m_o, self.m_o[rows]])
        self.reading_alpha = np.concatenate([alpha, alpha[rows]])
        for key in ("truth", "stated", "noise", "probs", "unclear", "unrelated"):
            setattr(self, f"reading_{key}", np.concatenate([main[key], extra[key]]))

    # ------------------------------------------------------------------ copies
    def copies(self) -> None:
        cfg, rng = self.cfg, self.r_copies
        n = self.m_q.size
        eligible = ~self.m_assistant & (rng.random(n) < cfg.copies.rate)
        delay = np.maximum(60, np.rint(rng.exponential(cfg.copies.delay_days * SECONDS_PER_DAY, size=n))).astype(np.int64)
        eligible &= self.m_t + delay < self.horizon
        originals = np.flatnonzero(eligible)
        # forwarders: pooled, non-assistant groups that talk about the kind
        weights = self.kind_group_weights * (~self.group_assistant & ~self.group_per_subject)[None, :]
        usable = weights.sum(axis=1)[self.q_kind[self.m_q[originals]]] > 0
        originals = originals[usable]
        groups = categorical(rng, weights, self.q_kind[self.m_q[originals]])
        leaves = self.pick_leaves(rng, groups, self.q_person[self.m_q[originals]])
        same = leaves == self.m_leaf[originals]
        # a forward comes from someone else: step to the group's next leaf (or drop a one-leaf group's copy)
        g_size = np.array([len(p) for p in self.group_popularity])[groups]
        g_start = np.array(self.group_leaf_start)[groups]
        leaves = np.where(same, g_start + (leaves - g_start + 1) % g_size, leaves)
        keep = leaves != self.m_leaf[originals]
        self.c_orig = originals[keep]
        self.c_leaf = leaves[keep]
        self.c_t = self.m_t[self.c_orig] + delay[self.c_orig]
        self.c_fwd = rng.random(self.c_orig.size) < cfg.copies.fwd_share

    # ------------------------------------------------------------------ settlements
    def settlements(self) -> None:
        cfg, rng = self.cfg, self.r_settle
        n_q = len(self.q_ids)
        settled = rng.random(n_q) < cfg.settlements.question_share
        counts = rng.poisson(cfg.settlements.rate_per_day * cfg.days, size=n_q) * settled
        s_q = np.repeat(np.arange(n_q), counts)
        window = cfg.settlements.window_days
        lo, hi = (0, self.horizon) if window is None else (int(window[0] * SECONDS_PER_DAY),
                                                           int(window[1] * SECONDS_PER_DAY))
        s_t = rng.integers(lo, hi, size=s_q.size)
        order = np.lexsort((s_t, s_q))
        self.s_q, self.s_t = s_q[order], s_t[order]
        self.s_answer = self.answer(self.s_q, self.s_t)
        hows = list(cfg.settlements.how)
        shares = np.array([[cfg.settlements.how[h] for h in hows]]) if hows else np.ones((1, 1))
        self.s_how = [hows[i] for i in categorical(rng, shares, np.zeros(s_q.size, dtype=np.int64)).tolist()] if hows else []
        self.settled = settled

    # ------------------------------------------------------------------ text
    def texts(self, order: np.ndarray) -> list[str]:
        """One text per original message (in ``order``); unique under a strict normalisation."""
        cfg, rng = self.cfg, self.r_text
        n = order.size
        opener = rng.integers(0, len(OPENERS), size=n).tolist()
        closer = rng.integers(0, len(CLOSERS), size=n).tolist()
        use_full = (rng.random(n) < 0.3).tolist()
        main_rows = order  # main reading row of message m is row m
        stated = self.reading_stated[main_rows].tolist()
        qs = self.m_q[order].tolist()
        u = self.m_u[order].tolist()
        o = self.m_o[order].tolist()
        assistant = self.m_assistant[order].tolist()
        moments = (np.datetime64(self.start, "s") + self.m_t[order].astype("timedelta64[s]")).astype(object)
        used: set[str] = set()
        out: list[str] = []
        for i in range(n):
            q = qs[i]
            kind = cfg.kinds[int(self.q_kind[q])]
            p = int(self.q_person[q])
            name = f"{self.first[p]} {self.last[p]}" if use_full[i] else self.first[p]
            option = self.q_values[q][stated[i]] if kind.open else kind.options[stated[i]]
            phrase = kind.phrases.get(option, option)
            when = moments[i]
            stamp = f"({MONTHS[when.month - 1]} {when.day})"
            if o[i] > 0.5:
                body = kind.one_off.format(name=name, option=phrase)
                text = f"{OPENERS[opener[i]]}{body} {stamp}"
            elif u[i] > 0.5:
                text = f"{OPENERS[opener[i]]}{name} said something about {kind.topic}, not sure what exactly {stamp}"
            else:
                body = kind.lasting.format(name=name, option=phrase)
                text = f"{OPENERS[opener[i]]}{body}{CLOSERS[closer[i]]} {stamp}"
            if assistant[i]:
                text = f"Assistant note: {text} (to check)"
            text = text[0].upper() + text[1:]
            key, base, extra = text_key(text), text, 2
            while key in used:
                text = f"{base} #{extra}"
                key, extra = text_key(text), extra + 1
            used.add(key)
            out.append(text)
        return out

    # ------------------------------------------------------------------ assembly
    def run(self) -> World:
        cfg = self.cfg
        self.kinds()
        self.people()
        self.sources()
        self.timelines()
        self.messages()
        self.readings()
        self.copies()
        self.settlements()

        # stream messages: originals then copies, in time order; ids follow that order
        n_orig, n_copy = self.m_q.size, self.c_orig.size
        all_t = np.concatenate([self.m_t, self.c_t])
        all_src = np.concatenate([self.m_leaf, self.c_leaf])
        all_orig = np.concatenate([np.arange(n_orig), self.c_orig])
        is_copy = np.concatenate([np.zeros(n_orig, bool), np.ones(n_copy, bool)])
        fwd = np.concatenate([np.zeros(n_orig, bool), self.c_fwd])
        order = np.lexsort((np.arange(all_t.size), all_t))
        position = np.empty_like(order)
        position[order] = np.arange(order.size)
        message_ids = [f"m{i:06d}" for i in range(order.size)]
        texts = self.texts(np.arange(n_orig))

        # reading rows: each original's rows, plus a copy of them for every copy
        rows_of = np.argsort(self.reading_msg, kind="stable")
        row_bounds = np.searchsorted(self.reading_msg[rows_of], np.arange(n_orig + 1))
        copy_rows = [rows_of[row_bounds[o]:row_bounds[o + 1]] for o in self.c_orig.tolist()]
        copy_row_src = np.concatenate(copy_rows) if copy_rows else np.zeros(0, dtype=np.int64)
        copy_row_msg = np.repeat(n_orig + np.arange(n_copy), [len(r) for r in copy_rows]).astype(np.int64)
        row_src = np.concatenate([np.arange(self.reading_msg.size), copy_row_src])  # which generated row's content
        row_msg = np.concatenate([self.reading_msg, copy_row_msg])  # stream message (0..n_orig+n_copy)
        role = np.concatenate([self.reading_role, np.full(copy_row_src.size, "copy", dtype=object)])
        row_order = np.lexsort((role != "main", position[row_msg]))
        row_src, row_msg, role = row_src[row_order], row_msg[row_order], role[row_order]

        # planted campaigns (in-stream): after the world exists so the records use World helpers
        world = World(config=cfg, records=[], record_days=np.zeros(0), truth=None,  # type: ignore[arg-type]
                      primary_reader=max(cfg.readers, key=lambda r: r.share).name)
        world.truth = self.truth(world_ids=message_ids, position=position, all_src=all_src, row_src=row_src,
                                 row_msg=row_msg, role=role, all_t=all_t)
        planted_records, planted_days, campaigns = self.campaigns(world)
        world.truth.campaigns = campaigns
        world.truth.planted_sources = {c for camp in campaigns for c in camp.sources}
        told_records, told_days, world.change_reports, told_truth = self.change_reports(world)

        self.used_leaves = np.unique(all_src)
        records, days = self.definitions(campaign_sources=[r for r in planted_records + told_records
                                                           if r["type"] == "source"])
        # events: messages (each followed by its readings), settlements and planted claims, by time
        iso = np.datetime_as_string(np.datetime64(self.start, "s") + all_t[order].astype("timedelta64[s]"), unit="s")
        sorted_src = all_src[order].tolist()
        sorted_orig = all_orig[order].tolist()
        sorted_fwd = fwd[order].tolist()
        row_bounds_stream = np.searchsorted(position[row_msg], np.arange(order.size + 1))
        probs_rows = self.reading_probs[row_src]
        probs_list = probs_rows.tolist()
        unclear = self.reading_unclear[row_src].tolist()
        unrelated = self.reading_unrelated[row_src].tolist()
        one_off = self.reading_o[row_src].tolist()
        row_q = self.reading_q[row_src].tolist()
        row_reader = self.m_reader[self.reading_msg[row_src]].tolist()
        reader_names = [r.name for r in cfg.readers]
        reader_versions = [r.version for r in cfg.readers]
        q_options = self.question_options()

        event_records: list[tuple[int, int, int, list[dict]]] = []  # (time, tiebreak, seq, records)
        for j in range(order.size):
            text = texts[sorted_orig[j]]
            if sorted_fwd[j]:
                text = f"Fwd: {text}"
            chunk = [{"type": "message", "id": message_ids[j], "source": self.source_ids[sorted_src[j]],
                      "sent_at": iso[j] + "Z", "text": text}]
            for r in range(row_bounds_stream[j], row_bounds_stream[j + 1]):
                q = row_q[r]
                options = q_options[q]
                chunk.append({"type": "reading", "message": message_ids[j], "question": self.q_ids[q],
                              "reader": reader_names[row_reader[r]], "reader_version": reader_versions[row_reader[r]],
                              "probs": dict(zip(options, probs_list[r][: len(options)])),
                              "unclear": unclear[r], "unrelated": unrelated[r], "one_off": one_off[r]})
            event_records.append((int(all_t[order[j]]), 0, j, chunk))
        s_iso = np.datetime_as_string(np.datetime64(self.start, "s") + self.s_t.astype("timedelta64[s]"), unit="s")
        for i, (q, a) in enumerate(zip(self.s_q.tolist(), self.s_answer.tolist())):
            event_records.append((int(self.s_t[i]), 1, i, [{"type": "settlement", "question": self.q_ids[q],
                                                            "answer": q_options[q][a], "at": s_iso[i] + "Z",
                                                            "how": self.s_how[i]}]))
        claim_chunks: list[list[dict]] = []
        for rec in planted_records:
            if rec["type"] == "message":
                claim_chunks.append([rec])
            elif rec["type"] == "reading":
                claim_chunks[-1].append(rec)
        for i, (chunk, day) in enumerate(zip(claim_chunks, planted_days)):
            event_records.append((int(round(day * SECONDS_PER_DAY)), 2, i, chunk))
        told_chunks = [told_records[i + 1:i + 3] for i in range(0, len(told_records), 3)]  # (message, reading)
        for i, (chunk, day) in enumerate(zip(told_chunks, told_days)):
            event_records.append((int(round(day * SECONDS_PER_DAY)), 3, i, chunk))
        event_records.sort(key=lambda e: (e[0], e[1], e[2]))
        for t, _, _, chunk in event_records:
            records.extend(chunk)
            days.extend([t / SECONDS_PER_DAY] * len(chunk))
        if self.q_open.any():  # open questions: option_added records, readings over the values listed then
            records, days = self.open_records(world, records, days,
                                              *self.open_names(message_ids, position, row_src, row_msg, campaigns))
        world.records = records
        world.record_days = np.asarray(days, dtype=float)
        self.add_planted_truth(world, claim_chunks, planted_days, told_truth)
        return world

    def definitions(self, campaign_sources: list[dict]) -> tuple[list[dict], list[float]]:
        cfg = self.cfg
        records: list[dict] = []
        for p, pid in enumerate(self.person_ids):
            rec = {"type": "subject", "id": pid, "name": f"{self.first[p]} {self.last[p]}", "aliases": []}
            if p < len(ALIASES):
                rec["aliases"] = [ALIASES[p]]
            records.append(rec)
        for a, b, kind in self.relations:
            records.append({"type": "relation", "from": self.person_ids[a], "to": self.person_ids[b], "kind": kind})
        for i in self.used_leaves.tolist():  # a source nobody heard from is not in the store
            sid = self.source_ids[i]
            rec = {"type": "source", "id": sid, "layers": list(self.source_layers[i])}
            if sid in self.stated_trust:
                rec["trust"] = self.stated_trust[sid]
            records.append(rec)
        records.extend(campaign_sources)
        for q, qid in enumerate(self.q_ids):
            kind = cfg.kinds[int(self.q_kind[q])]
            p = int(self.q_person[q])
            records.append({"type": "question", "id": qid, "subject": self.person_ids[p], "kind": kind.name,
                            "text": kind.text.format(name=self.first[p]), "shape": kind.shape,
                            "options": list(kind.options), **self.open_question_fields(q)})
        return records, [-math.inf] * len(records)

    def campaigns(self, world: World) -> tuple[list[dict], list[float], list[PlantedCampaign]]:
        cfg, rng = self.cfg, self.r_planted
        records: list[dict] = []
        days: list[float] = []
        campaigns: list[PlantedCampaign] = []
        n_q = len(self.q_ids)
        for c in range(cfg.planted.campaigns):
            q = int(rng.integers(0, n_q))
            t = int(rng.integers(int(0.05 * self.horizon), int(0.95 * self.horizon)))
            k = int(self.q_k[q])
            true = int(self.answer(np.array([q]), np.array([t]))[0])
            wrong = (true + 1 + int(rng.integers(0, k - 1))) % k
            size = 1 + int(rng.poisson(cfg.planted.burst_mean - 1.0))
            offsets = np.sort(rng.integers(0, int(cfg.planted.window_hours * 3600), size=size))
            offsets = np.minimum(t + offsets, self.horizon - 1)
            claim_days = (offsets / SECONDS_PER_DAY).tolist()
            recs, sources, messages = _planted_claims(world, self.q_ids[q], wrong, claim_days, list(range(size)),
                                                      label=f"campaign-{c}")
            records.extend(recs)
            days.extend(claim_days)
            options = self.question_options()[q]
            campaigns.append(PlantedCampaign(question=self.q_ids[q], day=t / SECONDS_PER_DAY, option=options[wrong],
                                             true_option=options[true], messages=messages, sources=sources))
        return records, days, campaigns

    def change_reports(self, world: World) -> tuple[list[dict], list[float], list[ChangeReport], dict | None]:
        """The ``change_reports`` knob: each true change (a share of them) told by new sources.

        Reporter ``i`` of a change at ``t`` sends one message at ``t + delay + i·spacing`` (kept
        only while inside the run) from a new leaf of a pooled group that talks about the kind
        (drawn by share; with ``venues: distinct`` each reporter of a change from another group
        while there are groups left). Its reliability is drawn as any leaf's, ``logit α = logit
        α_group + σ ε``, and what it states and what the reader reports follow the story
        (:meth:`read`), with ``u`` and ``o`` from the low parts of their mixtures (a clear, lasting
        statement). Its own stream (seeded by the config's seed and this stage's name), so a
        config without the knob gives the same records as before. Returns source, message and
        reading records (three per report), their days, the reports, and their truth rows.
        """
        cfg = self.cfg
        told = cfg.change_reports
        if told is None:
            return [], [], [], None
        rng = np.random.default_rng([cfg.seed, zlib.crc32(b"change_reports")])
        answers = self.answers
        real = np.flatnonzero(answers.real_changes())
        real = real[rng.random(real.size) < told.share]
        if told.kinds is not None:
            reported = np.isin(np.asarray(self.kind_names, dtype=object), told.kinds)
            real = real[reported[self.q_kind[answers.change_q[real]]]]
        offsets = ((told.delay_days + told.spacing_days * np.arange(told.reporters)) * SECONDS_PER_DAY).round()
        groups = cfg.sources.groups
        pooled = (~self.group_assistant & ~self.group_per_subject).astype(float)
        reports: list[ChangeReport] = []
        rows: list[tuple[int, int, int, int]] = []  # (question, second, group, report index)
        for c in real.tolist():
            q, t0 = int(answers.change_q[c]), int(answers.change_t[c])
            times = t0 + offsets.astype(np.int64)
            times = times[times < self.horizon]
            weights = self.kind_group_weights[self.q_kind[q]] * pooled
            if not times.size or weights.sum() <= 0:
                continue
            if told.venues == "one":
                chosen = np.full(times.size, rng.choice(len(groups), p=weights / weights.sum()))
            else:  # weighted draw without replacement, repeating the order once every group has told
                order = rng.choice(len(groups), size=int((weights > 0).sum()), replace=False,
                                   p=weights / weights.sum())
                chosen = order[np.arange(times.size) % order.size]
            reports.append(ChangeReport(question=self.q_ids[q], day=t0 / SECONDS_PER_DAY,
                                        option=cfg.kinds[int(self.q_kind[q])].options[int(answers.change_value[c])],
                                        sources=[], messages=[], days=(times / SECONDS_PER_DAY).tolist()))
            rows += [(q, int(t), int(g), len(reports) - 1) for t, g in zip(times.tolist(), chosen.tolist())]
        if not rows:
            return [], [], reports, None
        q, t, g, r = (np.array(col, dtype=np.int64) for col in zip(*rows))
        n = q.size
        parent = np.array([self.node_logit["/".join(groups[j].layers)] for j in g.tolist()])
        sigma = np.array([_sigma(cfg.sources.sigma_by_depth, len(groups[j].layers) + 1) for j in g.tolist()])
        alpha = sigmoid(parent + sigma * rng.standard_normal(n))
        u = rng.beta(*cfg.reading.unclear.low, size=n)
        o = rng.beta(*cfg.reading.one_off.low, size=n)
        reader = categorical(rng, np.array([[x.share for x in cfg.readers]]), np.zeros(n, dtype=np.int64))
        read = self.read(rng, q, t, alpha, u, o, reader)
        records: list[dict] = []
        paths, messages = [], []
        for i in range(n):
            group, kind = groups[int(g[i])], cfg.kinds[int(self.q_kind[q[i]])]
            report_index = int(r[i])
            source_id = f"{group_prefix(group)}-told-{report_index:05d}-{len(reports[report_index].sources)}"
            message_id = f"{source_id}.m"
            options = kind.options
            stated = options[int(read["stated"][i])]
            first = self.first[int(self.q_person[q[i]])]
            body = kind.lasting.format(name=first, option=kind.phrases.get(stated, stated))
            records += [{"type": "source", "id": source_id, "layers": list(group.layers)},
                        {"type": "message", "id": message_id, "source": source_id, "sent_at": world.iso(t[i] / SECONDS_PER_DAY),
                         "text": f"News: {body}. ({source_id} told me)"},
                        {"type": "reading", "message": message_id, "question": self.q_ids[int(q[i])],
                         "reader": cfg.readers[int(reader[i])].name, "reader_version": cfg.readers[int(reader[i])].version,
                         "probs": dict(zip(options, read["probs"][i, :len(options)].tolist())),
                         "unclear": float(read["unclear"][i]), "unrelated": float(read["unrelated"][i]),
                         "one_off": float(o[i])}]
            reports[report_index].sources.append(source_id)
            reports[report_index].messages.append(message_id)
            paths.append("/".join([*group.layers, source_id]))
            messages.append(message_id)
            counts = world.truth.node_messages
            for d in range(1, len(group.layers) + 2):  # the reporter's message counts on every node above it
                node = "/".join([*group.layers, source_id][:d])
                counts[node] = counts.get(node, 0) + 1
        truth_rows = {
            "message": np.array(messages, dtype=object),
            "question": np.array(self.q_ids, dtype=object)[q],
            "source": np.array([p.rsplit("/", 1)[-1] for p in paths], dtype=object),
            "path": np.array(paths, dtype=object),
            "day": t / SECONDS_PER_DAY,
            "role": np.full(n, "change_report", dtype=object),
            "assistant": np.zeros(n, dtype=bool),
            "n_options": self.q_k[q],
            "reader": np.array([x.name for x in cfg.readers], dtype=object)[reader],
            "answer": read["truth"],
            "stated": read["stated"],
            "noise": read["noise"],
            "u": u,
            "o": o,
            "alpha": alpha,
        }
        return records, (t / SECONDS_PER_DAY).tolist(), reports, truth_rows

    def truth(self, *, world_ids: list[str], position: np.ndarray, all_src: np.ndarray, row_src: np.ndarray,
              row_msg: np.ndarray, role: np.ndarray, all_t: np.ndarray) -> WorldTruth:
        cfg = self.cfg
        questions = {
            qid: {"subject": self.person_ids[int(self.q_person[q])], "kind": self.kind_names[int(self.q_kind[q])],
                  "options": list(self.question_options()[q]),
                  "first_name": self.first[int(self.q_person[q])], **self.open_truth_fields(q)}
            for q, qid in enumerate(self.q_ids)
        }
        answers = self.answers
        bounds = answers.bounds()
        change_times = {qid: answers.change_t[bounds[q]:bounds[q + 1]] / SECONDS_PER_DAY
                        for q, qid in enumerate(self.q_ids)}
        change_values = {qid: answers.change_value[bounds[q]:bounds[q + 1]].copy() for q, qid in enumerate(self.q_ids)}
        node_trust = {node: float(sigmoid(x)) for node, x in self.node_logit.items()}
        node_trust.update({p: float(sigmoid(x)) for p, x in zip(self.source_paths, self.source_logit.tolist())})
        node_logit = dict(self.node_logit)
        node_logit.update(dict(zip(self.source_paths, self.source_logit.tolist())))
        node_depth = dict(self.node_depth)
        node_depth.update({p: p.count("/") + 1 for p in self.source_paths})
        per_leaf = np.bincount(all_src, minlength=len(self.source_ids))
        node_messages: dict[str, int] = {}
        for path, count in zip(self.source_paths, per_leaf.tolist()):
            parts = path.split("/")
            for d in range(1, len(parts) + 1):
                key = "/".join(parts[:d])
                node_messages[key] = node_messages.get(key, 0) + count
        reader_names = np.array([r.name for r in cfg.readers], dtype=object)
        msg_of_row = self.reading_msg[row_src]
        leaf = all_src[row_msg]
        n_q_opts = self.q_k[self.reading_q[row_src]]
        readings = ReadingTruth(
            message=np.array(world_ids, dtype=object)[position[row_msg]],
            question=np.array(self.q_ids, dtype=object)[self.reading_q[row_src]],
            source=np.array(self.source_ids, dtype=object)[leaf],
            path=np.array(self.source_paths, dtype=object)[leaf],
            day=all_t[row_msg] / SECONDS_PER_DAY,
            role=role,
            assistant=self.group_assistant[self.source_group[leaf]],
            n_options=n_q_opts,
            reader=reader_names[self.m_reader[msg_of_row]],
            answer=self.answer(self.reading_q[row_src], all_t[row_msg]),  # a copy: the truth when it was forwarded
            stated=self.reading_stated[row_src],
            noise=self.reading_noise[row_src],
            u=self.reading_u[row_src],
            o=self.reading_o[row_src],
            alpha=self.reading_alpha[row_src],
        )
        return WorldTruth(
            start=self.start,
            days=float(cfg.days),
            questions=questions,
            change_times=change_times,
            change_values=change_values,
            initial={qid: int(answers.initial[q]) for q, qid in enumerate(self.q_ids)},
            prior={k: self.prior[i, : self.k_of_kind[i]].tolist() for i, k in enumerate(self.kind_names)},
            change_rate={k: float(self.rate[i]) for i, k in enumerate(self.kind_names)},
            kind_options={k.name: list(k.options) for k in cfg.kinds},
            node_trust=node_trust,
            node_logit=node_logit,
            node_depth=node_depth,
            node_messages=node_messages,
            sigma_by_depth=list(cfg.sources.sigma_by_depth),
            root_trust=cfg.sources.root_trust,
            reader_temperature={r.name: r.temperature for r in cfg.readers},
            reader_beta={r.name: r.beta for r in cfg.readers},
            planted_sources=set(),
            campaigns=[],
            settled_questions={qid for q, qid in enumerate(self.q_ids) if self.settled[q]},
            readings=readings,
            favourite={self.source_ids[i]: {kind.name: kind.options[int(self.favourite[i, k])]
                                            for k, kind in enumerate(cfg.kinds)}
                       for i in np.flatnonzero(self.source_bias > 0).tolist()},
            compromised={self.source_ids[i]: (float(self.compromised_from[i] / SECONDS_PER_DAY),
                                              float(sigmoid(self.compromised_logit[i])))
                         for i in np.flatnonzero(np.isfinite(self.compromised_from)).tolist()},
        )

    def add_planted_truth(self, world: World, chunks: list[list[dict]], days: list[float],
                          told: dict[str, np.ndarray] | None = None) -> None:
        """Append the planted claims' readings (and the reported changes' rows ``told``) to
        ``truth.readings`` and re-align it with the stream."""
        t = world.truth
        if told is not None and len(told["message"]):
            t.readings = ReadingTruth(**{name: np.concatenate([getattr(t.readings, name), told[name]])
                                         for name in told})
        by_message = {c.messages[i]: c for c in t.campaigns for i in range(len(c.messages))}
        rows = [(chunk[1], day) for chunk, day in zip(chunks, days)]
        if rows:
            planted_layers = "/".join(self.cfg.planted.layers)
            extra = {
                "message": np.array([r["message"] for r, _ in rows], dtype=object),
                "question": np.array([r["question"] for r, _ in rows], dtype=object),
                "source": np.array([r["message"][:-2] for r, _ in rows], dtype=object),
                "path": np.array([f"{planted_layers}/{r['message'][:-2]}" for r, _ in rows], dtype=object),
                "day": np.array([d for _, d in rows], dtype=float),
                "role": np.full(len(rows), "planted", dtype=object),
                "assistant": np.zeros(len(rows), dtype=bool),
                "n_options": np.array([len(r["probs"]) for r, _ in rows], dtype=np.int64),
                "reader": np.array([r["reader"] for r, _ in rows], dtype=object),
                "answer": np.array([t.answer_index_at(r["question"], d) for r, d in rows], dtype=np.int64),
                "stated": np.array([t.questions[r["question"]]["options"].index(by_message[r["message"]].option)
                                    for r, _ in rows], dtype=np.int64),
                "noise": np.zeros(len(rows), dtype=bool),
                "u": np.array([r["unclear"] + r["unrelated"] for r, _ in rows], dtype=float),
                "o": np.array([r["one_off"] for r, _ in rows], dtype=float),
                "alpha": np.full(len(rows), np.nan),
            }
            merged = {name: np.concatenate([getattr(t.readings, name), extra[name]]) for name in extra}
        else:
            merged = {name: getattr(t.readings, name) for name in ReadingTruth.__dataclass_fields__}
        # stream order of reading records: index each reading record by (message id, question)
        key = [f"{m}\x1f{q}" for m, q in zip(merged["message"].tolist(), merged["question"].tolist())]
        where = {k: i for i, k in enumerate(key)}
        stream = [where[f"{r['message']}\x1f{r['question']}"] for r in world.records if r["type"] == "reading"]
        idx = np.asarray(stream, dtype=np.int64)
        t.readings = ReadingTruth(**{name: merged[name][idx] for name in merged})
        counts = t.node_messages
        for chunk in chunks:
            path = f"{'/'.join(self.cfg.planted.layers)}/{chunk[0]['source']}"
            parts = path.split("/")
            for d in range(1, len(parts) + 1):
                node = "/".join(parts[:d])
                counts[node] = counts.get(node, 0) + 1


def generate_world(config: WorldConfig) -> World:
    """Draw a world from ``config``; the same config (seed included) gives the same world."""
    return _Generator(config).run()
