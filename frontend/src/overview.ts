// The cluster overview's data: the heatmap's columns decoded into nodes, the one order
// of what needs attention, the filters and the groups (NVLink domain, rack, zone, node pool).
import type { HeatCell, HeatNode, Health } from "./api";

// GET heatmap?form=columns (docs/api.md): parallel node columns, then parallel device
// columns with each node's devices in a run of `nodes.devices[i]`.
export interface HeatColumns {
  generated_at: number;
  form: "columns";
  health: Health[];
  models: string[];
  flags: { allocated: number; idle: number; spinning: number; hot?: number };
  nodes: {
    node_id: string[]; hostname: string[]; status: string[]; devices: number[];
    nvlink_domain: string[]; rack: string[]; zone: string[]; node_pool: string[];
  };
  devices: {
    index: string[]; model: number[]; health: number[]; util: (number | null)[];
    mem: (number | null)[]; power: (number | null)[]; temp: (number | null)[]; flags: number[];
  };
}

export const GROUP_KEYS = ["nvlink_domain", "rack", "zone", "node_pool"] as const;
export type GroupKey = (typeof GROUP_KEYS)[number];
export type GroupBy = GroupKey | "none";
export const GROUP_NAMES: Record<GroupBy, string> = {
  nvlink_domain: "NVLink domain", rack: "Rack", zone: "Zone", node_pool: "Node pool",
  none: "All nodes",
};

// The nodes of the columns form, each with its cells (and its placement for grouping).
export function decodeColumns(doc: HeatColumns): HeatNode[] {
  const n = doc.nodes;
  const d = doc.devices;
  const nodes: HeatNode[] = [];
  let at = 0;
  for (let i = 0; i < n.node_id.length; i += 1) {
    const devices: HeatCell[] = [];
    for (let k = 0; k < n.devices[i]; k += 1, at += 1) {
      const flags = d.flags[at];
      devices.push({
        uuid: `${n.node_id[i]}/${d.index[at]}`, index: d.index[at], model: doc.models[d.model[at]],
        health: doc.health[d.health[at]], util: d.util[at], mem: d.mem[at], power: d.power[at],
        temp: d.temp[at], allocated: (flags & doc.flags.allocated) !== 0,
        idle: (flags & doc.flags.idle) !== 0, spinning: (flags & doc.flags.spinning) !== 0,
        hot: (flags & (doc.flags.hot ?? 0)) !== 0,
      });
    }
    nodes.push({
      node_id: n.node_id[i], hostname: n.hostname[i], status: n.status[i],
      nvlink_domain: n.nvlink_domain[i], devices,
      placement: { nvlink_domain: n.nvlink_domain[i], rack: n.rack[i], zone: n.zone[i],
                   node_pool: n.node_pool[i] },
    });
  }
  return nodes;
}

// What needs attention, most first: the one order of the overview, its groups and lists.
export const FOCUSES = ["down", "spinning", "idle", "hot", "stale", "warning"] as const;
export type Focus = (typeof FOCUSES)[number];
export const FOCUS_NAMES: Record<Focus | "all", string> = {
  all: "All", down: "Down", spinning: "Spinning", idle: "Idle allocation", hot: "Hot",
  stale: "Stale", warning: "Warning",
};
const CALM = FOCUSES.length; // the rank of a device that needs nothing

export function isHot(cell: HeatCell): boolean {
  return cell.health !== "down" && !!cell.hot;
}

export function hasFocus(cell: HeatCell, focus: Focus): boolean {
  switch (focus) {
    case "down": return cell.health === "down";
    case "spinning": return cell.health !== "down" && !!cell.spinning;
    case "idle": return cell.health !== "down" && cell.idle;
    case "hot": return isHot(cell);
    case "stale": return cell.health === "stale";
    case "warning": return cell.health === "warning";
  }
}

// A device's rank in the order (0 = down ... CALM = nothing to see).
export function attentionRank(cell: HeatCell): number {
  for (let rank = 0; rank < FOCUSES.length; rank += 1) {
    if (hasFocus(cell, FOCUSES[rank])) return rank;
  }
  return CALM;
}

function byAttention(a: HeatCell, b: HeatCell): number {
  return attentionRank(a) - attentionRank(b) || (b.util ?? -1) - (a.util ?? -1)
    || a.index.localeCompare(b.index, undefined, { numeric: true });
}

// How many devices there are of each rank (index = rank).
function rankCounts(cells: HeatCell[]): number[] {
  const counts = new Array<number>(CALM + 1).fill(0);
  for (const cell of cells) counts[attentionRank(cell)] += 1;
  return counts;
}

