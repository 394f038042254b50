"""The `ray` marker stays true: a test without it cannot start a Ray cluster (tests/conftest.py)."""

from __future__ import annotations

import pytest

from ray_accel.demo.local_cluster import LocalRayCluster


def test_an_unmarked_test_cannot_start_a_ray_head():
    cluster = LocalRayCluster(prefix="rm-")
    try:
        with pytest.raises(RuntimeError,
                           match=r"test_suite_ray_marker\.py::.* mark it @pytest\.mark\.ray"):
            cluster.start_head()
    finally:
        cluster.stop()
