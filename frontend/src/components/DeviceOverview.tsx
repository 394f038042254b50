// Every device of the cluster at once on one canvas (80,000 cells would be 80,000 DOM
// nodes otherwise), in the overview's order and groups. Hover names a device; a click on
// a device opens its node, a click on a group's header opens the group.
import { useEffect, useMemo, useRef, useState } from "react";
import { Box } from "@mui/material";
import type { HeatCell } from "../api";
import { HEALTH_COLORS, heatColor } from "../format";
import { counted, type Group } from "../overview";
import { HEADER_HEIGHT, hitTest, layoutOverview, type Layout } from "../overviewLayout";
import { SPINNING_COLOR } from "./Activity";
import { cellTitle, type HeatMetric } from "./Heatmap";

const IDLE_MARK = "#212121";
const DEFAULT_WIDTH = 1200;

// The cell's fill on a canvas: cellColor's rules, with the hatch of an absent value as a
// pattern (canvases cannot paint CSS gradients).
export function canvasFill(cell: HeatCell, metric: HeatMetric): string | "absent" {
  if (cell.health === "down") return HEALTH_COLORS.down;
  if (metric === "health") return HEALTH_COLORS[cell.health] ?? HEALTH_COLORS.stale;
  const value = metric === "util" ? cell.util : cell.mem;
  return value == null ? "absent" : heatColor(value);
}

function hatch(ctx: CanvasRenderingContext2D): CanvasPattern | string {
  const tile = document.createElement("canvas");
  tile.width = tile.height = 4;
  const t = tile.getContext("2d");
  if (!t) return "#ffffff";
  t.fillStyle = "#ffffff";
  t.fillRect(0, 0, 4, 4);
  t.fillStyle = "#c0c0c0";
  for (let i = 0; i < 4; i += 1) t.fillRect(i, 3 - i, 1, 1);
  return ctx.createPattern(tile, "repeat") ?? "#ffffff";
}

function headerText(group: Group): string {
  const parts = [counted(group.nodes.length, "node"), counted(group.devices, "device")];
  if (group.counts.down) parts.push(`${group.counts.down} down`);
  if (group.counts.spinning) parts.push(`${group.counts.spinning} spinning`);
  if (group.counts.idle) parts.push(`${group.counts.idle} idle`);
  if (group.counts.hot) parts.push(`${group.counts.hot} hot`);
  return `${group.label}  ·  ${parts.join(" · ")}`;
}

function draw(canvas: HTMLCanvasElement, layout: Layout, groups: Group[], metric: HeatMetric) {
  const ctx = canvas.getContext("2d");
  if (!ctx) return; // no canvas (jsdom): the layout and its counts still hold
  const ratio = window.devicePixelRatio || 1;
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, layout.width, layout.height);
  ctx.font = "12px Roboto, Helvetica, Arial, sans-serif";
  ctx.textBaseline = "middle";
  for (const header of layout.headers) {
    ctx.fillStyle = "#37474f";
    ctx.fillText(headerText(groups[header.group]), header.x + 2, header.y + HEADER_HEIGHT / 2,
                 header.width - 4);
  }
  const absent = hatch(ctx);
  const { cell: size, inner } = layout;
  const step = size + inner;
  const big = size >= 6;
  const halos: [number, number, string][] = [];
  for (const tile of layout.tiles) {
    tile.node.cells.forEach((cell, i) => {
      const x = tile.x + i * step;
      const fill = canvasFill(cell, metric);
      ctx.fillStyle = fill === "absent" ? absent : fill;
      ctx.fillRect(x, tile.y, size, size);
      const mark = cell.health === "down" ? (big ? null : HEALTH_COLORS.down)
        : cell.spinning ? SPINNING_COLOR : cell.idle ? IDLE_MARK : null;
      if (mark && big) {
        ctx.strokeStyle = mark;
        ctx.lineWidth = 1.5;
        ctx.setLineDash(cell.spinning ? [1, 1.5] : [3, 2]);
        ctx.strokeRect(x + 0.5, tile.y + 0.5, size - 1, size - 1);
      } else if (mark) {
        halos.push([x, tile.y, mark]);
      }
    });
  }
  ctx.setLineDash([]);
  // Cells a few pixels wide are too small to show a mark: a down, spinning or idle one
  // gets a ring around it, drawn over its neighbours, so a few among 80,000 stand out.
  ctx.lineWidth = 1;
  for (const [x, y, mark] of halos) {
    ctx.strokeStyle = mark;
    ctx.strokeRect(x - 1.5, y - 1.5, size + 3, size + 3);
  }
}

