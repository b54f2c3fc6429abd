"""The params document as a typed, versioned structure: what the nightly job publishes into
the ``params`` table and every read scores with.

The store checks a document when it is published (:meth:`doxa.data.store.Store.publish_params`)
and the read side when it is read (:func:`doxa.inference.read.params.with_defaults`, which
:meth:`Memory.params` and the scorer call), so a malformed one is refused at either end with
a :class:`ParamsDocumentError` that names the field. The lookups that read it (trust by
node, base rates, change rates, temperatures) and the defaults before the first fit are in
:mod:`doxa.inference.read.params`.

Fields (JSON; every one but ``format`` and ``version`` may be left out, and then means
"nothing fitted"):

``format``       int, :data:`FORMAT` — the layout of the document; one published before the
                 layout was numbered reads as 1. A larger number was written by a newer doxa.
``version``      int, set by the store when published (``null`` before).
``trust``        ``{node_path: {"mean", "lo", "hi", "n"}}`` — reliability ``α`` in [0, 1] of
                 each node of the source tree (``mean``; ``lo``/``hi`` an interval, ``n`` the
                 messages behind it). A node path is the source's layers joined by ``/``; a
                 leaf is ``<layers>/<source id>``.
``confusion``    ``{node_path: {kind: C}}`` — a K×K row-stochastic matrix
                 ``C[j][c] = P(message states c | truth j)`` for a biased source.
``kinds``        ``{kind: {"options", "prior", "change_rate", "half_life_days",
                 "change_rate_interval", "new_value_weight", "new_value_weight_interval"}}`` —
                 base rates over the options (one non-negative number each; both lists empty
                 for a kind fitted on open questions only), changes per day ``λ ≥ 0``
                 (``null``: not fitted) and ``ln 2 / λ`` (``null`` when ``λ = 0``); for open
                 questions, the weight ``θ > 0`` held back for values not yet named.
``readers``      ``{reader: {"temperature", "lo", "hi"}}`` — ``τ > 0``: ``r̃ ∝ r^(1/τ)``.
``calibration``  ``{"method": "none"}``, ``{"method": "temperature", "temperature": T,
                 "floor": ε}`` (``T > 0``, ε in [0, 1)) or ``{"method": "isotonic", "x": [...],
                 "y": [...]}`` (knots of equal number, ``x`` increasing, ``y`` in [0, 1]).
``defaults``     ``{"change_rate", "trust", "trust_by_top_layer"}`` — what applies where
                 nothing more specific was fitted.
``diagnostics``  free-form facts about the fit (ELBO trace, steps, seconds, calibration report).

No third-party import: this is on the read path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from .errors import StoreError

#: The document layout this doxa writes and reads.
FORMAT = 1
FIELDS = ("format", "version", "trust", "confusion", "kinds", "readers", "calibration", "defaults", "diagnostics")
CALIBRATION_METHODS = ("none", "temperature", "isotonic")


class ParamsDocumentError(StoreError, ValueError):
    """A params document is malformed: ``field`` is where, the message says what and the fix
    (``context`` says which document: the one being published, or a published version)."""

    def __init__(self, field_path: str, problem: str, context: str = "parameter document"):
        super().__init__(f"{context}: {field_path}: {problem}")
        self.field = field_path
        self.problem = problem
        self.context = context

    def within(self, context: str) -> "ParamsDocumentError":
        """The same problem, said of a named document."""
        return ParamsDocumentError(self.field, self.problem, context)


@dataclass(frozen=True)
class TrustEntry:
    mean: float
    lo: float | None = None
    hi: float | None = None
    n: int | None = None


@dataclass(frozen=True)
class KindEntry:
    options: tuple[str, ...]
    prior: tuple[float, ...]
    change_rate: float | None = None
    half_life_days: float | None = None
    change_rate_interval: tuple[float, float] | None = None
    #: θ of the kind's open questions (docs/design.md §2): base rates 1/(n+θ) per named value, θ/(n+θ) unlisted
    new_value_weight: float | None = None
    new_value_weight_interval: tuple[float, float] | None = None


@dataclass(frozen=True)
class ReaderEntry:
    temperature: float | None = None
    lo: float | None = None
    hi: float | None = None


@dataclass(frozen=True)
class Calibration:
    method: str = "none"
    temperature: float | None = None
    floor: float | None = None
    x: tuple[float, ...] = ()
    y: tuple[float, ...] = ()


@dataclass(frozen=True)
class Defaults:
    change_rate: float | None = None
    trust: float | None = None
    trust_by_top_layer: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ParamsDocument:
    format: int = FORMAT
    version: int | None = None
    trust: dict[str, TrustEntry] = field(default_factory=dict)
    confusion: dict[str, dict[str, tuple[tuple[float, ...], ...]]] = field(default_factory=dict)
    kinds: dict[str, KindEntry] = field(default_factory=dict)
    readers: dict[str, ReaderEntry] = field(default_factory=dict)
    calibration: Calibration = field(default_factory=Calibration)
    defaults: Defaults = field(default_factory=Defaults)
    diagnostics: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, body: Any) -> "ParamsDocument":
        """The typed document of a JSON object; :class:`ParamsDocumentError` names the first bad field."""
        body = _mapping(body, "document", ("an object {field: value}",), FIELDS)
        fmt = body.get("format", FORMAT)
        if isinstance(fmt, bool) or not isinstance(fmt, int) or fmt < 1:
            raise ParamsDocumentError("format", f"{fmt!r} is not a document format (a whole number from 1)")
        if fmt > FORMAT:
            raise ParamsDocumentError("format", f"{fmt} was written by a newer doxa (this one reads format "
                                                f"{FORMAT}): upgrade doxa")
        version = body.get("version")
        if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
            raise ParamsDocumentError("version", f"{version!r} is not a version number (a whole number)")
        return cls(
            format=fmt,
            version=version,
            trust={node: _trust(entry, node) for node, entry in _table(body, "trust").items()},
            confusion={node: {kind: _matrix(c, f"confusion[{node!r}][{kind!r}]")
                              for kind, c in _mapping(per_kind, f"confusion[{node!r}]", ("{kind: matrix}",)).items()}
                       for node, per_kind in _table(body, "confusion").items()},
            kinds={kind: _kind(entry, f"kinds[{kind!r}]") for kind, entry in _table(body, "kinds").items()},
            readers={name: _reader(entry, f"readers[{name!r}]") for name, entry in _table(body, "readers").items()},
            calibration=_calibration(body.get("calibration") or {"method": "none"}),
            defaults=_defaults(body.get("defaults") or {}),
            diagnostics=dict(_mapping(body.get("diagnostics") or {}, "diagnostics", ("an object",))),
        )


def _mapping(value: Any, where: str, expected: tuple[str, ...], allowed: tuple[str, ...] | None = None
             ) -> Mapping[str, Any]:
    if not isinstance(value, dict) and not isinstance(value, Mapping):
        raise ParamsDocumentError(where, f"expected {expected[0]}, got {type(value).__name__}")
    for key in value:
        if not isinstance(key, str):
            raise ParamsDocumentError(where, f"key {key!r} is not a string")
        if allowed is not None and key not in allowed:
            raise ParamsDocumentError(f"{where}.{key}" if where != "document" else key,
                                      f"unknown field (known: {', '.join(allowed)})")
    return value


def _table(body: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    return _mapping(body.get(name) or {}, name, ("an object {name: entry}",))


def _number(value: Any, where: str, *, lo: float | None = None, hi: float | None = None, above: float | None = None,
            below: float | None = None, optional: bool = False, infinite: bool = False) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) \
            or (math.isinf(value) and not infinite):
        raise ParamsDocumentError(where, f"{value!r} is not a finite number")
    if (lo is not None and value < lo) or (hi is not None and value > hi) or (above is not None and value <= above) \
            or (below is not None and value >= below):
        rule = " and ".join(f"{sign} {bound:g}" for sign, bound in (("≥", lo), (">", above), ("≤", hi), ("<", below))
                            if bound is not None)
        raise ParamsDocumentError(where, f"{value!r} is out of range: it must be {rule}")
    return float(value)


def _probability(value: Any, where: str, optional: bool = False) -> float | None:
    return _number(value, where, lo=0.0, hi=1.0, optional=optional)


_TRUST_FIELDS = ("mean", "lo", "hi", "n")
_TRUST_KEYS = frozenset(_TRUST_FIELDS)


def _is_unit(value: Any) -> bool:
    return type(value) is float and 0.0 <= value <= 1.0  # NaN fails both comparisons


def _trust(entry: Any, node: str) -> TrustEntry:
    # the one table as large as the source tree: plain entries take this short path
    if type(entry) is dict and entry.keys() <= _TRUST_KEYS and _is_unit(entry.get("mean")) \
            and all(_is_unit(entry[k]) for k in ("lo", "hi") if entry.get(k) is not None) \
            and (entry.get("n") is None or (type(entry["n"]) is int and entry["n"] >= 0)):
        return TrustEntry(entry["mean"], entry.get("lo"), entry.get("hi"), entry.get("n"))
    where = f"trust[{node!r}]"
    entry = _mapping(entry, where, ('{"mean": α, "lo", "hi", "n"}',), _TRUST_FIELDS)
    if "mean" not in entry:
        raise ParamsDocumentError(f"{where}.mean", "missing: a trust entry needs its reliability α in [0, 1]")
    n = entry.get("n")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
        raise ParamsDocumentError(f"{where}.n", f"{n!r} is not a message count (a whole number ≥ 0)")
    return TrustEntry(mean=_probability(entry["mean"], f"{where}.mean"),
                      lo=_probability(entry.get("lo"), f"{where}.lo", optional=True),
                      hi=_probability(entry.get("hi"), f"{where}.hi", optional=True), n=n)


def _matrix(value: Any, where: str) -> tuple[tuple[float, ...], ...]:
    if not isinstance(value, (list, tuple)) or not value:
        raise ParamsDocumentError(where, "expected a K×K matrix (a list of K rows of K probabilities)")
    k = len(value)
    rows = []
    for j, row in enumerate(value):
        if not isinstance(row, (list, tuple)) or len(row) != k:
            raise ParamsDocumentError(f"{where}[{j}]", f"expected a row of {k} probabilities (the matrix is K×K)")
        rows.append(tuple(_probability(p, f"{where}[{j}][{c}]") for c, p in enumerate(row)))
        if abs(math.fsum(rows[-1]) - 1.0) > 1e-6:
            raise ParamsDocumentError(f"{where}[{j}]", f"sums to {math.fsum(rows[-1]):.9g}: each row is "
                                                       "P(states c | truth j) over c and sums to 1")
    return tuple(rows)


def _kind(entry: Any, where: str) -> KindEntry:
    entry = _mapping(entry, where, ('{"options", "prior", "change_rate"}',),
                     ("options", "prior", "change_rate", "half_life_days", "change_rate_interval",
                      "new_value_weight", "new_value_weight_interval"))
    new_value_weight = _number(entry.get("new_value_weight"), f"{where}.new_value_weight", above=0.0, optional=True)
    options = entry.get("options")
    if (not isinstance(options, (list, tuple)) or not all(isinstance(o, str) for o in options)
            or (not options and new_value_weight is None)):
        raise ParamsDocumentError(f"{where}.options", "expected the kind's options, a non-empty list of strings "
                                  "(empty only beside a new_value_weight)")
    prior = entry.get("prior")
    if not isinstance(prior, (list, tuple)) or len(prior) != len(options):
        raise ParamsDocumentError(f"{where}.prior", f"expected {len(options)} base rates, one per option")

    def interval_of(name: str) -> tuple[float, float] | None:
        interval = entry.get(name)
        if interval is None:
            return None
        if not isinstance(interval, (list, tuple)) or len(interval) != 2:
            raise ParamsDocumentError(f"{where}.{name}", "expected [lo, hi]")
        return tuple(_number(x, f"{where}.{name}[{i}]", lo=0.0) for i, x in enumerate(interval))

    interval = interval_of("change_rate_interval")
    return KindEntry(
        new_value_weight=new_value_weight,
        new_value_weight_interval=interval_of("new_value_weight_interval"),
        options=tuple(options),
        prior=tuple(_number(p, f"{where}.prior[{i}]", lo=0.0) for i, p in enumerate(prior)),
        change_rate=_number(entry.get("change_rate"), f"{where}.change_rate", lo=0.0, optional=True),
        half_life_days=_number(entry.get("half_life_days"), f"{where}.half_life_days", above=0.0, optional=True,
                               infinite=True),  # in memory, before publishing writes it as null
        change_rate_interval=interval,
    )


def _reader(entry: Any, where: str) -> ReaderEntry:
    entry = _mapping(entry, where, ('{"temperature": τ}',), ("temperature", "lo", "hi"))
    return ReaderEntry(*(_number(entry.get(name), f"{where}.{name}", above=0.0, optional=True)
                         for name in ("temperature", "lo", "hi")))


def _calibration(value: Any) -> Calibration:
    entry = _mapping(value, "calibration", ('{"method": ...}',), ("method", "temperature", "floor", "x", "y"))
    method = entry.get("method", "none")
    if method not in CALIBRATION_METHODS:
        raise ParamsDocumentError("calibration.method", f"{method!r} is not one of {', '.join(CALIBRATION_METHODS)}")
    if method == "temperature":
        return Calibration(method, temperature=_number(entry.get("temperature"), "calibration.temperature", above=0.0),
                           floor=_number(entry.get("floor"), "calibration.floor", lo=0.0, below=1.0, optional=True))
    if method == "isotonic":
        x, y = entry.get("x"), entry.get("y")
        if not isinstance(x, (list, tuple)) or not isinstance(y, (list, tuple)) or not x or len(x) != len(y):
            raise ParamsDocumentError("calibration.x", "an isotonic map needs knots x and y, as many of each")
        xs = tuple(_probability(v, f"calibration.x[{i}]") for i, v in enumerate(x))
        if any(b <= a for a, b in zip(xs, xs[1:])):
            raise ParamsDocumentError("calibration.x", "the knots must increase")
        return Calibration(method, x=xs, y=tuple(_probability(v, f"calibration.y[{i}]") for i, v in enumerate(y)))
    return Calibration(method)


def _defaults(value: Any) -> Defaults:
    entry = _mapping(value, "defaults", ('{"change_rate", "trust", "trust_by_top_layer"}',),
                     ("change_rate", "trust", "trust_by_top_layer"))
    by_layer = _mapping(entry.get("trust_by_top_layer") or {}, "defaults.trust_by_top_layer", ("{layer: α}",))
    return Defaults(
        change_rate=_number(entry.get("change_rate"), "defaults.change_rate", lo=0.0, optional=True),
        trust=_probability(entry.get("trust"), "defaults.trust", optional=True),
        trust_by_top_layer={layer: _probability(a, f"defaults.trust_by_top_layer[{layer!r}]")
                            for layer, a in by_layer.items()},
    )
