// Every finding of the cluster, most severe first, filterable; the list is virtualised.
import { useMemo, useRef, useState } from "react";
import { useVirtualizer } from "@tanstack/react-virtual";
import { Alert, Box, Chip, MenuItem, Stack, TextField, Typography } from "@mui/material";
import { usePoll, type Finding } from "../api";

const SEVERITY_COLOR = { critical: "error", warning: "warning", info: "info" } as const;
// Kinds the Transfers view shows in full (both ends of a transfer, hung collectives).
const TRANSFER_KINDS = new Set(["transfer_stalled", "transfer_slow", "transfer_aborted",
                                "collective_stall"]);

export function FindingRow({ finding }: { finding: Finding }) {
  return (
    <Box data-testid="finding" data-kind={finding.kind}
      sx={{ display: "flex", alignItems: "center", gap: 1, height: 36,
            borderBottom: "1px solid #eee", px: 1 }}>
      <Chip size="small" color={SEVERITY_COLOR[finding.severity]} label={finding.severity}
        sx={{ width: 72 }} />
      <Chip size="small" variant="outlined" label={finding.kind} />
      <Box component="a" href={`#/node/${finding.node_id}`} sx={{ fontSize: 13, width: 140,
        overflow: "hidden", textOverflow: "ellipsis", whiteSpace: "nowrap" }}>
        {finding.hostname || finding.node_id.slice(0, 12)}
      </Box>
      {TRANSFER_KINDS.has(finding.kind) && (
        <Box component="a" href="#/transfers" data-testid="finding-transfers-link"
          sx={{ fontSize: 13 }}>transfers</Box>
      )}
      <Typography variant="body2" noWrap>{finding.message}</Typography>
    </Box>
  );
}

export function filterFindings(all: Finding[], kind: string, severity: string): Finding[] {
  return all.filter((f) => (!kind || f.kind === kind) && (!severity || f.severity === severity));
}

export function FindingsView({ refreshMs }: { refreshMs: number }) {
  const { data, error } = usePoll<{ total: number; findings: Finding[] }>("findings", refreshMs);
  const [kind, setKind] = useState("");
  const [severity, setSeverity] = useState("");
  const all = data?.findings ?? [];
  const kinds = useMemo(() => [...new Set(all.map((f) => f.kind))].sort(), [all]);
  const shown = useMemo(() => filterFindings(all, kind, severity), [all, kind, severity]);
  const parent = useRef<HTMLDivElement>(null);
  const virtual = useVirtualizer({
    count: shown.length, getScrollElement: () => parent.current, estimateSize: () => 36,
    overscan: 20, initialRect: { width: 1000, height: 600 },
  });
  return (
    <Stack spacing={2}>
      {error && <Alert severity="error">{error.message}</Alert>}
      <Stack direction="row" spacing={2} alignItems="center">
        <TextField select size="small" label="Kind" value={kind} sx={{ minWidth: 200 }}
          onChange={(e) => setKind(e.target.value)} data-testid="kind-filter">
          <MenuItem value="">all</MenuItem>
          {kinds.map((k) => <MenuItem key={k} value={k}>{k}</MenuItem>)}
        </TextField>
        <TextField select size="small" label="Severity" value={severity} sx={{ minWidth: 140 }}
          onChange={(e) => setSeverity(e.target.value)}>
          <MenuItem value="">all</MenuItem>
          {["critical", "warning", "info"].map((s) => <MenuItem key={s} value={s}>{s}</MenuItem>)}
        </TextField>
        <Typography data-testid="findings-shown">{shown.length} of {all.length}</Typography>
      </Stack>
      <Box ref={parent} sx={{ height: 600, overflow: "auto" }} data-testid="findings-list">
        <Box sx={{ height: virtual.getTotalSize(), position: "relative" }}>
          {virtual.getVirtualItems().map((item) => (
            <Box key={item.key} sx={{ position: "absolute", top: 0, left: 0, right: 0,
              transform: `translateY(${item.start}px)` }}>
              <FindingRow finding={shown[item.index]} />
            </Box>
          ))}
        </Box>
      </Box>
    </Stack>
  );
}
