"""A generated world's config: every knob, validated, with presets (docs/world.md).

:class:`WorldConfig` is a strict pydantic model (unknown fields are refused); its
validator checks what one field cannot (option counts against priors, group prefixes,
trust pins against the source tree's nodes, …) and reports every problem at once, each
naming its field. Presets are JSON files under ``worlds/``; ``{"extends": "default", …}``
merges a config over one (nested dicts merged, ``phrases``/``trust``/``how`` replaced).
:mod:`.world` draws a world from a config.
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .world_names import FIRST_NAMES, LAST_NAMES

WORLDS_DIR = Path(__file__).with_name("worlds")
SETTLEMENT_HOWS = ("correction", "approval", "outcome")


class WorldConfigError(ValueError):
    """A world config was refused; the message names each field and how to fix it."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _check_beta(name: str, params: tuple[float, float]) -> None:
    if len(params) != 2 or params[0] <= 0 or params[1] <= 0:
        raise ValueError(f"{name}: a Beta distribution is [a, b] with a > 0 and b > 0, got {list(params)}")


class BetaMixture(_Strict):
    """With probability ``share_high`` draw from Beta(``high``), else from Beta(``low``)."""

    share_high: float = Field(ge=0.0, le=1.0)
    low: tuple[float, float]
    high: tuple[float, float]


class KindConfig(_Strict):
    """One kind of question (``diet``, ``home_city``, …): questions of one kind share options."""

    name: str = Field(min_length=1, pattern=r"^[a-z0-9_]+$")
    shape: Literal["choice", "yes_no", "scale"] = "choice"
    options: list[str] = Field(min_length=2)
    prior: list[float] | None = None
    half_life_days: float | None = Field(default=None, gt=0.0)
    message_rate: float = Field(gt=0.0, description="messages per question per day, before scaling")
    text: str = Field(description="question text; {name} is the person's first name")
    lasting: str = Field(description="a lasting statement; {name}, {option}")
    one_off: str = Field(description="a one-off statement; {name}, {option}")
    topic: str = Field(description="what the kind is about, for vague messages")
    phrases: dict[str, str] = Field(default_factory=dict, description="option → wording in messages")
    # open kinds (values named as they come: addresses, employers); see world.py, "Open kinds"
    open: bool = Field(default=False, description="an open (value) kind: `options` is a pool each question draws "
                       "its own `slots` values from; its questions list a value when a message first names it")
    slots: int = Field(default=6, ge=2, description="open kinds: the values one question's messages can name (the "
                       "answers it takes over time, and the wrong ones)")
    new_value_weight: float = Field(default=1.0, gt=0.0, description="open kinds: θ of the Chinese restaurant; a "
                                    "change with n values taken so far lands on a new one with θ/(n+θ)")


class PeopleConfig(_Strict):
    count: int = Field(ge=2, le=7000)
    questions_per_person: tuple[int, int]
    activity_shape: float = Field(gt=0.0, description="Gamma shape of a person's chattiness (mean 1)")
    partner_share: float = Field(ge=0.0, le=1.0)
    sibling_share: float = Field(ge=0.0, le=1.0)
    friends_mean: float = Field(ge=0.0)


class TruthConfig(_Strict):
    prior_concentration: float = Field(gt=0.0, description="Dirichlet concentration for unpinned priors")
    change_rate_log_mean: float = Field(description="mean of log λ (per day) for unpinned kinds")
    change_rate_log_sd: float = Field(ge=0.0)


class CompromiseConfig(_Strict):
    """A share of a group's sources turns unreliable on one day (honest, then compromised)."""

    share: float = Field(gt=0.0, le=1.0, description="share of the group's leaves that are compromised")
    day: float = Field(ge=0.0, description="world day from which they state the truth with `trust`")
    trust: float = Field(gt=0.0, lt=1.0, description="their reliability from that day on")


class SourceGroup(_Strict):
    """Leaf sources sharing one layer path."""

    layers: list[str] = Field(min_length=1)
    share: float = Field(ge=0.0, description="relative weight of this group among message senders")
    leaves: Union[int, Literal["per_subject"]] = Field(
        description="number of leaf sources, or per_subject: each person's own source"
    )
    popularity: float = Field(default=1.0, ge=0.0, description="Zipf exponent over leaves")
    prefix: str | None = Field(default=None, description="leaf id prefix (pooled) or suffix (per_subject)")
    kinds: list[str] | None = Field(default=None, description="kinds this group talks about (None: all)")
    bias: float = Field(default=0.0, ge=0.0, le=1.0, description="when wrong, the chance a source states its "
                        "favourite option of the kind (one per source and kind) instead of a uniform other one")
    compromised: CompromiseConfig | None = None
    stated_trust: float | None = Field(default=None, gt=0.0, lt=1.0, description="user-stated trust on every "
                                       "source of the group (instead of sources.stated_trust_share's noisy truth)")


