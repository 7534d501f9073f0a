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

  // Every row was recorded: the same runs side by side from their permalinks.
  await expect(lab.testid("compare-link")).toBeVisible();
  await lab.testid("compare-link").click();
  await expect(page).toHaveURL(/\/compare\?runs=([0-9a-f]{16},){6}[0-9a-f]{16}$/);
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  await expect(page.getByTestId("compare-table").locator("thead th")).toHaveCount(1 + 7);
  await expect(page.getByTestId("compare-table")).toContainText("train · enabled");
  await expect.poll(async () => (await lab.chartData("compare-chart", 0)).length).toBe(7);
  expect(await lab.chartData("compare-chart", 0)).toEqual(peaks);
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

test("recorded runs are listed, and two picked ones open side by side", async ({ page }) => {
  const lab = new LabPage(page);
  await lab.open("model=tiny_mlp&device=cpu&batch=4&warmup=0&iters=3");
  await lab.run();
  await lab.waitDone();
  await lab.testid("grad-no_grad").check();
  await lab.run();
  await lab.waitDone();

  await page.goto("/runs");
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  const rows = page.getByTestId("records").locator("tbody tr");
  // Newest first: the no_grad run, then the one before it, each model named as the pages name it.
  await expect(rows.nth(0)).toContainText("Tiny MLP (BatchNorm + Dropout) · eval · no_grad · batch 4");
  await expect(rows.nth(1)).toContainText("Tiny MLP (BatchNorm + Dropout) · eval · enabled · batch 4");
  await expect(page.getByTestId("compare-selected")).toBeHidden();
  await rows.nth(0).locator("input[type=checkbox]").check();
  await rows.nth(1).locator("input[type=checkbox]").check();
  await page.getByTestId("compare-selected").click();
  await expect(page.getByTestId("compare-table").locator("thead th")).toHaveCount(3);
  await expect(page.getByTestId("compare-table")).toContainText("eval · no_grad · batch 4");
});
