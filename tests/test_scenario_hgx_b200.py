"""The hgx-b200 scenario read by the NVIDIA backend: NVLink 5 through NVSwitch, GPM per link."""

from __future__ import annotations

import time

from ray_accel.exporter import catalog as m
from ray_accel.exporter.rates import with_link_rates


def test_eighteen_nvlink5_links_per_gpu_in_one_domain(open_backend):
    backend, devices, _ = open_backend("hgx-b200")
    assert len(devices) == 8
    assert {d.model for d in devices} == {"NVIDIA B200"}
    assert {d.facts["architecture"] for d in devices} == {"blackwell"}
    assert len({d.facts["nvlink_domain"] for d in devices}) == 1
    for device in devices:
        assert sorted(peer.connection for peer in device.peers) == ["NV18"] * 7
    sample = backend.sample(devices[0])
    nvlinks = [link for link in sample.links if link.link_type == "nvlink"]
    assert len(nvlinks) == 18
    assert {link.facts["version"] for link in nvlinks} == {"5"}


def test_gpm_link_bandwidth_agrees_with_the_byte_counters(open_backend):
    backend, devices, _ = open_backend("hgx-b200")
    trainer = devices[0]
    first = backend.sample(trainer)
    time.sleep(0.5)
    second = with_link_rates(first, backend.sample(trainer))
    link = next(link for link in second.links if link.link_type == "nvlink" and link.index == 0)
    from_counters = link.rates["receive"]
    wanted = {"link_type": "nvlink", "link": "0", "direction": "receive"}
    from_gpm = next(r.value for r in second.readings
                    if r.metric == m.LINK_THROUGHPUT and dict(r.labels) == wanted)
    assert from_counters > 10e9  # NVLink 5 training traffic: tens of GB/s per link
    assert abs(from_gpm - from_counters) / from_counters < 0.1