class SourcesConfig(_Strict):
    root_trust: float = Field(gt=0.0, lt=1.0)
    trust: dict[str, float] = Field(default_factory=dict, description="node path → pinned reliability")
    sigma_by_depth: list[float] = Field(min_length=1)
    groups: list[SourceGroup] = Field(min_length=1)
    stated_trust_share: float = Field(default=0.0, ge=0.0, le=1.0)
    stated_trust_noise: float = Field(default=0.5, ge=0.0)


class ReaderConfig(_Strict):
    name: str = Field(min_length=1)
    version: str = ""
    temperature: float = Field(gt=0.0, description="τ: reported r ∝ r̃^τ")
    beta: float = Field(gt=0.0, description="Dirichlet noise: r̃ ~ Dirichlet(β·1 + e_c)")
    share: float = Field(ge=0.0)


class ReadingConfig(_Strict):
    unclear: BetaMixture
    unrelated_fraction: tuple[float, float]
    one_off: BetaMixture
    cross_rate: float = Field(ge=0.0, le=1.0)
    cross_unclear: tuple[float, float]


class CopiesConfig(_Strict):
    rate: float = Field(ge=0.0, le=1.0)
    delay_days: float = Field(gt=0.0)
    fwd_share: float = Field(default=0.5, ge=0.0, le=1.0)


class PlantedConfig(_Strict):
    layers: list[str] = Field(min_length=1)
    prefix: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    campaigns: int = Field(ge=0)
    burst_mean: float = Field(ge=1.0)
    window_hours: float = Field(gt=0.0)


class ChangeReportsConfig(_Strict):
    """Honest changes told by new sources: after a question's true answer changes, ``reporters``
    sources nobody heard from before each send one message about it, ``spacing_days`` apart."""

    share: float = Field(default=1.0, gt=0.0, le=1.0, description="share of the true changes that are reported")
    kinds: list[str] | None = Field(default=None, description="kinds whose changes are reported (None: all)")
    reporters: int = Field(default=3, ge=1, le=50, description="new sources per reported change, one message each")
    delay_days: float = Field(default=0.5, ge=0.0, description="first report this long after the change")
    spacing_days: float = Field(default=1.0, gt=0.0, description="days between one report and the next")
    venues: Literal["distinct", "one"] = Field(
        default="distinct", description="distinct: each reporter from another pooled group (as long as there "
        "are groups that talk about the kind); one: every reporter of a change from one group")


class SettlementsConfig(_Strict):
    rate_per_day: float = Field(ge=0.0)
    question_share: float = Field(ge=0.0, le=1.0)
    how: dict[str, float]
    window_days: tuple[float, float] | None = Field(default=None, description="[from, to] world days: settlements "
                                                   "fall only in this window (None: the whole run)")


