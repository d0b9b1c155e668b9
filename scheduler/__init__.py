"""pyepp's scheduling library (standalone: never imports ``epp`` or ``datalayer``).

Contracts: :mod:`scheduler.types` (value types), :mod:`scheduler.interfaces` (extension points),
:mod:`scheduler.cycle_state`, :mod:`scheduler.errors`. Orchestration: :mod:`scheduler.profile`
(filters -> weighted scorers -> picker) and :mod:`scheduler.scheduler` (the cycle and the hook
fan-out). Configuration: :mod:`scheduler.config` (``EndpointPickerConfig`` -> ``Scheduler``).
Plugins: :mod:`scheduler.plugins` (in-tree, assembled by ``register_builtin``), the registry with
entry-point discovery in :mod:`scheduler.registry`, parameter parsing in :mod:`scheduler.params`.
"""
