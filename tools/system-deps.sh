#!/usr/bin/env bash
# Installs the system packages the test suite uses (Debian): Prometheus and
# promtool, a C compiler for the simulated NVML library, Node.js and npm for the
# Accelerators tab's frontend, and Chromium for its browser tests. Runs apt-get
# only for what is missing. `system-deps.sh demo` installs only what `make demo`
# uses: the C compiler and Prometheus.
set -euo pipefail

declare -A PACKAGE_FOR=(
  [promtool]=prometheus
  [prometheus]=prometheus
  [cc]=gcc
)
if [ "${1:-}" != "demo" ]; then
  PACKAGE_FOR+=([node]=nodejs [npm]=npm [chromium]=chromium)
fi

missing=()
for command in "${!PACKAGE_FOR[@]}"; do
  command -v "$command" >/dev/null 2>&1 || missing+=("${PACKAGE_FOR[$command]}")
done
[ ${#missing[@]} -eq 0 ] && exit 0

mapfile -t packages < <(printf '%s\n' "${missing[@]}" | sort -u)
if [ "$(id -u)" -eq 0 ]; then
  SUDO=""
elif command -v sudo >/dev/null 2>&1; then
  SUDO="sudo"
else
  echo "missing system packages: ${packages[*]} (install them as root)" >&2
  exit 1
fi
echo "installing system packages: ${packages[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
