// A pitfall card runs its experiment on the server and shows the verdict with its chart.
import { expect, test } from "@playwright/test";

test("a pitfall card runs and shows its verdict, figures and chart", async ({ page }) => {
  await page.goto("/pitfalls");
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  await page.evaluate(() => localStorage.removeItem("gradless-tour"));
  await page.reload();
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  // The tour's total is the catalogue's, as /api/pitfalls lists it.
  const total = (await (await page.request.get("/api/pitfalls")).json()).length;
  expect(total).toBeGreaterThan(19);
  await expect(page.getByTestId("tour-progress")).toContainText(`0 of ${total}`);
  const card = page.getByTestId("card-nograd-and-dropout");
  // The question state labels the code by what it does; the lesson says which falls in.
  await expect(card).not.toContainText("Falls in");
  await page.getByTestId("skip-nograd-and-dropout").click();
  await expect(card).toContainText("Falls in");
  await expect(page.getByTestId("verdict-nograd-and-dropout")).toContainText("Confirmed", { timeout: 90_000 });
  await expect(card.locator("table.figures")).toContainText("running mean change");
  const bars = await page.evaluate(() => {
    const el = document.getElementById("pitfall-chart-nograd-and-dropout");
    const chart = el && (window as any).echarts.getInstanceByDom(el);
    return (chart?.getOption()?.series ?? []).map((s: any) => s.data.length);
  });
  expect(bars).toEqual([3, 3]);
  // The tour remembers the card across a reload.
  await expect(page.getByTestId("tour-progress")).toContainText(`1 of ${total}`);
  await page.reload();
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  await expect(page.getByTestId("tour-progress")).toContainText(`1 of ${total}`);
});

test("a CUDA-only card says not applicable on a CPU, with the reason", async ({ page }) => {
  await page.goto("/pitfalls#timing-gpu-work");
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  await page.getByTestId("skip-empty-cache").click();
  await expect(page.getByTestId("verdict-empty-cache")).toContainText("Not applicable", { timeout: 60_000 });
  await expect(page.getByTestId("verdict-empty-cache")).toContainText("CUDA");
});

test("a card beyond the five switches runs on the CPU: cast weights against autocast", async ({ page }) => {
  await page.goto("/pitfalls#half-weights");
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  await page.getByTestId("skip-half-weights").click();
  await expect(page.getByTestId("verdict-half-weights")).toContainText("Confirmed", { timeout: 120_000 });
  const card = page.getByTestId("card-half-weights");
  await expect(card.locator("table.figures")).toContainText("bf16 weights parameters");
  await expect(card).toContainText("autocast / cast-weights latency");
});
