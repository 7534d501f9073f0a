// The latency chart's statistic labels never cover each other, however close p50 and p95
// are (a steady tiny model: the usual case), and the warm-up band's label stays clear of
// them and inside the chart. Measured on the drawn chart: ECharts' own text elements and
// their boxes on the canvas, after every transform.
import { expect, test } from "@playwright/test";

type Box = { text: string; x0: number; y0: number; x1: number; y1: number };

test("p50, p95 and warm-up labels do not overlap", async ({ page, request }) => {
  const res = await request.post("/api/runs", {
    data: { model: "tiny_mlp", device: "cpu", batch: 4, grad: "no_grad", warmup: 3, iters: 30 },
  });
  expect(res.status()).toBe(202);
  const { id } = await res.json();
  await expect.poll(async () => (await request.get(`/api/runs/${id}`)).status(), { timeout: 60_000 }).toBe(200);
  const report = await (await request.get(`/api/runs/${id}`)).json();

  for (const width of [1440, 390]) {
    await page.setViewportSize({ width, height: 900 });
    await page.goto(`/runs/${id}`);
    await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
    const labels = async (): Promise<Box[]> => page.evaluate(() => {
      const chart = (window as any).echarts.getInstanceByDom(document.getElementById("latency-chart"));
      if (!chart) return [];
      const out: Box[] = [];
      for (const el of chart.getZr().storage.getDisplayList(true)) {
        const text: string | undefined = el.style?.text;
        if (!text || !/^(p50|p95|warm-up)/.test(text) || el.invisible) continue;
        const r = el.getBoundingRect();
        const m = el.getComputedTransform?.() ?? el.transform ?? [1, 0, 0, 1, 0, 0];
        const xs: number[] = [], ys: number[] = [];
        for (const [x, y] of [[r.x, r.y], [r.x + r.width, r.y], [r.x, r.y + r.height], [r.x + r.width, r.y + r.height]]) {
          xs.push(m[0] * x + m[2] * y + m[4]);
          ys.push(m[1] * x + m[3] * y + m[5]);
        }
        out.push({ text, x0: Math.min(...xs), y0: Math.min(...ys), x1: Math.max(...xs), y1: Math.max(...ys) });
      }
      return out;
    });
    await expect.poll(async () => (await labels()).length, { timeout: 20_000 }).toBe(3);
    const check = (boxes: Box[], when: string) => {
      const find = (prefix: string) => boxes.find((b) => b.text.startsWith(prefix))!;
      const [p50, p95, warm] = [find("p50"), find("p95"), find("warm-up")];
      const overlap = (a: Box, b: Box) => a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1;
      for (const [a, b] of [[p50, p95], [p50, warm], [p95, warm]]) {
        expect(overlap(a, b), `${width} px, ${when}: "${a.text}" ${JSON.stringify(a)} overlaps "${b.text}" ${JSON.stringify(b)}`).toBe(false);
      }
      return { p50, p95 };
    };
    // As measured.
    const { p50, p95 } = check(await labels(), "as measured");
    // The labels carry the report's figures (ECharts writes mark lines to 2 decimals).
    expect(parseFloat(p50.text.slice(4))).toBeCloseTo(report.latency_ms.p50, 2);
    expect(parseFloat(p95.text.slice(4))).toBeCloseTo(report.latency_ms.p95, 2);
    // Every label lies inside the chart's canvas.
    const size = await page.locator("#latency-chart").boundingBox();
    for (const b of await labels()) {
      expect(b.x0, b.text).toBeGreaterThanOrEqual(0);
      expect(b.y0, b.text).toBeGreaterThanOrEqual(0);
      expect(b.x1, b.text).toBeLessThanOrEqual(size!.width + 0.5);
      expect(b.y1, b.text).toBeLessThanOrEqual(size!.height + 0.5);
    }
    // The worst case, whatever this run's noise: p95 equal to p50. The app's own option,
    // with only the p95 line moved onto the p50 line (labels, positions, styles kept).
    await page.evaluate(() => {
      const chart = (window as any).echarts.getInstanceByDom(document.getElementById("latency-chart"));
      const option = chart.getOption();
      const lines = option.series[0].markLine.data;
      const at = lines.find((d: any) => d.name === "p50").yAxis;
      for (const d of lines) d.yAxis = at;
      option.animation = false;
      chart.setOption(option, true);
    });
    check(await labels(), "with p95 = p50");
  }
});
