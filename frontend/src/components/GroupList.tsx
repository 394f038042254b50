// The overview's groups as a virtualised table: what each holds and what needs attention
// in it; a click on a row opens the group (its nodes in the overview and the node list).
import { useRef } from "react";
import { useVirtualizer } from "@tanstack/react-virtual";
import { Box, Chip, Stack, Typography } from "@mui/material";
import { HEALTH_COLORS } from "../format";
import { FOCUSES, FOCUS_NAMES, counted, type Focus, type Group } from "../overview";
import { SPINNING_COLOR } from "./Activity";

const ROW = 30;
// Chip colours of the focuses: health's own colours where a health is meant.
const FOCUS_COLORS: Record<Focus, string> = {
  down: HEALTH_COLORS.down, spinning: SPINNING_COLOR, idle: "#212121", hot: "#6d4c41",
  stale: HEALTH_COLORS.stale, warning: HEALTH_COLORS.warning,
};

export function GroupList({ groups, selected, onOpen, height = 280 }: {
  groups: Group[]; selected: string | null; onOpen: (key: string) => void; height?: number;
}) {
  const parent = useRef<HTMLDivElement>(null);
  const virtual = useVirtualizer({
    count: groups.length, getScrollElement: () => parent.current, estimateSize: () => ROW,
    overscan: 10, initialRect: { width: 600, height },
  });
  return (
    <Box ref={parent} data-testid="group-list" data-groups={groups.length}
      sx={{ height: Math.min(height, virtual.getTotalSize() + 2), overflow: "auto",
            border: "1px solid #e0e0e0", borderRadius: 1, background: "#fff" }}>
      <Box sx={{ height: virtual.getTotalSize(), position: "relative" }}>
        {virtual.getVirtualItems().map((item) => {
          const group = groups[item.index];
          return (
            <Stack key={item.key} direction="row" spacing={1} alignItems="center"
              data-testid="group-row" data-key={group.key} role="button" tabIndex={0}
              onClick={() => onOpen(group.key)}
              onKeyDown={(e) => { if (e.key === "Enter") onOpen(group.key); }}
              sx={{ position: "absolute", top: 0, left: 0, right: 0, height: ROW, px: 1,
                    transform: `translateY(${item.start}px)`, cursor: "pointer",
                    background: group.key === selected ? "#e3f2fd" : undefined,
                    "&:hover": { background: "#f5f5f5" } }}>
              <Typography variant="body2" sx={{ minWidth: 220, overflow: "hidden",
                textOverflow: "ellipsis", whiteSpace: "nowrap" }}>{group.label}</Typography>
              <Typography variant="caption" color="text.secondary" sx={{ minWidth: 140 }}>
                {counted(group.nodes.length, "node")} · {counted(group.devices, "device")}
              </Typography>
              {FOCUSES.filter((f) => group.counts[f] > 0).map((f) => (
                <Chip key={f} size="small" variant="outlined" label={`${group.counts[f]} ${FOCUS_NAMES[f].toLowerCase()}`}
                  sx={{ borderColor: FOCUS_COLORS[f], color: FOCUS_COLORS[f], height: 20 }} />
              ))}
            </Stack>
          );
        })}
      </Box>
    </Box>
  );
}
