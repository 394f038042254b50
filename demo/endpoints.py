"""What the demo serves, and how to reach it: the text it prints and the JSON it writes."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass

from ..dashboard_module.api import PREFIX
from .prometheus import DEMO_THRESHOLDS

TAB_READY_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class DemoEndpoints:
    """The demo's URLs; `prometheus_url` is None when it runs without Prometheus."""

    dashboard_url: str
    token_file: str
    agent_url: str
    prometheus_url: str | None
    folders: tuple[str, ...] = ()  # the demo's temporary folders, removed when it stops

    @property
    def tab_url(self) -> str:
        return f"{self.dashboard_url}{PREFIX}/"

    def text(self) -> str:
        """The endpoints in the order a new user wants them: the tab first, the agent last."""
        token = self.token_file
        lines = [
            f"Accelerators tab:  {self.tab_url}",
            f"  Sign in first: open Ray's dashboard below and paste the cluster's token when "
            f"it asks (`cat {token}`);",
            "  Ray keeps it in a cookie that the tab uses. Or from a shell:",
            f"  curl -c cookies -X POST -H \"Authorization: Bearer $(cat {token})\" "
            f"{self.dashboard_url}/api/authenticate",
            f"Ray's dashboard:   {self.dashboard_url}/",
        ]
        if self.prometheus_url:
            lines.append(f"Prometheus alerts: {self.prometheus_url}/alerts  "
                         "(RayAcceleratorAllocatedIdle fires once the idle actor has held its "
                         f"device for {DEMO_THRESHOLDS['idle_allocation_for']})")
        lines += [
            "Agent:",
            f"  Metrics:  {self.agent_url}/metrics",
            f"  Snapshot: {self.agent_url}/api/v1/snapshot",
            f"  Health:   {self.agent_url}/healthz",
        ]
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "tab_url": self.tab_url}, indent=2) + "\n"


def wait_for_tab(dashboard_url: str, token: str, stopped, timeout_s: float = TAB_READY_TIMEOUT_S,
                 ) -> str | None:
    """None once the tab's API lists devices (behind Ray's token), else why not.

    `stopped()` ends the wait early (Ctrl-C).
    """
    request = urllib.request.Request(f"{dashboard_url}{PREFIX}/api/summary",
                                     headers={"Authorization": f"Bearer {token}"})
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline and not stopped():
        try:
            with urllib.request.urlopen(request, timeout=5) as reply:
                summary = json.loads(reply.read())
            if summary.get("devices", {}).get("total"):
                return None
            last = "it lists no devices yet"
        except urllib.error.HTTPError as error:
            last = f"HTTP {error.code}"
        except (OSError, ValueError) as error:
            last = str(error)
        time.sleep(1)
    return f"the Accelerators tab is not serving yet ({last})"
