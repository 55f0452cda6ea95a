"""NMSBENCH_TEST_SHARD (tests/conftest.py): the shards of a collection are disjoint and
together hold every test, and a malformed value is refused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
TARGET = "test_registry.py"  # a small module with several tests


def collected(shard: str | None) -> tuple[int, list[str]]:
    env = {key: value for key, value in os.environ.items() if key != "NMSBENCH_TEST_SHARD"}
    if shard is not None:
        env["NMSBENCH_TEST_SHARD"] = shard
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", TARGET],
                          cwd=TESTS, env=env, capture_output=True, text=True)
    return done.returncode, [line for line in done.stdout.splitlines() if "::" in line]


def test_shards_are_disjoint_and_cover_the_collection():
    code, everything = collected(None)
    assert code == 0 and len(everything) >= 3
    parts = [collected(f"{i}/2")[1] for i in range(2)]
    assert sorted(sum(parts, [])) == sorted(everything)
    assert all(part for part in parts) and len(set(sum(parts, []))) == len(everything)
    assert parts[0][0] == everything[0] and parts[1][0] == everything[1]  # round robin over the collection


def test_a_malformed_shard_is_refused():
    for shard in ("2/2", "a/b"):
        code, _ = collected(shard)
        assert code != 0, shard
