// One node: its devices, topology matrix, per-link bandwidth and processes on each device.
import { Fragment, useState } from "react";
import {
  Alert, Box, Chip, Link, Stack, Table, TableBody, TableCell, TableHead, TableRow, Tooltip,
  Typography,
} from "@mui/material";
import { rayLink, recordingPath, usePoll, type Device, type NodeDetail } from "../api";
import { ActivityCell, HolderStateChip, activityText, withTensor } from "../components/Activity";
import { FabricTable, fabricDevices } from "../components/FabricTable";
import { HistoryRange, sourceText, useHistory, type HistoryRangeName } from "../components/HistoryRange";
import { InfoMark } from "../components/InfoMark";
import { Sparkline } from "../components/Sparkline";
import { DASH, HEALTH_COLORS, MEMORY_AS_RAY_SHOWS_IT, bytes, percent, rate, watts } from "../format";
import { FindingRow } from "./Findings";
import { transfersHref } from "./Transfers";

function HealthChip({ health }: { health: string }) {
  return <Chip size="small" label={health} data-testid="health"
    sx={{ background: HEALTH_COLORS[health], color: "#fff" }} />;
}

function Holders({ device, ray }: { device: Device; ray: string | null }) {
  if (!device.holders.length) return <>{DASH}</>;
  return (
    <>
      {device.holders.map((h) => {
        const who = h.actor_class || h.task_name || `pid ${h.pid}`;
        const href = h.ray_actor_id ? rayLink(ray, `actors/${h.ray_actor_id}`) : null;
        // A whole-device holder's activity is the device's; a fractional one shares it.
        const activity = h.shared ? "" : activityText(withTensor(device.activity, device.pipe_activity));
        return (
          <Box key={`${h.pid}`} data-testid="holder" data-idle={h.idle ? "true" : "false"}
            data-spinning={h.spinning ? "true" : "false"}
            sx={{ color: h.idle ? "warning.dark" : undefined }}>
            {href ? <Link href={href}>{who}</Link> : who} ×{h.fraction}
            <HolderStateChip holder={h} />
            {h.shared && <Chip size="small" variant="outlined" label="shared" sx={{ ml: 0.5 }}
              title="holds a fraction of the device: judged by its own process's NVML figures" />}
            {activity && <Typography variant="caption" display="block" color="text.secondary"
              data-testid="holder-activity">{activity}</Typography>}
          </Box>
        );
      })}
    </>
  );
}

