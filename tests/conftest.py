"""Shared test configuration.

Hypothesis: no deadline (numba compiles on an implementation's first call, which would
trip the per-example deadline), and the failing example is printed with its reproduce
blob. Select another profile with HYPOTHESIS_PROFILE=thorough (more examples; see
NMSBENCH_EXAMPLES_SCALE in test_properties.py, which scales per-test example counts).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "nmsbench",
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("thorough", parent=settings.get_profile("nmsbench"), max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "nmsbench"))
