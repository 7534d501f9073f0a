// What a newcomer meets (issue 68), at 1440 and 390 px: the Pitfalls contents folded on a
// phone so the first card is on the first screens, the Lab's Run in a bar at the foot of a
// phone's screen, Generate's bar one row that never covers the footer, code that scrolls
// sideways rather than breaking identifiers, and the model picker keeping the KV cache card's
// answer until that card is done. Screenshots land in end2end/test-results/shots/
// (GRADLESS_SHOTS).
import { expect, Page, test } from "@playwright/test";
import { LabPage } from "./lab-page";
import { GeneratePage } from "./generate-page";
import { seenTexts, watchTexts } from "./watch";

const shots = process.env.GRADLESS_SHOTS ?? "test-results/shots";
const PHONE = { width: 390, height: 844 };
const LAPTOP = { width: 1440, height: 900 };

async function hydrated(page: Page, path: string) {
  await page.goto(path);
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
}

/** Top of `selector`'s first match, in page pixels. */
const pageTop = (page: Page, selector: string) =>
  page.locator(selector).first().evaluate((e) => e.getBoundingClientRect().top + window.scrollY);

test("Pitfalls on a phone: the contents are folded and the first card starts within two screens", async ({ page }) => {
  await page.setViewportSize(PHONE);
  await hydrated(page, "/pitfalls");
  const contents = page.getByTestId("contents");
  await expect(contents.locator("ol")).toBeHidden();
  expect(await pageTop(page, "article.card")).toBeLessThan(2 * PHONE.height);
  await page.screenshot({ path: `${shots}/newcomer-pitfalls-390.png` });
  // Asked for, the list opens; every card is named.
  const cards = await page.locator("article.card").count();
  await page.getByTestId("contents-toggle").click();
  await expect(contents.locator("ol")).toBeVisible();
  await expect(contents.locator("li")).toHaveCount(cards);
  await expect(page.getByTestId("contents-toggle")).toHaveAttribute("aria-expanded", "true");
  // On a wide screen it is open beside the cards, with nothing to unfold.
  await page.setViewportSize(LAPTOP);
  await hydrated(page, "/pitfalls");
  await expect(contents.locator("ol")).toBeVisible();
  await expect(page.getByTestId("contents-toggle")).toBeHidden();
});

test("the Lab on a phone: Run is in a bar at the foot of the first screen; on a laptop it is not", async ({ page }) => {
  const lab = new LabPage(page);
  await page.setViewportSize(PHONE);
  await lab.open("model=tiny_mlp&device=cpu&eval=1&grad=no_grad&autocast=off&batch=4&warmup=1&iters=5");
  const bar = lab.testid("run-bar");
  await expect(bar).toBeVisible();
  const box = (await bar.boundingBox())!;
  expect(box.y + box.height).toBeLessThanOrEqual(PHONE.height + 1);
  expect(box.height).toBeLessThan(70);
  // Before the charts: the first screen holds the bar's Run while the settings are below.
  const settingsTop = await pageTop(page, "#settings");
  expect(settingsTop).toBeGreaterThan(PHONE.height);
  await page.screenshot({ path: `${shots}/newcomer-lab-390.png` });
  await lab.testid("run-bar-run").click();
  await lab.waitDone();
  // At the end of the page the footer sits above the bar, not under it.
  await page.evaluate(() => window.scrollTo(0, document.body.scrollHeight));
  const footer = (await page.locator("footer").boundingBox())!;
  const barNow = (await bar.boundingBox())!;
  expect(footer.y + footer.height).toBeLessThanOrEqual(barNow.y + 1);
  await page.setViewportSize(LAPTOP);
  await expect(bar).toBeHidden();
});

