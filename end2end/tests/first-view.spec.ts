// The first five minutes: on a fresh server the Lab's first view is never empty (the
// default runs once, said so; later visits show it as recorded), and the guided start's
// three steps can be completed by clicking them, the Lab pointing at what each is about.
import { expect, test } from "@playwright/test";
import { LabPage } from "./lab-page";
import { freePort, startServer, stopServer, OwnServer } from "./own-server";

let server: OwnServer;
test.beforeAll(async () => {
  // A fresh server: nothing recorded.
  server = await startServer(freePort(5), ["--db", ":memory:", "--rate-limit", "0"]);
});
test.afterAll(async () => {
  if (server) await stopServer(server);
});

/** The option ECharts holds for the chart in element `id`. */
async function option(page: import("@playwright/test").Page, id: string): Promise<any> {
  return page.evaluate((id) => {
    const el = document.getElementById(id);
    const chart = el && (window as any).echarts.getInstanceByDom(el);
    return chart ? JSON.parse(JSON.stringify(chart.getOption())) : null;
  }, id);
}

test("first view, then the guided start clicked through", async ({ page, browser }) => {
  test.setTimeout(6 * 60_000);
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  const lab = new LabPage(page);
  await page.goto(`${server.url}/`);
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);

  // Fresh server: the default runs once on arrival, and the page says why.
  await expect(lab.testid("shown-note")).toContainText("First visit", { timeout: 30_000 });
  await lab.waitDone();
  expect((await lab.chartData("memory-chart")).length).toBeGreaterThan(0);
  // The default is not the tiny MLP, whose grad/no_grad difference is invisible.
  await expect(lab.testid("model")).not.toHaveValue("tiny_mlp");

  // A second visitor sees that run as recorded, with its date and hardware, at once.
  const other = await browser.newPage();
  await other.goto(`${server.url}/`);
  await expect(other.getByTestId("shown-note")).toContainText(/Recorded \d{4}-\d\d-\d\d \d\d:\d\d UTC on .+\(cpu\)/);
  // Its charts are the server's pictures of that record, described by the charts' own
  // sentences; ECharts is not fetched until the visitor acts.
  const picture = other.locator("#latency-chart [data-testid=chart-picture] img");
  await expect(picture).toHaveJSProperty("complete", true);
  await expect(picture).toHaveAttribute("alt", /p50 .* ms/);
  expect(await other.evaluate(() => typeof (window as any).echarts)).toBe("undefined");
  // A pointer over a chart brings ECharts, which draws the record over its picture.
  await other.locator("#latency-chart").hover();
  await expect.poll(async () => (await new LabPage(other).chartData("latency-chart")).length).toBeGreaterThan(0);
  await expect(other.locator("#latency-chart [data-testid=chart-picture]")).toHaveCount(0);
  await expect(other.getByTestId("shown")).toContainText("Showing a recorded run");
  await expect(other.getByTestId("load-shown")).toHaveCount(0);
  await other.close();

  // The guided start: step 1 is current and the Lab outlines the grad control, Run and
  // the memory chart; the automatic first run did not count as the reader's.
  const guide = lab.testid("guide");
  await expect(guide).toBeVisible();
  await expect(lab.testid("guide-progress")).toContainText("0 of 3");
  await expect(page.locator('.lab[data-guide-step="1"]')).toHaveCount(1);
  for (const target of [lab.testid("run"), page.locator("figure:has(#memory-chart)"), page.locator("fieldset:has([data-testid=grad-enabled])")]) {
    expect(await target.evaluate((e) => getComputedStyle(e).outlineStyle)).toBe("dashed");
  }
  expect(await lab.testid("compare-all").evaluate((e) => getComputedStyle(e).outlineStyle)).not.toBe("dashed");

  await lab.testid("guide-step-1").click();
  await expect(lab.testid("guide-progress")).toContainText("1 of 3", { timeout: 90_000 });
  await expect(page).toHaveURL(/grad=enabled/);
  await expect(page.locator('.lab[data-guide-step="2"]')).toHaveCount(1);
  // Step 1 ran the recorded run's settings again: two runs of identical settings read as
  // the same within this server's run-to-run noise, or, where that noise is too wide to
  // decide (a young server, a busy machine), as not decided — never as a difference.
  const latencyTitle = JSON.stringify((await option(page, "latency-chart")).title);
  expect(latencyTitle).toMatch(/p50 within run-to-run noise \(±[\d.]+%\)"|p50 against the previous run: not decided/);
  await expect(lab.testid("reading")).toContainText(/no difference beyond run-to-run noise|median latency: not decided: .*rerun on a quieter machine, or with more iterations/);

  await lab.testid("guide-step-2").click();
  await expect(lab.testid("guide-progress")).toContainText("2 of 3", { timeout: 90_000 });
  await expect(page).toHaveURL(/grad=no_grad/);
  await expect(lab.testid("grad-no_grad")).toBeChecked();
  // The run shown is the one the controls describe: nothing to load.
  await expect(lab.testid("shown")).toContainText("no_grad");
  await expect(lab.testid("load-shown")).toHaveCount(0);
  // The previous run is drawn behind the current one, and the reading is on the chart.
  const memory = await option(page, "memory-chart");
  const names: string[] = memory.series.map((s: any) => s.name);
  expect(names.some((n) => /previous/.test(n))).toBe(true);
  const titles: string = JSON.stringify(memory.title);
  expect(titles).toMatch(/peak \d+\.\d× lower than the previous run/);
  expect(titles).toContain("above the baseline of");
  expect(memory.aria.enabled).toBe(true);
  await expect(page.locator("#memory-chart")).toHaveAttribute("aria-label", /lower than the previous run/);

  await lab.testid("guide-step-3").click();
  await expect(lab.testid("guide-finished")).toBeVisible({ timeout: 4 * 60_000 });
  await expect(lab.testid("guide-progress")).toContainText("done");
  await expect(page.locator(".lab[data-guide-step]")).toHaveCount(0);

  // After the comparison the summary says which run it shows: the lesson ends on the grad
  // modes it teaches, eval under no_grad against eval with autograd (five runs after the
  // first three), and the snippet is that run's.
  const runs = await lab.testid("page-runs").locator("li").count();
  expect(runs).toBe(8);
  await expect(lab.testid("shown")).toContainText(`Showing run #${runs} of this page`);
  await expect(lab.testid("shown")).toContainText("eval · no_grad");
  await expect(lab.testid("summary").locator("caption")).toContainText(
    (await lab.testid("shown").innerText()).split(": ")[1].split(" — ")[0],
  );
  const last = await option(page, "memory-chart");
  expect(JSON.stringify(last.title)).toMatch(/peak \d+\.\d× lower than the previous run/);
  expect(JSON.stringify(last.title)).not.toMatch(/fp16|bf16/);
  await expect(lab.testid("snippet")).toContainText("with torch.no_grad():");
  await expect(lab.testid("snippet")).toContainText("model.eval()");
  await expect(lab.testid("load-shown")).toHaveCount(0);
  // Any compared run can be brought back, its settings loaded into the controls.
  const first = lab.testid("page-runs").locator("li", { hasText: "train · enabled" }).first();
  await first.getByRole("button").click();
  await expect(lab.testid("shown")).toContainText("train · enabled");
  await expect(lab.testid("load-shown")).toHaveCount(0);
  await expect(lab.testid("mode-train")).toBeChecked();
  await expect(lab.testid("grad-enabled")).toBeChecked();

  // Remembered in this browser: still done after a reload; hidden stays hidden.
  await page.reload();
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  await expect(lab.testid("guide-progress")).toContainText("done");
  await lab.testid("guide-dismiss").click();
  await page.reload();
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  await expect(lab.testid("guide")).toBeHidden();
  await lab.testid("guide-show").click();
  await expect(lab.testid("guide")).toBeVisible();
  expect(errors).toEqual([]);
});

test("a comparison does not skip the steps before it, and the absolute toggle keeps the baseline", async ({ page }) => {
  const lab = new LabPage(page);
  await page.goto(`${server.url}/?model=tiny_mlp&device=cpu&batch=8&warmup=1&iters=3`);
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  await page.evaluate(() => localStorage.removeItem("gradless-guide"));
  await page.reload();
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  // A run with settings in the address: no recorded run is put in its place.
  await expect(lab.testid("shown-note")).toHaveCount(0);
  await lab.run();
  await lab.waitDone();
  await expect(lab.testid("guide-progress")).toContainText("1 of 3");
  const above = (await lab.chartData("memory-chart")) as number[];
  await lab.testid("memory-absolute").check();
  await expect.poll(async () => JSON.stringify((await option(page, "memory-chart")).title)).toContain("absolute");
  const absolute = (await lab.chartData("memory-chart")) as number[];
  // Absolute is above-baseline plus the baseline: higher at every iteration.
  expect(absolute.length).toBe(above.length);
  absolute.forEach((v, i) => expect(v).toBeGreaterThan(above[i]));
});
