// Page weight: what a cold visit to the Lab transfers, and what a second visit does not.
// Counted from Chromium's own network log (CDP `Network.loadingFinished`: the bytes received
// for each response, headers and encoded body), so compression and caching are counted as a
// browser sees them. Deterministic for a given build: no timing is asserted here (timings
// come from scripts/bench-load.mjs).
import { expect, test, Browser, Page } from "@playwright/test";
import { recordedRun } from "./recorded-run";

/**
 * The budgets of a cold visit (an empty cache), every response together, per page: the
 * issue's targets (docs/measuring.md, "The site's weight, split by split", has the history: 0.6 MB
 * for the Lab before the route-split wasm; 559,464 B, /generate 606,750 B, an embedded
 * run 609,400 B before what follows).
 * - An embedded recorded run is served without the wasm (app/src/static_page.rs):
 *   158,525 B against 300,000.
 * - The Lab's and Generate's bare addresses show their first view, a recorded run, as
 *   the server's pictures of its charts (`/runs/{id}.svg?chart=...`, about 1.5 KB each)
 *   and fetch ECharts (148.8 KB) only when the visitor acts (app/src/charts/draw.rs):
 *   measured on 2026-12-02, Lab 417,105 B against 450,000 and /generate 465,997 B
 *   against 500,000 (the main module 388.8 KB brotli of each).
 * A page's budget covers what it needs to be live and show its charts: the main module,
 * its own modules, ECharts or the pictures, the page. The printed table shows where the
 * bytes are when one fails; scripts/bench-load.mjs prints every page's figure.
 */
// Raised on 2026-12-03 from 450,000 and 500,000: the main module grew from 388.8 to 422.8 KB
// brotli with the cards' two states (question, lesson) and the trained model's controls,
// measured at 455,231 B (Lab) and 519,671 B (/generate). Winning those bytes back is open
// work (docs/measuring.md, "The site's weight, split by split").
const BUDGETS = { lab: 470_000, generate: 540_000, embedRun: 300_000 };

interface Transfer {
  url: string;
  type: string;
  bytes: number;
  encoding: string;
  contentType: string;
  fromCache: boolean;
}

/** Records every response of `page` from now on, as the network log saw it. */
async function recordTransfers(page: Page): Promise<Transfer[]> {
  const cdp = await page.context().newCDPSession(page);
  await cdp.send("Network.enable");
  const pending = new Map<string, Partial<Transfer>>();
  const done: Transfer[] = [];
  cdp.on("Network.requestWillBeSent", (e: any) => {
    pending.set(e.requestId, { url: e.request.url, type: e.type ?? "", fromCache: false });
  });
  cdp.on("Network.requestServedFromCache", (e: any) => {
    const p = pending.get(e.requestId);
    if (p) p.fromCache = true;
  });
  cdp.on("Network.responseReceived", (e: any) => {
    const p = pending.get(e.requestId);
    if (!p) return;
    const h = Object.fromEntries(Object.entries(e.response.headers).map(([k, v]) => [k.toLowerCase(), String(v)]));
    p.encoding = h["content-encoding"] ?? "";
    p.contentType = h["content-type"] ?? "";
    p.fromCache ||= Boolean(e.response.fromDiskCache || e.response.fromMemoryCache);
  });
  cdp.on("Network.loadingFinished", (e: any) => {
    const p = pending.get(e.requestId);
    if (!p) return;
    done.push({ ...(p as Transfer), bytes: e.encodedDataLength });
    pending.delete(e.requestId);
  });
  return done;
}

/** Opens `path` and waits until it is live and its charts are shown (ECharts there, or the
 *  recorded run's pictures drawn: the Lab's and Generate's bare addresses fetch ECharts
 *  only when the visitor acts) and the network is quiet. */
async function open(page: Page, path: string) {
  await page.goto(path, { waitUntil: "networkidle" });
  // Live: hydrated, or (an embedded recorded run, served without the wasm) drawn.
  await expect(page.locator("html[data-hydrated=true], html[data-static=drawn]")).toHaveCount(1);
  await page.waitForFunction(
    () =>
      typeof (window as any).echarts?.init === "function" ||
      [...document.querySelectorAll<HTMLImageElement>(".chart-picture img")].some((i) => i.complete && i.naturalWidth > 0),
  );
  // Anything fetched after hydration (a chunk, the first view's record) is part of the visit.
  await page.waitForLoadState("networkidle");
}

/** Makes sure the bare page `path` (the Lab or Generate) has a recorded run of its
 *  defaults to show: a server's first visitor runs them once; later ones see the record. */
