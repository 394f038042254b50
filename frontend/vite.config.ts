/// <reference types="vitest" />
import { defineConfig } from "vite";

// Built into the Python package's data (dashboard_module/static/), served under
// /accelerators/ by Ray's dashboard or `ray-accel dashboard`; relative asset URLs.
export default defineConfig({
  base: "./",
  esbuild: { jsx: "automatic" },
  build: {
    outDir: "../dashboard_module/static",
    emptyOutDir: true,
    chunkSizeWarningLimit: 1500,
    rollupOptions: {
      onwarn(warning, warn) {
        if (warning.code === "MODULE_LEVEL_DIRECTIVE") return; // MUI's "use client"
        warn(warning);
      },
    },
  },
  test: {
    environment: "jsdom",
    include: ["src/**/*.test.{ts,tsx}"],
    // A limit for a hung test, not a speed target: rendering MUI in jsdom on a loaded
    // shared machine takes several seconds.
    testTimeout: 30000,
  },
});
