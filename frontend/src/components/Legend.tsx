// The heatmap's legend: the sequential scale in the utilization and memory modes, the
// health colours in the health mode, and the marks every mode shares.
import { Box, Stack, Typography } from "@mui/material";
import { ABSENT_FILL, HEALTH_COLORS, SCALE_STOPS } from "../format";
import { SPINNING_COLOR } from "./Activity";
import type { HeatMetric } from "./Heatmap";

function Swatch({ fill, border, label, testid }: {
  fill: string; border?: string; label: string; testid?: string;
}) {
  return (
    <Stack direction="row" spacing={0.5} alignItems="center" data-testid={testid}>
      <Box sx={{ width: 14, height: 12, borderRadius: "2px", background: fill,
                 border: border ?? "1px solid rgba(0,0,0,0.15)" }} />
      <Typography variant="caption">{label}</Typography>
    </Stack>
  );
}

// The scale as a CSS gradient, low values on the left.
export function scaleGradient(): string {
  return `linear-gradient(to right, ${SCALE_STOPS.join(", ")})`;
}

export function HeatLegend({ metric }: { metric: HeatMetric }) {
  const what = metric === "util" ? "utilization" : "memory used";
  return (
    <Stack direction="row" spacing={1.5} alignItems="center" useFlexGap flexWrap="wrap"
      data-testid="legend" data-metric={metric}>
      {metric === "health" ? (
        Object.entries(HEALTH_COLORS).map(([health, colour]) => (
          <Swatch key={health} fill={colour} label={health} testid={`legend-${health}`} />
        ))
      ) : (
        <>
          <Stack direction="row" spacing={0.5} alignItems="center">
            <Typography variant="caption">{what} 0%</Typography>
            <Box data-testid="legend-scale" sx={{
              width: 120, height: 12, borderRadius: "2px", border: "1px solid rgba(0,0,0,0.15)",
              background: scaleGradient() }} />
            <Typography variant="caption">100%</Typography>
          </Stack>
          <Swatch fill={ABSENT_FILL} label="not reported" testid="legend-absent" />
          <Swatch fill={HEALTH_COLORS.down} label="down" testid="legend-down" />
        </>
      )}
      <Swatch fill="transparent" border="2px dashed #212121" label="allocated, idle" />
      <Swatch fill="transparent" border={`2px dotted ${SPINNING_COLOR}`} label="spinning" />
      <Typography variant="caption" color="text.secondary">
        where cells are a few pixels wide, a ring of its colour marks a down, idle or spinning
        device · click a device for its node
      </Typography>
    </Stack>
  );
}
