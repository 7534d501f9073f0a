// Screenshots of an onboarding path and its answers page at 1440×900 and 390×844 (issue 34).
// It first answers step 4 of the shipped path a few times through the API (some right, some
// wrong), so the answers page has something to show.
// Usage: node learn-screenshots.mjs URL OUTDIR
import { chromium } from "@playwright/test";

const [url, out] = process.argv.slice(2);
const path = "inference-settings";
for (const choice of ["higher", "higher", "about the same", "lower"]) {
  const c = { "about the same": "same" }[choice] ?? choice;
  const r = await fetch(`${url}/api/learn/${path}/steps/4`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ prediction: { choice: c } }),
  });
  console.log(`step 4, predicted ${choice}: ${r.status}`);
}
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"],
});
for (const [w, h] of [[1440, 900], [390, 844]]) {
  const page = await browser.newPage({ viewport: { width: w, height: h } });
  await page.goto(`${url}/learn/${path}`);
  await page.waitForSelector("html[data-hydrated=true]");
  await page.waitForTimeout(500);
  await page.screenshot({ path: `${out}/learn-path-${w}.png`, fullPage: w > 400 });
  await page.goto(`${url}/learn/${path}/answers`);
  await page.waitForSelector("html[data-hydrated=true]");
  await page.waitForTimeout(500);
  await page.screenshot({ path: `${out}/learn-answers-${w}.png`, fullPage: w > 400 });
  const wide = await page.evaluate(() => document.scrollingElement.scrollWidth - innerWidth);
  console.log(`${w}: the answers page scrolls sideways by ${wide} px`);
  await page.close();
}
await browser.close();
console.log(`wrote ${out}`);
