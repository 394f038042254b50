// Where every device of the overview goes on its canvas: one strip of cells per node,
// strips flowing left to right in the order, groups one after another. With few groups
// each has a header line (unless the headers would shrink the cells below READABLE_CELL);
// otherwise groups are told apart by a gap (and named on hover), so that 10,000 nodes in
// 625 racks still fit on one screen.
import type { Group, OverviewNode } from "./overview";

export const MAX_CELL = 24;
export const MIN_CELL = 2;
export const HEADER_HEIGHT = 18;
export const MAX_HEADED_GROUPS = 24;
export const READABLE_CELL = 8;
const NODE_GAP = 2; // between two nodes' strips, and between lines
const GROUP_GAP = 8; // between two groups in the flow

export interface Tile { x: number; y: number; group: number; node: OverviewNode }
export interface Header { x: number; y: number; width: number; group: number }

export interface Layout {
  cell: number; // a cell's side, pixels
  inner: number; // gap between two cells of one node
  width: number;
  height: number;
  tiles: Tile[];
  headers: Header[];
  cells: number; // devices placed
}

function tileWidth(node: OverviewNode, cell: number, inner: number): number {
  return node.cells.length * cell + Math.max(node.cells.length - 1, 0) * inner;
}

function place(groups: Group[], width: number, cell: number, headed: boolean): Layout {
  const inner = cell >= 8 ? 1 : 0;
  const line = cell + NODE_GAP;
  const tiles: Tile[] = [];
  const headers: Header[] = [];
  let x = 0;
  let y = 0;
  let cells = 0;
  groups.forEach((group, g) => {
    if (headed) {
      if (x > 0) { y += line + GROUP_GAP; x = 0; }
      headers.push({ x: 0, y, width, group: g });
      y += HEADER_HEIGHT;
    } else if (x > 0) {
      x += GROUP_GAP - NODE_GAP;
    }
    for (const node of group.nodes) {
      if (node.cells.length === 0) continue; // listed below the canvas, nothing to paint
      const w = tileWidth(node, cell, inner);
      if (x > 0 && x + w > width) { x = 0; y += line; }
      tiles.push({ x, y, group: g, node });
      cells += node.cells.length;
      x += w + NODE_GAP;
    }
  });
  const height = tiles.length ? y + line : 0;
  return { cell, inner, width, height, tiles, headers, cells };
}

// The largest cells (MIN_CELL to MAX_CELL pixels) with which everything fits in
// `maxHeight`; the smallest when nothing does (the overview then grows taller).
function fit(groups: Group[], width: number, maxHeight: number, headed: boolean): Layout {
  for (let cell = MAX_CELL; cell > MIN_CELL; cell -= 1) {
    const layout = place(groups, width, cell, headed);
    if (layout.height <= maxHeight) return layout;
  }
  return place(groups, width, MIN_CELL, headed);
}

// The overview's layout: with headers where there are few groups and the cells stay
// readable with them (or as big as without), else without.
export function layoutOverview(groups: Group[], width: number, maxHeight: number): Layout {
  const flow = fit(groups, width, maxHeight, false);
  if (groups.length > MAX_HEADED_GROUPS) return flow;
  const headed = fit(groups, width, maxHeight, true);
  return headed.cell >= Math.min(flow.cell, READABLE_CELL) ? headed : flow;
}

export type Hit =
  | { kind: "cell"; tile: Tile; cell: number }
  | { kind: "header"; group: number }
  | null;

// What is under the point (x, y) of the canvas.
export function hitTest(layout: Layout, x: number, y: number): Hit {
  for (const header of layout.headers) {
    if (y >= header.y && y < header.y + HEADER_HEIGHT && x >= header.x
        && x < header.x + header.width) {
      return { kind: "header", group: header.group };
    }
  }
  const step = layout.cell + layout.inner;
  for (const tile of layout.tiles) {
    if (y < tile.y || y >= tile.y + layout.cell || x < tile.x) continue;
    const at = Math.floor((x - tile.x) / step);
    if (at < tile.node.cells.length && x - tile.x - at * step < layout.cell) {
      return { kind: "cell", tile, cell: at };
    }
  }
  return null;
}
