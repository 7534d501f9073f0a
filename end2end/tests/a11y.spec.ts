// Accessibility, checked by axe-core in the browser: no serious or critical violation on
// any page, in the light and the dark colour scheme; the charts describe themselves in
// words; every control is reached with the keyboard and shows a visible focus ring.
import { expect, test, Page } from "@playwright/test";
import { recordedRun } from "./recorded-run";
import * as path from "node:path";

// axe-core from end2end's devDependencies (package.json), injected into each page.
const AXE = path.join(__dirname, "..", "node_modules", "axe-core", "axe.min.js");

// The pages' CSP allows only their own nonce-carrying scripts, so an injected checker is
// refused; here (only here) the browser ignores the CSP. Every other spec runs the pages
// under it, which is how the CSP itself is tested.
test.use({ bypassCSP: true });

async function seriousViolations(page: Page): Promise<string[]> {
  await page.addScriptTag({ path: AXE });
  const violations: any[] = await page.evaluate(async () => {
    const result = await (window as any).axe.run(document, { resultTypes: ["violations"] });
    return result.violations;
  });
  return violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => `${v.id} (${v.impact}): ${v.help} — ${v.nodes.slice(0, 3).map((n: any) => n.target.join(" ")).join(", ")}`);
}

test("axe-core finds no serious or critical violation on any page, light or dark", async ({ page, request }) => {
  test.setTimeout(6 * 60_000);
  const a = await recordedRun(request, "enabled");
  const b = await recordedRun(request, "no_grad");
  const pages: [string, (p: Page) => Promise<void>][] = [
    ["/?model=tiny_mlp&device=cpu&batch=4&warmup=1&iters=3", async (p) => {
      await p.getByTestId("run").click();
      await expect(p.getByTestId("status")).toContainText("Done", { timeout: 90_000 });
      await p.getByTestId("embed").first().click();
    }],
    ["/pitfalls", async (p) => {
      // Without a prediction: the card opens its lesson and runs (on the second pass the
      // card was answered in this browser, so it opens as its lesson, with Run again).
      const skip = p.getByTestId("skip-warm-up");
      if (await skip.count()) await skip.click();
      else await p.getByTestId("rerun-warm-up").click();
      await expect(p.getByTestId("verdict-warm-up")).toBeVisible({ timeout: 120_000 });
    }],
    ["/runs", async () => {}],
    [`/runs/${a}`, async () => {}],
    [`/compare?runs=${a},${b}`, async () => {}],
    ["/embed/lab?model=tiny_mlp&hide=snippet", async () => {}],
    [`/embed/runs/${a}`, async () => {}],
    ["/embed/pitfalls/warm-up", async () => {}],
  ];
  for (const scheme of ["light", "dark"] as const) {
    await page.emulateMedia({ colorScheme: scheme });
    for (const [path, act] of pages) {
      await page.goto(path);
      // Live: hydrated, or (an embedded recorded run, served without the wasm) drawn.
      await expect(page.locator("html[data-hydrated=true], html[data-static=drawn]")).toHaveCount(1);
      await act(page);
      expect(await seriousViolations(page), `${path} (${scheme})`).toEqual([]);
    }
  }
});

test("the charts say in words what they show", async ({ page }) => {
  await page.goto("/?model=tiny_mlp&device=cpu&batch=4&warmup=1&iters=5");
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  await page.getByTestId("run").click();
  await expect(page.getByTestId("status")).toContainText("Done", { timeout: 90_000 });
  await expect(page.locator("#latency-chart")).toHaveAttribute("aria-label", /p50 \d+\.\d ms, p95 \d+\.\d ms over 5 iterations/);
  await expect(page.locator("#memory-chart")).toHaveAttribute("aria-label", /peak .+ above the baseline of/);
  await expect(page.locator("#compare-chart")).toHaveAttribute("aria-label", /#1 Tiny MLP/);
  // Bars carry decal patterns: told apart without colour.
  const decal = await page.evaluate(() => {
    const c = (window as any).echarts.getInstanceByDom(document.getElementById("compare-chart"));
    return c.getOption().aria[0]?.decal?.show ?? c.getOption().aria.decal?.show;
  });
  expect(decal).toBe(true);
});

test("every control of the Lab is reached with Tab and shows a focus ring", async ({ page }) => {
  await page.goto("/?model=tiny_mlp&device=cpu&batch=4&warmup=1&iters=3");
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  const wanted = ["model", "device", "mode-eval", "grad-enabled", "autocast-off", "batch", "run", "compare-all", "guide-step-1"];
  const reached = new Set<string>();
  await page.locator("body").focus();
  for (let i = 0; i < 60 && reached.size < wanted.length; i++) {
    await page.keyboard.press("Tab");
    const focused = await page.evaluate(() => {
      const el = document.activeElement as HTMLElement | null;
      if (!el) return null;
      const style = getComputedStyle(el);
      return { id: el.getAttribute("data-testid"), outline: style.outlineStyle, width: parseFloat(style.outlineWidth) };
    });
    if (focused?.id && wanted.includes(focused.id)) {
      reached.add(focused.id);
      expect(focused.outline, `${focused.id} focus ring`).not.toBe("none");
      expect(focused.width, `${focused.id} focus ring width`).toBeGreaterThanOrEqual(2);
    }
  }
  expect([...reached].sort()).toEqual([...wanted].sort());
});
