"""The built Accelerators tab shipped as package data is current and complete."""

from __future__ import annotations

import re

from ray_accel.dashboard_module import frontend_build


def test_committed_bundle_was_built_from_the_current_sources():
    assert frontend_build.recorded_hash() == frontend_build.source_hash(), (
        "dashboard_module/static/ is older than frontend/: run `make frontend`")


def test_index_references_only_files_that_ship():
    static = frontend_build.PACKAGE / "static"
    index = (static / "index.html").read_text()
    assets = re.findall(r'(?:src|href)="\./(assets/[^"]+)"', index)
    assert assets, index
    for asset in assets:
        assert (static / asset).is_file(), asset
