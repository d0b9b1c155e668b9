"""What the picker is told to do: command-line flags and the configuration file.

* :mod:`epp.config.options`: the ``epp`` command line parsed into :class:`~epp.config.options.Options`
  (the flag definitions are in :mod:`epp.config.parser`);
* :mod:`epp.config.flags`: value parsers shared by the flags (durations, ports, quantities, booleans);
* :mod:`epp.config.sections`: the EndpointPickerConfig with the sections other parts own (``dataLayer``,
  ``flowControl``, ``parser``, feature gates) and ``epp check-config``;
* :mod:`epp.config.feature_gates`: the ``featureGates`` section;
* :mod:`epp.config.stability`: which plugin types llm-d-router marks Alpha.

Submodules are imported by name; this package imports none of them.
"""
