// The route-split wasm (app/src/routes.rs): the Lab's cold visit loads the main module and
// none of the other pages' code until it is wanted; from the Lab, a click on Generate
// navigates in the page (no new document), loads Generate's chunk and draws its first chart;
// a visit that lands on a lazy page hydrates it; the embed dialog's code comes on its first
// press. Nothing here is timed (scripts/bench-load.mjs measures).
import { expect, test, type Page } from "@playwright/test";

/** The wasm files `page` requested, by path. */
function wasmRequests(page: Page): string[] {
  const seen: string[] = [];
  page.on("request", (r) => {
    const path = new URL(r.url()).pathname;
    if (path.endsWith(".wasm")) seen.push(path);
  });
  return seen;
}

async function seriesLength(page: Page, id: string): Promise<number> {
  return page.evaluate((el) => {
    const node = document.getElementById(el);
    const chart = node && (window as any).echarts?.getInstanceByDom(node);
    return chart?.getOption()?.series?.[0]?.data?.length ?? 0;
  }, id);
}

test("from the Lab, a click on Generate loads its chunk and draws its first chart", async ({ page }) => {
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  const wasm = wasmRequests(page);
  await page.goto("/?model=tiny_mlp&device=cpu");
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  // The Lab is the main module: no pitfall, record or compare page's chunk came with it.
  expect(wasm.filter((p) => /\/gradless_bg\.\w+\.wasm$/.test(p)), wasm.join("\n")).toHaveLength(1);
  expect(wasm.filter((p) => /pitfalls|record|compare/i.test(p)), wasm.join("\n")).toEqual([]);
  // Client-side navigation keeps this document (and this marker).
  await page.evaluate(() => ((window as any).__samePage = true));
  const link = page.locator("header.top a.nav", { hasText: "Generate" });
  await link.hover();
  await link.click();
  await expect(page).toHaveURL(/\/generate$/);
  await expect(page.getByTestId("gen-run")).toBeEnabled();
  expect(await page.evaluate(() => (window as any).__samePage), "navigated without a new document").toBe(true);
  expect(wasm.some((p) => /generate/i.test(p)), `Generate's chunk was loaded:\n${wasm.join("\n")}`).toBe(true);
  // Its first chart: the default (CPU) decoder's first steps are drawn, in the same page.
  await page.getByTestId("gen-run").click();
  await expect.poll(() => seriesLength(page, "gen-latency-chart"), { timeout: 90_000 }).toBeGreaterThan(0);
  expect(await page.evaluate(() => (window as any).__samePage)).toBe(true);
  expect(errors).toEqual([]);
});

test("a visit that lands on a lazy page hydrates it, and its links work", async ({ page }) => {
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto("/pitfalls");
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  await expect(page.getByTestId("tour-progress")).toContainText("cards run");
  await page.locator("header.top a.nav", { hasText: "Lab" }).click();
  await expect(page).toHaveURL(/\/$/);
  await expect(page.getByTestId("run")).toBeEnabled();
  // Back to the cards by client-side navigation: this page carried none of their texts,
  // so they are read from the API, and drawn as on a fresh visit.
  await page.locator("header.top a.nav", { hasText: "Pitfalls" }).click();
  await expect(page.getByTestId("tour-progress")).toContainText("cards run");
  const cards = await page.locator("[data-testid^=contents-]").count();
  expect(cards).toBeGreaterThan(3);
  expect(errors).toEqual([]);
});

test("the embed dialog's code comes on its first press", async ({ page }) => {
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  const wasm = wasmRequests(page);
  await page.goto("/?model=tiny_mlp&device=cpu");
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  await page.waitForLoadState("networkidle");
  expect(wasm.some((p) => /embed_dialog/.test(p)), wasm.join("\n")).toBe(false);
  await page.getByTestId("embed").first().click();
  await expect(page.getByTestId("embed-code")).toBeVisible();
  await expect(page.getByTestId("embed-code")).toHaveValue(/\/embed\/lab/);
  expect(wasm.some((p) => /embed_dialog/.test(p)), wasm.join("\n")).toBe(true);
  // Hidden and shown again: the same dialog, no second load.
  await page.getByTestId("embed").first().click();
  await expect(page.getByTestId("embed-code")).toHaveCount(0);
  await page.getByTestId("embed").first().click();
  await expect(page.getByTestId("embed-code")).toBeVisible();
  expect(wasm.filter((p) => /embed_dialog/.test(p))).toHaveLength(1);
  expect(errors).toEqual([]);
});
