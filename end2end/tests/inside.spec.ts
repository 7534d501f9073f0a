// Inside the forward pass: the traced pass drawn module by module, runs overlaid, and the
// Chrome-trace export.
import { expect, test } from "@playwright/test";
import { LabPage } from "./lab-page";

/** The y values (MiB held above baseline) of series `index` of the trace chart. */
async function held(lab: LabPage, index: number): Promise<number[]> {
  const data = (await lab.chartData("trace-chart", index)) as unknown[][];
  return data.map((point) => point[1] as number);
}

test("the forward-pass chart overlays one series per run, grad above no_grad", async ({ page, request }) => {
  const lab = new LabPage(page);
  await lab.open("model=resnet18&device=cpu&eval=1&grad=enabled&autocast=off&batch=2&warmup=0&iters=2&input_size=64");
  await lab.run();
  await lab.waitDone();
  await expect(lab.testid("inside")).toBeVisible();
  await expect.poll(() => lab.chartSeriesCount("trace-chart")).toBe(1);

  await lab.testid("grad-no_grad").check();
  await lab.run();
  await lab.waitDone();
  await expect.poll(() => lab.chartSeriesCount("trace-chart")).toBe(2);

  const grad = await held(lab, 0);
  const noGrad = await held(lab, 1);
  expect(grad.length).toBeGreaterThanOrEqual(20);
  expect(noGrad.length).toBe(grad.length);
  // The staircase ends far above the sawtooth: every activation grad saved is still held.
  expect(grad[grad.length - 1]).toBeGreaterThan(4 * noGrad[noGrad.length - 1]);
  expect(Math.max(...grad)).toBeGreaterThan(Math.max(...noGrad));
  // The five modules that hold the most, from the shown (no_grad) run.
  await expect(lab.testid("top-holders").locator("tbody tr")).toHaveCount(5);
  await expect(lab.testid("achieved")).toContainText("multiply-add counts as 2 FLOPs");
  await expect.poll(() => lab.chartSeriesCount("breakdown-chart")).toBeGreaterThanOrEqual(2);
  await expect.poll(() => lab.chartSeriesCount("roofline-chart")).toBeGreaterThanOrEqual(3);

  // The Chrome trace: JSON with one span per module and memory counter events.
  const href = await lab.testid("export-trace").getAttribute("href");
  expect(href).toMatch(/^\/api\/records\/[0-9a-f]{16}\/export\/trace$/);
  const res = await request.get(href!);
  expect(res.ok()).toBe(true);
  const trace = JSON.parse(await res.text());
  const events = trace.traceEvents as { ph: string; name: string; dur?: number; args?: any }[];
  const spans = events.filter((e) => e.ph === "X");
  const counters = events.filter((e) => e.ph === "C");
  expect(spans.length).toBe(noGrad.length);
  expect(counters.length).toBeGreaterThan(spans.length - 1);
  expect(spans[0].name).toBe("conv1");
  expect(spans.every((s) => typeof s.dur === "number" && s.dur >= 0)).toBe(true);
  expect(counters.every((c) => typeof c.args.bytes === "number")).toBe(true);
});

test("a memory pitfall card overlays the traced passes of its rows", async ({ page }) => {
  await page.goto("/pitfalls#eval-and-autograd");
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  // Without a prediction (Lock in waits for one): the lesson opens and the card runs.
  await page.getByTestId("skip-eval-and-autograd").click();
  await expect(page.getByTestId("verdict-eval-and-autograd")).toContainText("Confirmed", { timeout: 120_000 });
  await expect(page.getByTestId("trace-eval-and-autograd")).toBeVisible();
  const lines = await page.evaluate(() => {
    const el = document.getElementById("pitfall-chart-eval-and-autograd-trace");
    const chart = el && (window as any).echarts.getInstanceByDom(el);
    return (chart?.getOption()?.series ?? []).map((s: any) => ({ name: s.name, last: s.data[s.data.length - 1][1] }));
  });
  expect(lines.map((l: any) => l.name)).toEqual(["eval + grad", "eval + no_grad"]);
  expect(lines[0].last).toBeGreaterThan(lines[1].last);
});
