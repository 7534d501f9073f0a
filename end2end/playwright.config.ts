// Browser tests: Playwright's runner driving Debian's Chromium (no browser download) against
// a Gradless server that scripts/test.sh starts at GRADLESS_URL.
import { defineConfig } from "@playwright/test";

export default defineConfig({
  testDir: "./tests",
  timeout: 120_000,
  expect: { timeout: 60_000 },
  retries: process.env.CI ? 1 : 0,
  // One device worker serves every run: parallel tests would only queue behind each other.
  workers: 1,
  reporter: [["list"]],
  use: {
    baseURL: process.env.GRADLESS_URL ?? "http://127.0.0.1:3000",
    trace: "retain-on-failure",
    screenshot: "only-on-failure",
    launchOptions: {
      executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
      args: [
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
      ],
    },
  },
});