test("Generate on a phone: its bar is one row and the footer ends above it", async ({ page }) => {
  const gen = new GeneratePage(page);
  await page.setViewportSize(PHONE);
  await gen.open("model=llama_tiny&device=cpu&batch=1&prompt=16&new_tokens=8&cache=dynamic&eval=1&grad=no_grad&autocast=off");
  const bar = page.locator(".gen-actions");
  const buttons = bar.locator("button");
  await expect(buttons).toHaveCount(3);
  const tops = await buttons.evaluateAll((bs) => bs.map((b) => Math.round(b.getBoundingClientRect().top)));
  expect(new Set(tops).size, `the buttons sit on one row: ${tops}`).toBe(1);
  expect((await bar.boundingBox())!.height).toBeLessThan(70);
  await page.evaluate(() => window.scrollTo(0, document.body.scrollHeight));
  const footer = (await page.locator("footer").boundingBox())!;
  expect(footer.y + footer.height).toBeLessThanOrEqual((await bar.boundingBox())!.y + 1);
  await page.screenshot({ path: `${shots}/newcomer-generate-390.png` });
  // Its names for a screen reader stay whole.
  await expect(gen.testid("gen-compare-cache")).toHaveAccessibleName("Compare cache modes");
});

for (const [name, viewport] of [["1440", LAPTOP], ["390", PHONE]] as const) {
  test(`code keeps its lines and scrolls sideways, never breaking an identifier (${name} px)`, async ({ page }) => {
    await page.setViewportSize(viewport);
    await hydrated(page, "/generate?model=llama_tiny&device=cpu");
    const pre = page.getByTestId("gen-snippet-generate").locator("xpath=..");
    expect(await pre.evaluate((e) => getComputedStyle(e).whiteSpace)).toBe("pre");
    expect(await pre.evaluate((e) => getComputedStyle(e).overflowX)).toBe("auto");
    // Keyboard-reachable, so its arrows scroll it.
    expect(await pre.getAttribute("tabindex")).toBe("0");
    // Each line of the code is one line on screen: `LlamaConfig(` stays whole.
    const lineHeight = await pre.evaluate((e) => parseFloat(getComputedStyle(e).lineHeight) || 16);
    const lines = (await pre.innerText()).split("\n").length;
    const height = await pre.evaluate((e) => (e.firstElementChild as HTMLElement).getBoundingClientRect().height);
    expect(height).toBeLessThanOrEqual((lines + 1) * lineHeight * 1.1);
    expect(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth)).toBe(true);
    await pre.scrollIntoViewIfNeeded();
    await page.screenshot({ path: `${shots}/newcomer-code-${name}.png` });
  });
}

test("the model picker keeps the KV cache card's answer until that card is done here", async ({ page }) => {
  const gen = new GeneratePage(page);
  await gen.open("model=llama_tiny&device=cpu");
  await page.evaluate(() => localStorage.clear());
  await page.reload();
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  const shape = gen.testid("gen-model-shape");
  await expect(shape).toContainText("layers, hidden");
  await expect(shape).not.toContainText("per token");
  // The card answered in this browser (as the Pitfalls page keeps it): the figure is told.
  await page.evaluate(() => localStorage.setItem("gradless-answers", JSON.stringify([["kv-cache-size", "skipped"]])));
  await page.reload();
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  await expect(shape).toContainText(/KV cache [\d.]+ \w+ per token per sequence/);
});

// A quality measurement runs most of a minute after the last step; the page said "64 steps
// streamed" under a full bar. It now names the setting it measures, and the bar restarts.
test("a quality measurement names each setting as it goes", async ({ page }) => {
  test.setTimeout(300_000);
  const gen = new GeneratePage(page);
  await gen.open("model=torch_bytes&device=cpu&batch=1&new_tokens=8&cache=dynamic&eval=1&grad=no_grad&autocast=off&quality=1&prompt_text=def%20f(x)%3A");
  await watchTexts(page, "gen-steps");
  await watchTexts(page, "gen-status");
  await gen.generate();
  await gen.waitDone(280_000);
  const steps = (await seenTexts(page, "gen-steps")).join("\n");
  const status = (await seenTexts(page, "gen-status")).join("\n");
  expect(steps).toMatch(/steps streamed · Measuring quality: setting 1 of (\d+) \(/);
  const total = Number(steps.match(/setting 1 of (\d+)/)![1]);
  expect(total).toBeGreaterThan(1);
  expect(steps).toContain(`Measuring quality: setting ${total} of ${total} (`);
  expect(status).toMatch(/Measuring quality: setting \d+ of \d+/);
  await expect(gen.testid("gen-quality")).toBeVisible();
});
