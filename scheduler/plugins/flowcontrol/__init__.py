"""Flow-control policies (GIE's ``pkg/epp/framework/plugins/flowcontrol``): plugins of the scheduler's
registry that the EPP's flow controller uses to order queued requests.

* ordering policies (which request of one flow goes next): ``fcfs-ordering-policy``,
  ``edf-ordering-policy``, ``slo-deadline-ordering-policy`` (:mod:`.ordering`);
* fairness policies (which flow of a priority band goes next): ``global-strict-fairness-policy``,
  ``round-robin-fairness-policy`` (:mod:`.fairness`), ``program-aware-fairness`` (:mod:`.program_aware`),
  ``fair-share-fairness-policy`` (ours: round-robin plus a per-flow ceiling, :mod:`.fair_share`);
* usage-limit policies (the saturation ceiling under which a band may dispatch):
  ``static-usage-limit-policy``, ``priority-holdback-policy``, ``soft-reflective-ceiling-policy``
  (:mod:`.usage_limit`).

The contracts are in :mod:`.interfaces`. Policies are pure and hold no per-request state; the
per-band state a fairness policy needs lives in the object its ``new_state()`` returns.
"""
