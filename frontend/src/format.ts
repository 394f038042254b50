// Formatting of base-unit values (ratios, bytes, bytes/s, watts) for display.

export const DASH = "–";

export function percent(ratio: number | null | undefined): string {
  return ratio == null ? DASH : `${Math.round(ratio * 100)}%`;
}

const UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];

export function bytes(value: number | null | undefined): string {
  if (value == null) return DASH;
  let v = value;
  let unit = 0;
  while (Math.abs(v) >= 1024 && unit < UNITS.length - 1) {
    v /= 1024;
    unit += 1;
  }
  return `${v >= 100 || unit === 0 ? v.toFixed(0) : v.toFixed(1)} ${UNITS[unit]}`;
}

// Link rates in decimal units, as NVLink and PCIe bandwidth is quoted.
export function rate(value: number | null | undefined): string {
  if (value == null) return DASH;
  const steps: [number, string][] = [[1e12, "TB/s"], [1e9, "GB/s"], [1e6, "MB/s"], [1e3, "kB/s"]];
  for (const [size, unit] of steps) {
    if (Math.abs(value) >= size) return `${(value / size).toFixed(1)} ${unit}`;
  }
  return `${value.toFixed(0)} B/s`;
}

export function watts(value: number | null | undefined): string {
  if (value == null) return DASH;
  return value >= 10000 ? `${(value / 1000).toFixed(1)} kW` : `${value.toFixed(0)} W`;
}

export function shortId(id: string, length = 8): string {
  return id.length > length ? id.slice(0, length) : id;
}

// Heat colour for a 0-1 value: grey when absent, then blue (cold) to red (hot).
export function heatColor(ratio: number | null | undefined): string {
  if (ratio == null) return "#bdbdbd";
  const r = Math.max(0, Math.min(1, ratio));
  const hue = 220 - 220 * r;
  return `hsl(${hue.toFixed(0)}, 70%, ${(55 - 10 * r).toFixed(0)}%)`;
}

export const HEALTH_COLORS: Record<string, string> = {
  ok: "#43a047",
  warning: "#fb8c00",
  stale: "#9e9e9e",
  down: "#e53935",
};
