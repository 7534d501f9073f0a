// An internal doc page embeds the lab in an iframe: the frame sizes itself to its content
// through the height message, and a run started inside it measures for real.
import { expect, test, Page } from "@playwright/test";
import { createServer } from "node:http";

/**
 * A docs site on another origin, served from this machine (Chromium keeps public sites from
 * framing loopback ones, as it should); scripts/test.sh lets it frame embeds with
 * --embed-origins http://127.0.0.1:$GRADLESS_DOCS_PORT. Its page holds `frames` and the
 * listener the embed snippets paste, which sizes each frame to the height it posts.
 */
async function docsSite(baseURL: string, frames: string) {
  const docsPort = Number(process.env.GRADLESS_DOCS_PORT ?? 3139);
  const origin = new URL(baseURL).origin;
  const html = `<!doctype html><html><body style="margin:0">
        <h1>Onboarding: inference settings</h1>
        ${frames}
        <script>
          addEventListener("message", (e) => {
            if (e.origin !== ${JSON.stringify(origin)} || !e.data || e.data.type !== "gradless:height") return;
            for (const f of document.querySelectorAll("iframe"))
              if (f.contentWindow === e.source) f.style.height = e.data.height + "px";
          });
        </script></body></html>`;
  const docs = createServer((_, res) => res.writeHead(200, { "content-type": "text/html" }).end(html));
  await new Promise<void>((r) => docs.listen(docsPort, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${docsPort}/docs/guide.html`, close: () => docs.close() };
}

/** The height of the iframe `#id` on the doc page, and of the embed's content inside it. */
function frameHeights(page: Page, id: string) {
  const frame = page.frameLocator(`#${id}`);
  return {
    frame,
    iframeHeight: () => page.locator(`#${id}`).evaluate((f: HTMLIFrameElement) => f.getBoundingClientRect().height),
    contentHeight: () => frame.locator("body").evaluate((b) => b.scrollHeight),
  };
}

test("the lab embedded in a doc page resizes its iframe and runs", async ({ page, baseURL }) => {
  const src = `${baseURL}/embed/lab?model=tiny_mlp&device=cpu&batch=4&warmup=1&iters=8&hide=snippet,advanced,history&lock=model,batch`;
  // The doc page pastes the snippet the Embed button hands out; here it is built the same way.
  const docs = await docsSite(baseURL!, `
        <iframe id="g" src="${src}" title="Gradless" style="width:100%;border:0" height="150"></iframe>
        <p id="after">Text after the embed.</p>
        <iframe id="n" src="${baseURL}/pitfalls" title="not an embed" height="100"></iframe>`);
  // A narrow doc column: the lab stacks in one column, so results make the embed taller.
  await page.setViewportSize({ width: 720, height: 900 });
  try {
    await page.goto(docs.url);
    const { frame, iframeHeight, contentHeight } = frameHeights(page, "g");
    await expect(frame.locator("html[data-hydrated=true]")).toHaveCount(1);

    // The frame grew from its 150 px to the embed's full height: no inner scrollbar.
    await expect.poll(iframeHeight).toBeGreaterThan(400);
    expect(Math.abs((await iframeHeight()) - (await contentHeight()))).toBeLessThanOrEqual(2);

    // Pages that are not embeds refuse to be framed by other sites (frame-ancestors 'self').
    await expect.poll(() => page.frames().some((f) => f.url().startsWith("chrome-error://"))).toBe(true);

    // Minimal chrome; locked controls cannot change; hidden ones are gone.
    await expect(frame.locator("header.top")).toHaveCount(0);
    await expect(frame.getByText("open the full page")).toBeVisible();
    await expect(frame.getByTestId("model")).toBeDisabled();
    await expect(frame.getByTestId("batch")).toBeDisabled();
    await expect(frame.getByTestId("locked-note")).toBeVisible();
    await expect(frame.getByTestId("snippet")).toHaveCount(0);
    await expect(frame.getByTestId("grad-no_grad")).toBeEnabled();

    // A run inside the frame: results appear and the frame follows the taller content.
    const before = await iframeHeight();
    await frame.getByTestId("grad-no_grad").check();
    await frame.getByTestId("run").click();
    await expect(frame.getByTestId("status")).toContainText("Done", { timeout: 90_000 });
    await expect(frame.getByTestId("summary")).toContainText("eval · no_grad · batch 4");
    await expect.poll(iframeHeight).toBeGreaterThan(before);
    await expect.poll(async () => Math.abs((await iframeHeight()) - (await contentHeight()))).toBeLessThanOrEqual(2);
  } finally {
    docs.close();
  }
});

test("a pitfall card and a recorded run embed too", async ({ page, request, baseURL }) => {
  const res = await request.post("/api/runs", { data: { model: "tiny_mlp", batch: 2, warmup: 0, iters: 3 } });
  expect(res.status()).toBe(202);
  const { id } = await res.json();
  await expect.poll(async () => (await request.get(`/api/runs/${id}`)).status()).toBe(200);
  // A recorded run is read, not operated: served without the wasm, drawn by its own script.
  const wasm: string[] = [];
  page.on("request", (r) => r.url().endsWith(".wasm") && wasm.push(r.url()));
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(`/embed/runs/${id}`);
  await expect(page.locator("html[data-static=drawn]")).toHaveCount(1);
  await expect(page.getByTestId("provenance")).toContainText("Recorded");
  await expect(page.getByTestId("summary")).toBeVisible();
  await expect(page.locator("header.top")).toHaveCount(0);
  await expect(page.locator("#latency-chart canvas")).toHaveCount(1);
  await expect(page.locator("#memory-chart canvas")).toHaveCount(1);
  // Its exports work without the app: a chart saved as PNG, the full page one click away.
  const download = page.waitForEvent("download");
  await page.getByTestId("png-latency").click();
  expect((await download).suggestedFilename()).toBe(`gradless-${id}-latency.png`);
  await expect(page.getByText("open the full page")).toHaveAttribute("href", `/runs/${id}`);
  // A phone's width: the charts are drawn again to fit, never wider than the page.
  await page.setViewportSize({ width: 360, height: 800 });
  await expect.poll(() => page.locator("#latency-chart canvas").evaluate((c) => c.getBoundingClientRect().width)).toBeLessThanOrEqual(360);
  expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(360);
  expect(wasm).toEqual([]);
  expect(errors).toEqual([]);
  // Framed in a doc page, it sizes its frame as the Lab's embed does.
  await page.setViewportSize({ width: 720, height: 900 });
  const docs = await docsSite(baseURL!, `<iframe id="r" src="${baseURL}/embed/runs/${id}" title="Gradless: a recorded run" style="width:100%;border:0" height="150"></iframe>`);
  try {
    await page.goto(docs.url);
    const { frame, iframeHeight, contentHeight } = frameHeights(page, "r");
    await expect(frame.locator("html[data-static=drawn]")).toHaveCount(1);
    await expect.poll(iframeHeight).toBeGreaterThan(400);
    await expect.poll(async () => Math.abs((await iframeHeight()) - (await contentHeight()))).toBeLessThanOrEqual(2);
  } finally {
    docs.close();
  }

  await page.goto("/embed/pitfalls/nograd-and-dropout");
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  await page.getByTestId("skip-nograd-and-dropout").click();
  await expect(page.getByTestId("verdict-nograd-and-dropout")).toContainText("Confirmed", { timeout: 90_000 });
  // The result got a permalink that shows it again without running.
  const permalink = page.getByTestId("permalink-nograd-and-dropout");
  const href = await permalink.getAttribute("href");
  await page.goto(href!);
  await expect(page.getByTestId("verdict-nograd-and-dropout")).toContainText("Confirmed");
  await expect(page.getByTestId("provenance")).toContainText("Recorded");
});
