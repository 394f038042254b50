// A tiny SVG line of recent values (None gaps are skipped; a value with no neighbour is a
// dot, so that the first points of a long range show); `title` is its tooltip (the range
// and source of the values, say).
export function Sparkline({ values, width = 120, height = 28, max, color = "#1976d2", label,
  title }: {
  values: (number | null)[]; width?: number; height?: number; max?: number; color?: string;
  label?: string; title?: string;
}) {
  const present = values.filter((v): v is number => v != null);
  const top = max ?? Math.max(1e-9, ...present);
  const step = values.length > 1 ? width / (values.length - 1) : width;
  let path = "";
  const dots: [number, number][] = [];
  values.forEach((v, i) => {
    if (v == null) return;
    const x = i * step;
    const y = height - (Math.min(v, top) / top) * (height - 2) - 1;
    path += `${path && values[i - 1] != null ? "L" : "M"}${x.toFixed(1)},${y.toFixed(1)}`;
    if (values[i - 1] == null && values[i + 1] == null) dots.push([x, y]);
  });
  return (
    <svg width={width} height={height} role="img" aria-label={label ?? "history"}
      data-testid="sparkline" data-points={present.length}>
      {title && <title>{title}</title>}
      <path d={path} fill="none" stroke={color} strokeWidth={1.5} />
      {dots.map(([x, y]) => (
        <circle key={x} cx={Math.min(Math.max(x, 1.5), width - 1.5)} cy={y} r={1.5} fill={color}
          data-testid="sparkline-dot" />
      ))}
    </svg>
  );
}
