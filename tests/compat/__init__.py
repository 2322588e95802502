"""The compatibility suite: the SDK's own tests, run once plain and once with every run routed
through :class:`evidence_ledger.Recorder`, to show that recording never changes what the SDK
does (``make compat``).

- :mod:`tests.compat.venv` caches the release's source distribution (which ships its
  ``tests/``) and a venv holding that release, the test dependencies the selected files need
  and this project, under ``.cache/compat/<version>/``;
- ``files.txt`` lists the SDK test files run, by topic;
- :mod:`tests.compat.plugin` (loaded into the SDK's pytest with ``-p plugin``) routes
  ``Runner.run`` / ``run_streamed`` / ``run_sync`` and ``RunState.approve`` / ``reject``
  through a per-test recorder, verifies each test's ledger and checks the violations against
  ``expected-violations.json``;
- :mod:`tests.compat.run` builds, runs both passes and reports what differs.
"""
