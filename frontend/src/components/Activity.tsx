// GPM engine activity of a device or holder, and a holder's state (busy, idle, spinning).
import { Chip, Tooltip, Typography } from "@mui/material";
import type { Activity } from "../api";
import { DASH, percent } from "../format";

// Engines in the order shown, with their short names (activity per engine, tensor pipe).
export const ACTIVITY_ENGINES: [string, string][] = [
  ["graphics", "GR"], ["sm", "SM"], ["sm_occupancy", "Occ"], ["tensor", "Tensor"], ["dram", "DRAM"],
];

// A device's engine activity with its tensor pipe folded in (`pipes.tensor`).
export function withTensor(activity?: Activity, pipes?: Activity): Activity {
  const found: Activity = { ...(activity ?? {}) };
  if (pipes?.tensor != null) found.tensor = pipes.tensor;
  return found;
}

// "GR 85% · SM 70% · ..." for the engines measured; "" when none is.
export function activityText(activity?: Activity): string {
  if (!activity) return "";
  return ACTIVITY_ENGINES.filter(([key]) => activity[key] != null)
    .map(([key, label]) => `${label} ${percent(activity[key])}`).join(" · ");
}

export function ActivityCell({ activity }: { activity?: Activity }) {
  const text = activityText(activity);
  if (!text) {
    return (
      <Tooltip title="The device measures no engine activity (GPM: Hopper and newer, not in every VM).">
        <span data-testid="activity" data-measured="false">{DASH}</span>
      </Tooltip>
    );
  }
  return (
    <Tooltip title="GPM engine activity since the last sample: graphics engine, SMs, SM occupancy, tensor pipes, DRAM bandwidth.">
      <Typography variant="caption" data-testid="activity" data-measured="true"
        sx={{ whiteSpace: "nowrap" }}>{text}</Typography>
    </Tooltip>
  );
}

export type HolderState = "spinning" | "idle" | "busy";

// Spinning (busy by NVML, its SMs nearly idle) is neither busy nor idle.
export function holderState(holder: { idle: boolean; spinning?: boolean }): HolderState {
  if (holder.spinning) return "spinning";
  return holder.idle ? "idle" : "busy";
}

export const SPINNING_COLOR = "#6a1b9a";

const STATE_HELP: Record<HolderState, string> = {
  spinning: "Busy by NVML utilization while its SMs and tensor pipes stay nearly idle for the " +
    "spinning window: a kernel resident but not computing, as in a hung collective.",
  idle: "Ray assigned it the device and it does not use it.",
  busy: "Uses the device.",
};

const RULE_HELP: Record<string, string> = {
  activity: "judged by the device's engine activity (GPM)",
  utilization: "judged by NVML utilization",
  no_context: "it never created a context on the device",
};

export function HolderStateChip({ holder, label }: {
  holder: { idle: boolean; spinning?: boolean; idle_rule?: string }; label?: string;
}) {
  const state = holderState(holder);
  const rule = holder.idle_rule ? RULE_HELP[holder.idle_rule] ?? holder.idle_rule : "";
  const text = label ?? state.toUpperCase();
  return (
    <Tooltip title={`${STATE_HELP[state]}${rule ? ` (${rule})` : ""}`}>
      {state === "spinning"
        ? <Chip size="small" label={text} data-testid="state" data-state={state}
            sx={{ ml: 0.5, background: SPINNING_COLOR, color: "#fff" }} />
        : <Chip size="small" label={text} data-testid="state" data-state={state}
            color={state === "idle" ? "warning" : "default"}
            variant={state === "idle" ? "filled" : "outlined"} sx={{ ml: 0.5 }} />}
    </Tooltip>
  );
}
