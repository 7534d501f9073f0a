// Click Run and see a real measurement stream into the charts.
import { expect, test } from "@playwright/test";
import { LabPage } from "./lab-page";

test("a run streams measured samples into the charts", async ({ page }) => {
  const lab = new LabPage(page);
  // ResNet-18 on small images: long enough (a few seconds on 2 cores) to watch it stream.
  await lab.open("model=resnet18&device=cpu&eval=1&grad=no_grad&autocast=off&batch=4&warmup=2&iters=30&input_size=96");
  const started = Date.now();
  await lab.run();

  // While the run goes, the progress bar moves and points arrive one by one.
  let sawPartial = false;
  await expect
    .poll(async () => {
      const points = (await lab.chartData("latency-chart")).length;
      if (points > 0 && points < 32) sawPartial = true;
      return points;
    }, { intervals: [50], timeout: 90_000 })
    .toBe(32);
  console.log(`click to all 32 points: ${Date.now() - started} ms`);
  expect(sawPartial, "samples should arrive while the run is going").toBe(true);
  await lab.waitDone();

  // Every point is a measured latency; the summary names the hardware and the memory source.
  const latencies = (await lab.chartData("latency-chart")) as number[];
  expect(latencies.every((v) => typeof v === "number" && v > 0)).toBe(true);
  expect((await lab.chartData("memory-chart")).length).toBe(32);
  await expect(lab.testid("summary")).toContainText("CPU tensor memory");
  await expect(lab.testid("summary")).toContainText("back at baseline");
  await expect(lab.testid("reading")).toContainText("eval · no_grad · batch 4");
  expect((await lab.chartData("compare-chart")).length).toBe(1);
});

test("time from click to the first streamed sample (tiny model, warm)", async ({ page }) => {
  const lab = new LabPage(page);
  await lab.open("model=tiny_mlp&device=cpu&grad=no_grad&batch=32&warmup=0&iters=50");
  await lab.run(); // warms the model cache
  await lab.waitDone();
  const t0 = Date.now();
  await lab.run();
  await expect.poll(async () => (await lab.chartData("latency-chart")).length, { intervals: [5] }).toBeGreaterThan(0);
  console.log(`click to first streamed sample: ${Date.now() - t0} ms`);
  await lab.waitDone();
});
