// Takes the README's screenshot: the Lab after a run and a mode comparison.
// Usage: node screenshot.mjs URL OUT.png [width] [height] [colorScheme]
import { chromium } from "@playwright/test";

const [url, out, width = "1440", height = "1500", scheme = "light"] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const page = await browser.newPage({ viewport: { width: +width, height: +height }, colorScheme: scheme });
await page.goto(url);
await page.waitForSelector("html[data-hydrated=true]");
if (process.env.COMPARE) {
  await page.getByTestId("compare-all").click();
  await page.waitForFunction(() => {
    const c = window.echarts.getInstanceByDom(document.getElementById("compare-chart"));
    return (c?.getOption()?.series?.[0]?.data?.length ?? 0) >= Number(7);
  }, null, { timeout: 300000 });
}
await page.getByTestId("run").click();
await page.getByTestId("status").filter({ hasText: "Done" }).waitFor({ timeout: 300000 });
await page.waitForTimeout(800); // let the chart animations settle
await page.screenshot({ path: out, fullPage: true });
await browser.close();
console.log(`wrote ${out}`);
