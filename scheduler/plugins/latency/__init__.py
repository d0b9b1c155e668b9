"""Predicted-latency routing (llm-d-router's ``predicted-latency-producer`` family), learnt in process.

``model`` (the online TTFT/TPOT regression), ``producer`` (``predicted-latency-producer``),
``consumer`` (the consumer side of ``latencyPredictionInfoProducerName``), ``scorer``
(``latency-scorer``), ``tier_filter`` (``slo-headroom-tier-filter``), ``admitter``
(``latency-slo-admitter``).
"""