export function DeviceOverview({ groups, metric, onOpenNode, onOpenGroup, maxHeight = 620 }: {
  groups: Group[]; metric: HeatMetric; onOpenNode: (nodeId: string) => void;
  onOpenGroup: (key: string) => void; maxHeight?: number;
}) {
  const box = useRef<HTMLDivElement>(null);
  const canvas = useRef<HTMLCanvasElement>(null);
  const [width, setWidth] = useState(DEFAULT_WIDTH);
  const [tip, setTip] = useState<{ x: number; y: number; text: string } | null>(null);
  useEffect(() => {
    const element = box.current;
    if (!element) return undefined;
    const measure = () => { if (element.clientWidth > 0) setWidth(element.clientWidth); };
    measure();
    if (typeof ResizeObserver === "undefined") return undefined;
    const observer = new ResizeObserver(measure);
    observer.observe(element);
    return () => observer.disconnect();
  }, []);
  const layout = useMemo(() => layoutOverview(groups, width, maxHeight),
                         [groups, width, maxHeight]);
  useEffect(() => {
    if (canvas.current) draw(canvas.current, layout, groups, metric);
  }, [layout, groups, metric]);
  const ratio = typeof window !== "undefined" ? window.devicePixelRatio || 1 : 1;
  const first = layout.tiles[0]; // where the first device is (for tests and tools)
  const firstCell = first ? `${first.x + layout.cell / 2},${first.y + layout.cell / 2}` : "";

  const at = (event: React.MouseEvent<HTMLCanvasElement>) => {
    const rect = event.currentTarget.getBoundingClientRect();
    return { x: event.clientX - rect.left, y: event.clientY - rect.top };
  };
  const onMove = (event: React.MouseEvent<HTMLCanvasElement>) => {
    const { x, y } = at(event);
    const hit = hitTest(layout, x, y);
    if (hit?.kind === "cell") {
      const group = groups[hit.tile.group];
      const cell = hit.tile.node.cells[hit.cell];
      setTip({ x, y, text: `${cellTitle(cell, hit.tile.node.node)}\n${group.label}` });
    } else if (hit?.kind === "header") {
      setTip({ x, y, text: `${groups[hit.group].label}: click for its nodes` });
    } else {
      setTip(null);
    }
  };
  const onClick = (event: React.MouseEvent<HTMLCanvasElement>) => {
    const { x, y } = at(event);
    const hit = hitTest(layout, x, y);
    if (hit?.kind === "cell") onOpenNode(hit.tile.node.node.node_id);
    else if (hit?.kind === "header") onOpenGroup(groups[hit.group].key);
  };
  return (
    <Box ref={box} data-testid="overview" data-cells={layout.cells} data-nodes={layout.tiles.length}
      data-groups={groups.length} data-cell-px={layout.cell} data-first-cell={firstCell}
      sx={{ position: "relative", width: "100%", minHeight: 24 }}>
      <canvas ref={canvas} data-testid="overview-canvas" aria-label={
        `${layout.cells} devices on ${layout.tiles.length} nodes`}
        width={Math.ceil(layout.width * ratio)} height={Math.ceil(Math.max(layout.height, 1) * ratio)}
        style={{ width: layout.width, height: layout.height, display: "block",
                 cursor: tip ? "pointer" : "default" }}
        onMouseMove={onMove} onMouseLeave={() => setTip(null)} onClick={onClick} />
      {tip && (
        <Box data-testid="overview-tip" sx={{
          position: "absolute", left: Math.min(tip.x + 14, Math.max(layout.width - 300, 0)),
          top: tip.y + 14, pointerEvents: "none", whiteSpace: "pre-line", zIndex: 2,
          background: "rgba(33,33,33,0.92)", color: "#fff", fontSize: 12, px: 1, py: 0.5,
          borderRadius: 1, maxWidth: 320 }}>
          {tip.text}
        </Box>
      )}
    </Box>
  );
}
