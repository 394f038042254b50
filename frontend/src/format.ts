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

// The heatmap's sequential scale for 0-1 values: light to dark blue, one hue with
// lightness falling steadily (readable with any colour vision, and in greyscale). It never
// reuses a health colour (green, orange, grey, red), so a busy device cannot read as down.
export const SCALE_STOPS = ["#deebf7", "#9ecae1", "#4292c6", "#2171b5", "#08306b"];
// A value the device does not report: hatched white, distinct from every scale colour.
export const ABSENT_FILL = "repeating-linear-gradient(45deg, #ffffff 0 3px, #d0d0d0 3px 5px)";

function mix(from: string, to: string, t: number): string {
  const channel = (hex: string, i: number) => parseInt(hex.slice(1 + 2 * i, 3 + 2 * i), 16);
  const parts = [0, 1, 2].map((i) => Math.round(channel(from, i) + (channel(to, i) - channel(from, i)) * t));
  return `#${parts.map((v) => v.toString(16).padStart(2, "0")).join("")}`;
}

// Heat colour for a 0-1 value on SCALE_STOPS; ABSENT_FILL when absent.
export function heatColor(ratio: number | null | undefined): string {
  if (ratio == null) return ABSENT_FILL;
  const r = Math.max(0, Math.min(1, ratio)) * (SCALE_STOPS.length - 1);
  const at = Math.min(Math.floor(r), SCALE_STOPS.length - 2);
  return mix(SCALE_STOPS[at], SCALE_STOPS[at + 1], r - at);
}

// Text colour that stays legible on heatColor(ratio).
export function heatTextColor(ratio: number | null | undefined): string {
  return ratio != null && ratio >= 0.45 ? "#ffffff" : "#0d1b2a";
}

export const HEALTH_COLORS: Record<string, string> = {
  ok: "#43a047",
  warning: "#fb8c00",
  stale: "#9e9e9e",
  down: "#e53935",
};

// What Ray's dashboard shows as used memory: it counts the driver's reserved memory as used.
export const MEMORY_AS_RAY_SHOWS_IT =
  "Used memory here excludes what the driver and firmware reserve (its own series, " +
  "ray.accelerator.memory.reserved). Ray's dashboard counts the reserved memory as used: " +
  "an empty H200 reads 604 MiB in Ray and 0 B here; Ray's figure is used plus reserved.";

// A duration in seconds, as a person reads it: "42 s", "3 min 5 s", "2 h 10 min".
export function duration(seconds: number | null | undefined): string {
  if (seconds == null) return DASH;
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}
