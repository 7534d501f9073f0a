// Takes the Generate page's screenshots for docs/: after "Compare cache modes" (or a single
// generation with SINGLE=1).
// Usage: node generate-screenshot.mjs URL OUT.png [width] [height] [colorScheme]
import { chromium } from "@playwright/test";

const [url, out, width = "1440", height = "1800", scheme = "light"] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const page = await browser.newPage({ viewport: { width: +width, height: +height }, colorScheme: scheme });
await page.goto(url);
await page.waitForSelector("html[data-hydrated=true]");
const series = () => page.evaluate(() => {
  const c = window.echarts?.getInstanceByDom(document.getElementById("gen-latency-chart"));
  return c?.getOption()?.series?.length ?? 0;
});
if (process.env.SINGLE) {
  await page.getByTestId("gen-run").click();
  await page.getByTestId("gen-summary").waitFor({ timeout: 300000 });
} else {
  await page.getByTestId("gen-compare-cache").click();
  for (let i = 0; i < 600 && (await series()) < 3; i++) await page.waitForTimeout(500);
  await page.getByTestId("gen-summary").waitFor({ timeout: 300000 });
}
await page.waitForTimeout(800);
await page.screenshot({ path: out, fullPage: true });
await browser.close();
console.log(`wrote ${out}`);
