// The Generate page: a real generation streams its steps into the per-step charts, and
// "Compare cache modes" overlays dynamic, static and no cache.
import { expect, test, type Page } from "@playwright/test";
import { freePort, startServer, stopServer, type OwnServer } from "./own-server";

async function seriesLengths(page: Page, id: string): Promise<number[]> {
  return page.evaluate((el) => {
    const node = document.getElementById(el);
    const chart = node && (window as any).echarts?.getInstanceByDom(node);
    return (chart?.getOption()?.series ?? []).map((s: any) => (s.data ?? []).length);
  }, id);
}

test("a generation streams its steps into the per-step charts", async ({ page }) => {
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto("/generate?model=llama_tiny&device=cpu&batch=1&prompt=16&new_tokens=48&cache=dynamic&eval=1&grad=enabled&autocast=off");
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  await expect(page.getByTestId("gen-snippet-loop")).toContainText("DynamicCache");
  await expect(page.getByTestId("gen-snippet-generate")).toContainText("model.generate(");
  await page.getByTestId("gen-run").click();
  // Steps arrive while it runs, then all 48 (the prefill and 47 decode steps) are drawn.
  await expect.poll(async () => (await seriesLengths(page, "gen-latency-chart"))[0] ?? 0, { timeout: 90_000 }).toBe(47);
  await expect(page.getByTestId("gen-steps")).toContainText("48 steps");
  await expect(page.getByTestId("gen-summary")).toBeVisible({ timeout: 30_000 });
  await expect(page.getByTestId("gen-kv")).toContainText("equal to the byte");
  // Grad enabled: the graph the loop keeps is reported above the cache.
  await expect(page.getByTestId("gen-graph")).toContainText("on top of the cache");
  const memory = await seriesLengths(page, "gen-memory-chart");
  expect(memory).toEqual([48, 48]);
  await expect(page.getByTestId("gen-permalink")).toBeVisible();
  expect(errors).toEqual([]);
});

test("int8 and int4 weights: the weights split beside its formula, memory by holder, the drift", async ({ page }) => {
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto("/generate?model=llama_tiny&device=cpu&batch=1&prompt=16&new_tokens=16&cache=dynamic&eval=1&grad=no_grad&autocast=off");
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  for (const [choice, group, ratio] of [["int8", "", 0.3], ["int4", "32", 0.2]] as const) {
    await page.getByTestId("gen-quant").selectOption(choice);
    await expect(page).toHaveURL(new RegExp(`quant=${choice}`));
    await expect(page.getByTestId("gen-quant")).toHaveValue(choice);
    // int4's group size is its own control, shown with int4 only.
    await expect(page.getByTestId("gen-group-size")).toBeVisible({ visible: group !== "" });
    if (group) {
      await page.getByTestId("gen-group-size").selectOption(group);
      await expect(page).toHaveURL(new RegExp(`group_size=${group}`));
    }
    await page.getByTestId("gen-run").click();
    const split = page.getByTestId("gen-weights-split");
    await expect(split).toContainText("equal to their formula, to the byte", { timeout: 90_000 });
    // The linear layers' bytes against their unquantized bytes: under 0.3× (int8), 0.2× (int4).
    const factor = parseFloat((await split.innerText()).match(/\(([0-9.]+)× their/)![1]);
    expect(factor).toBeLessThan(ratio);
    await expect(page.getByTestId("gen-memory-split")).toContainText(/weights .+, KV cache .+, activations and logits /);
    await expect(page.getByTestId("gen-drift")).toContainText(/max \|Δ logit\| [0-9.]+ at the prefill/);
    await expect(page.getByTestId("gen-drift")).toContainText(/same greedy token for [0-9.]+% of 16 tokens/);
  }
  // Pictures of the new choices and rows, at 1440 and 390 px, for a person to look at.
  const shots = process.env.GRADLESS_SHOTS ?? "test-results/shots";
  for (const [name, width, height] of [["1440", 1440, 900], ["390", 390, 844]] as const) {
    await page.setViewportSize({ width, height });
    await page.getByTestId("gen-quant").scrollIntoViewIfNeeded();
    await page.screenshot({ path: `${shots}/generate-quant-controls-${name}.png` });
    await page.getByTestId("gen-weights-split").scrollIntoViewIfNeeded();
    await page.screenshot({ path: `${shots}/generate-quant-rows-${name}.png` });
  }
  expect(errors).toEqual([]);
});

test("Compare cache modes overlays dynamic, static and no cache", async ({ page }) => {
  await page.goto("/generate?model=llama_tiny&device=cpu&batch=1&prompt=8&new_tokens=24&cache=dynamic&eval=1&grad=no_grad&autocast=off");
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  await page.getByTestId("gen-compare-cache").click();
  await expect.poll(async () => (await seriesLengths(page, "gen-latency-chart")).length, { timeout: 120_000 }).toBe(3);
  await expect(page.getByTestId("gen-compare-link")).toBeVisible();
  expect(await seriesLengths(page, "gen-prefill-chart")).toEqual([3, 3]);
});

test.describe("the first view of a bare /generate", () => {
  let server: OwnServer;
  test.beforeAll(async () => {
    // A fresh server: nothing recorded.
    server = await startServer(freePort(7), ["--db", ":memory:", "--rate-limit", "0"]);
  });
  test.afterAll(async () => {
    if (server) await stopServer(server);
  });

  test("generates once on a fresh server, then shows that recorded generation", async ({ page }) => {
    test.setTimeout(4 * 60_000);
    const runs = async () => ((await (await fetch(`${server.url}/api/records?kind=run&limit=50`)).json()) as unknown[]).length;
    await page.goto(`${server.url}/generate`);
    await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
    await expect(page.getByTestId("gen-status")).toContainText("First visit", { timeout: 30_000 });
    await expect(page.getByTestId("gen-permalink")).toBeVisible({ timeout: 120_000 });
    await expect.poll(runs, { timeout: 30_000 }).toBe(1);
    // Two more loads find that generation and start nothing.
    for (let load = 0; load < 2; load++) {
      await page.goto(`${server.url}/generate`);
      await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
      await expect(page.getByTestId("gen-status")).toContainText("Recorded generation (the default settings)", { timeout: 30_000 });
      await expect(page.getByTestId("gen-status")).not.toContainText("First visit");
    }
    expect(await runs()).toBe(1);
  });
});