class WorldConfig(_Strict):
    """Every knob of a generated world (see docs/world.md)."""

    name: str = "custom"
    seed: int = Field(ge=0)
    start: date
    days: float = Field(gt=0.0)
    message_rate_scale: float = Field(gt=0.0)
    people: PeopleConfig
    truth: TruthConfig
    kinds: list[KindConfig] = Field(min_length=1)
    sources: SourcesConfig
    readers: list[ReaderConfig] = Field(min_length=1)
    reading: ReadingConfig
    copies: CopiesConfig
    planted: PlantedConfig
    settlements: SettlementsConfig
    change_reports: ChangeReportsConfig | None = None

    @model_validator(mode="after")
    def _consistent(self) -> "WorldConfig":
        problems: list[str] = []
        lo, hi = self.people.questions_per_person
        if lo < 1 or hi < lo:
            problems.append("people.questions_per_person: give [min, max] with 1 <= min <= max")
        if self.people.count > len(FIRST_NAMES) * len(LAST_NAMES):
            problems.append(f"people.count: at most {len(FIRST_NAMES) * len(LAST_NAMES)} people have names")
        names = [k.name for k in self.kinds]
        for i, kind in enumerate(self.kinds):
            where = f"kinds[{i}] ({kind.name})"
            if names.count(kind.name) > 1:
                problems.append(f"{where}.name: kind names must be unique")
            if len(set(kind.options)) != len(kind.options):
                problems.append(f"{where}.options: options must be distinct")
            if kind.shape == "yes_no" and sorted(kind.options) != ["no", "yes"]:
                problems.append(f"{where}.options: a yes_no kind has options exactly ['yes', 'no']")
            if kind.prior is not None:
                if len(kind.prior) != len(kind.options):
                    problems.append(
                        f"{where}.prior: has {len(kind.prior)} values for {len(kind.options)} options"
                    )
                elif min(kind.prior) < 0 or sum(kind.prior) <= 0:
                    problems.append(f"{where}.prior: base rates must be >= 0 with a positive sum")
            for template, slots in (("lasting", ("{name}", "{option}")), ("one_off", ("{name}",))):
                text = getattr(kind, template)
                for slot in slots:
                    if slot not in text:
                        problems.append(f"{where}.{template}: the template must contain {slot}")
            unknown = set(kind.phrases) - set(kind.options)
            if unknown:
                problems.append(f"{where}.phrases: {sorted(unknown)} are not options of this kind")
        problems += _open_kind_problems(self)
        lo_q, hi_q = self.people.questions_per_person
        if hi_q > len(self.kinds):
            problems.append(
                f"people.questions_per_person: max {hi_q} exceeds the {len(self.kinds)} kinds (one question per kind)"
            )
        for name, params in (
            ("reading.unclear.low", self.reading.unclear.low),
            ("reading.unclear.high", self.reading.unclear.high),
            ("reading.one_off.low", self.reading.one_off.low),
            ("reading.one_off.high", self.reading.one_off.high),
            ("reading.unrelated_fraction", self.reading.unrelated_fraction),
            ("reading.cross_unclear", self.reading.cross_unclear),
        ):
            try:
                _check_beta(name, params)
            except ValueError as err:
                problems.append(str(err))
        prefixes: dict[str, int] = {}
        for i, group in enumerate(self.sources.groups):
            where = f"sources.groups[{i}] ({'/'.join(group.layers)})"
            for layer in group.layers:
                if "/" in layer or not layer:
                    problems.append(f"{where}.layers: {layer!r} must be non-empty and contain no '/'")
            if isinstance(group.leaves, int) and group.leaves < 1:
                problems.append(f"{where}.leaves: give a count >= 1 or \"per_subject\"")
            if group.kinds is not None:
                unknown = set(group.kinds) - set(names)
                if unknown:
                    problems.append(f"{where}.kinds: unknown kinds {sorted(unknown)}; known: {names}")
            key = group_prefix(group)
            if key in prefixes:
                problems.append(f"{where}.prefix: {key!r} is also used by sources.groups[{prefixes[key]}]")
            prefixes[key] = i
        paths = {"/".join(g.layers[:d]) for g in self.sources.groups for d in range(1, len(g.layers) + 1)}
        paths |= {"/".join(self.planted.layers[:d]) for d in range(1, len(self.planted.layers) + 1)}
        for node, value in self.sources.trust.items():
            if node not in paths:
                problems.append(f"sources.trust[{node!r}]: not a node of any group's layers; known: {sorted(paths)}")
            if not 0.0 < value < 1.0:
                problems.append(f"sources.trust[{node!r}]: reliability must be in (0, 1), got {value}")
        evidence_groups = [g for g in self.sources.groups if g.layers[0] != "assistant" and g.share > 0]
        for kind in names:
            if not any(g.kinds is None or kind in g.kinds for g in evidence_groups):
                problems.append(f"sources.groups: no non-assistant group with share > 0 talks about kind {kind!r}")
        if any(s <= 0 for s in self.sources.sigma_by_depth):
            problems.append("sources.sigma_by_depth: every σ must be > 0")
        if self.planted.layers[0] == "assistant":
            problems.append("planted.layers: planted claims cannot come from assistant notes")
        readers = [r.name for r in self.readers]
        if len(set(readers)) != len(readers):
            problems.append("readers: reader names must be unique")
        if sum(r.share for r in self.readers) <= 0:
            problems.append("readers: at least one reader needs share > 0")
        unknown_how = set(self.settlements.how) - set(SETTLEMENT_HOWS)
        if unknown_how:
            problems.append(f"settlements.how: unknown {sorted(unknown_how)}; use {list(SETTLEMENT_HOWS)}")
        if self.settlements.how and sum(self.settlements.how.values()) <= 0:
            problems.append("settlements.how: shares must have a positive sum")
        if self.settlements.rate_per_day > 0 and not self.settlements.how:
            problems.append("settlements.how: give the share of each kind of settlement")
        if self.settlements.window_days is not None:
            lo_w, hi_w = self.settlements.window_days
            if not 0 <= lo_w < hi_w <= self.days:
                problems.append(f"settlements.window_days: give [from, to] with 0 <= from < to <= days ({self.days})")
        for i, group in enumerate(self.sources.groups):
            if group.compromised is not None and group.compromised.day >= self.days:
                problems.append(f"sources.groups[{i}].compromised.day: {group.compromised.day} is past the run's "
                                f"end (days = {self.days})")
        if self.change_reports is not None and self.change_reports.kinds is not None:
            unknown = set(self.change_reports.kinds) - set(names)
            if unknown:
                problems.append(f"change_reports.kinds: unknown kinds {sorted(unknown)}; known: {names}")
        if self.change_reports is not None and not any(
                g.leaves != "per_subject" for g in evidence_groups):
            problems.append("change_reports: reporters are new sources of a pooled group; give one non-assistant "
                            "group with share > 0 and a number of leaves")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    # ------------------------------------------------------------------ loading
    @classmethod
    def load(cls, path: str | Path) -> "WorldConfig":
        """Read a world config from JSON; errors name the field and how to fix it."""
        path = Path(path)
        try:
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise WorldConfigError(f"no such world config: {path}") from None
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as err:
            raise WorldConfigError(f"{path}: not valid JSON at line {err.lineno}, column {err.colno}: {err.msg}") from None
        return cls.from_dict(data, where=str(path))

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, where: str = "world config") -> "WorldConfig":
        """Validate a config dict; ``{"extends": "default", …}`` overrides a preset's fields."""
        if isinstance(data, dict) and "extends" in data:
            if where.count("<-") >= 4:
                raise WorldConfigError(f"{where}: 'extends' chain is too deep (a cycle?)")
            base_name = data["extends"]
            path = WORLDS_DIR / f"{base_name}.json"
            if not isinstance(base_name, str) or not path.is_file():
                known = sorted(p.stem for p in WORLDS_DIR.glob("*.json"))
                raise WorldConfigError(f"{where}: extends: no preset {base_name!r}; choose one of {known}")
            try:
                raw = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as err:
                raise WorldConfigError(f"{path}: not valid JSON at line {err.lineno}: {err.msg}") from None
            base = cls.from_dict(raw, where=f"{path} <- {where}").model_dump(mode="json")
            data = _deep_merge(base, {k: v for k, v in data.items() if k != "extends"})
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            raise WorldConfigError(_describe(err, where)) from None

    @classmethod
    def preset(cls, name: str) -> "WorldConfig":
        """A shipped world: ``default``, ``quick`` or ``tiny``."""
        path = WORLDS_DIR / f"{name}.json"
        if not path.is_file():
            known = sorted(p.stem for p in WORLDS_DIR.glob("*.json"))
            raise WorldConfigError(f"no world preset {name!r}; choose one of {known} or pass a JSON file")
        return cls.load(path)

    def with_overrides(self, **changes: Any) -> "WorldConfig":
        """A copy with top-level fields replaced (nested dicts are merged), validated again."""
        return type(self).from_dict(_deep_merge(self.model_dump(mode="json"), changes))


