// Every page fits the five widths people read it at — a phone, a tablet, laptops and a
// wide screen — without sideways scrolling, and the header and the content share one grid.
import { expect, test, Page } from "@playwright/test";
import { recordedRun } from "./recorded-run";

const WIDTHS = [390, 768, 1280, 1440, 1920];

async function overflow(page: Page) {
  return page.evaluate(() => {
    const width = document.documentElement.clientWidth;
    // The widest element sticking out, to say what to fix.
    let culprit = "";
    let most = width;
    for (const el of Array.from(document.querySelectorAll("body *"))) {
      const r = el.getBoundingClientRect();
      if (r.right > most + 1 && getComputedStyle(el).position !== "fixed") {
        most = r.right;
        culprit = `${el.tagName.toLowerCase()}.${(el as HTMLElement).className}`;
      }
    }
    return { scroll: document.documentElement.scrollWidth, width, culprit };
  });
}

test("no page scrolls sideways at 390, 768, 1280, 1440 or 1920 px; header and content line up", async ({ page, request }) => {
  test.setTimeout(5 * 60_000);
  const a = await recordedRun(request, "enabled");
  const b = await recordedRun(request, "no_grad");
  const pages = [
    "/?model=tiny_mlp&device=cpu&batch=4&warmup=1&iters=3",
    "/pitfalls",
    "/generate?model=llama_tiny&device=cpu",
    "/runs",
    `/runs/${a}`,
    `/compare?runs=${a},${b}`,
  ];
  for (const width of WIDTHS) {
    await page.setViewportSize({ width, height: 900 });
    for (const path of pages) {
      await page.goto(path);
      await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
      if (path.startsWith("/?")) {
        // The Lab after a run: its summary and history take room too.
        await page.getByTestId("run").click();
        await expect(page.getByTestId("status")).toContainText("Done", { timeout: 90_000 });
      }
      const o = await overflow(page);
      expect(o.scroll, `${path} at ${width}px: ${o.culprit} sticks out`).toBeLessThanOrEqual(o.width);
      // One grid: the brand in the header starts where the content does.
      const brand = await page.locator("header.top .brand").boundingBox();
      const content = await page.locator("main > :not(script)").first().boundingBox();
      expect(Math.abs(brand!.x - content!.x), `${path} at ${width}px`).toBeLessThanOrEqual(2);
    }
  }
});

test("the pitfalls contents list names every card, is sticky on a wide screen and shows a verdict once run", async ({ page }) => {
  await page.setViewportSize({ width: 1440, height: 900 });
  await page.goto("/pitfalls");
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  const cards = await page.locator("article.card").count();
  await expect(page.getByTestId("contents").locator("li")).toHaveCount(cards);
  expect(await page.getByTestId("contents").evaluate((e) => getComputedStyle(e).position)).toBe("sticky");
  // Without a prediction (Lock in waits for one): the lesson opens and the card runs.
  await page.getByTestId("skip-warm-up").click();
  await expect(page.getByTestId("verdict-warm-up")).toBeVisible({ timeout: 120_000 });
  await expect(page.getByTestId("contents").locator("li", { has: page.getByTestId("contents-warm-up") }))
    .toContainText(/confirmed|refuted here|not applicable here|inconclusive here/);
  // A contents entry jumps to its card.
  await page.getByTestId("contents-timing-gpu-work").click();
  await expect(page).toHaveURL(/#timing-gpu-work$/);
  // On a phone it sits above the cards, not beside them.
  await page.setViewportSize({ width: 390, height: 844 });
  expect(await page.getByTestId("contents").evaluate((e) => getComputedStyle(e).position)).toBe("static");
});
