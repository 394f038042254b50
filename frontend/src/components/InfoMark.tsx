// A small circled "i" after a label whose tooltip explains it (drawn, not a font glyph).
import { Box, Tooltip } from "@mui/material";

export function InfoMark({ help, testid }: { help: string; testid?: string }) {
  return (
    <Tooltip title={help}>
      <Box component="span" data-testid={testid} aria-label={help} sx={{
        display: "inline-flex", alignItems: "center", justifyContent: "center", ml: 0.5,
        width: 14, height: 14, borderRadius: "50%", border: "1px solid currentColor",
        fontSize: 10, fontWeight: 700, fontStyle: "normal", lineHeight: 1, cursor: "help",
        verticalAlign: "middle" }}>i</Box>
    </Tooltip>
  );
}
