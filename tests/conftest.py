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


def pytest_collection_modifyitems(config, items):
    """NMSBENCH_TEST_SHARD=i/k (.ci/gpu runs the GPU tests as k processes at once): keep
    the tests at positions i, i + k, i + 2k, ... of the collection (0 <= i < k), so the
    parametrized cases of one slow test spread over the shards, and deselect the rest."""
    shard = os.environ.get("NMSBENCH_TEST_SHARD", "").strip()
    if not shard:
        return
    import pytest

    index, slash, count = shard.partition("/")
    try:
        i, k = int(index), int(count)
    except ValueError:
        i, k = -1, 0
    if not slash or not 0 <= i < k:
        raise pytest.UsageError(f"NMSBENCH_TEST_SHARD={shard!r}: expected i/k with 0 <= i < k, e.g. 0/4")
    kept = [item for position, item in enumerate(items) if position % k == i]
    config.hook.pytest_deselected(items=[item for position, item in enumerate(items) if position % k != i])
    items[:] = kept
