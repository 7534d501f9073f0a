// Takes the operator's guide's fleet screenshots: the Lab on a fleet front, with the live workers
// listed, then the /compare page that "Run on every device" opens with the runs side by side.
// Usage: node fleet-screenshot.mjs FRONT_URL LAB.png COMPARE.png
import { chromium } from "@playwright/test";

const [url, labOut, compareOut] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const page = await browser.newPage({ viewport: { width: 1440, height: 1100 } });
await page.goto(url);
await page.waitForSelector("html[data-hydrated=true]");
await page.getByTestId("fleet").waitFor();
await page.getByTestId("fleet").scrollIntoViewIfNeeded();
await page.screenshot({ path: labOut });
await page.getByTestId("run-everywhere").click();
await page.waitForURL(/\/compare\?runs=/, { timeout: 300000 });
await page.waitForSelector("html[data-hydrated=true]");
await page.waitForTimeout(1500); // let the chart animations settle
await page.screenshot({ path: compareOut, fullPage: true });
await browser.close();
console.log(`wrote ${labOut} and ${compareOut}`);
