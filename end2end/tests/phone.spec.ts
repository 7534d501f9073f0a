// On a phone (390 px wide), the recorded list and the side-by-side comparison read without
// sideways scrolling, and an embedded card fits its frame.
import { expect, test } from "@playwright/test";
import { recordedRun } from "./recorded-run";

const noSidewaysScroll = (page: import("@playwright/test").Page) =>
  page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth);

test("recorded runs and the comparison fit a phone", async ({ page, request }) => {
  const a = await recordedRun(request, "enabled");
  const b = await recordedRun(request, "no_grad");
  await page.setViewportSize({ width: 390, height: 844 });
  await page.goto("/runs");
  await expect(page.getByTestId("records")).toContainText(/tiny/i); // the display name: "Tiny MLP ..."
  expect(await noSidewaysScroll(page)).toBe(true);
  await page.goto(`/compare?runs=${a},${b}`);
  const table = page.getByTestId("compare-table");
  await expect(table).toContainText("#2");
  expect(await noSidewaysScroll(page)).toBe(true);
  // The second run's figures are on screen, not behind a horizontal scroll.
  const second = table.locator('td[data-label="#2"]').first();
  const box = await second.boundingBox();
  expect(box && box.x + box.width).toBeLessThanOrEqual(390);
});

test("an embedded pitfall card fits a phone and has no Embed button of its own", async ({ page }) => {
  await page.setViewportSize({ width: 390, height: 844 });
  await page.goto("/embed/pitfalls/nograd-and-dropout");
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  expect(await noSidewaysScroll(page)).toBe(true);
  await expect(page.getByTestId("embed")).toHaveCount(0);
});
