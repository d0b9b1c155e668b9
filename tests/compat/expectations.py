"""Whether upstream loads or rejects each collected EndpointPickerConfig, and why.

Used by :mod:`tests.compat.collect` to write ``corpus/manifest.yaml``. The verdicts:

* the config loaders' own test fixtures (``pkg/epp/config/loader/testdata_test.go`` in the three EPP
  repositories) follow the Go test tables of ``configloader_test.go``: every ``error*`` constant is a
  case with ``wantErr: true`` (rejected by ``LoadRawConfig`` or by ``InstantiateAndConfigure``), every
  other constant (``success*``, ``plugins*``) a case that loads. Some of them name the Go test's fake
  plugin types (``test-plugin``, ``test-scorer``, ...): those load upstream only with the fakes the Go
  test registers, which :data:`GO_TEST_FAKES` lists and the corpus test registers the same way;
* every other Go test literal (runner, integration and e2e tests) is loaded by its test with
  ``require.NoError`` / ``t.Fatalf`` on error: it loads;
* configs shipped in ``deploy/``, the Helm charts, the conformance resources, and the examples of the
  documentation load (upstream ships and documents them as working configurations), except the
  documentation examples upstream's own loader rejects: skeletons with ``...`` placeholders (the strict
  decoder fails on them), an ``apiVersion`` whose group that repository's loader does not register, and
  examples of a user's own plugin type (``custom-scorer``) that no upstream registry holds.
"""

from __future__ import annotations

import re

__all__ = ["GO_TEST_FAKES", "REJECT_REASONS", "expect", "uses_go_test_fakes", "uses_harness_fakes"]

LOADER_FIXTURES = "pkg/epp/config/loader/testdata_test.go"
ORPHAN_FIXTURE = "test/testdata/configloader_1_test.yaml"

# The plugin types and feature gate the Go loader tests register (configloader_test.go,
# registerTestPlugins / RegisterFeatureGate), by extension point.
GO_TEST_FAKES: dict[str, str] = {
    "test-plugin": "filter",
    "test-scorer": "scorer",
    "test-picker": "picker",
    "test-profile-handler": "profile-handler",
    "utilization-detector": "saturation-detector",
    "test-source": "data-source",
    "test-extractor": "extractor",
    "test-with-dependencies": "filter",
    "test-with-nested-dependencies": "filter",
    "test-order-filter": "filter",  # GIE's TestFilterExecutionOrderFromYAML
}
_FAKE_RE = re.compile(r"type:\s*(" + "|".join(re.escape(t) for t in GO_TEST_FAKES) + r")\s*$", re.MULTILINE)
_CONST_RE = re.compile(r"Go raw string literal (\w+)")


def uses_go_test_fakes(text: str) -> bool:
    return bool(_FAKE_RE.search(text)) or "test-feature-gate" in text


_HARNESS_RE = re.compile(r"^# (path|also at): (\S+:)?test/integration/", re.MULTILINE)


def uses_harness_fakes(text: str) -> bool:
    """A Go integration-test config naming the harness's ``mock-metrics-source`` (test/integration/epp's
    harness.go registers it as a data source before it loads the config)."""
    return "type: mock-metrics-source" in text and bool(_HARNESS_RE.search(text))


# The config groups each repository's loader decodes (apix/config/v1alpha1/zz_generated.register.go;
# llm-d's pkg/epp/config/loader/configloader.go also registers the deprecated GIE group).
API_VERSIONS: dict[str, tuple[str, ...]] = {
    "gie": ("inference.networking.x-k8s.io/v1alpha1",),
    "llm-d-inference-scheduler": ("llm-d.ai/v1alpha1", "inference.networking.x-k8s.io/v1alpha1"),
    "llm-d-router": ("llm-d.ai/v1alpha1", "inference.networking.x-k8s.io/v1alpha1"),
    "llm-d": ("llm-d.ai/v1alpha1", "inference.networking.x-k8s.io/v1alpha1"),
}
_PLACEHOLDER_RE = re.compile(r"^\s*(?:-\s*|\w+:\s*)?\.{3,}\s*$", re.MULTILINE)
_API_RE = re.compile(r"^apiVersion:\s*(\S+)\s*$", re.MULTILINE)
_USER_PLUGIN_TYPES = ("custom-scorer",)


