// Screenshots of the long phases as they run (issue 68): a compile ahead of time (a package
// not cached yet: an input size of its own) in the Lab at 1440 px, and the quality
// measurement on Generate at 390 px.
// Usage: node phase-screenshots.mjs URL OUTDIR [INPUT_SIZE]
import { chromium } from "@playwright/test";

const [url, out, size = "320"] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const lab = await browser.newPage({ viewport: { width: 1440, height: 900 } });
await lab.goto(`${url}/?model=tiny_mlp&device=cpu&eval=1&grad=no_grad&batch=8&input_size=${size}&threads=1&warmup=2&iters=8&compiled=1`);
await lab.waitForSelector("html[data-hydrated=true]");
await lab.getByTestId("run").click();
for (const part of ["export", "lowering", "loading"]) {
  try {
    await lab.getByTestId("status").filter({ hasText: part }).waitFor({ timeout: 120000 });
    await lab.screenshot({ path: `${out}/compile-${part.toLowerCase()}-1440.png` });
  } catch { console.log(`no ${part} phase seen`); }
}
await lab.getByTestId("status").filter({ hasText: "Done" }).waitFor({ timeout: 200000 });
const gen = await browser.newPage({ viewport: { width: 390, height: 844 } });
await gen.goto(`${url}/generate?model=torch_bytes&device=cpu&batch=1&new_tokens=8&cache=dynamic&eval=1&grad=no_grad&autocast=off&quality=1&prompt_text=def%20f(x)%3A`);
await gen.waitForSelector("html[data-hydrated=true]");
await gen.getByTestId("gen-run").click();
await gen.getByTestId("gen-steps").filter({ hasText: "setting 3 of" }).waitFor({ timeout: 200000 });
await gen.evaluate(() => window.scrollTo(0, 0));
await gen.screenshot({ path: `${out}/quality-390.png` });
await gen.getByTestId("gen-status").filter({ hasText: "Done" }).waitFor({ timeout: 200000 });
await browser.close();
console.log(`wrote ${out}`);
