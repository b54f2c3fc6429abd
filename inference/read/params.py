"""The published parameter document: what the nightly fit writes and every read uses.

A version is one JSON document in the ``params`` table (``body`` column), typed and
versioned by :class:`doxa.data.params_document.ParamsDocument` (its fields are described
there): the store checks it when it is published, :func:`with_defaults` when it is read
(``Memory.params`` and the scorer both go through it), and a malformed one is refused with a
:class:`ParamsDocumentError` naming the field. The scorer and the lookups read the typed
document, which :func:`typed` makes of a JSON one (once: the checked dict carries it). Here are
the lookups the scorer and the fit share: a source's trust (its deepest fitted node, else the user's stated trust, else the
default of its top layer), confusion matrices, base rates, change rates and temperatures.

Until a version is published, :func:`default_params` applies: the user's stated
``trust`` for a source where given, else a default by the top layer of its path;
uniform priors; a slow change rate (half-life two years); reader temperature 1.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from doxa.data.params_document import ParamsDocument
    from doxa.data.store import Store

# doxa.data.params_document (the contract's type) is imported where a document is built or checked:
# a belief served from what reads keep beside the store needs neither, and its start-up counts

#: Trust by the most general layer when nothing was fitted and the user stated none.
#: First-hand people are trusted most (a person about themself), the user's own notes
#: about others less, businesses and the web least.
#:
#: Every default lies above 1/2, so above chance (1/K) on every question (K ≥ 2): each source
#: moves the belief toward what it says. A reading's log-likelihood ratio for the answer it
#: states, ``log(α (K - 1) / (1 - α))``, rises with ``α`` for every K, so the order of the
#: sources is the same on a yes/no question as on one of five options
#: (tests/test_default_trust.py checks both on K = 2, 3, 5). At ``α = 1/2`` a business would count
#: for nothing on a yes/no question while counting on every other.
DEFAULT_TRUST_BY_TOP_LAYER: dict[str, float] = {
    "person": 0.9,
    "user": 0.75,
    "family": 0.8,
    "notes": 0.7,
    "friend": 0.75,
    "business": 0.6,
    "web": 0.6,
    "crowd": 0.7,
}
DEFAULT_TRUST = 0.7
DEFAULT_HALF_LIFE_DAYS = 730.0
DEFAULT_CHANGE_RATE = math.log(2.0) / DEFAULT_HALF_LIFE_DAYS

#: The act threshold: a belief whose top answer has at least this probability is flagged
#: ``act``, else "ask before acting". It is the caller's choice, not fitted, so it lives beside
#: the document rather than in it: acting on the top answer is wrong with probability
#: ``1 - p_top``, and below 0.8 that is more than one time in five. Every reader of it (Memory,
#: ``--act-at`` of the command line, the MCP tools) takes its default from here.
DEFAULT_ACT_AT = 0.8


def default_params() -> dict[str, Any]:
    """The parameter document used before any fit is published."""
    from doxa.data.params_document import FORMAT

    return {
        "format": FORMAT,
        "version": None,
        "trust": {},
        "confusion": {},
        "kinds": {},
        "readers": {},
        "calibration": {"method": "none"},
        "defaults": {
            "change_rate": DEFAULT_CHANGE_RATE,
            "trust": DEFAULT_TRUST,
            "trust_by_top_layer": dict(DEFAULT_TRUST_BY_TOP_LAYER),
        },
        "diagnostics": {},
    }


class CheckedParams(dict):
    """A document :func:`with_defaults` has checked and filled: passed to it again (Memory
    hands the scorer what it read), it is not checked twice. Treat it as read-only: its
    typed form (``document``, what :func:`typed` gives the scorer) was built when it was checked."""

    document: "ParamsDocument"


def typed(params: "ParamsDocument | dict[str, Any]") -> "ParamsDocument":
    """The typed document the scorer and the lookups below read: the one place a JSON document
    (a dict, as the store, the fit and the tests hold it) becomes a :class:`ParamsDocument`,
    checked and filled by :func:`with_defaults` (once: a checked one carries its typed form).
    A :class:`ParamsDocument` is taken as it is."""
    if type(params) is CheckedParams:
        return params.document
    from doxa.data.params_document import ParamsDocument

    if isinstance(params, ParamsDocument):
        return params
    return with_defaults(params).document


def with_defaults(body: dict[str, Any], context: str | None = None) -> dict[str, Any]:
    """The document checked (:class:`ParamsDocument`), with the keys a published one may omit
    filled, so readers never need ``.get`` chains. ``context`` begins the message of an error."""
    if type(body) is CheckedParams:
        return body
    from dataclasses import replace

    from doxa.data.params_document import Defaults, ParamsDocument, ParamsDocumentError

    try:
        document = ParamsDocument.from_dict(body)
    except ParamsDocumentError as err:
        version = body.get("version") if isinstance(body, dict) else None
        raise err.within(context or (f"parameter version {version} is malformed" if version
                                     else "parameter document is malformed")) from None
    merged = default_params()
    fallback = dict(merged["defaults"])
    for key, value in body.items():
        if key == "defaults":
            merged["defaults"].update(value or {})
        else:
            merged[key] = value
    checked = CheckedParams(merged)
    # the typed form, filled as the dict is: a default stands for each field the document leaves out
    given = body.get("defaults") or {}
    checked.document = replace(document, defaults=Defaults(**{
        name: getattr(document.defaults, name) if name in given else value for name, value in fallback.items()}))
    return checked


def published(store: "Store") -> dict[str, Any]:
    """The document every read of ``store`` uses: its newest published version, checked and filled
    (:func:`with_defaults`), else :func:`default_params`. A read session of its own unless one is open."""
    version, body = store.latest_params()
    if body is None:
        return default_params()
    return with_defaults(body, f"published parameter version {version} is malformed (`doxa train` publishes "
                               "a new one)")


def node_chain(path: str) -> list[str]:
    """``a/b/c`` → ``["a/b/c", "a/b", "a"]``: a source's nodes, most specific first."""
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(len(parts), 0, -1)]


