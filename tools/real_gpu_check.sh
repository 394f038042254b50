#!/usr/bin/env bash
# The real-hardware check: run on a host with an NVIDIA GPU, from the repository root.
#
#   tools/real_gpu_check.sh OUT_DIR
#
# Needs python3 with nvidia-ml-py, prometheus-client and aiohttp; the project's wheel
# in .whl/ (`pip wheel --no-deps -w .whl .`), or setuptools>=68 to build it there;
# and, for the comparison with Ray's provider, the folder written beforehand by
# `python tools/ray_provider_subset.py --out .ray-subset` where Ray is installed.
# Ray itself is not needed. While a matrix-multiply load (with 1 GiB copied each way
# over PCIe every round) runs on GPU 0 it writes to
# OUT_DIR: real-gpu.json (tools/record_real_gpu.py; its `gpm` section holds every GPM
# call, with what each cost, from tools/record_gpm.py, and its `call_costs` the
# agent's costly calls timed ten times each, from tools/record_call_costs.py), benchmarks-real-gpu.md
# (bench/run.py --real-gpu, and its .json), metrics.txt (the agent's /metrics),
# agent-cpu.txt (its CPU share at a 1 s interval), nvidia-smi's view, and
# recorded-scenario.json (`ray-accel record`, 60 s) with metrics-replay.txt from an
# agent replaying it (`ray-accel agent --simulate`).
set -euo pipefail
out=${1:?usage: tools/real_gpu_check.sh OUT_DIR}
mkdir -p "$out"
site=$(mktemp -d)
wheel=$(ls .whl/ray_accel-*.whl 2>/dev/null || echo .)
python3 -m pip install -q --no-deps --no-build-isolation --no-index --target "$site" "$wheel" \
    >"$site.log" 2>&1 || { cat "$site.log" >&2; exit 1; }
export PYTHONPATH="$site:$PWD/.ray-subset" PYTHONUNBUFFERED=1

nvidia-smi -q >"$out/nvidia-smi-q.txt" 2>&1 || true
nvidia-smi topo -m >"$out/nvidia-smi-topo.txt" 2>&1 || true

python3 -c '
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
host = torch.empty(2**28, dtype=torch.float32, pin_memory=True)  # 1 GiB each way a round
device = torch.empty_like(host, device="cuda")
end = time.time() + 240
while time.time() < end:
    for _ in range(20):
        a @ a
    device.copy_(host, non_blocking=True)
    host.copy_(device, non_blocking=True)
    torch.cuda.synchronize()
' &
load=$!
trap 'kill $load 2>/dev/null || true' EXIT
sleep 5

# scrape PORT FILE: the /metrics of the agent on PORT once it has run 5 cycles.
scrape() {
    python3 - "$1" "$2" <<'EOF'
import sys, time, urllib.request
for attempt in range(30):
    time.sleep(1)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics",
                                    timeout=10) as reply:
            body = reply.read()
    except OSError:
        continue
    if b"accelerator_device_up" in body and attempt >= 5:
        open(sys.argv[2], "wb").write(body)
        break
else:
    sys.exit(f"no metrics from the agent on port {sys.argv[1]}")
EOF
}

# Each step stands alone: one failing still leaves the others' files.
python3 tools/record_real_gpu.py --out "$out/real-gpu.json" || echo "record failed" >&2
# The lent GPU as a replayable scenario (identities replaced), beside its call record;
# replayed below, its metrics land beside the live ones.
python3 -m ray_accel.exporter.cli record --duration 60 --out "$out/recorded-scenario.json" \
    >"$out/record.log" 2>&1 || echo "scenario recording failed" >&2
python3 bench/run.py --real-gpu --out "$out/benchmarks-real-gpu.md" || echo "bench failed" >&2

python3 -m ray_accel.exporter.cli agent --no-ray --port 9464 --interval 1 >"$out/agent.log" 2>&1 &
agent=$!
trap 'kill $load $agent 2>/dev/null || true' EXIT
scrape 9464 "$out/metrics.txt" || echo "agent scrape failed" >&2
# The running agent's CPU over 30 s of 1 s cycles (utime + stime of the whole process).
python3 - "$agent" "$out/agent-cpu.txt" <<'CPU' || echo "agent CPU reading failed" >&2
import os, sys, time
pid, out = sys.argv[1], sys.argv[2]
def cpu_s():
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
start, began = cpu_s(), time.monotonic()
time.sleep(30)
share = (cpu_s() - start) / (time.monotonic() - began)
open(out, "w").write(f"agent at --interval 1: {share * 100:.2f}% of one core over 30 s\n")
CPU
# Replay the recorded scenario on the simulated library and keep its metrics.
if [ -f "$out/recorded-scenario.json" ]; then
    python3 -m ray_accel.exporter.cli agent --no-ray --port 9465 --interval 1 \
        --simulate "$out/recorded-scenario.json" >"$out/replay-agent.log" 2>&1 &
    replay=$!
    trap 'kill $load $agent $replay 2>/dev/null || true' EXIT
    scrape 9465 "$out/metrics-replay.txt" || echo "replay scrape failed" >&2
fi
echo "real-hardware check written to $out"