// Worst rank first; at equal rank, more devices at it first (then the next rank, ...).
function compareCounts(a: number[], b: number[]): number {
  for (let rank = 0; rank < CALM; rank += 1) {
    if (a[rank] !== b[rank]) return b[rank] - a[rank];
  }
  return 0;
}

export interface OverviewNode {
  node: HeatNode;
  cells: HeatCell[]; // the devices the filter keeps, in the order (all of them for "all")
  counts: number[];
}

export interface Group {
  key: string; // the placement value ("" when the nodes report none)
  label: string;
  nodes: OverviewNode[];
  devices: number; // devices the filter keeps
  counts: Record<Focus, number>;
}

export function groupKeyOf(node: HeatNode, by: GroupBy): string {
  if (by === "none") return "";
  if (by === "nvlink_domain") return node.placement?.nvlink_domain ?? node.nvlink_domain ?? "";
  return node.placement?.[by] ?? "";
}

export function groupLabel(by: GroupBy, key: string): string {
  return by === "none" ? GROUP_NAMES.none : `${GROUP_NAMES[by]}: ${key || "none reported"}`;
}

// Nodes in the order: by their devices' ranks (compareCounts), nodes with no device to
// show after the others, then by name.
export function orderNodes(nodes: OverviewNode[]): OverviewNode[] {
  return [...nodes].sort((a, b) => compareCounts(a.counts, b.counts)
    || Number(a.cells.length === 0) - Number(b.cells.length === 0)
    || (a.node.hostname || a.node.node_id).localeCompare(b.node.hostname || b.node.node_id,
                                                       undefined, { numeric: true }));
}

// The overview: nodes with a device the filter keeps, grouped, each group and node in the
// order, each node's kept devices in it too. `only` keeps one group (the drill-down).
// "all" keeps every node, those with no device too (waiting for their first summary,
// unreachable with nothing kept, or with no device found), so none is missing from the list.
export function overviewGroups(nodes: HeatNode[], by: GroupBy, focus: Focus | "all",
                               only: string | null = null): Group[] {
  const byKey = new Map<string, OverviewNode[]>();
  for (const node of nodes) {
    const key = groupKeyOf(node, by);
    if (only !== null && key !== only) continue;
    const kept = focus === "all" ? node.devices : node.devices.filter((c) => hasFocus(c, focus));
    if (kept.length === 0 && focus !== "all") continue;
    const cells = [...kept].sort(byAttention);
    const entry = { node, cells, counts: rankCounts(node.devices) };
    const members = byKey.get(key);
    if (members) members.push(entry);
    else byKey.set(key, [entry]);
  }
  const groups: (Group & { ranks: number[] })[] = [];
  for (const [key, members] of byKey) {
    const ranks = new Array<number>(CALM + 1).fill(0);
    let devices = 0;
    for (const member of members) {
      devices += member.cells.length;
      member.counts.forEach((count, rank) => { ranks[rank] += count; });
    }
    const counts = Object.fromEntries(FOCUSES.map((f) => [f, 0])) as Record<Focus, number>;
    for (const member of members) {
      for (const cell of member.node.devices) {
        for (const f of FOCUSES) if (hasFocus(cell, f)) counts[f] += 1;
      }
    }
    groups.push({ key, label: groupLabel(by, key), nodes: orderNodes(members), devices, counts,
                  ranks });
  }
  groups.sort((a, b) => compareCounts(a.ranks, b.ranks)
    || a.key.localeCompare(b.key, undefined, { numeric: true }));
  return groups.map(({ ranks: _ranks, ...group }) => group);
}

// The nodes whose hostname or id contains `text` (any case); all of them for "".
export function findNodes(nodes: HeatNode[], text: string): HeatNode[] {
  const wanted = text.trim().toLowerCase();
  if (!wanted) return nodes;
  return nodes.filter((n) => n.hostname.toLowerCase().includes(wanted)
    || n.node_id.toLowerCase().includes(wanted));
}

// "1 node", "2 nodes", "10,000 devices".
export function counted(count: number, noun: string): string {
  return `${count.toLocaleString("en-US")} ${noun}${count === 1 ? "" : "s"}`;
}

// Devices of each focus over the whole cluster (for the filter's counts).
export function focusCounts(nodes: HeatNode[]): Record<Focus | "all", number> {
  const counts = { all: 0, ...Object.fromEntries(FOCUSES.map((f) => [f, 0])) } as
    Record<Focus | "all", number>;
  for (const node of nodes) {
    for (const cell of node.devices) {
      counts.all += 1;
      for (const f of FOCUSES) if (hasFocus(cell, f)) counts[f] += 1;
    }
  }
  return counts;
}