async function firstViewRecorded(browser: Browser, path: string) {
  const page = await browser.newPage();
  await page.goto(path);
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  const [note, finished] =
    path === "/"
      ? [page.getByTestId("shown-note"), page.getByTestId("status").filter({ hasText: "Done" })]
      : [page.getByTestId("gen-status"), page.getByTestId("gen-permalink")];
  await expect(note).toContainText(/Recorded|First visit/, { timeout: 30_000 });
  if (/First visit/.test(await note.innerText())) await expect(finished).toBeVisible({ timeout: 120_000 });
  await page.close();
}

/** The visitor acts on the chart in `id` (a pointer over it): ECharts comes and draws over
 *  the picture, with the recorded run's data. */
async function chartComesOnIntent(page: Page, id: string) {
  await page.locator(`#${id}`).hover();
  await page.waitForFunction((id) => {
    const el = document.getElementById(id);
    const chart = el && (window as any).echarts?.getInstanceByDom(el);
    return (chart?.getOption()?.series?.[0]?.data?.length ?? 0) > 0;
  }, id);
  await expect(page.locator(`#${id} [data-testid=chart-picture]`)).toHaveCount(0);
  await expect(page.locator(`#${id} canvas`)).toHaveCount(1);
}

const openLab = (page: Page) => open(page, "/");

/** The bytes of `transfers` except a run's own requests (the run's data, not the page's). */
function pageBytes(transfers: Transfer[]): number {
  const isRun = (t: Transfer) => new URL(t.url).pathname.startsWith("/api/runs");
  return transfers.filter((t) => !isRun(t)).reduce((sum, t) => sum + t.bytes, 0);
}

/** Every script, style and wasm was sent brotli-compressed, the wasm as application/wasm. */
function expectCompressed(transfers: Transfer[]) {
  for (const t of transfers.filter((t) => /\.(wasm|js|css)$/.test(t.url))) {
    expect(t.encoding, `${t.url} is sent compressed`).toBe("br");
  }
  for (const t of transfers.filter((t) => t.url.endsWith(".wasm"))) {
    expect(t.contentType, `${t.url}'s type`).toBe("application/wasm");
  }
}

function table(transfers: Transfer[]): string {
  return transfers
    .map((t) => `${String(t.bytes).padStart(9)}  ${(t.encoding || "-").padEnd(5)} ${t.fromCache ? "cache " : "net   "}${new URL(t.url).pathname}`)
    .join("\n");
}

test("a cold visit to the Lab stays within its byte budget, compressed", async ({ page, browser }) => {
  test.setTimeout(180_000);
  // Its first view is the newest recorded run of the defaults (run once if there is none).
  await firstViewRecorded(browser, "/");
  // Playwright gives each test a fresh browser context: an empty cache.
  const transfers = await recordTransfers(page);
  await openLab(page);
  // A run's own requests (none here: the first view is recorded) are the run's data, not
  // the page's weight: they are listed and left out of the total.
  const total = pageBytes(transfers);
  console.log(`cold Lab visit: ${total} bytes transferred (a run's own requests listed, not counted)\n${table(transfers)}`);

  // What the page needs did come over the network: the document and the app; the first
  // view's charts as the server's pictures, and no ECharts until the visitor acts.
  const wasm = transfers.find((t) => /\/gradless_bg\.\w+\.wasm$/.test(t.url));
  expect(wasm, "the app's main wasm was loaded").toBeTruthy();
  expect(transfers.some((t) => t.type === "Document")).toBe(true);
  await expect(page.getByTestId("shown-note")).toContainText("Recorded");
  for (const id of ["latency-chart", "memory-chart"]) {
    await expect(page.locator(`#${id} [data-testid=chart-picture] img`)).toHaveJSProperty("complete", true);
    expect(transfers.some((t) => new URL(t.url).pathname.endsWith(".svg") && t.url.includes(`chart=${id.split("-")[0]}`)), table(transfers)).toBe(true);
  }
  expect(transfers.filter((t) => /\/echarts[.\w]*\.js$/.test(t.url)), "no ECharts before the visitor acts").toEqual([]);
  expectCompressed(transfers);
  // The page's HTML is compressed too, and carries no pitfall card texts (the Lab shows none).
  const doc = transfers.find((t) => t.type === "Document")!;
  expect(doc.encoding, "the page is sent compressed").not.toBe("");
  const info = await page.evaluate(() => JSON.parse(document.getElementById("gradless-info")!.textContent!));
  expect(info.pitfalls, "the Lab's page carries no card texts").toEqual([]);
  expect(total, `cold Lab visit transfers ${total} bytes:\n${table(transfers)}`).toBeLessThanOrEqual(BUDGETS.lab);
  // A pointer over a chart brings ECharts, which draws the recorded run over its picture.
  await chartComesOnIntent(page, "latency-chart");
  await expect(page.locator("#memory-chart canvas")).toHaveCount(1);
});

