// The time range of the tab's series (1 h / 6 h / 24 h / 7 d) and where they come from:
// the cluster's Prometheus when the head has one, else the head's in-memory history.
import { Alert, Stack, ToggleButton, ToggleButtonGroup, Typography } from "@mui/material";
import { usePoll, type Polled } from "../api";

export const RANGES = ["1h", "6h", "24h", "7d"] as const;
export type HistoryRangeName = (typeof RANGES)[number];

const RANGE_WORDS: Record<HistoryRangeName, string> = {
  "1h": "1 h", "6h": "6 h", "24h": "24 h", "7d": "7 days",
};

type Values = (number | null)[];

// One answer of `api/history` (docs/api.md): the series of one scope over one range.
export interface SeriesAnswer {
  source: "prometheus" | "memory";
  error: string;
  range: HistoryRangeName;
  scope: "cluster" | "node" | "device" | "job";
  timestamps: number[];
  step_s?: number;
  interval_s: number;
  warnings?: string[]; // what Prometheus warned of with its answer (a partial response, ...)
  utilization?: Values; memory_used_bytes?: Values; power_watts?: Values;
  idle_allocations?: Values; devices_down?: Values; devices_held?: Values;
  devices?: Record<string, { utilization?: Values; memory_used_bytes?: Values }>;
}

export interface HistoryScope { node_id?: string; uuid?: string; job_id?: string }

export function historyPath(range: HistoryRangeName, scope: HistoryScope = {}): string {
  const params = new URLSearchParams({ range });
  for (const [name, value] of Object.entries(scope)) if (value) params.set(name, value);
  return `history?${params.toString()}`;
}

// The scope's series over `range`, polled like the rest of the tab.
export function useHistory(range: HistoryRangeName, scope: HistoryScope,
                           refreshMs: number): Polled<SeriesAnswer> {
  return usePoll<SeriesAnswer>(historyPath(range, scope), refreshMs);
}

function minutes(seconds: number): string {
  return seconds >= 120 ? `${Math.round(seconds / 60)} min` : `${Math.round(seconds)} s`;
}

// Says where the shown series come from and how much of the range they cover.
export function sourceText(answer: SeriesAnswer): string {
  if (answer.source === "prometheus") {
    const step = answer.step_s ? `, a point every ${minutes(answer.step_s)}` : "";
    return `From Prometheus: the last ${RANGE_WORDS[answer.range]}${step}`;
  }
  if (answer.scope === "job") return "No per-job history without Prometheus: the head keeps none";
  const stamps = answer.timestamps ?? [];
  const span = stamps.length > 1 ? stamps[stamps.length - 1] - stamps[0] : 0;
  return `In-memory history of the head: the last ${minutes(span)} only`;
}

export function HistoryRange({ value, onChange, answer }: {
  value: HistoryRangeName; onChange: (range: HistoryRangeName) => void;
  answer: SeriesAnswer | null;
}) {
  return (
    <Stack spacing={0.5}>
      <Stack direction="row" spacing={1.5} alignItems="center">
        <Typography variant="caption" color="text.secondary">History</Typography>
        <ToggleButtonGroup size="small" exclusive value={value}
          onChange={(_, v: HistoryRangeName | null) => v && onChange(v)}>
          {RANGES.map((r) => (
            <ToggleButton key={r} value={r} data-testid={`range-${r}`}>{r}</ToggleButton>
          ))}
        </ToggleButtonGroup>
        {answer && (
          <Typography variant="caption" color="text.secondary" data-testid="history-source"
            data-source={answer.source}>
            {sourceText(answer)}
          </Typography>
        )}
      </Stack>
      {answer?.error && (
        <Alert severity="warning" data-testid="history-error">
          Prometheus is not used for these series: {answer.error}
        </Alert>
      )}
      {answer?.warnings?.length ? (
        <Alert severity="info" data-testid="history-warnings">
          Prometheus warned with these series: {answer.warnings.join("; ")}
        </Alert>
      ) : null}
    </Stack>
  );
}
