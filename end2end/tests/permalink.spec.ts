// A permalink outlives the server that measured it: record a run, stop the server (SIGTERM,
// a clean shutdown), start a new one on the same database, and the page shows the same
// figures without measuring again. This test runs its own server (GRADLESS_BIN).
import { expect, test } from "@playwright/test";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BIN, freePort, startServer, stopServer } from "./own-server";

test("a permalink shows the recorded figures after a server restart", async ({ page }) => {
  test.skip(!BIN, "GRADLESS_BIN is not set (scripts/test.sh sets it)");
  const db = join(mkdtempSync(join(tmpdir(), "gradless-permalink-")), "runs.sqlite3");

  const port = freePort(1);
  const start = () => startServer(port, ["--db", db]);
  const URL_ = `http://127.0.0.1:${port}`;
  let server = await start();
  const created = await (await fetch(`${URL_}/api/runs`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "tiny_mlp", device: "cpu", batch: 8, warmup: 1, iters: 5, grad: "no_grad" }),
  })).json();
  let report: any;
  await expect.poll(async () => {
    const r = await fetch(`${URL_}/api/runs/${created.id}`);
    if (r.ok) report = await r.json();
    return r.status;
  }).toBe(200);
  await stopServer(server);

  server = await start();
  try {
    // The API answers from the database with the very same report.
    const again = await (await fetch(`${URL_}/api/runs/${created.id}`)).json();
    expect(again).toEqual(report);

    await page.goto(`${URL_}/runs/${created.id}`);
    await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
    const l = report.latency_ms;
    await expect(page.getByTestId("p50")).toHaveText(`${l.p50.toFixed(3)} / ${l.p95.toFixed(3)} / ${l.p99.toFixed(3)} ms`);
    await expect(page.getByTestId("provenance")).toContainText(report.env.measured_at);
    await expect(page.getByTestId("provenance")).toContainText(report.env.device_name);
    await expect(page.getByTestId("provenance")).toContainText(`libtorch ${report.env.libtorch_version}`);
    // The charts are drawn from the recorded samples: 1 warm-up + 5 timed.
    await expect.poll(() => page.evaluate(() => {
      const c = (window as any).echarts.getInstanceByDom(document.getElementById("latency-chart"));
      return c?.getOption()?.series?.[0]?.data?.length ?? 0;
    })).toBe(6);
    // Nothing ran on the new server to show this page.
    const health = await (await fetch(`${URL_}/api/health`)).json();
    expect(health.tasks).toBeLessThanOrEqual(1); // the model listing at start-up only

    // Side by side with another recorded run, from the permalinks.
    await page.getByTestId("compare-with").fill(`${URL_}/runs/${created.id}`);
    await page.getByRole("button", { name: "Side by side" }).click();
    await expect(page.getByTestId("compare-table")).toContainText(created.id);
  } finally {
    await stopServer(server);
  }
});
