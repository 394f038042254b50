// Types of the JSON API (docs/api.md) and a small fetch layer with polling.
import { useCallback, useEffect, useRef, useState } from "react";

export type Health = "ok" | "warning" | "stale" | "down";

export interface Config {
  host: "ray" | "standalone";
  ray_dashboard_url: string | null;
  refresh_s: number;
  started_error: string;
}

export interface Series {
  timestamps: number[];
  [key: string]: (number | null)[] | number[] | unknown;
}

export interface Summary {
  nodes: { total: number; ok: number; stale: number; unreachable: number; waiting: number };
  devices: {
    total: number; up: number; down: number; stale: number; warning: number; ok: number;
    allocated: number; idle_allocations: number;
  };
  by_model: { vendor: string; model: string; devices: number; down: number; nodes: number }[];
  utilization: { mean: number | null; max: number | null };
  memory: { used_bytes: number; total_bytes: number };
  power: { watts: number; limit_watts: number };
  findings: { total: number; by_severity: Record<string, number>; by_kind: Record<string, number> };
  refresh: { interval_s: number; rounds: number; last_round_at: number | null;
             discovery_error: string };
  history: {
    timestamps: number[]; utilization: (number | null)[]; power_watts: (number | null)[];
    memory_used_bytes: (number | null)[]; idle_allocations: (number | null)[];
  };
}

export interface HeatCell {
  uuid: string; index: string; model: string; health: Health; util: number | null;
  mem: number | null; power: number | null; temp: number | null; allocated: boolean;
  idle: boolean; act?: Activity; spinning?: boolean;
  hot?: boolean; // held down by heat, or its die at 85 °C or more (the head judges)
}

export interface HeatNode {
  node_id: string; hostname: string; status: string; nvlink_domain: string;
  devices: HeatCell[];
  placement?: Record<string, string>; // nvlink_domain, rack, zone, node_pool (columns form)
}

export interface Finding {
  kind: string; severity: "critical" | "warning" | "info"; node_id: string; hostname: string;
  message: string; device_uuid: string; device_index: string;
  details?: Record<string, unknown>;
}

export interface Link {
  link_type: string; index: number; up: boolean | null; transmit_bytes_per_s: number | null;
  receive_bytes_per_s: number | null; version: string; remote_type: string; peer_uuid: string;
  errors: number | null;
}

export interface Identity {
  pid: number; ray_job_id: string; ray_worker_id: string; ray_actor_id: string;
  actor_class: string; actor_name: string; ray_task_id: string; task_name: string;
}

export interface Process extends Identity {
  memory_bytes: number | null; sm_utilization: number | null;
}

// `idle_rule`: the signal that judged the holder ("activity", "utilization", "no_context").
export interface Holder extends Identity {
  fraction: number; idle: boolean; spinning?: boolean; shared?: boolean; idle_rule?: string;
}

// GPM engine activity ratios by engine (graphics, sm, sm_occupancy, tensor, dram, ...).
export type Activity = Record<string, number>;

export interface Fabric {
  state: number; status: number | null; health_summary: number | null; issues: string[];
  state_name: string; status_name: string; health_summary_name: string;
  incorrect_configuration: string; cluster_uuid: string; clique_id: string;
}

export interface Device {
  uuid: string; index: string; vendor: string; model: string; pci_bus_id: string; up: boolean;
  health: Health; utilization: number | null; memory_used_bytes: number | null;
  memory_total_bytes: number | null; memory_reserved_bytes?: number | null;
  activity?: Activity; pipe_activity?: Activity; spinning?: number | null;
  collective_suspected_stall?: boolean | null;
  power_watts: number | null;
  power_limit_watts: number | null; temperature_celsius: number | null;
  throttle_reasons: string[];
  pcie: { generation: number | null; generation_max: number | null; width: number | null;
          width_max: number | null };
  links: Link[]; processes: Process[]; holders: Holder[]; findings: Finding[];
  nvlink_transmit_bytes_per_s: number | null; nvlink_receive_bytes_per_s: number | null;
  pcie_transmit_bytes_per_s: number | null; pcie_receive_bytes_per_s: number | null;
  nvlink_domain: string; fabric: Fabric | null;
}

export interface NodeDetail {
  node_id: string; hostname: string; node_ip: string; url: string; status: string;
  error: string; snapshot_age_s: number | null; placement: Record<string, string>;
  devices: Device[]; topology: { matrix: string[][] }; findings: Finding[];
  backends: { name: string; up: boolean; device_count: number; message: string }[];
  history: { timestamps: number[]; utilization: (number | null)[];
             devices: Record<string, { utilization: (number | null)[] }> };
}

