"""Label values the rules select on (what the backends put in these labels)."""

from ray_accel.exporter import catalog as m

GENERAL = m.TASK_GENERAL  # hw_gpu_utilization_ratio{task}: compute/graphics engines
ECC_UNCORRECTED = m.ECC_UNCORRECTED
CURRENT, MAX = m.PCIE_CURRENT, m.PCIE_MAX  # PCIe link state
THERMAL_REASONS = m.THERMAL_THROTTLE_REASONS
POWER_REASONS = m.POWER_THROTTLE_REASONS
