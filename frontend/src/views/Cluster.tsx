// Cluster overview: summary cards with sparklines, devices by model, and the heatmap.
import { useState } from "react";
import {
  Alert, Box, Card, CardContent, Stack, Table, TableBody, TableCell, TableHead, TableRow,
  ToggleButton, ToggleButtonGroup, Typography,
} from "@mui/material";
import { usePoll, type HeatNode, type Summary } from "../api";
import { Heatmap, type HeatMetric } from "../components/Heatmap";
import { HistoryRange, sourceText, useHistory, type HistoryRangeName } from "../components/HistoryRange";
import { InfoMark } from "../components/InfoMark";
import { HeatLegend } from "../components/Legend";
import { Sparkline } from "../components/Sparkline";
import { MEMORY_AS_RAY_SHOWS_IT, bytes, percent, watts } from "../format";

function Stat({ label, value, testid, help, children }: {
  label: string; value: string; testid: string; help?: string; children?: React.ReactNode;
}) {
  const caption = (
    <Typography variant="caption" color="text.secondary">
      {label}{help && <InfoMark help={help} testid={`${testid}-help`} />}
    </Typography>
  );
  return (
    <Card variant="outlined" sx={{ minWidth: 170 }}>
      <CardContent sx={{ py: 1.5, "&:last-child": { pb: 1.5 } }}>
        {caption}
        <Typography variant="h5" data-testid={testid}>{value}</Typography>
        {children}
      </CardContent>
    </Card>
  );
}

export function ClusterView({ refreshMs }: { refreshMs: number }) {
  const summary = usePoll<Summary>("summary", refreshMs);
  const heatmap = usePoll<{ nodes: HeatNode[] }>("heatmap", refreshMs);
  const [metric, setMetric] = useState<HeatMetric>("util");
  const [range, setRange] = useState<HistoryRangeName>("1h");
  const series = useHistory(range, {}, refreshMs);
  const s = summary.data;
  const h = series.data ?? s?.history;  // the summary's in-memory series until it answers
  const shownAs = series.data ? sourceText(series.data) : undefined;
  return (
    <Stack spacing={2}>
      {summary.error && <Alert severity="error">{summary.error.message}</Alert>}
      {s?.refresh.discovery_error && <Alert severity="warning">{s.refresh.discovery_error}</Alert>}
      <HistoryRange value={range} onChange={setRange} answer={series.data} />
      {s && (
        <Stack direction="row" spacing={2} useFlexGap flexWrap="wrap">
          <Stat label="Nodes reporting" testid="node-count"
            value={`${s.nodes.ok} / ${s.nodes.total}`} />
          <Stat label="Devices" testid="device-count" value={String(s.devices.total)}>
            <Typography variant="caption" data-testid="devices-down">
              {s.devices.down} down · {s.devices.stale} stale · {s.devices.warning} warning
            </Typography>
          </Stat>
          <Stat label="Mean utilization" testid="utilization" value={percent(s.utilization.mean)}>
            <Sparkline values={h?.utilization ?? []} max={1} label="utilization history"
              title={shownAs} />
          </Stat>
          <Stat label="Memory used" help={MEMORY_AS_RAY_SHOWS_IT} testid="memory"
            value={`${bytes(s.memory.used_bytes)} / ${bytes(s.memory.total_bytes)}`}>
            <Sparkline values={h?.memory_used_bytes ?? []} max={s.memory.total_bytes || 1}
              color="#7b1fa2" label="memory history" title={shownAs} />
          </Stat>
          <Stat label="Power" testid="power"
            value={`${watts(s.power.watts)} / ${watts(s.power.limit_watts)}`}>
            <Sparkline values={h?.power_watts ?? []} max={s.power.limit_watts || 1}
              color="#ef6c00" label="power history" title={shownAs} />
          </Stat>
          <Stat label="Idle allocations" testid="idle-allocations"
            value={String(s.devices.idle_allocations)}>
            <Typography variant="caption">{s.devices.allocated} devices allocated</Typography>
          </Stat>
          <Stat label="Findings" testid="finding-count" value={String(s.findings.total)}>
            <Typography variant="caption">
              {s.findings.by_severity.critical ?? 0} critical ·{" "}
              {s.findings.by_severity.warning ?? 0} warning
            </Typography>
          </Stat>
        </Stack>
      )}
      {s && s.by_model.length > 0 && (
        <Table size="small" sx={{ maxWidth: 640 }} data-testid="by-model">
          <TableHead>
            <TableRow>
              <TableCell>Vendor</TableCell><TableCell>Model</TableCell>
              <TableCell align="right">Nodes</TableCell>
              <TableCell align="right">Devices</TableCell>
              <TableCell align="right">Down</TableCell>
            </TableRow>
          </TableHead>
          <TableBody>
            {s.by_model.map((m) => (
              <TableRow key={`${m.vendor}/${m.model}`}>
                <TableCell>{m.vendor}</TableCell><TableCell>{m.model}</TableCell>
                <TableCell align="right">{m.nodes}</TableCell>
                <TableCell align="right">{m.devices}</TableCell>
                <TableCell align="right">{m.down}</TableCell>
              </TableRow>
            ))}
          </TableBody>
        </Table>
      )}
      <Box sx={{ display: "flex", alignItems: "center", gap: 2 }}>
        <Typography variant="h6">Devices</Typography>
        <ToggleButtonGroup size="small" exclusive value={metric}
          onChange={(_, v) => v && setMetric(v)}>
          <ToggleButton value="util" data-testid="metric-util">Utilization</ToggleButton>
          <ToggleButton value="mem" data-testid="metric-mem">Memory</ToggleButton>
          <ToggleButton value="health" data-testid="metric-health">Health</ToggleButton>
        </ToggleButtonGroup>
      </Box>
      <HeatLegend metric={metric} />
      {heatmap.data && (
        <Heatmap nodes={heatmap.data.nodes} metric={metric}
          onOpen={(id) => { window.location.hash = `#/node/${id}`; }} />
      )}
    </Stack>
  );
}
