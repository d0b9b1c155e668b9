"""InferenceModelRewrite: model aliasing and weighted traffic splitting inside a pool (GIE v1alpha2).

An ``InferenceModelRewrite`` (``inference.networking.x-k8s.io/v1alpha2``) holds ordered rules; a rule
matches requests by the ``model`` of the JSON body and sends each to one of its weighted targets::

    spec:
      poolRef: {name: my-pool}
      rules:
      - matches: [{model: {value: food-review}}]     # Exact (the only type); several: any of them
        targets:
        - {modelRewrite: food-review-v1, weight: 90}
        - {modelRewrite: food-review-v2, weight: 10}
      - targets: [{modelRewrite: base-model}]         # no matches: a generic rule, any model

Which rule applies to a model name, as GIE's ``modelRewriteStore.getRule``:

1. a rule with an exact match on the name wins over a generic rule (empty ``matches``);
2. among several, the rule of the oldest object wins (``metadata.creationTimestamp``; on equal
   timestamps, ours: the lower ``metadata.name``);
3. within one object, the first such rule in list order.

No matching rule: the model is left as it is. The match is on the client's model name, exact and
case-sensitive. A target is drawn with probability ``weight / sum(weights)`` (weights 1..1000000; when
no target sets a weight, all are equally likely; mixing set and unset weights is rejected when loaded).

:class:`RewriteStore` holds the current set, swapped whole by the file loader or the Kubernetes watch
(a request sees the old or the new set, never a mix). Its index has one entry per distinct exact model
name in the objects plus one generic rule: bounded by the configured objects, which the operator writes.
:class:`ModelRewriter` is the request-path function: it looks the model up, draws a target with an
injected :class:`random.Random` (seeded in tests), and reports each decision (metric and log line).
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import accumulate

import structlog

__all__ = [
    "MAX_WEIGHT",
    "ModelRewrite",
    "ModelRewriter",
    "RewriteDecision",
    "RewriteRule",
    "RewriteStore",
    "RewriteTarget",
]

MAX_WEIGHT = 1_000_000  # the CRD's maximum for targets[].weight

log = structlog.get_logger("epp.rewrites")


@dataclass(frozen=True, slots=True)
class RewriteTarget:
    """``modelRewrite`` and its ``weight`` (None when the object leaves it unset)."""

    model: str
    weight: int | None = None


@dataclass(frozen=True, slots=True)
class RewriteRule:
    """One rule: ``models`` are its exact matches (empty: generic, matches every model); ``targets`` at
    least one. ``cumulative`` holds the running sums of the effective weights (all 1 when unset)."""

    models: tuple[str, ...]
    targets: tuple[RewriteTarget, ...]
    cumulative: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.targets:
            raise ValueError("a rule needs at least one target")
        weights = [t.weight if t.weight is not None else 1 for t in self.targets]
        object.__setattr__(self, "cumulative", tuple(accumulate(weights)))

    def pick(self, rng: random.Random) -> str:
        """One target model, drawn with probability weight / total."""
        if len(self.targets) == 1:
            return self.targets[0].model
        point = rng.randrange(self.cumulative[-1])
        return self.targets[bisect.bisect_right(self.cumulative, point)].model


@dataclass(frozen=True, slots=True)
class ModelRewrite:
    """One InferenceModelRewrite object: ``created`` is its creationTimestamp in epoch seconds (0 when
    absent), ``pool`` its ``spec.poolRef.name`` ("" when absent, files only)."""

    name: str
    rules: tuple[RewriteRule, ...]
    created: float = 0.0
    pool: str = ""
    namespace: str = ""


@dataclass(frozen=True, slots=True)
class RewriteDecision:
    """A rule applied: the object's ``rewrite_name``, the client's ``model`` and the drawn ``target``."""

    rewrite_name: str
    model: str
    target: str


class RewriteStore:
    """The current InferenceModelRewrite objects, indexed by precedence (see the module docstring)."""

    __slots__ = ("_exact", "_generic", "_rewrites")

    def __init__(self, rewrites: Iterable[ModelRewrite] = ()) -> None:
        self._exact: dict[str, tuple[RewriteRule, str]] = {}
        self._generic: tuple[RewriteRule, str] | None = None
        self._rewrites: tuple[ModelRewrite, ...] = ()
        self.replace_all(rewrites)

    def replace_all(self, rewrites: Iterable[ModelRewrite]) -> None:
        """Swap the whole set at once (a reload or a watch event)."""
        ordered = tuple(sorted(rewrites, key=lambda r: (r.created, r.name)))
        exact: dict[str, tuple[RewriteRule, str]] = {}
        generic: tuple[RewriteRule, str] | None = None
        for rewrite in ordered:  # oldest first: the first rule seen for a name keeps it
            for rule in rewrite.rules:
                if not rule.models:
                    if generic is None:
                        generic = (rule, rewrite.name)
                    continue
                for model in rule.models:
                    exact.setdefault(model, (rule, rewrite.name))
        self._exact, self._generic, self._rewrites = exact, generic, ordered

    def rule_for(self, model: str) -> tuple[RewriteRule, str] | None:
        """The rule that applies to ``model`` and the name of its object, or None."""
        found = self._exact.get(model)
        return found if found is not None else self._generic

    @property
    def rewrites(self) -> tuple[ModelRewrite, ...]:
        """The objects, oldest first."""
        return self._rewrites

    def __len__(self) -> int:
        return len(self._rewrites)


class ModelRewriter:
    """``rewriter(model, request_id) -> target model or None`` for the request path.

    None when no rule matches (or ``model`` is empty). Otherwise every call is a decision: it draws a
    target (which may equal ``model``), calls ``on_decision`` (the metric; its exceptions propagate, it
    must not raise) and, with ``log_decisions`` (the picker sets it from verbosity >= 2, the per-request
    level, as the request line), logs one info line ``model rewrite`` with the request id, the object's
    name, the model and the target. ``rng`` defaults to a :class:`random.Random` seeded from the OS.
    """

    __slots__ = ("_log", "_on_decision", "_rng", "store")

    def __init__(
        self,
        store: RewriteStore,
        rng: random.Random | None = None,
        on_decision: Callable[[RewriteDecision], None] | None = None,
        *,
        log_decisions: bool = True,
    ) -> None:
        self.store = store
        self._rng = rng or random.Random()
        self._on_decision = on_decision
        self._log = log_decisions

    def decide(self, model: str) -> RewriteDecision | None:
        """The decision for ``model`` (no reporting)."""
        if not model:
            return None
        found = self.store.rule_for(model)
        if found is None:
            return None
        rule, name = found
        return RewriteDecision(name, model, rule.pick(self._rng))

    def __call__(self, model: str, request_id: str = "") -> str | None:
        decision = self.decide(model)
        if decision is None:
            return None
        if self._on_decision is not None:
            self._on_decision(decision)
        if self._log:
            log.info(
                "model rewrite",
                request_id=request_id,
                model_rewrite_name=decision.rewrite_name,
                model=decision.model,
                target_model=decision.target,
            )
        return decision.target
