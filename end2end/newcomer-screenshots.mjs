// Screenshots of what a newcomer sees at 1440×900 and 390×844 (issue 38): the Generate
// page right after "Compare cache modes" is pressed and once it is done, the Lab after a
// run with the embed dialog open and its forward-pass view, and the first pitfall card.
// Usage: node newcomer-screenshots.mjs URL OUTDIR
import { chromium } from "@playwright/test";

const [url, out] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
for (const [w, h] of [[1440, 900], [390, 844]]) {
  const page = await browser.newPage({ viewport: { width: w, height: h } });
  await page.goto(`${url}/generate?model=llama_tiny&device=cpu&batch=1&prompt=16&new_tokens=24&cache=dynamic&eval=1&grad=no_grad&autocast=off`);
  await page.waitForSelector("html[data-hydrated=true]");
  await page.getByTestId("gen-compare-cache").scrollIntoViewIfNeeded();
  await page.getByTestId("gen-compare-cache").click();
  await page.waitForTimeout(300);
  await page.screenshot({ path: `${out}/gen-pressed-${w}.png` });
  await page.getByTestId("gen-comparison").waitFor({ timeout: 300000 });
  await page.getByTestId("gen-status").filter({ hasText: "Done" }).waitFor({ timeout: 300000 });
  await page.waitForTimeout(800);
  await page.screenshot({ path: `${out}/gen-done-${w}.png`, fullPage: true });

  await page.goto(`${url}/?model=resnet18&device=cpu&batch=2&eval=1&grad=enabled&autocast=off`);
  await page.waitForSelector("html[data-hydrated=true]");
  await page.getByTestId("run").scrollIntoViewIfNeeded();
  await page.getByTestId("run").click();
  await page.waitForTimeout(300);
  await page.screenshot({ path: `${out}/lab-pressed-${w}.png` });
  await page.getByTestId("status").filter({ hasText: "Done" }).waitFor({ timeout: 300000 });
  await page.getByTestId("embed").first().click();
  await page.getByTestId("embed-target").first().selectOption("markdown");
  await page.waitForTimeout(800);
  await page.screenshot({ path: `${out}/lab-done-${w}.png`, fullPage: true });
  const wide = await page.evaluate(() => document.scrollingElement.scrollWidth - innerWidth);
  console.log(`${w}: lab with embed open scrolls sideways by ${wide} px`);

  if (!process.env.NO_CARD) {
    await page.goto(`${url}/pitfalls`);
    await page.waitForSelector("html[data-hydrated=true]");
    const card = page.locator("article.card, .card").first();
    const run = card.locator("button[data-testid^=run-]").first();
    await run.scrollIntoViewIfNeeded();
    await run.click();
    await card.locator("[data-testid^=verdict-]").waitFor({ timeout: 300000 });
    await page.waitForTimeout(1000);
    await card.screenshot({ path: `${out}/card1-${w}.png` });
  }
  await page.close();
}
await browser.close();
console.log(`wrote ${out}`);
