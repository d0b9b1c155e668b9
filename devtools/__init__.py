"""Development tooling, not part of the picker: the local stack (:mod:`devtools.stack`: simulators, the
picker and Envoy as real processes), the demo (:mod:`devtools.demo`, ``make demo``) and the Envoy
configuration renderer (:mod:`devtools.envoy_config`, ``python -m devtools.envoy_config``).

The product packages (``epp``, ``scheduler``, ``datalayer``) never import this package; it imports them
(``tests/scheduler/test_dependency_direction.py`` enforces the direction).
"""
