"""In-tree plugins, one per module, grouped by kind.

Layout: ``scorers/``, ``filters/``, ``pickers/``, ``handlers/`` (profile handlers and P/D deciders),
``prefix/`` (the approximate prefix-cache index), ``saturation/`` (saturation detectors),
``response/`` (plugins acting on the response), ``flowcontrol/`` (flow-control policies); ``shared/``
holds helpers several kinds use (in-flight tracking, label selectors), no plugins. Each plugin
module exports its class and a ``factory``; :func:`register_builtin` is the one place that assembles
them into a registry (one line per plugin type).
"""

from __future__ import annotations

from scheduler.registry import Registry

__all__ = ["register_builtin"]


def register_builtin(registry: Registry) -> None:
    """Register every in-tree plugin type. Imports are local so that importing the package is cheap."""
    from scheduler.plugins import request_attributes
    from scheduler.plugins.handlers import single_profile
    from scheduler.plugins.pickers import max_score, random_picker, weighted_random
    from scheduler.plugins.prefix import affinity as prefix_affinity_scorer
    from scheduler.plugins.prefix import producer as prefix_producer
    from scheduler.plugins.prefix import scorer as prefix_scorer
    from scheduler.plugins.response import attribute_reporter
    from scheduler.plugins.scorers import kv_cache_utilization, queue
    from scheduler.plugins.tokens import producer as token_producer

    registry.register("queue-scorer", queue.factory)
    registry.register("kv-cache-utilization-scorer", kv_cache_utilization.factory)
    registry.register_alias("kv-cache-scorer", "kv-cache-utilization-scorer")  # GIE < v1.0 name
    registry.register("prefix-cache-scorer", prefix_scorer.factory)
    registry.register("approx-prefix-cache-producer", prefix_producer.factory)
    registry.register("token-producer", token_producer.factory)
    registry.register("agent-identity", request_attributes.agent_identity_factory)
    registry.register("session-id-producer", request_attributes.session_id_factory)
    registry.register("request-attribute-reporter", attribute_reporter.factory)
    registry.register_alias("tokenizer", "token-producer")  # llm-d-router's deprecated name
    registry.register("prefix-affinity-scorer", prefix_affinity_scorer.factory)  # pyepp's own
    registry.register("max-score-picker", max_score.factory)
    registry.register("random-picker", random_picker.factory)
    registry.register("weighted-random-picker", weighted_random.factory)
    registry.register("single-profile-handler", single_profile.factory)

    # Remaining scorers, filters and saturation detectors.
    from scheduler.plugins.filters import (
        by_label,
        header_testing,
        kv_headroom,
        label_selector,
        legacy,
        lora_fit,
        prefix_affinity,
        ready,
        roles,
    )
    from scheduler.plugins.handlers import disagg, disagg_deciders
    from scheduler.plugins.response import served_verifier
    from scheduler.plugins.saturation import concurrency, utilization
    from scheduler.plugins.scorers import (
        active_request,
        binpack,
        load_aware,
        lora_affinity,
        no_hit_lru,
        running_requests,
        session_affinity,
        spread,
        token_load,
    )
    from scheduler.plugins.shared import inflight_load

    registry.register("running-requests-size-scorer", running_requests.factory)
    registry.register("lora-affinity-scorer", lora_affinity.factory)
    registry.register("load-aware-scorer", load_aware.factory)
    registry.register("active-request-scorer", active_request.factory)
    registry.register("token-load-scorer", token_load.factory)
    registry.register("inflight-load-producer", inflight_load.factory)
    registry.register("session-affinity-scorer", session_affinity.factory)
    registry.register("binpack-scorer", binpack.factory)
    registry.register("spread-scorer", spread.factory)
    registry.register("no-hit-lru-scorer", no_hit_lru.factory)
    registry.register("label-selector-filter", label_selector.factory)
    registry.register("by-label-selector", label_selector.by_label_selector_factory)
    registry.register("by-label", by_label.factory)
    registry.register("ready-filter", ready.factory)
    registry.register("lora-fit-filter", lora_fit.factory)
    registry.register("kv-headroom-filter", kv_headroom.factory)
    registry.register("prefix-cache-affinity-filter", prefix_affinity.factory)
    registry.register("header-based-testing-filter", header_testing.factory)
    registry.register("destination-endpoint-served-verifier", served_verifier.factory)
    registry.register("prefill-filter", roles.prefill_factory)
    registry.register("decode-filter", roles.decode_factory)
    registry.register("encode-filter", roles.encode_factory)
    registry.register("least-queue-filter", legacy.least_queue_factory)
    registry.register("least-kv-cache-filter", legacy.least_kv_factory)
    registry.register("low-queue-filter", legacy.low_queue_factory)
    registry.register("lora-affinity-filter", legacy.lora_affinity_factory)
    registry.register("utilization-detector", utilization.factory)
    registry.register("concurrency-detector", concurrency.factory)
    registry.register("always-disagg-pd-decider", disagg_deciders.always_factory)
    registry.register("prefix-based-pd-decider", disagg_deciders.prefix_based_factory)
    registry.register("always-disagg-multimodal-decider", disagg_deciders.multimodal_factory)
    registry.register("disagg-profile-handler", disagg.factory)

    from scheduler.plugins.handlers import data_parallel, disagg_headers, header_profile, pd_profile

    registry.register("pd-profile-handler", pd_profile.factory)
    registry.register("disagg-headers-handler", disagg_headers.factory)
    registry.register("prefill-header-handler", disagg_headers.prefill_factory)
    registry.register("data-parallel-profile-handler", data_parallel.factory)
    registry.register("header-profile-handler", header_profile.factory)

    from scheduler.plugins.filters import session_affinity as session_affinity_filter
    from scheduler.plugins.scorers import context_length

    registry.register("session-affinity-filter", session_affinity_filter.factory)
    registry.register("multicluster-session-affinity-filter", session_affinity_filter.multicluster_factory)
    registry.register("context-length-aware", context_length.factory)

    from scheduler.plugins.filters import utilization as utilization_filter
    from scheduler.plugins.scorers import header_label_affinity

    registry.register("utilization-filter", utilization_filter.factory)
    registry.register("header-label-affinity-scorer", header_label_affinity.factory)

    from scheduler.plugins.filters import endpoint_attribute as endpoint_attribute_filter
    from scheduler.plugins.scorers import endpoint_attribute

    registry.register("endpoint-attribute-scorer", endpoint_attribute.factory)
    registry.register("endpoint-attribute-filter", endpoint_attribute_filter.factory)

    from scheduler.plugins import admitters

    registry.register("probabilistic-admitter", admitters.factory)

    from scheduler.plugins import topology

    registry.register("topology-extractor", topology.extractor_factory)
    registry.register("topology-affinity-filter", topology.filter_factory)
    registry.register("topology-affinity-scorer", topology.scorer_factory)

    from scheduler.plugins.prefix import p2p_source

    registry.register("p2p-source-producer", p2p_source.factory)

    from scheduler.plugins.precise import producer as precise_producer
    from scheduler.plugins.precise import scorer as precise_scorer

    registry.register("precise-prefix-cache-producer", precise_producer.factory)
    registry.register("precise-prefix-cache-scorer", precise_scorer.factory)

    # GIE's type names from #881 (2025-06) until #1151 (2025-07) renamed them; llm-d-inference-scheduler
    # releases built on GIE in that window shipped configs that use them.
    for old, new in (
        ("prefix-cache", "prefix-cache-scorer"),
        ("max-score", "max-score-picker"),
        ("random", "random-picker"),
        ("single-profile", "single-profile-handler"),
        ("kv-cache", "kv-cache-utilization-scorer"),
        ("queue", "queue-scorer"),
        ("least-KV-cache", "least-kv-cache-filter"),
        ("least-queue", "least-queue-filter"),
        ("lora-affinity", "lora-affinity-filter"),
        ("low-queue", "low-queue-filter"),
    ):
        registry.register_alias(old, new)

    from scheduler.plugins.latency import admitter as latency_admitter
    from scheduler.plugins.latency import producer as latency_producer
    from scheduler.plugins.latency import scorer as latency_scorer
    from scheduler.plugins.latency import tier_filter as latency_tier_filter

    registry.register("predicted-latency-producer", latency_producer.factory)
    registry.register("latency-scorer", latency_scorer.factory)
    registry.register("slo-headroom-tier-filter", latency_tier_filter.factory)
    registry.register("latency-slo-admitter", latency_admitter.factory)

    from scheduler.plugins.flowcontrol import fair_share, fairness, ordering, program_aware, usage_limit

    registry.register("fcfs-ordering-policy", ordering.fcfs_factory)
    registry.register("edf-ordering-policy", ordering.edf_factory)
    registry.register("slo-deadline-ordering-policy", ordering.slo_deadline_factory)
    registry.register("global-strict-fairness-policy", fairness.global_strict_factory)
    registry.register("round-robin-fairness-policy", fairness.round_robin_factory)
    registry.register("program-aware-fairness", program_aware.factory)
    registry.register("fair-share-fairness-policy", fair_share.factory)  # pyepp's own
    registry.register("static-usage-limit-policy", usage_limit.factory)
    registry.register("priority-holdback-policy", usage_limit.priority_holdback_factory)
    registry.register("soft-reflective-ceiling-policy", usage_limit.soft_reflective_factory)
