// A fleet as a person sees it: a front (no device of its own) and two CPU workers on the
// NATS and PostgreSQL that scripts/test.sh keeps running for the browser tests. Before any
// worker the Lab says why nothing runs; then it lists both workers' devices; "Run on every
// device" runs the Lab's settings on each and opens them side by side, each column naming
// the worker that measured it.
import { expect, test } from "@playwright/test";
import { BIN, freePort, startServer, startWorker, stopChild, stopServer } from "./own-server";

const NATS = process.env.GRADLESS_TEST_NATS;
const DATABASE = process.env.GRADLESS_TEST_DATABASE;

test("a fleet front lists its workers and runs on every device, side by side", async ({ page }) => {
  test.skip(!BIN || !NATS || !DATABASE, "needs GRADLESS_BIN, GRADLESS_TEST_NATS and GRADLESS_TEST_DATABASE (scripts/test.sh sets them)");
  test.setTimeout(240_000);
  // Fresh names: the stream keeps each name's consumer between test runs.
  const tag = Math.random().toString(36).slice(2, 8);
  const names = [`e2e-a-${tag}`, `e2e-b-${tag}`];
  const front = await startServer(freePort(7), ["--nats", NATS!, "--database", DATABASE!, "--heartbeat-s", "2", "--rate-limit", "0"]);
  const workers: ReturnType<typeof startWorker>[] = [];
  try {
    // Before any worker: the front says why nothing can run, and how to start one.
    await page.goto(front.url);
    await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
    await expect(page.getByTestId("fleet-empty")).toContainText("gradless worker --nats URL --name NAME");
    // ... and does not start the first visit's automatic run, which could only be refused.
    await page.waitForTimeout(1000);
    await expect(page.getByTestId("run-progress")).not.toContainText("Failed");

    workers.push(...names.map((n) => startWorker(n, NATS!)));
    // The page's own view of the fleet (what it renders from), not only the worker list.
    await expect.poll(async () => {
      const info: { workers: { name: string }[] } = await (await fetch(`${front.url}/api/info`)).json();
      return names.filter((n) => info.workers.some((w) => w.name === n)).length;
    }, { timeout: 120_000 }).toBe(2);

    await page.goto(front.url);
    await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
    await expect(page.getByTestId("fleet-empty")).toHaveCount(0);
    const fleet = page.getByTestId("fleet");
    for (const n of names) await expect(fleet).toContainText(n);

    // A small model, so that both runs take seconds on one CPU thread each.
    await page.getByTestId("model").selectOption("tiny_mlp");
    await page.getByTestId("run-everywhere").click();
    await page.waitForURL(/\/compare\?runs=/, { timeout: 180_000 });
    await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
    const ids = new URL(page.url()).searchParams.get("runs")!.split(",");
    expect(ids).toHaveLength(2);
    const table = page.getByTestId("compare-table");
    for (const id of ids) await expect(table).toContainText(id);
    // Each column says which worker measured it, in the order the workers are listed.
    const device = table.locator("tr", { has: page.locator("th", { hasText: /^device$/ }) });
    await expect(device.locator("td").nth(0)).toContainText(`worker ${names[0]} on `);
    await expect(device.locator("td").nth(1)).toContainText(`worker ${names[1]} on `);
    // The records are the fleet's: the API of the front serves them from PostgreSQL.
    for (const id of ids) {
      const record = await (await fetch(`${front.url}/api/runs/${id}`)).json();
      expect(names).toContain(record.env.worker.split(" on ")[0]);
    }
  } finally {
    await stopServer(front);
    for (const w of workers) await stopChild(w);
  }
});
