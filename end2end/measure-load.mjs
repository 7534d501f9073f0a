// First contentful paint and hydration time of the Lab on a fresh load (a new browser
// profile each time: nothing cached), median of several loads.
// Usage: node measure-load.mjs URL [loads]
import { chromium } from "@playwright/test";

const [url, loads = "7"] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const fcp = [], hydrated = [];
for (let i = 0; i < Number(loads); i++) {
  const context = await browser.newContext({ viewport: { width: 1440, height: 900 } });
  const page = await context.newPage();
  // The moment the app marks the page live (data-hydrated on <html>), from navigation start.
  await page.addInitScript(() => {
    new MutationObserver((_, obs) => {
      if (document.documentElement.getAttribute("data-hydrated") === "true") {
        window.__hydratedAt = performance.now();
        obs.disconnect();
      }
    }).observe(document.documentElement, { attributes: true });
  });
  await page.goto(url);
  await page.waitForSelector("html[data-hydrated=true]");
  const t = await page.evaluate(() => ({
    fcp: performance.getEntriesByName("first-contentful-paint")[0]?.startTime ?? NaN,
    hydrated: window.__hydratedAt,
  }));
  fcp.push(t.fcp);
  hydrated.push(t.hydrated);
  await context.close();
}
await browser.close();
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
console.log(JSON.stringify({
  loads: Number(loads),
  fcp_ms: Math.round(median(fcp)),
  hydrated_ms: Math.round(median(hydrated)),
  fcp_all: fcp.map(Math.round),
  hydrated_all: hydrated.map(Math.round),
}));
