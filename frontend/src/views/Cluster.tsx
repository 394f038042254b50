// Cluster overview: summary cards with sparklines, devices by model, every device on one
// canvas (ordered, filtered and grouped), the groups, and the nodes as rows of cells.
import { useMemo, useState } from "react";
import {
  Alert, Box, Card, CardContent, Chip, Stack, Table, TableBody, TableCell, TableHead, TableRow,
  TextField, ToggleButton, ToggleButtonGroup, Typography,
} from "@mui/material";
import { usePoll, type Summary } from "../api";
import { DeviceOverview } from "../components/DeviceOverview";
import { GroupList } from "../components/GroupList";
import { Heatmap, type HeatMetric } from "../components/Heatmap";
import { HistoryRange, sourceText, useHistory, type HistoryRangeName } from "../components/HistoryRange";
import { InfoMark } from "../components/InfoMark";
import { HeatLegend } from "../components/Legend";
import { Sparkline } from "../components/Sparkline";
import { MEMORY_AS_RAY_SHOWS_IT, bytes, percent, watts } from "../format";
import {
  FOCUSES, FOCUS_NAMES, GROUP_NAMES, counted, decodeColumns, findNodes, focusCounts,
  groupLabel, overviewGroups,
  type Focus, type GroupBy, type HeatColumns,
} from "../overview";

const GROUPINGS: GroupBy[] = ["nvlink_domain", "rack", "zone", "node_pool", "none"];

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
  const heatmap = usePoll<HeatColumns>("heatmap?form=columns", refreshMs);
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
      {heatmap.error && <Alert severity="error">{heatmap.error.message}</Alert>}
      {heatmap.data && <Devices columns={heatmap.data} metric={metric} />}
    </Stack>
  );
}

const openNode = (id: string) => { window.location.hash = `#/node/${id}`; };

// The overview's controls, the canvas of every device, the groups and the node rows.
export function Devices({ columns, metric }: { columns: HeatColumns; metric: HeatMetric }) {
  const [by, setBy] = useState<GroupBy>("nvlink_domain");
  const [focus, setFocus] = useState<Focus | "all">("all");
  const [group, setGroup] = useState<string | null>(null);
  const [query, setQuery] = useState("");
  // decoded again only when the head has a new view (the page polls it every refresh)
  const all = useMemo(() => decodeColumns(columns), [columns.generated_at]);
  const total = useMemo(() => focusCounts(all).all, [all]);
  const nodes = useMemo(() => findNodes(all, query), [all, query]);
  const counts = useMemo(() => focusCounts(nodes), [nodes]);
  const groups = useMemo(() => overviewGroups(nodes, by, focus, group), [nodes, by, focus, group]);
  const allGroups = useMemo(() => (group === null ? groups : overviewGroups(nodes, by, focus)),
                            [nodes, by, focus, group, groups]);
  const shown = groups.reduce((sum, g) => sum + g.devices, 0);
  const shownNodes = groups.reduce((sum, g) => sum + g.nodes.length, 0);
  return (
    <Stack spacing={1.5}>
      <Stack direction="row" spacing={2} useFlexGap flexWrap="wrap" alignItems="center">
        <Typography variant="caption" color="text.secondary">Show</Typography>
        <ToggleButtonGroup size="small" exclusive value={focus}
          onChange={(_, v) => v && setFocus(v)}>
          {(["all", ...FOCUSES] as const).map((f) => (
            <ToggleButton key={f} value={f} data-testid={`focus-${f}`} data-count={counts[f]}>
              {FOCUS_NAMES[f]} {counts[f]}
            </ToggleButton>
          ))}
        </ToggleButtonGroup>
        <Typography variant="caption" color="text.secondary">Group by</Typography>
        <ToggleButtonGroup size="small" exclusive value={by}
          onChange={(_, v) => { if (v) { setBy(v); setGroup(null); } }}>
          {GROUPINGS.map((g) => (
            <ToggleButton key={g} value={g} data-testid={`group-by-${g}`}>
              {g === "none" ? "None" : GROUP_NAMES[g]}
            </ToggleButton>
          ))}
        </ToggleButtonGroup>
        <TextField size="small" placeholder="Find nodes: hostname or id" value={query}
          onChange={(e) => setQuery(e.target.value)} sx={{ minWidth: 240 }}
          inputProps={{ "data-testid": "node-search", "aria-label": "find nodes" }} />
      </Stack>
      <Stack direction="row" spacing={1} alignItems="center">
        <Typography variant="body2" data-testid="overview-count" data-shown={shown}
          data-total={total} data-nodes={shownNodes}>
          {shown.toLocaleString("en-US")} of {counted(total, "device")}
          {" "}on {counted(shownNodes, "node")}
          {by !== "none" && group === null ? ` in ${counted(groups.length, "group")}` : ""}
          {" "}· most in need of attention first (down, spinning, idle, hot, stale, warning)
        </Typography>
        {group !== null && (
          <Chip size="small" color="primary" data-testid="selected-group"
            label={groupLabel(by, group)} onDelete={() => setGroup(null)} />
        )}
      </Stack>
      <DeviceOverview groups={groups} metric={metric} onOpenNode={openNode}
        onOpenGroup={(key) => { if (by !== "none") setGroup(key); }} />
      {by !== "none" && (
        <>
          <Typography variant="subtitle2">Groups ({allGroups.length.toLocaleString("en-US")})</Typography>
          <GroupList groups={allGroups} selected={group} onOpen={setGroup} />
        </>
      )}
      <Typography variant="subtitle2">
        Nodes{group !== null ? ` of ${groupLabel(by, group)}` : ""}
      </Typography>
      <Heatmap groups={groups} metric={metric} onOpen={openNode} />
    </Stack>
  );
}
