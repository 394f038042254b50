// The NVLink fabric of each GPU of a node (NVSwitch systems: NVL72 racks, HGX B200):
// registration state and status, health summary, health-mask issues. A GPU with a
// fabric_unhealthy finding is highlighted; nothing is shown for GPUs without a fabric.
import { Table, TableBody, TableCell, TableHead, TableRow } from "@mui/material";
import type { Device } from "../api";
import { DASH } from "../format";

export const FABRIC_FINDING = "fabric_unhealthy";

export function fabricDevices(devices: Device[]): Device[] {
  return devices.filter((d) => d.fabric != null);
}

export function FabricTable({ devices }: { devices: Device[] }) {
  const shown = fabricDevices(devices);
  if (!shown.length) return null;
  return (
    <Table size="small" data-testid="fabric">
      <TableHead>
        <TableRow>
          <TableCell>Device</TableCell><TableCell>State</TableCell><TableCell>Status</TableCell>
          <TableCell>Health</TableCell><TableCell>Issues</TableCell><TableCell>Domain</TableCell>
        </TableRow>
      </TableHead>
      <TableBody>
        {shown.map((d) => {
          const f = d.fabric!;
          const unhealthy = d.findings.some((x) => x.kind === FABRIC_FINDING);
          const issues = f.issues.map((i) => i === "incorrect_configuration"
            && f.incorrect_configuration ? `${i} (${f.incorrect_configuration})` : i);
          return (
            <TableRow key={d.uuid} data-testid={`fabric-${d.index}`}
              data-unhealthy={unhealthy ? "true" : "false"}
              sx={{ background: unhealthy ? "#ffebee" : undefined }}>
              <TableCell>{d.index}</TableCell>
              <TableCell>{f.state_name || f.state}</TableCell>
              <TableCell>{f.status_name || (f.status ?? DASH)}</TableCell>
              <TableCell>{f.health_summary_name || DASH}</TableCell>
              <TableCell>{issues.length ? issues.join(", ") : DASH}</TableCell>
              <TableCell>{f.cluster_uuid ? `${f.cluster_uuid}/${f.clique_id}` : DASH}</TableCell>
            </TableRow>
          );
        })}
      </TableBody>
    </Table>
  );
}