def _open_kind_problems(config: "WorldConfig") -> list[str]:
    """What an open kind's fields must satisfy (kept apart from the closed kinds' checks)."""
    problems: list[str] = []
    open_kinds = []
    for i, kind in enumerate(config.kinds):
        if not kind.open:
            continue
        open_kinds.append(kind.name)
        where = f"kinds[{i}] ({kind.name})"
        if kind.shape != "choice":
            problems.append(f"{where}.shape: an open kind has shape 'choice' (its answers are values)")
        if kind.prior is not None:
            problems.append(f"{where}.prior: an open kind has no base rates per option (a change lands on a new "
                            "value with new_value_weight); remove prior")
        if len(kind.options) < kind.slots:
            problems.append(f"{where}.options: the pool has {len(kind.options)} values for {kind.slots} slots per "
                            "question; give at least as many values as slots")
        if "unlisted" in kind.options:
            problems.append(f"{where}.options: 'unlisted' is reserved on open questions (every value not listed yet)")
    told = getattr(config, "change_reports", None)
    if open_kinds and told is not None and (told.kinds is None or set(told.kinds) & set(open_kinds)):
        problems.append(f"change_reports.kinds: reported changes of open kinds ({open_kinds}) are not generated; "
                        "list the closed kinds whose changes are reported")
    return problems


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict) and key not in ("phrases", "trust", "how"):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _describe(err: ValidationError, where: str) -> str:
    lines = []
    for item in err.errors():
        loc = ".".join(str(x) for x in item["loc"]) or "(top level)"
        msg = item["msg"].removeprefix("Value error, ")
        if item["type"] == "missing":
            msg = "missing: add this field (see docs/world.md)"
        elif item["type"] == "extra_forbidden":
            msg = "unknown field: remove it or check the spelling (see docs/world.md)"
        lines.append(f"  {loc}: {msg}")
    return f"{where}: invalid world config:\n" + "\n".join(lines)


def group_prefix(group: SourceGroup) -> str:
    return group.prefix or "-".join(group.layers)
