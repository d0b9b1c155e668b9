"""Upstream-valid corpus files that do not load in pyepp today, grouped by the first error they hit.

Shrink-only: the corpus test marks each entry as a strict xfail, so a file that starts loading fails the
suite until its entry is deleted here; a file missing from this table must load. Regenerate the table
with ``python -m tests.compat.gaps`` (it prints the current failures in this form) and check that the
diff only removes lines. The cause is the first error the loader reports; a file may hit more.

Deliberately different reasons go in ``WRONG_REASON_GROUPS`` (file -> what pyepp rejects it for instead
of upstream's reason); it is empty today: the Go loader's flow-control fixtures
(``errorFlowControlMissingPluginText``, ``errorFlowControlWrongPluginTypeText``) are rejected for the same
policy reference as upstream since flow control landed.
"""

from __future__ import annotations

__all__ = ["KNOWN_GAPS", "WRONG_REASON_GROUPS", "gap_reasons", "wrong_reasons"]

KNOWN_GAPS: dict[str, tuple[str, ...]] = {
    # 1 file(s)
    "data-layer source type multicluster-metrics-data-source": (
        "llm-d-router/pkg.epp.framework.plugins.README.yaml",
    ),
    # 1 file(s)
    "plugin type burst-prefix-cache-producer": (
        "llm-d-router/deploy.config.epp-burst-prefix-cache-config.yaml",
    ),
    # 1 file(s)
    "plugin type disaggregatedset-rollout-screener": (
        "llm-d-router/pkg.epp.framework.plugins.requestcontrol.screener.disaggregatedsetrollout.README.yaml",
    ),
    # 1 file(s)
    "plugin type mm-embeddings-cache-producer": (
        "llm-d-router/deploy.config.epp-mm-embeddings-cache-config.yaml",
    ),
}

WRONG_REASON_GROUPS: dict[str, tuple[str, ...]] = {}


def gap_reasons() -> dict[str, str]:
    """file -> cause, flattened from :data:`KNOWN_GAPS`."""
    return {name: cause for cause, names in KNOWN_GAPS.items() for name in names}


def wrong_reasons() -> dict[str, str]:
    """file -> what pyepp rejects it for instead, flattened from :data:`WRONG_REASON_GROUPS`."""
    return {name: cause for cause, names in WRONG_REASON_GROUPS.items() for name in names}
