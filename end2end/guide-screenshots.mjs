// Takes the user's guide's screenshots of the first view and of the guided start's last step,
// at 1440 px and on a phone (390 px), each in a fresh browser profile.
// Usage: node guide-screenshots.mjs URL OUTDIR [light|dark]
import { chromium } from "@playwright/test";

const [url, outdir = "../docs", scheme = "light"] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const suffix = scheme === "dark" ? "-dark" : "";
for (const [width, height, tag] of [[1440, 1000, ""], [390, 844, "-phone"]]) {
  const page = await browser.newPage({ viewport: { width, height }, colorScheme: scheme, deviceScaleFactor: tag ? 2 : 1 });
  await page.goto(url);
  await page.waitForSelector("html[data-hydrated=true]");
  // The first view: a recorded run of the default settings (or the first run on a fresh server).
  await page.getByTestId("shown-note").waitFor({ timeout: 60000 });
  await page.getByTestId("status").filter({ hasText: /Recorded|Done/ }).waitFor({ timeout: 120000 });
  await page.waitForTimeout(500);
  await page.screenshot({ path: `${outdir}/first-view${tag}${suffix}.png` });
  // The guided start: steps 1 and 2 clicked; the last step is current.
  for (const [step, after] of [[1, "1 of 3"], [2, "2 of 3"]]) {
    await page.getByTestId(`guide-step-${step}`).click();
    await page.getByTestId("guide-progress").filter({ hasText: after }).waitFor({ timeout: 120000 });
  }
  await page.waitForTimeout(500);
  if (tag) {
    // On a phone the charts are below the controls: show the memory chart with its reading.
    await page.locator("#memory-chart").scrollIntoViewIfNeeded();
    await page.evaluate(() => window.scrollBy(0, -120));
  }
  await page.screenshot({ path: `${outdir}/guided-start${tag}${suffix}.png` });
  await page.close();
  console.log(`wrote ${outdir}/first-view${tag}${suffix}.png and guided-start${tag}${suffix}.png`);
}
await browser.close();
