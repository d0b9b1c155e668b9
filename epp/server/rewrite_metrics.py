"""The model-rewrite decision counter: ``llm_d_epp_model_rewrite_decisions_total`` and GIE's
``inference_extension_model_rewrite_decisions_total`` (labels ``model_rewrite_name``, ``model_name``,
``target_model``), one increment per InferenceModelRewrite decision, as upstream's
``RecordInferenceModelRewriteDecision``.

The rewrite name and target come from the configured objects; the client's model name is bounded as the
request families bound it: at most :data:`~epp.server.metrics.LABEL_CAP` distinct values, later ones
reported as ``other`` (a generic rule matches any name). Bound recorders are cached, at most
:data:`~epp.server.metrics.CHILD_CACHE_BUDGET` of them.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from epp.admission.rewrites import RewriteDecision
from epp.server.metric_catalog import Naming, by_key
from epp.server.metric_twin import Recorder, Twin
from epp.server.metrics import CHILD_CACHE_BUDGET, LABEL_CAP, OVERFLOW

__all__ = ["RewriteMetrics"]


class RewriteMetrics:
    """``metrics(decision)`` counts one decision (the ``on_decision`` of a ModelRewriter)."""

    __slots__ = ("_children", "_models", "_twin")

    def __init__(self, registry: CollectorRegistry, naming: Naming = Naming.BOTH) -> None:
        self._twin = Twin(by_key("model_rewrite_decisions"), naming, registry)
        self._children: dict[tuple[str, str, str], Recorder] = {}
        self._models: set[str] = set()

    def _model(self, model: str) -> str:
        if model in self._models:
            return model
        if len(self._models) >= LABEL_CAP:
            return OVERFLOW
        self._models.add(model)
        return model

    def __call__(self, decision: RewriteDecision) -> None:
        key = (decision.rewrite_name, decision.model, decision.target)
        child = self._children.get(key)
        if child is None:
            labels = {
                "model_rewrite_name": decision.rewrite_name,
                "model_name": self._model(decision.model),
                "target_model": decision.target,
            }
            child = self._twin.bind(labels)
            if len(self._children) < CHILD_CACHE_BUDGET:
                self._children[key] = child
        child.inc()
