// Takes the user's guide's screenshots of "Inside the forward pass": a run with grad, then the
// same run under no_grad, so the staircase and the sawtooth overlay; then the breakdown and
// the roofline below them.
// Usage: node inside-screenshots.mjs URL OUT_DIR
import { chromium } from "@playwright/test";

const [url, outDir] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const page = await browser.newPage({ viewport: { width: 1440, height: 1400 } });
await page.goto(url);
await page.waitForSelector("html[data-hydrated=true]");
const done = () => page.getByTestId("status").filter({ hasText: "Done" }).waitFor({ timeout: 300000 });
await page.getByTestId("run").click();
await done();
await page.getByTestId("grad-no_grad").check();
await page.getByTestId("run").click();
await page.waitForTimeout(300);
await done();
await page.waitForFunction(() => {
  const c = window.echarts.getInstanceByDom(document.getElementById("trace-chart"));
  return (c?.getOption()?.series?.length ?? 0) >= 2;
}, null, { timeout: 60000 });
await page.waitForTimeout(800);
// Hover one point so the screenshot shows what the hover names.
const chart = page.getByTestId("trace-chart");
const box = await chart.boundingBox();
await page.evaluate(() => {
  const c = window.echarts.getInstanceByDom(document.getElementById("trace-chart"));
  const n = c.getOption().series[0].data.length;
  c.dispatchAction({ type: "showTip", seriesIndex: 0, dataIndex: Math.floor(n * 0.7) });
});
await page.waitForTimeout(300);
const row = page.locator(".inside-row");
await row.screenshot({ path: `${outDir}/inside-forward-pass.png` });
const charts = page.locator(".inside .charts");
await charts.scrollIntoViewIfNeeded();
await page.locator(".inside").screenshot({ path: `${outDir}/inside-breakdown.png` });
await browser.close();
console.log(`wrote ${outDir}/inside-forward-pass.png and inside-breakdown.png (chart at ${JSON.stringify(box)})`);
