// A pitfall card in its two states, for docs/: the question before the lock-in, then the
// lesson after it (the statements with how each is known, the verdict, the grade).
// Usage: node card-states-screenshot.mjs BASE_URL CARD_ID OUT_PREFIX [width] [answer]
// writes OUT_PREFIX-before.png and OUT_PREFIX-after.png; `answer` is a choice's label
// ("about the same", "lower", ...) or, for a scale, left at its middle.
import { chromium } from "@playwright/test";

const [base, id, prefix, width = "1440", answer = "about the same"] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const page = await browser.newPage({ viewport: { width: +width, height: 1200 } });
await page.goto(`${base}/pitfalls#${id}`);
await page.waitForSelector("html[data-hydrated=true]");
const card = page.getByTestId(`card-${id}`);
await card.scrollIntoViewIfNeeded();
await card.screenshot({ path: `${prefix}-before.png` });
const radio = card.locator(`[data-testid=predict-${id}] input[value="${answer}"]`);
if (await radio.count()) {
  await radio.check();
} else {
  const slider = card.getByTestId(`predict-slider-${id}`);
  await slider.focus();
  await slider.press("ArrowRight");
}
await page.getByTestId(`run-${id}`).click();
await page.getByTestId(`verdict-${id}`).waitFor({ timeout: 600000 });
await page.waitForTimeout(800);
await card.screenshot({ path: `${prefix}-after.png` });
await browser.close();
console.log(`wrote ${prefix}-before.png and ${prefix}-after.png`);
