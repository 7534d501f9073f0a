// The whole guided tour, every card in order, as a reader without a GPU takes it: no page
// error, no panic, every card ends with a verdict, and the tour counts all of them.
import { expect, test } from "@playwright/test";

test("every pitfall card runs in order on a CPU server without a page error", async ({ page }) => {
  test.setTimeout(20 * 60_000);
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(`pageerror: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() === "error" || /panicked/.test(m.text())) errors.push(`console: ${m.text()}`);
  });
  await page.goto("/pitfalls");
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  await page.evaluate(() => localStorage.removeItem("gradless-tour"));
  await page.reload();
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);

  const ids = await page.locator("article.card").evaluateAll((cards) => cards.map((c) => c.id));
  expect(ids.length).toBeGreaterThanOrEqual(13);
  await expect(page.getByTestId("tour-progress")).toContainText(`0 of ${ids.length}`);
  const verdicts: Record<string, string> = {};
  for (const [i, id] of ids.entries()) {
    // Run without predicting: the tour walks every card, whatever its question.
    await page.getByTestId(`skip-${id}`).click();
    const verdict = page.getByTestId(`verdict-${id}`);
    await expect(verdict).toBeVisible({ timeout: 5 * 60_000 });
    verdicts[id] = (await verdict.locator("strong").innerText()).trim().replace(/^The claim: /, "");
    expect(verdicts[id]).toMatch(/^(Confirmed|Refuted here|Not applicable here|Inconclusive here)$/);
    await expect(page.getByTestId("tour-progress")).toContainText(`${i + 1} of ${ids.length}`);
    // "Run" and the verdict are marked apart: a not-applicable card shows no pass mark.
    await expect(page.getByTestId(`ran-${id}`)).toBeVisible();
    await expect(page.getByTestId(`mark-${id}`)).toHaveText(verdicts[id].toLowerCase());
    // A card that measured something draws it; one that measured nothing shows no chart box.
    const chart = page.locator(`#pitfall-chart-${id}`);
    if (await chart.isVisible()) {
      await expect
        .poll(() =>
          page.evaluate((el) => {
            const inst = (window as any).echarts.getInstanceByDom(document.getElementById(el));
            return inst ? inst.getOption().series.length : 0;
          }, `pitfall-chart-${id}`),
        )
        .toBeGreaterThan(0);
    }
    expect(errors, `after card ${id}`).toEqual([]);
  }
  await expect(page.getByTestId("tour-progress")).toContainText(`${ids.length} of ${ids.length}`);
  await expect(page.getByTestId("tour-next")).toHaveCount(0);
  // On a CPU, at least one card is a CUDA-only effect: the case that used to crash the tour.
  expect(Object.values(verdicts)).toContain("Not applicable here");
  expect(errors).toEqual([]);
});