export interface Job {
  job_id: string; actors: number; tasks: number; workers: number; gpus: number; devices: number;
  idle_allocations: number; nodes: number;
}

export interface DeviceUse {
  node_id: string; hostname: string; uuid: string; index: string; model: string;
  fraction: number | null; allocated: boolean; idle: boolean; utilization: number | null;
  process_memory_bytes: number | null; process_sm_utilization: number | null;
  spinning?: boolean; shared?: boolean; activity?: Activity;
}

export interface Unit {
  key: string; kind: "actor" | "task" | "worker"; job_id: string; actor_id: string;
  actor_class: string; actor_name: string; task_id: string; task_name: string; pid: number;
  node_id: string; hostname: string; devices: DeviceUse[]; gpus: number; idle: boolean;
}

export interface JobDetail extends Job { units: Unit[] }

export class ApiError extends Error {
  constructor(public status: number, message: string) {
    super(message);
  }
}

// API paths are relative to the page (…/accelerators/), whichever host serves it.
export async function getJson<T>(path: string): Promise<T> {
  const reply = await fetch(`api/${path}`, { credentials: "same-origin" });
  if (!reply.ok) {
    let message = `${reply.status} ${reply.statusText}`;
    try {
      const body = await reply.json();
      if (body && body.error) message = body.error;
    } catch {
      /* not JSON */
    }
    throw new ApiError(reply.status, message);
  }
  return (await reply.json()) as T;
}

export async function authenticate(token: string): Promise<boolean> {
  const reply = await fetch("api/authenticate", {
    method: "POST", headers: { Authorization: `Bearer ${token}` }, credentials: "same-origin",
  });
  return reply.ok;
}

// GET nodes/{id}/record: the node agent's recent history as a scenario file (a download).
export const RECORDING_LAST = "10m";
export function recordingPath(nodeId: string, last: string = RECORDING_LAST): string {
  return `api/nodes/${encodeURIComponent(nodeId)}/record?last=${encodeURIComponent(last)}`;
}

export interface Polled<T> { data: T | null; error: ApiError | null; reload: () => void }

// Fetches `path` now and every `everyMs` while mounted; keeps the last good answer.
export function usePoll<T>(path: string | null, everyMs: number): Polled<T> {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  const [tick, setTick] = useState(0);
  const current = useRef(path);
  current.current = path;
  const reload = useCallback(() => setTick((t) => t + 1), []);
  useEffect(() => {
    setData(null);
    setError(null);
  }, [path]);
  useEffect(() => {
    if (path === null) return undefined;
    let cancelled = false;
    const load = () => {
      getJson<T>(path)
        .then((body) => {
          if (!cancelled && current.current === path) {
            setData(body);
            setError(null);
          }
        })
        .catch((e: unknown) => {
          if (!cancelled) setError(e instanceof ApiError ? e : new ApiError(0, String(e)));
        });
    };
    load();
    const timer = window.setInterval(load, Math.max(everyMs, 1000));
    return () => {
      cancelled = true;
      window.clearInterval(timer);
    };
  }, [path, everyMs, tick]);
  return { data, error, reload };
}

// Links into Ray's own dashboard (hash routes of Ray 2.x's UI).
export function rayLink(base: string | null | undefined, route: string): string | null {
  if (base == null) return null;
  const root = base.endsWith("/") ? base : `${base}/`;
  return `${root}#/${route}`;
}

// GET transfers: Ray Direct Transport transfers joined with the cluster (docs/api.md).
export interface TransferDevice { uuid: string; index: string; model: string; node_id: string;
                                  hostname: string }

export interface TransferEnd {
  task_id: string; actor_id: string; actor_class: string; state: string; node_id: string;
  hostname: string; devices: TransferDevice[];
}

export interface Transfer {
  job_id: string; since: number; age_s: number; stalled: boolean; consumer_task_id: string;
  source: TransferEnd; destination: TransferEnd; reported_by: string;
  slow?: boolean; // in flight past the agent's report threshold (stalled ones too)
}

export interface TransferAbort {
  job_id: string; age_s: number; at: number; ago_s: number; source: TransferEnd;
  destination: TransferEnd;
}

export interface TransferJob {
  job_id: string; in_flight: number; stalled: number; oldest_age_s: number | null; aborts: number;
}

export interface Transfers {
  generated_at: number; pairing_nodes: { node_id: string; hostname: string }[];
  in_flight: number; stalled: number; oldest_age_s: number | null; dropped: number;
  by_job: TransferJob[]; transfers: Transfer[]; aborts: TransferAbort[];
  collective_stalls: Finding[];
}
