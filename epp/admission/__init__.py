"""Admission: objective priorities, the standalone objectives file, subset selection, shedding."""

from epp.admission.admitter import Admitter
from epp.admission.objectives import InferenceObjective, InMemoryObjectiveStore, ObjectiveStore
from epp.admission.objectives_file import ObjectivesFileError, load_objectives_file, parse_objectives
from epp.admission.priority import ObjectivePriorities
from epp.admission.subset_filter import host_of, select_subset

__all__ = [
    "Admitter",
    "InMemoryObjectiveStore",
    "InferenceObjective",
    "ObjectivePriorities",
    "ObjectiveStore",
    "ObjectivesFileError",
    "host_of",
    "load_objectives_file",
    "parse_objectives",
    "select_subset",
]
