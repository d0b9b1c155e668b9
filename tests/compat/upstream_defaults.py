"""Upstream's default parameters of every plugin type pyepp registers that exists upstream.

Read from the Go source (the citations name file and commit); values are written in pyepp's resolved form
(durations in seconds). Only parameters upstream gives a default value are listed: a parameter whose
default is Go's zero value meaning "unset" (an empty string, a nil pointer or slice) is not.
``test_defaults.py`` builds each plugin with no parameters through the registry and compares its
resolved parameters (what ``epp check-config`` renders) with this table.

Mismatches are listed in :data:`DEFAULT_MISMATCHES` with the reason; that table is shrink-only (the test
fails when a listed parameter starts to match, so its entry must go).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_MISMATCHES", "NOT_UPSTREAM", "REQUIRED", "UPSTREAM_DEFAULTS", "Upstream"]

ROUTER = "llm-d-router@ebab68792"
GIE = "gie@1748e829d116"
_P = "pkg/epp/framework/plugins/"


@dataclass(frozen=True, slots=True)
class Upstream:
    source: str  # repository@commit:file
    defaults: Mapping[str, Any]  # parameter (dotted path for nested ones) -> default


_PRECISE_DEFAULTS = {
    "tokenProcessorConfig.blockSizeTokens": 16,
    "kvEventsConfig.topicFilter": "kv@",
    "kvEventsConfig.concurrency": 4,
    "kvEventsConfig.discoverPods": True,
    "kvEventsConfig.podDiscoveryConfig.socketPort": 5557,
    "speculativeTTL": 2.0,
}

UPSTREAM_DEFAULTS: dict[str, Upstream] = {
    # Scorers
    "active-request-scorer": Upstream(
        f"{ROUTER}:{_P}scheduling/scorer/activerequest/active_request.go (NewActiveRequest)",
        {"idleThreshold": 0, "maxBusyScore": 1.0},
    ),
    "kv-cache-utilization-scorer": Upstream(
        f"{ROUTER}:{_P}scheduling/scorer/kvcacheutilization/kvcache_utilization.go (no parameters)", {}
    ),
    "load-aware-scorer": Upstream(
        f"{ROUTER}:{_P}scheduling/scorer/loadaware/load_aware.go (QueueThresholdDefault)", {"threshold": 128}
    ),
    "lora-affinity-scorer": Upstream(
        f"{ROUTER}:{_P}scheduling/scorer/loraaffinity/lora_affinity.go (no parameters)", {}
    ),
    "no-hit-lru-scorer": Upstream(
        f"{ROUTER}:{_P}scheduling/scorer/nohitlru/no_hit_lru.go (defaultLRUSize)", {"lruSize": 1024}
    ),
    "prefix-cache-scorer": Upstream(
        f"{GIE}:{_P}requestcontrol/dataproducer/approximateprefix/types.go (defaultConfig)",
        {
            "autoTune": True,
            "blockSizeTokens": 16,
            "maxPrefixBlocksToMatch": 256,
            "lruCapacityPerServer": 31250,
        },
    ),
    "queue-scorer": Upstream(f"{ROUTER}:{_P}scheduling/scorer/queuedepth/queue.go (no parameters)", {}),
    "running-requests-size-scorer": Upstream(
        f"{ROUTER}:{_P}scheduling/scorer/runningrequests/runningrequest.go (no parameters)", {}
    ),
    "session-affinity-scorer": Upstream(
        f"{ROUTER}:{_P}scheduling/scorer/sessionaffinity/session_affinity.go (defaultParameters, "
        "EncodedEndpointHeaderConfig.ApplyDefaults)",
        {"strategy": "encoded_endpoint_header", "encodedEndpointHeaderConfig.header": "x-session-token"},
    ),
    "context-length-aware": Upstream(
        f"{ROUTER}:{_P}scheduling/scorer/contextlengthaware/context_length_aware.go "
        "(Factory, DefaultContextLengthLabel)",
        {"label": "llm-d.ai/context-length-range", "enableFiltering": False},
    ),
    "topology-affinity-scorer": Upstream(
        f"{ROUTER}:{_P}scheduling/scorer/topologyaffinity/scorer.go (Factory: no defaulted parameter)", {}
    ),
    "token-load-scorer": Upstream(
        f"{ROUTER}:{_P}scheduling/scorer/tokenload/token_load.go (tokenQueueThresholdDefault)",
        {"queueThresholdTokens": 4194304},
    ),
    # Filters
    "by-label-selector": Upstream(f"{ROUTER}:{_P}scheduling/filter/bylabel/selector.go (no defaults)", {}),
    "label-selector-filter": Upstream(
        f"{ROUTER}:{_P}scheduling/filter/bylabel/selector.go (no defaults)", {}
    ),
    "decode-filter": Upstream(f"{ROUTER}:{_P}scheduling/filter/bylabel/roles.go (no parameters)", {}),
    "prefill-filter": Upstream(f"{ROUTER}:{_P}scheduling/filter/bylabel/roles.go (no parameters)", {}),
    "encode-filter": Upstream(f"{ROUTER}:{_P}scheduling/filter/bylabel/roles.go (no parameters)", {}),
    "header-based-testing-filter": Upstream(
        f"{ROUTER}:{_P}scheduling/test/filter/request_header_based_filter.go (no parameters)", {}
    ),
    "prefix-cache-affinity-filter": Upstream(
        f"{ROUTER}:{_P}scheduling/filter/prefixcacheaffinity/plugin.go (DefaultConfig)",
        {
            "affinityThreshold": 0.8,
            "explorationProbability": 0.0,
            "maxTTFTPenaltyMs": 18000.0,
            "ttftSource": "prefillThroughput",
            "peakPrefillThroughput": 15928.0,
        },
    ),
    "session-affinity-filter": Upstream(
        f"{ROUTER}:{_P}scheduling/filter/sessionaffinity/session_affinity.go (defaultParameters, "
        "EncodedEndpointHeaderConfig.ApplyDefaults)",
        {"strategy": "encoded_endpoint_header", "encodedEndpointHeaderConfig.header": "x-session-token"},
    ),
    "multicluster-session-affinity-filter": Upstream(
        f"{ROUTER}:{_P}scheduling/filter/sessionaffinity/multicluster.go (MultiClusterFactory: "
        "session-affinity-filter's Factory)",
        {"strategy": "encoded_endpoint_header", "encodedEndpointHeaderConfig.header": "x-session-token"},
    ),
    "topology-affinity-filter": Upstream(
        f"{ROUTER}:{_P}scheduling/filter/topologyaffinity/filter.go (Factory)", {"minAffinity": "host"}
    ),
    # Pickers
    "max-score-picker": Upstream(
        f"{ROUTER}:{_P}scheduling/picker/common.go (DefaultMaxNumOfEndpoints)", {"maxNumOfEndpoints": 1}
    ),
    "random-picker": Upstream(
        f"{ROUTER}:{_P}scheduling/picker/common.go (DefaultMaxNumOfEndpoints)", {"maxNumOfEndpoints": 1}
    ),
    "weighted-random-picker": Upstream(
        f"{ROUTER}:{_P}scheduling/picker/common.go (DefaultMaxNumOfEndpoints)", {"maxNumOfEndpoints": 1}
    ),
    # Request parsers (each factory ignores its parameters: `name string, _ *json.Decoder`)
    "openai-parser": Upstream(f"{ROUTER}:{_P}requesthandling/parsers/openai/openai.go (no parameters)", {}),
    "anthropic-parser": Upstream(
        f"{ROUTER}:{_P}requesthandling/parsers/anthropic/anthropic.go (no parameters)", {}
    ),
    "vllmhttp-parser": Upstream(
        f"{ROUTER}:{_P}requesthandling/parsers/vllmhttp/vllmhttp.go (no parameters)", {}
    ),
    "sglanghttp-parser": Upstream(
        f"{ROUTER}:{_P}requesthandling/parsers/sglanghttp/sglanghttp.go (no parameters)", {}
    ),
    "vllmgrpc-parser": Upstream(
        f"{ROUTER}:{_P}requesthandling/parsers/vllmgrpc/vllmgrpc.go (no parameters)", {}
    ),
    "vertexai-parser": Upstream(
        f"{ROUTER}:{_P}requesthandling/parsers/vertexai/vertexai.go (no parameters)", {}
    ),
    "passthrough-parser": Upstream(
        f"{ROUTER}:{_P}requesthandling/parsers/passthrough/passthrough.go (no parameters)", {}
    ),
    "destination-endpoint-served-verifier": Upstream(
        f"{GIE}:{_P}requestcontrol/test/responsereceived/"
        "destination_endpoint_served_verifier.go (no parameters)",
        {},
    ),
    # Profile handlers and deciders
    "single-profile-handler": Upstream(
        f"{ROUTER}:{_P}scheduling/profilehandler/single/single_profile_handler.go (no parameters)", {}
    ),
    "disagg-profile-handler": Upstream(
        f"{ROUTER}:{_P}scheduling/profilehandler/disagg/disagg_profile_handler.go (defaultDecodeProfile, "
        "defaultPrefillProfile, defaultEncodeProfile)",
        {"profiles.decode": "decode", "profiles.prefill": "prefill", "profiles.encode": "encode"},
    ),
    "always-disagg-pd-decider": Upstream(
        f"{ROUTER}:{_P}scheduling/profilehandler/disagg/always_disagg_pd_decider.go (no parameters)", {}
    ),
    "prefix-based-pd-decider": Upstream(
        f"{ROUTER}:{_P}scheduling/profilehandler/disagg/prefix_based_pd_decider.go (factory)",
        {"nonCachedTokens": 0, "promptTokens": 0},
    ),
    "always-disagg-multimodal-decider": Upstream(
        f"{ROUTER}:{_P}scheduling/profilehandler/disagg/always_disagg_mm_decider.go (no parameters)", {}
    ),
    "disagg-headers-handler": Upstream(
        f"{ROUTER}:{_P}scheduling/profilehandler/disagg/disagg_headers_handler.go (HeadersHandlerFactory, "
        "defaultPrefillProfile, defaultEncodeProfile)",
        {"prefillProfile": "prefill", "encodeProfile": "encode"},
    ),
    "prefill-header-handler": Upstream(
        f"{ROUTER}:{_P}scheduling/profilehandler/disagg/disagg_headers_handler.go (HeadersHandlerFactory, "
        "defaultPrefillProfile, defaultEncodeProfile)",
        {"prefillProfile": "prefill", "encodeProfile": "encode"},
    ),
    "data-parallel-profile-handler": Upstream(
        f"{ROUTER}:{_P}scheduling/profilehandler/dataparallel/dp_profile_handler.go (ProfileHandlerFactory)",
        {"primaryPort": 8000},
    ),
    "header-profile-handler": Upstream(
        f"{ROUTER}:{_P}scheduling/profilehandler/headerprofile/header_profile_handler.go "
        "(defaultHeaderName, defaultProfileName)",
        {"headerName": "EPP-Profile", "defaultProfile": "decode"},
    ),
    # Request-control plugins: data producers and admitters
    "approx-prefix-cache-producer": Upstream(
        f"{ROUTER}:{_P}requestcontrol/dataproducer/approximateprefix/types.go (defaultConfig)",
        {
            "autoTune": True,
            "blockSizeTokens": 16,
            "maxPrefixBlocksToMatch": 2048,
            "maxPrefixTokensToMatch": 131072,
            "lruCapacityPerServer": 31250,
        },
    ),
    "precise-prefix-cache-producer": Upstream(
        f"{ROUTER}:{_P}requestcontrol/dataproducer/preciseprefixcache/producer.go, pkg/kvcache/kvblock/"
        "token_processor.go (DefaultTokenProcessorConfig), pkg/kvevents/pool.go (DefaultConfig)",
        _PRECISE_DEFAULTS,
    ),
    "precise-prefix-cache-scorer": Upstream(
        "llm-d-inference-scheduler@520af4789:pkg/epp/framework/plugins/scheduling/scorer/"
        "preciseprefixcache/precise_prefix_cache.go (same kvcache defaults)",
        _PRECISE_DEFAULTS,
    ),
    "inflight-load-producer": Upstream(
        f"{ROUTER}:{_P}requestcontrol/dataproducer/inflightload/producer.go (defaultConfig, "
        "InFlightLoadProducerFactory, DefaultOutputRatio)",
        {"addEstimatedOutputTokens": False, "outputRatio": 1.5, "syncCrossReplicaState": True},
    ),
    "p2p-source-producer": Upstream(
        f"{ROUTER}:{_P}requestcontrol/dataproducer/p2psource/producer.go (defaultMinCachedTokenDelta, "
        "defaultPrefillProfile)",
        {"minCachedTokenDelta": 1, "prefillProfileName": "prefill"},
    ),
    # No parameters: the estimate backend, which has no defaulted field (vllm.url 5s/30s apply only to
    # the vllm backend, tested in tests/scheduler/producers/test_token_producer.py).
    "token-producer": Upstream(
        f"{ROUTER}:{_P}requestcontrol/dataproducer/tokenizer/tokenizer.go (NewPlugin: estimate default)", {}
    ),
    "agent-identity": Upstream(
        f"{ROUTER}:{_P}requestcontrol/requestheader/agentidentity/agent_identity.go "
        "(additionalSessionHeaders: omitempty, no default)",
        {},
    ),
    "predicted-latency-producer": Upstream(
        f"{ROUTER}:{_P}requestcontrol/dataproducer/predictedlatency/plugin.go (DefaultConfig)",
        {
            "samplingMean": 1000.0,
            "maxDecodeTokenSamplesForPrediction": 0,
            "sloBufferFactor": 1.0,
            "contextTTL": 300.0,
            "streamingMode": False,
            "predictInProduce": True,
        },
    ),
    "latency-scorer": Upstream(
        f"{ROUTER}:{_P}scheduling/scorer/latency/plugin.go (DefaultConfig)",
        {
            "ttftWeight": 0.8,
            "tpotWeight": 0.2,
            "headroomSelectionStrategy": "least",
            "compositeKVWeight": 1.0,
            "compositeQueueWeight": 1.0,
            "compositePrefixWeight": 1.0,
        },
    ),
    "slo-headroom-tier-filter": Upstream(
        f"{ROUTER}:{_P}scheduling/filter/sloheadroomtier/plugin.go (DefaultConfig)",
        {"epsilonExploreNeg": 0.01},
    ),
    "latency-slo-admitter": Upstream(
        f"{ROUTER}:{_P}requestcontrol/admitter/latencyslo/plugin.go (LatencyAdmissionDefaultConfig)", {}
    ),
    "probabilistic-admitter": Upstream(
        f"{ROUTER}:{_P}requestcontrol/admitter/probabilisticadmitter/plugin.go (default*)",
        {"queueDepthThreshold": 5, "kvCacheUtilThreshold": 0.8, "power": 5.0, "k": 300.0},
    ),
    # Flow-control policies
    "fcfs-ordering-policy": Upstream(f"{ROUTER}:{_P}flowcontrol/ordering/fcfs/fcfs.go (no parameters)", {}),
    "edf-ordering-policy": Upstream(f"{ROUTER}:{_P}flowcontrol/ordering/edf/edf.go (no parameters)", {}),
    "slo-deadline-ordering-policy": Upstream(
        f"{ROUTER}:{_P}flowcontrol/ordering/slodeadline/slo_deadline.go (no parameters)", {}
    ),
    "global-strict-fairness-policy": Upstream(
        f"{ROUTER}:{_P}flowcontrol/fairness/globalstrict/global_strict.go (no parameters)", {}
    ),
    "round-robin-fairness-policy": Upstream(
        f"{ROUTER}:{_P}flowcontrol/fairness/roundrobin/roundrobin.go (no parameters)", {}
    ),
    "program-aware-fairness": Upstream(
        f"{ROUTER}:{_P}flowcontrol/fairness/program-aware/plugin.go (DefaultConfig)",
        {
            "strategy": "las",
            "evictionTtlSeconds": 3600,
            "evictionSweepSeconds": 300,
            "lasWeightService": 0.8,
            "lasWeightHeadWait": 0.2,
            "lasHalfLifeSeconds": 60,
        },
    ),
    "static-usage-limit-policy": Upstream(
        f"{GIE}:{_P}flowcontrol/usagelimits/usagelimitpolicy.go (StaticPolicyFactory)", {"threshold": 1.0}
    ),
    "soft-reflective-ceiling-policy": Upstream(
        f"{ROUTER}:{_P}flowcontrol/usagelimits/softreflectiveceiling/policy.go (no parameters)", {}
    ),
    # Saturation detectors
    "concurrency-detector": Upstream(
        f"{ROUTER}:{_P}flowcontrol/saturationdetector/concurrency/config.go (defaults)",
        {
            "concurrencyMode": "requests",
            "maxConcurrency": 100,
            "maxTokenConcurrency": 1000000,
            "headroom": 0.0,
        },
    ),
    "utilization-detector": Upstream(
        f"{ROUTER}:{_P}flowcontrol/saturationdetector/utilization/config.go (Default*)",
        {
            "queueDepthThreshold": 5,
            "kvCacheUtilThreshold": 0.8,
            "metricsStalenessThreshold": 0.2,
            "headroom": 0.0,
        },
    ),
    # Data layer
    "metrics-data-source": Upstream(
        f"{ROUTER}:{_P}datalayer/source/metrics/datasource.go (defaultDataSourceConfigParams)",
        {"scheme": "http", "path": "/metrics", "insecureSkipVerify": True},
    ),
    "models-data-source": Upstream(
        f"{ROUTER}:{_P}datalayer/source/models/datasource.go (defaultModels*)",
        {"scheme": "http", "path": "/v1/models", "insecureSkipVerify": True},
    ),
    "dcgm-data-source": Upstream(
        f"{ROUTER}:{_P}datalayer/source/dcgm/datasource.go (defaultDCGM*)",
        {
            "scheme": "http",
            "path": "/metrics",
            "port": 9400,
            "insecureSkipVerify": True,
            "useNodeAddress": False,
        },
    ),
    "dcgm-extractor": Upstream(f"{ROUTER}:{_P}datalayer/extractor/dcgm/extractor.go (no parameters)", {}),
    "endpoint-notification-source": Upstream(
        f"{ROUTER}:{_P}datalayer/source/notifications/factory.go (EndpointSourceFactory: no parameters)", {}
    ),
    "models-data-extractor": Upstream(
        f"{ROUTER}:{_P}datalayer/extractor/models/extractor.go (no parameters)", {}
    ),
    "core-metrics-extractor": Upstream(
        f'{ROUTER}:{_P}datalayer/extractor/metrics/factories.go (DefaultEngine: "Defaults to vllm")',
        {"defaultEngine": "vllm"},
    ),
    "topology-extractor": Upstream(
        f"{ROUTER}:{_P}datalayer/extractor/topology/extractor.go (default*Label)",
        {
            "hostname": "kubernetes.io/hostname",
            "rack": "topology.kubernetes.io/rack",
            "zone": "topology.kubernetes.io/zone",
            "region": "topology.kubernetes.io/region",
        },
    ),
}

# Types upstream also refuses to build without parameters: pyepp must raise ConfigError too.
REQUIRED: dict[str, str] = {
    "priority-holdback-policy": (
        f"{ROUTER}:{_P}flowcontrol/usagelimits/priorityholdback/config.go: MinCeiling (Required)"
    ),
    "file-discovery": f"{ROUTER}:{_P}datalayer/discovery/file/plugin.go: \"'path' parameter is required\"",
    "multicluster-file-discovery": (
        f"{ROUTER}:{_P}datalayer/discovery/file/multicluster.go: \"'path' parameter is required\""
    ),
    "by-label": f"{ROUTER}:{_P}scheduling/filter/bylabel/filter.go: \"'label' must be specified\"",
    "endpoint-attribute-filter": (
        f"{ROUTER}:{_P}scheduling/filter/endpointattribute/filter.go: "
        '"endpoint attribute filter requires a non-empty attribute"'
    ),
    "endpoint-attribute-scorer": (
        f"{ROUTER}:{_P}scheduling/scorer/endpointattribute/endpointattribute.go: "
        '"endpoint attribute scorer requires a non-empty attributeKey"'
    ),
    "header-label-affinity-scorer": (
        f'{ROUTER}:{_P}scheduling/scorer/headerlabelaffinity/plugin.go: "header-label-affinity-scorer '
        'requires parameters"'
    ),
    "request-attribute-reporter": (
        f"{ROUTER}:{_P}requestcontrol/requestattributereporter/plugin.go (New): "
        '"attributes must contain exactly one entry"'
    ),
    "session-id-producer": (
        f"{ROUTER}:{_P}requestcontrol/dataproducer/sessionid/producer.go (Factory): "
        "\"'session-id-producer' requires exactly one of headerName or cookieName to be set\""
    ),
    "utilization-filter": (
        f'{ROUTER}:{_P}scheduling/filter/utilization/filter.go: "utilization filter requires at least one '
        'condition"'
    ),
    # Its parameters all have defaults (decodeProfile decode, prefillProfile prefill, primaryPort 0,
    # deciderPluginName prefix-based-pd-decider; pyepp's match), but the default decider must be a plugin
    # of the configuration: built alone, upstream fails as pyepp does.
    "pd-profile-handler": (
        f"{ROUTER}:{_P}scheduling/profilehandler/disagg/pd_profile_handler.go (PdProfileHandlerFactory): "
        '"invalid decider plugin type: prefix-based-pd-decider"'
    ),
}

# pyepp's own plugin types, which no upstream repository defines.
NOT_UPSTREAM: frozenset[str] = frozenset(
    {
        "binpack-scorer",
        "spread-scorer",
        "kv-headroom-filter",
        "lora-fit-filter",
        "prefix-affinity-scorer",
        "ready-filter",
        "least-kv-cache-filter",
        "least-queue-filter",
        "lora-affinity-filter",
        "low-queue-filter",
        "fair-share-fairness-policy",
    }
)

_NOT_YET = "not a parameter of this data-layer plugin in pyepp yet (see the corpus gaps)"
_UNRESOLVED = (
    "the data-layer plugins keep only the parameters the file sets; the default (or the matching "
    "--model-server-metrics-* flag) is applied when the source is built, so the resolved render omits it"
)
_SESSION_HEADER = (
    "pyepp accepts encodedEndpointHeaderConfig.header and the older flat headerName (not both), so "
    "neither is filled in: both render null and x-session-token, the same default, is applied when the "
    "header is read"
)
_DISAGG = "pyepp resolves unset profile names when it builds the handler; the rendered parameter stays null"

# (type, parameter) -> why pyepp's resolved default differs. Shrink-only.
DEFAULT_MISMATCHES: dict[tuple[str, str], str] = {
    ("predicted-latency-producer", "samplingMean"): (
        "deprecated and ignored upstream; pyepp rejects it rather than accept and ignore it"
    ),
    ("predicted-latency-producer", "maxDecodeTokenSamplesForPrediction"): (
        "deprecated and ignored upstream; pyepp rejects it rather than accept and ignore it"
    ),
    ("prefix-cache-affinity-filter", "explorationProbability"): (
        "pyepp keeps GIE's and llm-d-inference-scheduler's 0.01; llm-d-router changed it to 0"
    ),
    ("session-affinity-scorer", "encodedEndpointHeaderConfig.header"): _SESSION_HEADER,
    ("session-affinity-filter", "encodedEndpointHeaderConfig.header"): _SESSION_HEADER,
    ("multicluster-session-affinity-filter", "encodedEndpointHeaderConfig.header"): _SESSION_HEADER,
    ("token-load-scorer", "queueThresholdTokens"): (
        "pyepp applies the same default (4194304) when it scores but renders the unset parameter as null"
    ),
    ("disagg-profile-handler", "profiles.decode"): (_DISAGG),
    ("disagg-profile-handler", "profiles.prefill"): (_DISAGG),
    ("disagg-profile-handler", "profiles.encode"): (_DISAGG),
    ("metrics-data-source", "scheme"): _NOT_YET,
    ("metrics-data-source", "insecureSkipVerify"): _NOT_YET,
    ("metrics-data-source", "path"): _UNRESOLVED,
    ("models-data-source", "scheme"): _NOT_YET,
    ("models-data-source", "insecureSkipVerify"): _NOT_YET,
    ("models-data-source", "path"): _UNRESOLVED,
    ("core-metrics-extractor", "defaultEngine"): _NOT_YET,
}
