// Ray Direct Transport transfers: in flight, stalled, the oldest, per job, each with both
// ends (actor, devices, node); Ray's recent aborts; devices suspected of a hung collective.
import {
  Alert, Box, Chip, Link, Paper, Stack, Table, TableBody, TableCell, TableHead, TableRow,
  Typography,
} from "@mui/material";
import {
  rayLink, usePoll, type Transfer, type TransferAbort, type TransferEnd, type Transfers,
} from "../api";
import { DASH, duration, shortId } from "../format";
import { FindingRow } from "./Findings";

export interface TransfersFilter { job: string | null; node: string | null }

// The API path for a filter: one job's or one node's transfers, or all.
export function transfersPath(filter: TransfersFilter): string {
  if (filter.job) return `transfers?job_id=${encodeURIComponent(filter.job)}`;
  if (filter.node) return `transfers?node_id=${encodeURIComponent(filter.node)}`;
  return "transfers";
}

// Hash routes of the view: #/transfers, #/transfers/job/<id>, #/transfers/node/<id>.
export function transfersHref(filter: Partial<TransfersFilter> = {}): string {
  if (filter.job) return `#/transfers/job/${filter.job}`;
  if (filter.node) return `#/transfers/node/${filter.node}`;
  return "#/transfers";
}

function Count({ label, value, testid, alarm }: {
  label: string; value: string; testid: string; alarm?: boolean;
}) {
  return (
    <Paper variant="outlined" sx={{ px: 2, py: 1, minWidth: 140 }}>
      <Typography variant="caption" color="text.secondary">{label}</Typography>
      <Typography variant="h5" data-testid={testid}
        sx={{ color: alarm ? "error.main" : undefined }}>{value}</Typography>
    </Paper>
  );
}

// One end of a transfer: its actor (linked to Ray's actor page), its devices on their node
// (linked to the node page), and its call's state.
export function EndCell({ end, ray }: { end: TransferEnd; ray: string | null }) {
  const actor = end.actor_id ? rayLink(ray, `actors/${end.actor_id}`) : null;
  const name = `${end.actor_class || "actor"} ${shortId(end.actor_id)}`;
  const where = end.hostname || (end.node_id ? shortId(end.node_id, 12) : "node unknown");
  return (
    <Box data-testid="transfer-end" data-actor={end.actor_id}>
      {actor ? <Link href={actor}>{name}</Link> : name}
      <Typography variant="caption" display="block" color="text.secondary">
        {end.devices.length > 0 ? end.devices.map((d, i) => (
          <span key={d.uuid}>{i > 0 && ", "}
            <Link href={`#/node/${d.node_id || end.node_id}`} data-testid="end-device">
              {d.index ? `device ${d.index}` : shortId(d.uuid, 12)} on {d.hostname || where}
            </Link>
          </span>
        )) : end.node_id
          ? <>no device · <Link href={`#/node/${end.node_id}`}>{where}</Link></>
          : <>no device · {where}</>}
        {end.state && ` · ${end.state.startsWith("PENDING") ? "pending" : end.state.toLowerCase()}`}
      </Typography>
    </Box>
  );
}

function JobLink({ job }: { job: string }) {
  return job ? <Link href={`#/workloads/${job}`} data-testid="transfer-job">{job}</Link> : <>{DASH}</>;
}

// A transfer's state: stalled, slow (in flight past the agent's report threshold), in flight.
function transferState(transfer: Transfer): { label: string; color: "error" | "warning" | "default" } {
  if (transfer.stalled) return { label: "STALLED", color: "error" };
  if (transfer.slow) return { label: "slow", color: "warning" };
  return { label: "in flight", color: "default" };
}

function TransferRow({ transfer, ray }: { transfer: Transfer; ray: string | null }) {
  const state = transferState(transfer);
  return (
    <TableRow data-testid="transfer" data-stalled={transfer.stalled ? "true" : "false"}
      sx={{ background: transfer.stalled ? "#ffebee" : undefined }}>
      <TableCell>
        <Chip size="small" color={state.color} label={state.label} data-testid="transfer-state" />
      </TableCell>
      <TableCell align="right" data-testid="transfer-age">{duration(transfer.age_s)}</TableCell>
      <TableCell><JobLink job={transfer.job_id} /></TableCell>
      <TableCell data-testid="transfer-source"><EndCell end={transfer.source} ray={ray} /></TableCell>
      <TableCell>→</TableCell>
      <TableCell data-testid="transfer-destination">
        <EndCell end={transfer.destination} ray={ray} />
      </TableCell>
    </TableRow>
  );
}

function AbortRow({ abort, ray }: { abort: TransferAbort; ray: string | null }) {
  return (
    <TableRow data-testid="transfer-abort">
      <TableCell align="right">{duration(abort.ago_s)} ago</TableCell>
      <TableCell align="right">{duration(abort.age_s)}</TableCell>
      <TableCell><JobLink job={abort.job_id} /></TableCell>
      <TableCell><EndCell end={abort.source} ray={ray} /></TableCell>
      <TableCell>→</TableCell>
      <TableCell><EndCell end={abort.destination} ray={ray} /></TableCell>
    </TableRow>
  );
}

