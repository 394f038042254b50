// A job's devices over time (from the cluster's Prometheus): how many it holds, how busy
// they are, how much memory its processes use, and how many of its holdings sit idle.
import { useState } from "react";
import { Stack, Typography } from "@mui/material";
import { bytes, percent } from "../format";
import { HistoryRange, sourceText, useHistory, type HistoryRangeName } from "./HistoryRange";
import { Sparkline } from "./Sparkline";

type Values = (number | null)[];

function last(values: Values | undefined): number | null {
  for (let i = (values?.length ?? 0) - 1; i >= 0; i -= 1) {
    const v = values![i];
    if (v != null) return v;
  }
  return null;
}

export function JobHistory({ jobId, refreshMs }: { jobId: string; refreshMs: number }) {
  const [range, setRange] = useState<HistoryRangeName>("1h");
  const { data } = useHistory(range, { job_id: jobId }, refreshMs);
  const title = data ? sourceText(data) : undefined;
  const held = data?.devices_held ?? [];
  const series: [string, Values, string, number | undefined, string][] = [
    ["Devices held", held, String(last(held) ?? "–"), undefined, "#1976d2"],
    ["Their utilization", data?.utilization ?? [], percent(last(data?.utilization)), 1, "#1976d2"],
    ["Its memory", data?.memory_used_bytes ?? [], bytes(last(data?.memory_used_bytes)), undefined,
     "#7b1fa2"],
    ["Held idle", data?.idle_allocations ?? [], String(last(data?.idle_allocations) ?? "–"),
     undefined, "#ef6c00"],
  ];
  return (
    <Stack spacing={1} data-testid="job-history">
      <HistoryRange value={range} onChange={setRange} answer={data} />
      {data?.source === "prometheus" && (
        <Stack direction="row" spacing={3} useFlexGap flexWrap="wrap">
          {series.map(([label, values, now, max, color]) => (
            <Stack key={label}>
              <Typography variant="caption" color="text.secondary">{label}: {now}</Typography>
              <Sparkline values={values} max={max} color={color} title={title}
                label={`${label} history`} />
            </Stack>
          ))}
        </Stack>
      )}
    </Stack>
  );
}
