// Compare all modes fills the comparison chart with one measured group per mode.
import { expect, test } from "@playwright/test";
import { LabPage } from "./lab-page";

test("compare all modes fills the comparison chart", async ({ page }) => {
  const lab = new LabPage(page);
  await lab.open("model=tiny_mlp&device=cpu&batch=16&warmup=1&iters=4");
  await lab.testid("compare-all").click();
  // Five classic rows plus the autocast rows this device runs (both, with notes, on a CPU).
  await expect.poll(async () => (await lab.chartData("compare-chart")).length, { timeout: 90_000 }).toBe(7);
  expect(await lab.chartSeriesCount("compare-chart")).toBe(3);
  const peaks = (await lab.chartData("compare-chart", 0)) as number[];
  // train+grad keeps activations for backward; eval+no_grad does not.
  expect(peaks[0]).toBeGreaterThan(peaks[3]);
});

test("a failed request shows a readable message and the page stays usable", async ({ page }) => {
  const lab = new LabPage(page);
  await lab.open("model=tiny_mlp&device=cpu&batch=8&iters=3");
  await page.route("**/api/runs", (route) =>
    route.fulfill({
      status: 503,
      contentType: "application/json",
      headers: { "retry-after": "5" },
      body: JSON.stringify({ error: { code: "queue_full", message: "the run queue is full (16 runs waiting); try again in a few seconds" } }),
    }),
  );
  await lab.run();
  await expect(lab.testid("run-error")).toContainText("queue is full");
  await page.unroute("**/api/runs");
  await lab.run();
  await lab.waitDone();
});