export function NodeView({ nodeId, refreshMs, ray }: {
  nodeId: string; refreshMs: number; ray: string | null;
}) {
  const { data: node, error } = usePoll<NodeDetail>(`nodes/${encodeURIComponent(nodeId)}`, refreshMs);
  const [range, setRange] = useState<HistoryRangeName>("1h");
  const series = useHistory(range, { node_id: nodeId }, refreshMs);
  // A node the head no longer knows (404) has no current values to show; any other failed
  // refresh leaves the last answer on screen, saying it is not current.
  if (error && (!node || error.status === 404)) {
    return <Alert severity="error" data-testid="node-error">{error.message}</Alert>;
  }
  if (!node) return <Typography>Loading…</Typography>;
  const rayNode = rayLink(ray, `cluster/nodes/${node.node_id}`);
  return (
    <Stack spacing={2}>
      <Box>
        <Typography variant="h5" data-testid="node-title">
          {node.hostname || node.node_id} <HealthChip health={node.status === "ok" ? "ok" : "stale"} />
        </Typography>
        <Typography variant="body2" color="text.secondary">
          node {node.node_id} · {node.node_ip} · agent {node.url}
          {node.placement.nvlink_domain && ` · NVLink domain ${node.placement.nvlink_domain}`}
          {rayNode && <> · <Link href={rayNode} data-testid="ray-node-link">Ray node page</Link></>}
          {" · "}
          <Tooltip title="The node agent's last 10 minutes as a scenario file: replay it anywhere with ray-accel agent --simulate FILE (UUIDs, serials and pids replaced).">
            <Link href={recordingPath(node.node_id)} download data-testid="node-recording-link">
              Download recording (last 10 min)
            </Link>
          </Tooltip>
          {" · "}<Link href={transfersHref({ node: node.node_id })} data-testid="node-transfers-link">
            Transfers</Link>
        </Typography>
        {error && <Alert severity="warning" data-testid="node-refresh-error">
          Not refreshed ({error.message}): the values below are from the last answer.</Alert>}
        {node.error && <Alert severity="warning">{node.error}</Alert>}
      </Box>

      <Typography variant="h6">Devices</Typography>
      <HistoryRange value={range} onChange={setRange} answer={series.data} />
      <Table size="small" data-testid="device-table">
        <TableHead>
          <TableRow>
            <TableCell>Device</TableCell><TableCell>Health</TableCell>
            <TableCell align="right">Util</TableCell><TableCell>History</TableCell>
            <TableCell>Activity</TableCell>
            <TableCell align="right">
              Memory<InfoMark help={MEMORY_AS_RAY_SHOWS_IT} testid="memory-help" />
            </TableCell><TableCell align="right">Power</TableCell>
            <TableCell align="right">Temp</TableCell>
            <TableCell align="right">NVLink TX / RX</TableCell>
            <TableCell align="right">PCIe TX / RX</TableCell>
            <TableCell>Held by</TableCell>
          </TableRow>
        </TableHead>
        <TableBody>
          {node.devices.map((d) => (
            <TableRow key={d.uuid} data-testid={`device-${d.index}`}>
              <TableCell sx={{ maxWidth: 220, overflowWrap: "anywhere" }}>
                {d.index} <Typography variant="caption">{d.model}</Typography></TableCell>
              <TableCell>
                <HealthChip health={d.health} />
                {d.spinning === 1 && <HolderStateChip holder={{ idle: false, spinning: true }} />}
                {d.collective_suspected_stall === true && (
                  <Tooltip title="Suspected hung collective: busy while its NVLink/PCIe counters stay flat and its SMs do no real work for the detection window.">
                    <Chip size="small" color="error" variant="outlined" label="HUNG COLLECTIVE?"
                      data-testid="collective-stall" sx={{ ml: 0.5 }} />
                  </Tooltip>
                )}
              </TableCell>
              <TableCell align="right">{percent(d.utilization)}</TableCell>
              <TableCell>
                <Sparkline max={1} title={series.data ? sourceText(series.data) : undefined}
                  values={(series.data?.devices ?? node.history.devices)[d.uuid]?.utilization ?? []} />
              </TableCell>
              <TableCell><ActivityCell activity={withTensor(d.activity, d.pipe_activity)} /></TableCell>
              <TableCell align="right">
                <Tooltip title={d.memory_reserved_bytes == null || d.memory_used_bytes == null
                  ? MEMORY_AS_RAY_SHOWS_IT
                  : `Reserved by the driver: ${bytes(d.memory_reserved_bytes)}; Ray's dashboard ` +
                    `shows ${bytes(d.memory_used_bytes + d.memory_reserved_bytes)} used. ` +
                    MEMORY_AS_RAY_SHOWS_IT}>
                  <span>{bytes(d.memory_used_bytes)} / {bytes(d.memory_total_bytes)}</span>
                </Tooltip>
              </TableCell>
              <TableCell align="right">{watts(d.power_watts)}</TableCell>
              <TableCell align="right">
                {d.temperature_celsius == null ? DASH : `${d.temperature_celsius.toFixed(0)} °C`}
              </TableCell>
              <TableCell align="right" data-testid="nvlink-rate">
                {rate(d.nvlink_transmit_bytes_per_s)} / {rate(d.nvlink_receive_bytes_per_s)}
              </TableCell>
              <TableCell align="right">
                {rate(d.pcie_transmit_bytes_per_s)} / {rate(d.pcie_receive_bytes_per_s)}
              </TableCell>
              <TableCell><Holders device={d} ray={ray} /></TableCell>
            </TableRow>
          ))}
        </TableBody>
      </Table>

      <Typography variant="h6">Topology</Typography>
      <Box sx={{ overflowX: "auto" }}>
        <Table size="small" data-testid="topology" sx={{ width: "auto" }}>
          <TableBody>
            {node.topology.matrix.map((row, i) => (
              <TableRow key={i}>
                {row.map((cell, j) => (
                  <TableCell key={j} sx={{
                    fontFamily: "monospace", fontWeight: i === 0 || j === 0 ? 600 : 400,
                    background: cell.startsWith("NV") ? "#e3f2fd" : undefined,
                  }}>{cell}</TableCell>
                ))}
              </TableRow>
            ))}
          </TableBody>
        </Table>
      </Box>

      <Typography variant="h6">Links</Typography>
      <Table size="small" data-testid="links">
        <TableHead>
          <TableRow>
            <TableCell>Device</TableCell><TableCell>Link</TableCell><TableCell>State</TableCell>
            <TableCell>To</TableCell><TableCell align="right">TX</TableCell>
            <TableCell align="right">RX</TableCell><TableCell align="right">Errors</TableCell>
          </TableRow>
        </TableHead>
        <TableBody>
          {node.devices.map((d) => d.links.map((l) => (
            <TableRow key={`${d.uuid}-${l.link_type}-${l.index}`}
              sx={{ background: l.up === false ? "#ffebee" : undefined }}>
              <TableCell>{d.index}</TableCell>
              <TableCell>{l.link_type} {l.index}{l.version && ` (v${l.version})`}</TableCell>
              <TableCell>{l.up == null ? DASH : l.up ? "up" : "DOWN"}</TableCell>
              <TableCell>{l.remote_type || DASH}</TableCell>
              <TableCell align="right">{rate(l.transmit_bytes_per_s)}</TableCell>
              <TableCell align="right">{rate(l.receive_bytes_per_s)}</TableCell>
              <TableCell align="right">{l.errors ?? DASH}</TableCell>
            </TableRow>
          )))}
        </TableBody>
      </Table>

      {fabricDevices(node.devices).length > 0 && <Typography variant="h6">NVLink fabric</Typography>}
      <FabricTable devices={node.devices} />

      <Typography variant="h6">Processes</Typography>
      <Table size="small" data-testid="processes">
        <TableHead>
          <TableRow>
            <TableCell>Device</TableCell><TableCell>PID</TableCell><TableCell>Job</TableCell>
            <TableCell>Actor / task</TableCell><TableCell align="right">Memory</TableCell>
            <TableCell align="right">SM</TableCell>
          </TableRow>
        </TableHead>
        <TableBody>
          {node.devices.map((d) => (
            <Fragment key={d.uuid}>
              {d.processes.map((p) => {
                const job = p.ray_job_id ? rayLink(ray, `jobs/${p.ray_job_id}`) : null;
                const actor = p.ray_actor_id ? rayLink(ray, `actors/${p.ray_actor_id}`) : null;
                const task = p.ray_task_id && p.ray_job_id
                  ? rayLink(ray, `jobs/${p.ray_job_id}/tasks/${p.ray_task_id}`) : null;
                return (
                  <TableRow key={`${d.uuid}-${p.pid}`}>
                    <TableCell>{d.index}</TableCell><TableCell>{p.pid}</TableCell>
                    <TableCell>{job ? <Link href={job}>{p.ray_job_id}</Link> : DASH}</TableCell>
                    <TableCell>
                      {actor ? <Link href={actor}>{p.actor_class || p.ray_actor_id}</Link> : null}
                      {task ? <> <Link href={task}>{p.task_name || p.ray_task_id}</Link></> : null}
                      {!actor && !task ? DASH : null}
                    </TableCell>
                    <TableCell align="right">{bytes(p.memory_bytes)}</TableCell>
                    <TableCell align="right">{percent(p.sm_utilization)}</TableCell>
                  </TableRow>
                );
              })}
            </Fragment>
          ))}
        </TableBody>
      </Table>

      {node.findings.length > 0 && <Typography variant="h6">Findings</Typography>}
      {node.findings.map((f, i) => <FindingRow key={i} finding={f} />)}
    </Stack>
  );
}
