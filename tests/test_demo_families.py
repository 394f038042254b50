"""`ray-accel demo` on a TPU host, a Trainium node and a Gaudi node: workload, agent, table."""

from __future__ import annotations

import pytest
from demo_output import demo_output, holder_rows

pytestmark = pytest.mark.ray


@pytest.mark.parametrize(("scenario", "trainer_devices"),
                         [("tpu-v5e-8", 4), ("trn1-32xl", 4), ("gaudi2-8", 4)])
def test_the_demo_workload_runs_on_tpu_chips_neuroncores_and_gaudi_cards(scenario,
                                                                        trainer_devices):
    output = demo_output(scenario)
    rows = holder_rows(output)
    states: dict[str, list[str]] = {}
    for holder, state in rows:
        states.setdefault(holder, []).append(state)
    assert states["Trainer"] == ["busy"] * trainer_devices, rows
    assert states["IdleHolder"] == ["IDLE"], rows
    assert states["preprocess"] == ["busy"], rows
