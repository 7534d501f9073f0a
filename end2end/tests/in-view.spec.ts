// What a newcomer sees when they press the button: the run's first chart is on screen at a
// laptop's and a phone's width (the Generate page's settings run two screens down; on a
// phone the Lab's charts sit above its settings), and the embed dialog fits a phone.
import { expect, test, type Page } from "@playwright/test";

const WIDTHS = [
  { width: 1440, height: 900 },
  { width: 390, height: 844 },
];

async function hydrated(page: Page) {
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
}

for (const size of WIDTHS) {
  test(`at ${size.width} px, Generate brings its first chart into view`, async ({ page }) => {
    await page.setViewportSize(size);
    await page.goto("/generate?model=llama_tiny&device=cpu&batch=1&prompt=8&new_tokens=8&cache=dynamic&eval=1&grad=no_grad&autocast=off");
    await hydrated(page);
    if (size.width < 900) {
      // Results first on a phone, as in the Lab; the snippets after the settings.
      const chart = await page.getByTestId("gen-latency-chart").boundingBox();
      const button = await page.getByTestId("gen-run").boundingBox();
      const snippet = await page.getByTestId("gen-snippet-loop").boundingBox();
      expect(chart!.y).toBeLessThan(button!.y);
      expect(snippet!.y).toBeGreaterThan(button!.y);
    }
    await page.getByTestId("gen-run").scrollIntoViewIfNeeded();
    await page.getByTestId("gen-run").click();
    await expect(page.getByTestId("gen-latency-chart")).toBeInViewport();
    await expect(page.getByTestId("gen-status")).toContainText("Done", { timeout: 90_000 });
  });

  test(`at ${size.width} px, the Lab's Run brings its first chart into view`, async ({ page }) => {
    await page.setViewportSize(size);
    await page.goto("/?model=tiny_mlp&device=cpu&batch=4&eval=1&grad=no_grad&autocast=off");
    await hydrated(page);
    await page.getByTestId("run").scrollIntoViewIfNeeded();
    await page.getByTestId("run").click();
    await expect(page.getByTestId("latency-chart")).toBeInViewport();
    await expect(page.getByTestId("status")).toContainText("Done", { timeout: 90_000 });
  });
}

test("the embed dialog fits a phone and gives the Lab's picture once a run is recorded", async ({ page }) => {
  await page.setViewportSize({ width: 390, height: 844 });
  await page.goto("/?model=tiny_mlp&device=cpu&batch=2&eval=1&grad=no_grad&autocast=off");
  await hydrated(page);
  await page.getByTestId("embed").click();
  const code = page.getByTestId("embed-code");
  await expect(code).toBeVisible();
  const wide = () => page.evaluate(() => document.scrollingElement!.scrollWidth - window.innerWidth);
  expect(await wide()).toBeLessThanOrEqual(0);
  // Nothing on the charts yet: the Markdown is a link, and the dialog says so.
  await page.getByTestId("embed-target").selectOption("markdown");
  await expect(page.getByTestId("embed-picture")).toContainText("no picture");
  await expect(page.getByTestId("embed-target").locator("option:checked")).not.toContainText("picture");
  expect(await code.inputValue()).not.toContain(".png");
  // The dialog never names an operator's setting.
  await expect(page.locator(".embed-code")).not.toContainText("--embed-origins");
  await page.getByTestId("run").click();
  await expect(page.getByTestId("status")).toContainText("Done", { timeout: 90_000 });
  await expect.poll(() => code.inputValue()).toMatch(/^\[!\[.*\]\(http.*\/runs\/[0-9a-f]+\.png\)\]\(http.*model=tiny_mlp/);
  await page.getByTestId("embed-target").selectOption("html");
  await expect.poll(() => code.inputValue()).toContain("<img src=");
  expect(await wide()).toBeLessThanOrEqual(0);
  // The picture the snippet names is served.
  const src = (await code.inputValue()).match(/<img src="([^"]+)"/)![1];
  expect((await page.request.get(src)).status()).toBe(200);
});

test("at 1440 px the embed dialog stays inside the settings column", async ({ page }) => {
  await page.setViewportSize({ width: 1440, height: 900 });
  await page.goto("/?model=tiny_mlp&device=cpu&batch=2&eval=1&grad=no_grad&autocast=off");
  await hydrated(page);
  await page.getByTestId("embed").click();
  const column = await page.locator("section.controls").boundingBox();
  for (const id of ["embed-target", "embed-theme", "embed-code", "embed-note"]) {
    const box = await page.getByTestId(id).boundingBox();
    expect(box!.x + box!.width, id).toBeLessThanOrEqual(column!.x + column!.width + 0.5);
  }
});
