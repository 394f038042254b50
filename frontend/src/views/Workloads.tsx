// Job -> actor/task -> devices, idle allocations first and highlighted.
import { useMemo, useRef } from "react";
import { useVirtualizer } from "@tanstack/react-virtual";
import {
  Alert, Box, Chip, Link, Stack, Table, TableBody, TableCell, TableHead, TableRow, Typography,
} from "@mui/material";
import { rayLink, usePoll, type DeviceUse, type Job, type JobDetail, type Unit } from "../api";
import { ActivityCell, HolderStateChip } from "../components/Activity";
import { JobHistory } from "../components/JobHistory";
import { DASH, bytes, percent } from "../format";
import { transfersHref } from "./Transfers";

function unitName(u: Unit): string {
  if (u.kind === "actor") return `${u.actor_class || "actor"}${u.actor_name ? ` "${u.actor_name}"` : ""}`;
  if (u.kind === "task") return u.task_name || "task";
  return `worker pid ${u.pid}`;
}

// Whether the API carries per-holder activity (older heads do not: show no column then,
// rather than a dash that would read as "not measured").
export function carriesActivity(units: Unit[]): boolean {
  return units.some((u) => u.devices.some((d) => d.activity !== undefined || d.shared !== undefined));
}

// One row per device of each unit (a job across 10,000 nodes can have 80,000).
export interface UnitDevice { unit: Unit; device: DeviceUse; first: boolean }

export function unitDevices(units: Unit[]): UnitDevice[] {
  return units.flatMap((unit) => unit.devices.map((device, i) => ({ unit, device, first: i === 0 })));
}

// Jobs with more rows than this render only the rows in view.
export const WINDOWED_ABOVE = 200;
const ROW_HEIGHT = 53;

function UnitDeviceRow({ row, ray, activity }: {
  row: UnitDevice; ray: string | null; activity: boolean;
}) {
  const { unit, device: d } = row;
  const link = unit.kind === "actor" ? rayLink(ray, `actors/${unit.actor_id}`)
    : unit.kind === "task" ? rayLink(ray, `jobs/${unit.job_id}/tasks/${unit.task_id}`) : null;
  return (
    <TableRow data-testid="unit-device"
      data-idle={d.idle ? "true" : "false"} data-spinning={d.spinning ? "true" : "false"}
      sx={{ background: d.spinning ? "#f3e5f5" : d.idle ? "#fff3e0" : undefined }}>
      <TableCell data-testid={row.first ? "unit" : undefined}>
        {row.first && <>
          {link ? <Link href={link}>{unitName(unit)}</Link> : unitName(unit)}
          <Typography variant="caption" display="block" color="text.secondary">
            {unit.kind} · pid {unit.pid}
          </Typography>
        </>}
      </TableCell>
      <TableCell><Link href={`#/node/${d.node_id}`}>
        {d.hostname || d.node_id.slice(0, 12)}</Link> device {d.index}</TableCell>
      <TableCell align="right">{d.fraction ?? "not allocated"}</TableCell>
      <TableCell align="right">{percent(d.utilization)}</TableCell>
      <TableCell align="right">{percent(d.process_sm_utilization)}</TableCell>
      <TableCell align="right">{bytes(d.process_memory_bytes)}</TableCell>
      {activity && <TableCell>{d.shared ? <Chip size="small" variant="outlined" label="shared" />
        : <ActivityCell activity={d.activity ?? {}} />}</TableCell>}
      <TableCell>{d.spinning ? <HolderStateChip holder={d} />
        : d.idle ? <HolderStateChip holder={d} label="IDLE ALLOCATION" />
        : d.allocated ? "in use" : "using, not allocated"}</TableCell>
    </TableRow>
  );
}

// A spacer standing for the rows out of view above or below.
function Spacer({ height, columns }: { height: number; columns: number }) {
  if (height <= 0) return null;
  return <TableRow style={{ height }}><TableCell colSpan={columns} sx={{ p: 0, border: 0 }} /></TableRow>;
}

