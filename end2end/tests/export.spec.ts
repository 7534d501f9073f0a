// Exports of a finished run: the report as JSON and CSV, the charts as PNG, and a Python
// script that measures the same run again with PyTorch, printing the same fields.
import { expect, test } from "@playwright/test";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { LabPage } from "./lab-page";

const PYTHON = process.env.GRADLESS_PYTHON;

test("a run exports JSON, CSV, PNG and a Python script that reproduces it", async ({ page }) => {
  const lab = new LabPage(page);
  await lab.open("model=tiny_mlp&device=cpu&eval=0&grad=enabled&batch=8&warmup=1&iters=4");
  await lab.run();
  await lab.waitDone();

  const download = async (testid: string) => {
    const [d] = await Promise.all([page.waitForEvent("download"), lab.testid(testid).click()]);
    return { name: d.suggestedFilename(), path: (await d.path())! };
  };

  const json = await download("export-json");
  expect(json.name).toMatch(/^gradless-run-[0-9a-f]{16}\.json$/);
  const record = JSON.parse(readFileSync(json.path, "utf8"));
  expect(record.kind).toBe("run");
  expect(record.report.samples).toHaveLength(4);

  const csv = readFileSync((await download("export-csv")).path, "utf8").trim().split("\n");
  expect(csv[0]).toBe("phase,iteration,latency_ms,allocated_bytes,peak_bytes,reserved_bytes,caveat");
  expect(csv.slice(1).map((l) => l.split(",")[0])).toEqual(["warmup", "timed", "timed", "timed", "timed"]);
  // Numbered from 1, as the charts label them (w1, then 1, 2, …).
  expect(csv.slice(1).map((l) => l.split(",")[1])).toEqual(["1", "1", "2", "3", "4"]);
  expect(record.caveat).toBeUndefined();

  const png = await download("png-latency");
  expect(png.name).toMatch(/\.png$/);
  expect(readFileSync(png.path).subarray(0, 8)).toEqual(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]));

  const script = await download("export-py");
  expect(script.name).toMatch(/\.py$/);
  test.skip(!PYTHON, "GRADLESS_PYTHON is not set (scripts/test.sh points it at the venv)");
  // The script runs with the recorded settings; a flag on the command line overrides one.
  const out = execFileSync(PYTHON!, [script.path, "--json", "--device", "cpu"], { encoding: "utf8", timeout: 120_000 });
  const peer = JSON.parse(out);
  expect(peer.spec.model).toBe("tiny_mlp");
  expect(peer.spec.batch).toBe(8);
  expect(peer.spec.eval).toBe(false);
  expect(peer.spec.iters).toBe(4);
  for (const k of ["p50", "p95", "p99", "mean", "min", "max", "stddev"]) expect(typeof peer.latency_ms[k]).toBe("number");
  expect(peer.latency_ms.p50).toBeGreaterThan(0);
  for (const k of ["baseline_bytes", "peak_above_baseline_bytes", "leaked_bytes"]) expect(typeof peer.memory[k]).toBe("number");
  expect(peer.memory.source).toBe(record.report.memory.source);
  // Same model, same settings: PyTorch's own allocation reporting sees the same peak.
  expect(peer.memory.peak_above_baseline_bytes).toBe(record.report.memory.peak_above_baseline_bytes);
  expect(peer.recorded.run_id).toBe(record.id);
  expect(peer.recorded.memory.peak_above_baseline_bytes).toBe(record.report.memory.peak_above_baseline_bytes);
  // Without --json it prints a table with the recorded figures in a column beside its own.
  const table = execFileSync(PYTHON!, [script.path, "--iters", "2"], { encoding: "utf8", timeout: 120_000 });
  expect(table).toContain(`recorded by Gradless (run ${record.id})`);
  const row = (name: string) => table.split("\n").find((l) => l.startsWith(name + " "));
  for (const name of ["latency p50", "baseline", "peak above baseline"]) {
    // Two figures on the row: this machine's and the recorded one.
    expect(row(name)?.match(/\d+(\.\d+)? (ms|B|KiB|MiB|GiB)/g)?.length, `${name}: ${row(name)}`).toBe(2);
  }
});

test("fp16/bf16 on a CPU: the caveat travels into every export and the comparison", async ({ page }) => {
  const lab = new LabPage(page);
  await lab.open("model=tiny_mlp&device=cpu&grad=no_grad&autocast=bf16&batch=4&warmup=1&iters=3");
  await lab.run();
  await lab.waitDone();
  const download = async (testid: string) => {
    const [d] = await Promise.all([page.waitForEvent("download"), lab.testid(testid).click()]);
    return readFileSync((await d.path())!, "utf8");
  };
  const record = JSON.parse(await download("export-json"));
  expect(record.caveat).toContain("emulated");
  const csv = (await download("export-csv")).trim().split("\n");
  expect(csv.slice(1).every((l) => l.includes("emulated"))).toBe(true);
  expect(await download("export-py")).toContain("# Caveat: bf16 autocast ran on a CPU");
  // The comparison view names it too, and says which entries of its list it ignored.
  await page.goto(`/compare?runs=${record.id},not-a-run`);
  await expect(page.getByTestId("compare-table")).toContainText("emulated");
  await expect(page.getByTestId("compare-ignored")).toContainText("not-a-run");
});
