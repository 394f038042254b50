// The nodes of the overview's groups as rows of device cells (a node's devices in index
// order), each group under its header, in the overview's order. Rows are virtualised, so
// 10,000 nodes render only what is on screen.
import { useMemo, useRef } from "react";
import { useVirtualizer } from "@tanstack/react-virtual";
import { Box, Chip, Tooltip, Typography } from "@mui/material";
import type { HeatCell, HeatNode } from "../api";
import { HEALTH_COLORS, heatColor, heatTextColor, percent, watts } from "../format";
import type { Group } from "../overview";
import { SPINNING_COLOR, activityText } from "./Activity";

export type HeatMetric = "util" | "mem" | "health";

type Row = { kind: "group"; label: string; count: number } | { kind: "node"; node: HeatNode };

export function groupRows(groups: Group[]): Row[] {
  const rows: Row[] = [];
  for (const group of groups) {
    rows.push({ kind: "group", label: group.label, count: group.nodes.length });
    for (const member of group.nodes) rows.push({ kind: "node", node: member.node });
  }
  return rows;
}

// Down is red in every mode; otherwise health colours only in the health mode, and the
// sequential scale (which shares no colour with health) for utilization and memory.
export function cellColor(cell: HeatCell, metric: HeatMetric): string {
  if (cell.health === "down") return HEALTH_COLORS.down;
  if (metric === "health") return HEALTH_COLORS[cell.health] ?? HEALTH_COLORS.stale;
  return heatColor(metric === "util" ? cell.util : cell.mem);
}

function cellTextColor(cell: HeatCell, metric: HeatMetric): string {
  if (cell.health === "down" || metric === "health") return "#fff";
  return heatTextColor(metric === "util" ? cell.util : cell.mem);
}

// The tooltip's text: where, what, utilization and memory, activity, state.
export function cellTitle(cell: HeatCell, node: HeatNode): string {
  const activity = activityText(cell.act);
  const state = cell.spinning ? " · SPINNING (busy, SMs nearly idle)"
    : cell.idle ? " · IDLE ALLOCATION" : cell.allocated ? " · allocated" : "";
  return [
    `${node.hostname || node.node_id.slice(0, 8)} device ${cell.index} · ${cell.model}`,
    `utilization ${percent(cell.util)} · memory ${percent(cell.mem)} · ${watts(cell.power)}`,
    ...(activity ? [`activity: ${activity}`] : []),
    `${cell.health}${state}`,
  ].join("\n");
}

function Cell({ cell, node, metric, onOpen }: {
  cell: HeatCell; node: HeatNode; metric: HeatMetric; onOpen: (nodeId: string) => void;
}) {
  const title = cellTitle(cell, node);
  return (
    <Tooltip title={<span style={{ whiteSpace: "pre-line" }}>{title}</span>}>
      <Box component="button" onClick={() => onOpen(node.node_id)}
        data-testid={`cell-${node.node_id}-${cell.index}`} data-health={cell.health}
        data-idle={cell.idle ? "true" : "false"} data-spinning={cell.spinning ? "true" : "false"}
        aria-label={`device ${cell.index}`}
        sx={{
          width: 30, height: 22, mr: "3px", p: 0, cursor: "pointer", borderRadius: "3px",
          background: cellColor(cell, metric), fontSize: 10, color: cellTextColor(cell, metric),
          border: cell.spinning ? `2px dotted ${SPINNING_COLOR}`
            : cell.idle ? "2px dashed #212121" : "1px solid rgba(0,0,0,0.15)",
        }}>
        {cell.index}
      </Box>
    </Tooltip>
  );
}

// What a node row with no device says instead of its cells (its status is beside its name).
function noDeviceText(status: string): string {
  return status === "waiting" ? "waiting for its first summary" : "no devices reported";
}

export function Heatmap({ groups, metric, onOpen, height = 560 }: {
  groups: Group[]; metric: HeatMetric; onOpen: (nodeId: string) => void; height?: number;
}) {
  const rows = useMemo(() => groupRows(groups), [groups]);
  const parent = useRef<HTMLDivElement>(null);
  const virtual = useVirtualizer({
    count: rows.length,
    getScrollElement: () => parent.current,
    estimateSize: (i) => (rows[i].kind === "group" ? 34 : 28),
    overscan: 12,
    initialRect: { width: 1000, height },
  });
  return (
    <Box ref={parent} data-testid="heatmap"
      sx={{ height: Math.min(height, virtual.getTotalSize() + 4), minHeight: 40, overflow: "auto",
            border: "1px solid #e0e0e0", borderRadius: 1, background: "#fff" }}>
      <Box sx={{ height: virtual.getTotalSize(), position: "relative" }}>
        {virtual.getVirtualItems().map((item) => {
          const row = rows[item.index];
          return (
            <Box key={item.key} sx={{
              position: "absolute", top: 0, left: 0, right: 0, height: item.size,
              transform: `translateY(${item.start}px)`, display: "flex", alignItems: "center",
              px: 1,
            }}>
              {row.kind === "group" ? (
                <Typography variant="subtitle2" data-testid="group-header">
                  {row.label}{" "}
                  <Chip size="small" label={`${row.count} node${row.count === 1 ? "" : "s"}`} />
                </Typography>
              ) : (
                <>
                  <Box component="a" href={`#/node/${row.node.node_id}`} data-testid="node-row"
                    data-node={row.node.node_id}
                    sx={{ width: 190, flexShrink: 0, fontSize: 13, overflow: "hidden",
                          textOverflow: "ellipsis", whiteSpace: "nowrap" }}>
                    {row.node.hostname || row.node.node_id.slice(0, 12)}
                    {row.node.status !== "ok" ? ` (${row.node.status})` : ""}
                  </Box>
                  {row.node.devices.map((cell) => (
                    <Cell key={cell.uuid} cell={cell} node={row.node} metric={metric}
                      onOpen={onOpen} />
                  ))}
                  {row.node.devices.length === 0 && (
                    <Typography variant="caption" color="text.secondary" data-testid="no-devices">
                      {noDeviceText(row.node.status)}
                    </Typography>
                  )}
                </>
              )}
            </Box>
          );
        })}
      </Box>
    </Box>
  );
}