export function JobPanel({ jobId, refreshMs, ray }: {
  jobId: string; refreshMs: number; ray: string | null;
}) {
  const { data, error } = usePoll<JobDetail>(`jobs/${encodeURIComponent(jobId)}`, refreshMs);
  const rows = useMemo(() => unitDevices(data?.units ?? []), [data]);
  const scroller = useRef<HTMLDivElement>(null);
  const windowed = rows.length > WINDOWED_ABOVE;
  const virtual = useVirtualizer({
    count: windowed ? rows.length : 0, getScrollElement: () => scroller.current,
    estimateSize: () => ROW_HEIGHT, overscan: 20, initialRect: { width: 1000, height: 640 },
  });
  if (error && !data) return <Alert severity="error">{error.message}</Alert>;
  if (!data) return <Typography>Loading…</Typography>;
  const activity = carriesActivity(data.units);
  const columns = activity ? 8 : 7;
  const items = windowed ? virtual.getVirtualItems() : [];
  const shown = windowed ? items.map((item) => rows[item.index]) : rows;
  const above = items.length ? items[0].start : 0;
  const below = items.length ? virtual.getTotalSize() - items[items.length - 1].end : 0;
  return (
    <>
    <JobHistory jobId={jobId} refreshMs={refreshMs} />
    <Box ref={scroller} sx={windowed ? { maxHeight: 640, overflow: "auto" } : undefined}>
    <Table size="small" stickyHeader={windowed} data-testid="job-units" data-rows={rows.length}>
      <TableHead>
        <TableRow>
          <TableCell>Actor / task</TableCell><TableCell>Device</TableCell>
          <TableCell align="right">Share</TableCell><TableCell align="right">Device util</TableCell>
          <TableCell align="right">Its SM</TableCell><TableCell align="right">Its memory</TableCell>
          {activity && <TableCell>Activity</TableCell>}<TableCell>State</TableCell>
        </TableRow>
      </TableHead>
      <TableBody>
        <Spacer height={above} columns={columns} />
        {shown.map((row) => (
          <UnitDeviceRow key={`${row.unit.key}-${row.device.uuid}`} row={row} ray={ray}
            activity={activity} />
        ))}
        <Spacer height={below} columns={columns} />
      </TableBody>
    </Table>
    </Box>
    </>
  );
}

export function WorkloadsView({ jobId, refreshMs, ray }: {
  jobId: string | null; refreshMs: number; ray: string | null;
}) {
  const { data, error } = usePoll<{ jobs: Job[] }>("jobs", refreshMs);
  const jobs = data?.jobs ?? [];
  const selected = jobId ?? (jobs.length === 1 ? jobs[0].job_id : null);
  return (
    <Stack spacing={2}>
      {error && <Alert severity="error">{error.message}</Alert>}
      {data && jobs.length === 0 && <Typography>No Ray worker holds or uses a device.</Typography>}
      <Table size="small" data-testid="jobs" sx={{ maxWidth: 900 }}>
        <TableHead>
          <TableRow>
            <TableCell>Job</TableCell><TableCell align="right">Actors</TableCell>
            <TableCell align="right">Tasks</TableCell><TableCell align="right">Devices held</TableCell>
            <TableCell align="right">Devices</TableCell><TableCell align="right">Nodes</TableCell>
            <TableCell>Idle allocations</TableCell><TableCell>Ray</TableCell>
          </TableRow>
        </TableHead>
        <TableBody>
          {jobs.map((j) => {
            const ray_job = j.job_id ? rayLink(ray, `jobs/${j.job_id}`) : null;
            return (
              <TableRow key={j.job_id} hover selected={j.job_id === selected}
                data-testid={`job-${j.job_id}`}>
                <TableCell><Link href={`#/workloads/${j.job_id}`}>{j.job_id || "(no job)"}</Link></TableCell>
                <TableCell align="right">{j.actors}</TableCell>
                <TableCell align="right">{j.tasks}</TableCell>
                <TableCell align="right">{j.gpus}</TableCell>
                <TableCell align="right">{j.devices}</TableCell>
                <TableCell align="right">{j.nodes}</TableCell>
                <TableCell>{j.idle_allocations > 0
                  ? <Chip size="small" color="warning" label={`${j.idle_allocations} idle`} /> : DASH}
                </TableCell>
                <TableCell>{ray_job ? <Link href={ray_job}>job page</Link> : DASH}</TableCell>
              </TableRow>
            );
          })}
        </TableBody>
      </Table>
      {selected && (
        <Box>
          <Typography variant="h6" data-testid="job-title">Job {selected}</Typography>
          <Link href={transfersHref({ job: selected })} data-testid="job-transfers-link">
            Its transfers (Ray Direct Transport)</Link>
          <JobPanel jobId={selected} refreshMs={refreshMs} ray={ray} />
        </Box>
      )}
    </Stack>
  );
}