# Why each wantErr fixture is rejected upstream, as a pattern the pyepp error ("<location>: <message>")
# must match: the corpus test checks that pyepp rejects it for the same reason, not for another one.
REJECT_REASONS: dict[str, str] = {
    "errorBadYamlText": r"^plugins\[0\]: expected a mapping",
    "errorBadPluginReferenceText": r"^plugins\[\d+\]\.type: required",
    "errorBadPluginReferencePluginText": r'unknown plugin type "unknown-plugin-type"',
    "errorBadPluginJsonText": r"blockSize",
    "errorBadPluginJSONText": r"blockSize",
    "errorUnknownFeatureGateText": r"^featureGates\[\d+\]: unknown feature gate",
    "errorBadFeatureGateText": r"^featureGates\[\d+\]:.*qwerty",
    "errorNoProfileNameText": r"^schedulingProfiles\[\d+\]\.name: required",
    "errorBadProfilePluginText": r"^schedulingProfiles\[\d+\]\.plugins\[\d+\]\.pluginRef: required",
    "errorBadProfilePluginRefText": r"^schedulingProfiles\[\d+\]\.plugins\[\d+\]\.pluginRef",
    "errorUndefinedSaturationDetectorPluginText": r"^saturationDetector",
    "errorDuplicatePluginText": r"duplicate plugin name",
    "errorDuplicateProfileText": r"duplicate profile name",
    "errorTwoPickersText": r"picker",
    "errorTwoProfileHandlersText": r"second profile handler",
    "errorNoProfileHandlersText": r"profile handler",
    "errorMultiProfilesUseSingleProfileHandlerText": r"single-profile-handler .* exactly one profile",
    "errorPluginsRefedInLoopText": r"(?i)loop|cycle|circular",
    "errorBadSourceReferenceText": r"^dataLayer\.sources\[\d+\]\.pluginRef",
    # its extractor is a bare name, not {pluginRef: ...}: the strict decoder fails on that entry
    "errorBadExtractorReferenceText": r"^dataLayer\.sources\[\d+\]\.extractors\[\d+\]: expected a mapping",
    "errorFlowControlMissingPluginText": r"^flowControl\.",
    "errorFlowControlWrongPluginTypeText": r"^flowControl\.",
    "errorParserWrongPluginTypeText": r"^(parser|requestHandler\.parsers\[\d+\])\.pluginRef",
    "errorParserWrongPluginNameText": r"^(parser|requestHandler\.parsers\[\d+\])\.pluginRef",
}


def expect(source: str, path: str, how: str, text: str) -> tuple[str, str, str]:
    """("load" | "reject", why, the pattern a rejection's error must match or "") for one document."""
    if path.endswith(LOADER_FIXTURES):
        m = _CONST_RE.search(how)
        name = m.group(1) if m else "?"
        fakes = " (with the Go test's fake plugin types registered)" if uses_go_test_fakes(text) else ""
        if name.startswith("error"):
            why = f"Go loader test: {name} is a wantErr case of configloader_test.go{fakes}"
            return "reject", why, REJECT_REASONS[name]
        return "load", f"Go loader test: {name} is a no-error case of configloader_test.go{fakes}", ""
    harness = (
        " (with the integration harness's mock-metrics-source registered)"
        if "mock-metrics-source" in text
        else ""
    )
    if path.endswith("_test.go"):
        return "load", f"Go test loads it and fails on any error (require.NoError / t.Fatalf){harness}", ""
    if path == ORPHAN_FIXTURE:
        why = (
            "test fixture no Go test reads at this commit, naming plugin types no registry holds "
            "(test-one, test-two, and the Go tests' fakes): the EPP rejects it"
        )
        return "reject", why, r"test-(one|two|profile-handler|picker|source|extractor|feature-gate)\b"

    if "/templates/" in path:
        return "load", "the Helm chart's default EPP config, rendered with the chart defaults", ""
    if path.endswith(".md"):
        api = _API_RE.search(text)
        if api and api.group(1) not in API_VERSIONS[source]:
            why = f"documentation example with apiVersion {api.group(1)}, a group this loader does not decode"
            return "reject", why, r"^apiVersion: "
        if _PLACEHOLDER_RE.search(text):
            why = "documentation skeleton with '...' placeholders: not a loadable document"
            return "reject", why, r"expected a (mapping|list), got .*\.\.\."
        if any(f"type: {t}" in text for t in _USER_PLUGIN_TYPES):
            why = "example of a user's own plugin type, unknown to upstream's plugin registry"
            return "reject", why, r'unknown plugin type "custom-scorer"'
        return "load", "documentation example presented as a working configuration", ""
    if path.startswith("deploy/") or path.startswith("config/") or path.startswith("conformance/"):
        return "load", "shipped configuration", ""
    if path.startswith("test/"):
        return "load", f"configuration the upstream e2e / integration tests deploy{harness}", ""
    return "load", "shipped configuration", ""
