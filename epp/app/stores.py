"""The admission stores from the flags: InferenceObjectives (``--objectives-file``) and
InferenceModelRewrites (``--model-rewrites-file``). In InferencePool mode both are fed by watches
(:mod:`epp.kubernetes.crd_watch`, started by :class:`~epp.app.picker.PickerApp`), so a file there is
refused."""

from __future__ import annotations

from epp.admission import (
    InMemoryObjectiveStore,
    ObjectivePriorities,
    ObjectivesFileError,
    load_objectives_file,
)
from epp.admission.rewrites import RewriteStore
from epp.admission.rewrites_file import RewritesFileError, load_rewrites_file
from epp.app.errors import StartupError
from epp.config.options import Options

__all__ = ["objective_store", "rewrite_store"]


def objective_store(options: Options) -> tuple[InMemoryObjectiveStore, ObjectivePriorities]:
    """The objective store and the priority lookup over it.

    Standalone modes read ``--objectives-file``; in InferencePool mode the store is fed by a watch of the
    cluster's InferenceObjective objects (started with the app), so a file there is contradictory.
    """
    store = InMemoryObjectiveStore()
    if options.objectives_file is not None and options.discovery_mode == "pool":
        raise StartupError(
            "--objectives-file cannot be combined with --pool-name: in InferencePool mode the picker watches "
            "the cluster's InferenceObjective objects"
        )
    if options.objectives_file is not None:
        try:
            objectives = load_objectives_file(options.objectives_file, pool_name=options.pool_name)
        except ObjectivesFileError as exc:
            raise StartupError(f"--objectives-file: {exc}") from None
        for objective in objectives:
            store.upsert(objective)
    return store, ObjectivePriorities(store)


def rewrite_store(options: Options) -> RewriteStore:
    """The InferenceModelRewrite store: ``--model-rewrites-file`` in standalone modes, fed by a watch in
    InferencePool mode (a file there is contradictory, as for objectives)."""
    if options.model_rewrites_file is None:
        return RewriteStore()
    if options.discovery_mode == "pool":
        raise StartupError(
            "--model-rewrites-file cannot be combined with --pool-name: in InferencePool mode the picker "
            "watches the cluster's InferenceModelRewrite objects"
        )
    try:
        return RewriteStore(load_rewrites_file(options.model_rewrites_file, pool_name=options.pool_name))
    except RewritesFileError as exc:
        raise StartupError(f"--model-rewrites-file: {exc}") from None
