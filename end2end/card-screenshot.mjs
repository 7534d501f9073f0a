// Takes a pitfall card's screenshot after its experiment ran (for docs/).
// Usage: node card-screenshot.mjs BASE_URL CARD_ID OUT.png [width]
import { chromium } from "@playwright/test";

const [base, id, out, width = "1440"] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const page = await browser.newPage({ viewport: { width: +width, height: 1200 } });
await page.goto(`${base}/pitfalls#${id}`);
await page.waitForSelector("html[data-hydrated=true]");
await page.getByTestId(`run-${id}`).click();
await page.getByTestId(`verdict-${id}`).waitFor({ timeout: 300000 });
await page.waitForTimeout(800);
await page.getByTestId(`card-${id}`).screenshot({ path: out });
await browser.close();
console.log(`wrote ${out}`);
