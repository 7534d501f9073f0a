import { chromium } from "@playwright/test";
const [url, out, width, sel] = process.argv.slice(2);
const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking"] });
const page = await browser.newPage({ viewport: { width: +width, height: 900 } });
await page.goto(url); await page.waitForSelector("html[data-hydrated=true]"); await page.waitForTimeout(1500);
if (sel) await page.locator(sel).screenshot({ path: out }); else await page.screenshot({ path: out, fullPage: false });
await browser.close();
