"""Shared settings for the parser fuzz tests: 10^3 inputs each in ``make test``,
``FUZZ_EXAMPLES=100000`` in ``make fuzz``."""

import os

from hypothesis import HealthCheck, settings

FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "1000")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    database=None,
)