test("a cold visit to the Generate page stays within its byte budget", async ({ page, browser }) => {
  test.setTimeout(240_000);
  await firstViewRecorded(browser, "/generate");
  const transfers = await recordTransfers(page);
  await open(page, "/generate");
  const total = pageBytes(transfers);
  console.log(`cold /generate visit: ${total} bytes\n${table(transfers)}`);
  // The page's own chunk came with it: the main module alone does not draw Generate.
  expect(transfers.filter((t) => t.url.endsWith(".wasm")).length, table(transfers)).toBeGreaterThan(1);
  await expect(page.getByTestId("gen-run")).toBeEnabled();
  // The recorded generation's charts are the server's pictures; ECharts waits for the visitor.
  await expect(page.getByTestId("gen-status")).toContainText("Recorded generation");
  for (const id of ["gen-latency-chart", "gen-memory-chart", "gen-prefill-chart"])
    await expect(page.locator(`#${id} [data-testid=chart-picture] img`)).toHaveJSProperty("complete", true);
  expect(transfers.filter((t) => /\/echarts[.\w]*\.js$/.test(t.url)), table(transfers)).toEqual([]);
  expectCompressed(transfers);
  expect(total, `cold /generate visit transfers ${total} bytes:\n${table(transfers)}`).toBeLessThanOrEqual(BUDGETS.generate);
  await chartComesOnIntent(page, "gen-latency-chart");
});

test("a cold visit to an embedded recorded run stays within its byte budget", async ({ page, request }) => {
  const id = await recordedRun(request, "no_grad");
  const transfers = await recordTransfers(page);
  await open(page, `/embed/runs/${id}`);
  const total = pageBytes(transfers);
  console.log(`cold /embed/runs/{id} visit: ${total} bytes\n${table(transfers)}`);
  await expect(page.getByTestId("record-title")).toBeVisible();
  // Drawn without the app: no wasm, its charts on canvases all the same.
  expect(transfers.filter((t) => t.url.endsWith(".wasm")), table(transfers)).toEqual([]);
  await expect(page.locator("#latency-chart canvas")).toHaveCount(1);
  await expect(page.locator("#memory-chart canvas")).toHaveCount(1);
  expectCompressed(transfers);
  expect(total, `cold /embed/runs/{id} visit transfers ${total} bytes:\n${table(transfers)}`).toBeLessThanOrEqual(BUDGETS.embedRun);
});

test("a second visit downloads nothing but the page", async ({ page }) => {
  await openLab(page);
  const transfers = await recordTransfers(page);
  await openLab(page);
  console.log(`second Lab visit:\n${table(transfers)}`);
  const assets = transfers.filter((t) => new URL(t.url).pathname.startsWith("/pkg/"));
  expect(assets.length, "the page still uses the app's assets").toBeGreaterThan(0);
  // Content-hashed and immutable: taken from the cache without asking the server.
  for (const t of assets) {
    expect(t.fromCache, `${t.url} came from the cache`).toBe(true);
  }
  // Over the network: the page, and the data its first view reads (the newest recorded run
  // of the defaults, from /api/records); no script, style, wasm or image.
  const fetched = transfers.filter((t) => !t.fromCache && !t.url.startsWith("data:"));
  const notData = fetched.filter((t) => !new URL(t.url).pathname.startsWith("/api/"));
  expect(notData.map((t) => t.type), table(transfers)).toEqual(["Document"]);
});

test("a permalink carries the cards' titles, not their texts, and names an experiment by its card", async ({ page, request }) => {
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  const card = "eval-and-autograd";
  const res = await request.post(`/api/pitfalls/${card}`, { data: { device: "cpu" }, timeout: 110_000 });
  expect(res.status(), await res.text()).toBe(200);
  const { record_id } = await res.json();
  const title = (await (await request.get("/api/pitfalls")).json()).find((c: any) => c.id === card).title;
  for (const path of [`/runs/${record_id}`, `/embed/runs/${record_id}`]) {
    await open(page, path);
    // Hydrated with the title the server wrote (the browser reads it from the page's titles).
    await expect(page.getByTestId("record-title")).toHaveText(title);
    if (path.startsWith("/embed/")) {
      // Not hydrated (drawn by record-embed.js): it carries no data for an app, and its
      // experiment's chart is drawn all the same.
      for (const id of ["gradless-info", "gradless-card-titles", "gradless-records"])
        await expect(page.locator(`#${id}`), `${path} carries no #${id}`).toHaveCount(0);
      const charts = await page.locator('script[data-chart-for="pitfall-chart"]').count();
      await expect(page.locator("#pitfall-chart canvas")).toHaveCount(charts);
      continue;
    }
    const info = await page.evaluate(() => JSON.parse(document.getElementById("gradless-info")!.textContent!));
    expect(info.pitfalls, `${path} carries no card texts`).toEqual([]);
    const titles = await page.evaluate(() => JSON.parse(document.getElementById("gradless-card-titles")!.textContent!));
    expect(titles).toContainEqual([card, title]);
  }
  expect(errors).toEqual([]);
});
