"""PCIe as the backends read it: each generation's transfer rate per lane."""

from __future__ import annotations

#: PCIe generation -> transfer rate per lane, in MT/s (one bit per transfer, before encoding)
MT_PER_S = {1: 2500, 2: 5000, 3: 8000, 4: 16000, 5: 32000, 6: 64000, 7: 128000}
#: transfer rate per lane, in MT/s -> PCIe generation
GENERATIONS = {rate: generation for generation, rate in MT_PER_S.items()}
