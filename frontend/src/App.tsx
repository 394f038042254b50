// The Accelerators tab: hash routes #/ (cluster), #/node/<id>, #/workloads[/<job>], #/findings,
// #/transfers[/job/<id> | /node/<id>].
import { useEffect, useState } from "react";
import {
  Alert, AppBar, Box, Button, Container, CssBaseline, Dialog, DialogActions, DialogContent,
  DialogTitle, Link, Tab, Tabs, TextField, ThemeProvider, Toolbar, Typography, createTheme,
} from "@mui/material";
import { authenticate, usePoll, type Config } from "./api";
import { ClusterView } from "./views/Cluster";
import { FindingsView } from "./views/Findings";
import { NodeView } from "./views/Node";
import { TransfersView } from "./views/Transfers";
import { WorkloadsView } from "./views/Workloads";

// Ray's dashboard look: MUI defaults with its blue primary.
const theme = createTheme({
  palette: { primary: { main: "#036DCF" }, background: { default: "#F4F6F8" } },
  typography: { fontSize: 13 },
});

export type Route =
  | { view: "cluster" } | { view: "node"; nodeId: string }
  | { view: "workloads"; jobId: string | null } | { view: "findings" }
  | { view: "transfers"; job: string | null; node: string | null };

// A route's part as written in the hash, decoded once (left as it is where it is not
// valid percent-encoding): ids are encoded again wherever they go into a request.
function routePart(part: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    return part;
  }
}

export function parseRoute(hash: string): Route {
  const parts = hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(routePart);
  if (parts[0] === "node" && parts[1]) return { view: "node", nodeId: parts[1] };
  if (parts[0] === "workloads") return { view: "workloads", jobId: parts[1] ?? null };
  if (parts[0] === "findings") return { view: "findings" };
  if (parts[0] === "transfers") {
    const of = (kind: string) => (parts[1] === kind ? parts[2] ?? null : null);
    return { view: "transfers", job: of("job"), node: of("node") };
  }
  return { view: "cluster" };
}

function useHashRoute(): Route {
  const [route, setRoute] = useState(() => parseRoute(window.location.hash));
  useEffect(() => {
    const onChange = () => setRoute(parseRoute(window.location.hash));
    window.addEventListener("hashchange", onChange);
    return () => window.removeEventListener("hashchange", onChange);
  }, []);
  return route;
}

function SignIn({ onDone }: { onDone: () => void }) {
  const [token, setToken] = useState("");
  const [failed, setFailed] = useState(false);
  const submit = async () => {
    if (await authenticate(token)) onDone();
    else setFailed(true);
  };
  return (
    <Dialog open>
      <DialogTitle>Sign in</DialogTitle>
      <DialogContent>
        <Typography variant="body2" gutterBottom>
          This dashboard needs the Ray cluster's authentication token.
        </Typography>
        {failed && <Alert severity="error">That token was refused.</Alert>}
        <TextField autoFocus fullWidth type="password" label="Token" value={token}
          inputProps={{ "data-testid": "token-input" }}
          onChange={(e) => setToken(e.target.value)}
          onKeyDown={(e) => { if (e.key === "Enter") void submit(); }} />
      </DialogContent>
      <DialogActions><Button onClick={() => void submit()}>Sign in</Button></DialogActions>
    </Dialog>
  );
}

export function App() {
  const route = useHashRoute();
  const config = usePoll<Config>("config", 60000);
  const probe = usePoll<unknown>("summary", 15000);
  const refreshMs = Math.max((config.data?.refresh_s ?? 5) * 1000, 2000);
  const ray = config.data?.ray_dashboard_url ?? null;
  const needsToken = probe.error?.status === 401 || probe.error?.status === 403;
  const tab = route.view === "node" ? "cluster" : route.view;
  return (
    <ThemeProvider theme={theme}>
      <CssBaseline />
      <AppBar position="static" color="default" elevation={1}>
        <Toolbar variant="dense" sx={{ gap: 2 }}>
          {ray != null && <Link href={ray} underline="none" sx={{ fontWeight: 600 }}>Ray</Link>}
          <Typography variant="h6" sx={{ fontSize: 16 }}>Accelerators</Typography>
          <Tabs value={tab} onChange={(_, v) => { window.location.hash = v === "cluster" ? "#/" : `#/${v}`; }}>
            <Tab value="cluster" label="Cluster" data-testid="tab-cluster" />
            <Tab value="workloads" label="Workloads" data-testid="tab-workloads" />
            <Tab value="transfers" label="Transfers" data-testid="tab-transfers" />
            <Tab value="findings" label="Findings" data-testid="tab-findings" />
          </Tabs>
        </Toolbar>
      </AppBar>
      <Container maxWidth={false} sx={{ py: 2 }}>
        {needsToken && <SignIn onDone={() => window.location.reload()} />}
        {config.data?.started_error && (
          <Alert severity="error">The module did not start: {config.data.started_error}</Alert>
        )}
        {!needsToken && <Box>
          {route.view === "cluster" && <ClusterView refreshMs={refreshMs} />}
          {route.view === "node" && <NodeView nodeId={route.nodeId} refreshMs={refreshMs} ray={ray} />}
          {route.view === "workloads" && (
            <WorkloadsView jobId={route.jobId} refreshMs={refreshMs} ray={ray} />
          )}
          {route.view === "findings" && <FindingsView refreshMs={refreshMs} />}
          {route.view === "transfers" && <TransfersView filter={route} refreshMs={refreshMs} ray={ray} />}
        </Box>}
      </Container>
    </ThemeProvider>
  );
}
