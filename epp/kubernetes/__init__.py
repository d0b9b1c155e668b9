"""The picker's Kubernetes side (InferencePool mode and leader election), over ``kubernetes_asyncio``.

* :mod:`epp.kubernetes.client`: the API client (in-cluster service account, else the kubeconfig);
* :mod:`epp.kubernetes.label_selector`: ``--endpoint-selector`` syntax (Kubernetes label selectors);
* :mod:`epp.kubernetes.crd_group`: which API group serves InferenceObjective / InferenceModelRewrite;
* :mod:`epp.kubernetes.crd_watch`: the watch of those objects, feeding the admission stores;
* :mod:`epp.kubernetes.leader`: Lease-based leader election gating readiness.

Endpoint discovery from pods and InferencePools is the data layer's (:mod:`datalayer.discovery.kube`).
Submodules are imported by name; this package imports none of them (nor ``kubernetes_asyncio``).
"""