function Scope({ filter }: { filter: TransfersFilter }) {
  if (!filter.job && !filter.node) return null;
  return (
    <Typography variant="body2" data-testid="transfers-scope">
      {filter.job ? <>Job <Link href={`#/workloads/${filter.job}`}>{filter.job}</Link></>
        : <>Transfers with an end on node <Link href={`#/node/${filter.node}`}>
          {shortId(filter.node ?? "", 12)}</Link></>}
      {" · "}<Link href={transfersHref()}>all transfers</Link>
    </Typography>
  );
}

export function TransfersView({ filter, refreshMs, ray }: {
  filter: TransfersFilter; refreshMs: number; ray: string | null;
}) {
  const { data, error } = usePoll<Transfers>(transfersPath(filter), refreshMs);
  if (error && !data) return <Alert severity="error">{error.message}</Alert>;
  if (!data) return <Typography>Loading…</Typography>;
  const pairing = data.pairing_nodes.map((n) => n.hostname || shortId(n.node_id, 12)).join(", ");
  return (
    <Stack spacing={2}>
      {error && <Alert severity="error">{error.message}</Alert>}
      <Scope filter={filter} />
      <Stack direction="row" spacing={2}>
        <Count label="In flight" value={String(data.in_flight)} testid="transfers-in-flight" />
        <Count label="Stalled" value={String(data.stalled)} testid="transfers-stalled"
          alarm={data.stalled > 0} />
        <Count label="Oldest" value={duration(data.oldest_age_s)} testid="transfers-oldest" />
      </Stack>
      <Typography variant="body2" color="text.secondary" data-testid="transfers-pairing">
        {pairing
          ? `Paired by the agent on ${pairing}. A transfer is slow once in flight past the `
            + "agent's report threshold (1 s by default), stalled past its stall threshold "
            + "(10 s by default); Ray aborts it at its timeout (60 s by default) by killing "
            + "both actors."
          : "No agent pairs this cluster's transfers (the head node's agent does by default: "
            + "see docs/transfers.md)."}
        {data.dropped > 0 && ` ${data.dropped} more in flight are counted but not listed.`}
      </Typography>

      <Typography variant="h6">Per job</Typography>
      {data.by_job.length === 0 ? <Typography>No transfer in flight.</Typography> : (
        <Table size="small" data-testid="transfers-jobs" sx={{ maxWidth: 900 }}>
          <TableHead>
            <TableRow>
              <TableCell>Job</TableCell><TableCell align="right">In flight</TableCell>
              <TableCell align="right">Stalled</TableCell><TableCell align="right">Oldest</TableCell>
              <TableCell align="right">Aborted by Ray</TableCell><TableCell>Ray</TableCell>
            </TableRow>
          </TableHead>
          <TableBody>
            {data.by_job.map((j) => {
              const rayJob = j.job_id ? rayLink(ray, `jobs/${j.job_id}`) : null;
              return (
                <TableRow key={j.job_id} data-testid={`transfers-job-${j.job_id}`}>
                  <TableCell><JobLink job={j.job_id} /></TableCell>
                  <TableCell align="right" data-testid="job-in-flight">{j.in_flight}</TableCell>
                  <TableCell align="right" data-testid="job-stalled">
                    {j.stalled > 0 ? <Chip size="small" color="error" label={j.stalled} /> : 0}
                  </TableCell>
                  <TableCell align="right" data-testid="job-oldest">{duration(j.oldest_age_s)}</TableCell>
                  <TableCell align="right">{j.aborts}</TableCell>
                  <TableCell>{rayJob ? <Link href={rayJob}>job page</Link> : DASH}</TableCell>
                </TableRow>
              );
            })}
          </TableBody>
        </Table>
      )}

      <Typography variant="h6">Transfers</Typography>
      {data.transfers.length === 0 ? <Typography>None in flight.</Typography> : (
        <Table size="small" data-testid="transfers-list">
          <TableHead>
            <TableRow>
              <TableCell>State</TableCell><TableCell align="right">Age</TableCell>
              <TableCell>Job</TableCell><TableCell>From (sends)</TableCell><TableCell />
              <TableCell>To (receives)</TableCell>
            </TableRow>
          </TableHead>
          <TableBody>
            {data.transfers.map((t) => (
              <TransferRow key={`${t.source.task_id}-${t.destination.task_id}`} transfer={t} ray={ray} />
            ))}
          </TableBody>
        </Table>
      )}

      {data.aborts.length > 0 && <>
        <Typography variant="h6">Aborted by Ray</Typography>
        <Table size="small" data-testid="transfers-aborts">
          <TableHead>
            <TableRow>
              <TableCell align="right">When</TableCell><TableCell align="right">Stalled for</TableCell>
              <TableCell>Job</TableCell><TableCell>From</TableCell><TableCell /><TableCell>To</TableCell>
            </TableRow>
          </TableHead>
          <TableBody>
            {data.aborts.map((a) => (
              <AbortRow key={`${a.source.actor_id}-${a.destination.actor_id}-${a.at}`} abort={a} ray={ray} />
            ))}
          </TableBody>
        </Table>
      </>}

      {data.collective_stalls.length > 0 && <>
        <Typography variant="h6">Suspected hung collectives</Typography>
        {data.collective_stalls.map((f) => <FindingRow key={`${f.node_id}-${f.device_uuid}`} finding={f} />)}
      </>}
    </Stack>
  );
}
