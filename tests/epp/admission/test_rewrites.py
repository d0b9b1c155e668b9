"""InferenceModelRewrite matching, precedence and weighted splitting (GIE's modelRewriteStore cases)."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
import structlog

from epp.admission.rewrites import (
    ModelRewrite,
    ModelRewriter,
    RewriteDecision,
    RewriteRule,
    RewriteStore,
    RewriteTarget,
)


def rule(*models: str, targets: tuple[tuple[str, int | None], ...] = (("t", None),)) -> RewriteRule:
    return RewriteRule(models, tuple(RewriteTarget(m, w) for m, w in targets))


def to(target: str, *models: str) -> RewriteRule:
    return rule(*models, targets=((target, None),))


OLD, NEW = 100.0, 200.0

# GIE's pkg/epp/datastore/modelrewritestore_test.go objects
REWRITE_OLD = ModelRewrite("rewrite-old", (to("target-old", "model-a"),), OLD)
REWRITE_NEW = ModelRewrite("rewrite-new", (to("target-new", "model-a"),), NEW)
GENERIC_OLD = ModelRewrite("rewrite-generic-old", (to("generic-old"),), OLD)
GENERIC_NEW = ModelRewrite("rewrite-generic-new", (to("generic-new"),), NEW)


def found(store: RewriteStore, model: str) -> tuple[str, str] | None:
    hit = store.rule_for(model)
    return None if hit is None else (hit[1], hit[0].targets[0].model)


@pytest.mark.parametrize(
    ("case", "rewrites", "model", "want"),
    [
        ("simple exact match", [REWRITE_OLD], "model-a", ("rewrite-old", "target-old")),
        ("simple generic match", [GENERIC_OLD], "model-b", ("rewrite-generic-old", "generic-old")),
        ("no match", [REWRITE_OLD], "model-b", None),
        ("no match is case-sensitive", [REWRITE_OLD], "Model-A", None),
        ("exact wins over generic", [GENERIC_OLD, REWRITE_NEW], "model-a", ("rewrite-new", "target-new")),
        (
            "generic when no exact",
            [REWRITE_OLD, GENERIC_OLD],
            "model-z",
            ("rewrite-generic-old", "generic-old"),
        ),
        ("oldest exact wins", [REWRITE_NEW, REWRITE_OLD], "model-a", ("rewrite-old", "target-old")),
        (
            "oldest generic wins",
            [GENERIC_NEW, GENERIC_OLD],
            "model-a",
            ("rewrite-generic-old", "generic-old"),
        ),
        (
            "equal timestamps: lower name wins",
            [ModelRewrite("b", (to("from-b", "m"),), OLD), ModelRewrite("a", (to("from-a", "m"),), OLD)],
            "m",
            ("a", "from-a"),
        ),
        (
            "within one object: first rule in list order",
            [ModelRewrite("one", (to("first", "m"), to("second", "m"), to("generic")), OLD)],
            "m",
            ("one", "first"),
        ),
        (
            "several matches in one rule: any of them",
            [ModelRewrite("one", (to("x", "m1", "m2"),), OLD)],
            "m2",
            ("one", "x"),
        ),
        ("empty model name matches only a generic rule", [REWRITE_OLD], "", None),
    ],
)
def test_precedence(
    case: str, rewrites: list[ModelRewrite], model: str, want: tuple[str, str] | None
) -> None:
    assert found(RewriteStore(rewrites), model) == want, case


def test_replace_all_swaps_the_set_delete_and_update() -> None:
    store = RewriteStore([REWRITE_OLD, GENERIC_OLD])
    store.replace_all([GENERIC_OLD])  # "Delete": rewrite-old gone, the generic rule applies
    assert found(store, "model-a") == ("rewrite-generic-old", "generic-old")
    updated = ModelRewrite("rewrite-old", (to("target-updated", "model-a"),), NEW)
    store.replace_all([updated, GENERIC_OLD])  # "Update": same name, new rules
    assert found(store, "model-a") == ("rewrite-old", "target-updated")
    assert [r.name for r in store.rewrites] == ["rewrite-generic-old", "rewrite-old"] and len(store) == 2


def test_rule_needs_a_target() -> None:
    with pytest.raises(ValueError, match="at least one target"):
        RewriteRule(("m",), ())


def _counts(rule_: RewriteRule, n: int, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    counts: dict[str, int] = {}
    for _ in range(n):
        target = rule_.pick(rng)
        counts[target] = counts.get(target, 0) + 1
    return counts


@pytest.mark.parametrize(
    "targets",
    [
        (("v1", 90), ("v2", 10)),
        (("a", 1), ("b", 2), ("c", 7)),
        (("a", None), ("b", None), ("c", None)),  # no weights: uniform
        (("only", 1_000_000), ("rare", 1)),
    ],
)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_split_follows_weights(targets: tuple[tuple[str, int | None], ...], seed: int) -> None:
    """Each target's share is within 5 standard deviations of weight/total (binomial), over 20000 draws;
    a fixed seed makes the check deterministic, several seeds keep it from being tuned to one."""
    n = 20_000
    r = rule("m", targets=targets)
    counts = _counts(r, n, seed)
    weights = {m: (w if w is not None else 1) for m, w in targets}
    total = sum(weights.values())
    assert set(counts) <= set(weights)
    for model, weight in weights.items():
        p = weight / total
        bound = 5 * math.sqrt(n * p * (1 - p)) + 1
        assert abs(counts.get(model, 0) - n * p) <= bound, (model, counts)


def test_same_seed_same_sequence() -> None:
    r = rule("m", targets=(("a", 1), ("b", 1)))
    a, b = random.Random(7), random.Random(7)
    assert [r.pick(a) for _ in range(50)] == [r.pick(b) for _ in range(50)]


def test_rewriter_reports_each_decision_and_logs_it() -> None:
    seen: list[RewriteDecision] = []
    store = RewriteStore([ModelRewrite("split", (rule("alias", targets=(("a", 1), ("b", 3))),), OLD)])
    rewriter = ModelRewriter(store, random.Random(0), seen.append)
    with structlog.testing.capture_logs() as logs:
        targets = [rewriter("alias", f"r{i}") for i in range(8)]
        assert rewriter("other", "r9") is None and rewriter("", "r10") is None
    assert set(targets) <= {"a", "b"}
    assert seen == [RewriteDecision("split", "alias", t) for t in targets]  # type: ignore[arg-type]
    lines: list[dict[str, Any]] = [e for e in logs if e["event"] == "model rewrite"]
    assert [(e["request_id"], e["target_model"]) for e in lines] == [
        (f"r{i}", t) for i, t in enumerate(targets)
    ]
    assert all(e["model_rewrite_name"] == "split" and e["model"] == "alias" for e in lines)
    assert all(e["log_level"] == "info" for e in lines)


def test_rewriter_without_log_lines_still_reports() -> None:
    seen: list[RewriteDecision] = []
    store = RewriteStore([ModelRewrite("x", (to("t", "m"),))])
    with structlog.testing.capture_logs() as logs:
        assert ModelRewriter(store, random.Random(0), seen.append, log_decisions=False)("m") == "t"
    assert logs == [] and seen == [RewriteDecision("x", "m", "t")]


def test_rewriter_sees_store_replacements() -> None:
    store = RewriteStore()
    rewriter = ModelRewriter(store, random.Random(0))
    assert rewriter("m") is None
    store.replace_all([ModelRewrite("x", (to("t", "m"),))])
    assert rewriter("m") == "t"