# Each lookup takes the typed document (a dict is typed once by :func:`typed`; a caller with many
# lookups to make types it first).
def trust_for_source(params: "ParamsDocument | dict[str, Any]", path: str, stated: float | None) -> tuple[float, str]:
    """The reliability ``α`` a source gets, and the node (or rule) it came from.

    Fitted nodes win (deepest first). Without a fitted node: the user's stated trust,
    else the default for the top layer.
    """
    doc = typed(params)
    fitted = doc.trust
    for node in node_chain(path):
        entry = fitted.get(node)
        if entry is not None:
            return float(entry.mean), node
    if stated is not None and not math.isnan(stated):
        return float(stated), "stated"
    top = path.split("/", 1)[0]
    by_layer = doc.defaults.trust_by_top_layer
    if top in by_layer:
        return float(by_layer[top]), f"default:{top}"
    return float(doc.defaults.trust), "default"


def confusion_for_source(params: "ParamsDocument | dict[str, Any]", path: str, kind: str, n_options: int):
    """The fitted confusion matrix for (source, kind) (K rows of K probabilities), or ``None``
    (then ``α`` is used)."""
    table = typed(params).confusion
    if not table:
        return None, None
    for node in node_chain(path):
        per_kind = table.get(node)
        if per_kind and kind in per_kind:
            matrix = per_kind[kind]
            if len(matrix) == n_options:
                return matrix, node
    return None, None


def kind_prior(params: "ParamsDocument | dict[str, Any]", kind: str, options: list[str]) -> list[float]:
    """Base rates ``π_k`` over ``options`` (uniform when the kind was not fitted on them)."""
    entry = typed(params).kinds.get(kind)
    if entry is not None and list(entry.options) == list(options):
        prior = [float(p) for p in entry.prior]
        total = sum(prior)
        if total > 0:
            return [p / total for p in prior]
    return [1.0 / len(options)] * len(options)


#: θ before a fit: a question with ``n`` named values holds back ``θ/(n+θ)`` for a value not yet named.
DEFAULT_NEW_VALUE_WEIGHT = 1.0


def new_value_weight(params: "ParamsDocument | dict[str, Any]", kind: str) -> float:
    """θ of the kind's open questions (docs/design.md §2): fitted, else :data:`DEFAULT_NEW_VALUE_WEIGHT`."""
    entry = typed(params).kinds.get(kind)
    if entry is not None and entry.new_value_weight is not None:
        return float(entry.new_value_weight)
    return DEFAULT_NEW_VALUE_WEIGHT


def open_prior(params: "ParamsDocument | dict[str, Any]", kind: str, n_named: int) -> list[float]:
    """Base rates of an open question with ``n_named`` values listed, then ``unlisted``: the
    Chinese-restaurant predictive with each named value counted once,
    ``π_v = 1/(n+θ)``, ``π_unlisted = θ/(n+θ)``."""
    theta = new_value_weight(params, kind)
    return [1.0 / (n_named + theta)] * n_named + [theta / (n_named + theta)]


def kind_change_rate(params: "ParamsDocument | dict[str, Any]", kind: str) -> float:
    """``λ_k`` in changes per day."""
    doc = typed(params)
    entry = doc.kinds.get(kind)
    if entry is not None and entry.change_rate is not None:
        return float(entry.change_rate)
    return float(doc.defaults.change_rate)


def reader_temperature(params: "ParamsDocument | dict[str, Any]", reader: str) -> float:
    entry = typed(params).readers.get(reader)
    if entry is not None and entry.temperature:
        return float(entry.temperature)
    return 1.0
