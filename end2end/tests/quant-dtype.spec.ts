// Issue 47: the quantized linear layers and the weights' dtype are two settings with two
// address keys (`quant`, `dtype`), so int4 on bf16 weights (gpt-fast's setup) is chosen on
// the page, survives a reload, and runs; an old address's ambiguous `weights` key is read
// as the setting whose word it is, with a note. The status then names what the run changed
// from the defaults. Pictures of /generate at 390 px before a run and after it.
import { expect, test } from "@playwright/test";

test("int4 linear layers on bf16 weights: chosen on the page, reloaded, run, said", async ({ page }) => {
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  const shots = process.env.GRADLESS_SHOTS ?? "test-results/shots";
  await page.setViewportSize({ width: 390, height: 844 });
  await page.goto("/generate?model=llama_tiny&device=cpu&batch=1&prompt=8&new_tokens=6&cache=dynamic&eval=1&grad=no_grad&autocast=off");
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  await page.screenshot({ path: `${shots}/generate-390-before-a-run.png` });
  // On a phone the Generate button is on the first screen (a sticky action).
  const box = await page.getByTestId("gen-run").boundingBox();
  expect(box && box.y + box.height).toBeLessThanOrEqual(844);
  // Both orders of choosing: the dtype, then the quantization; neither resets the other.
  await page.getByTestId("gen-dtype").selectOption("bf16");
  await expect(page).toHaveURL(/dtype=bf16/);
  await page.getByTestId("gen-quant").selectOption("int4");
  await page.getByTestId("gen-group-size").selectOption("32");
  await page.getByTestId("gen-kv-dtype").selectOption("bf16");
  await expect(page).toHaveURL(/quant=int4&group_size=32/);
  await expect(page.getByTestId("gen-dtype")).toHaveValue("bf16");
  await expect(page).not.toHaveURL(/weights=/);
  await expect(page.getByTestId("gen-settings")).toContainText("bf16 weights");
  await expect(page.getByTestId("gen-settings")).toContainText("int4 linear layers · group 32");
  // A reload keeps all of them (the router reads the address as the page wrote it).
  await page.reload();
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  await expect(page.getByTestId("gen-dtype")).toHaveValue("bf16");
  await expect(page.getByTestId("gen-quant")).toHaveValue("int4");
  await expect(page.getByTestId("gen-group-size")).toHaveValue("32");
  await expect(page.getByTestId("gen-kv-dtype")).toHaveValue("bf16");
  await page.getByTestId("gen-run").click();
  const status = page.getByTestId("gen-status");
  await expect(status).toContainText("Done", { timeout: 90_000 });
  // What ran, named: the quantization and the KV cache's dtype among what differs.
  await expect(status).toContainText("Weights dtype: bf16");
  await expect(status).toContainText("Quantized linear layers: int4");
  await expect(status).toContainText("KV cache dtype: bf16");
  await expect(status).not.toContainText("Recorded generation");
  await expect(page.getByTestId("gen-summary-which")).toContainText("int4 group size: 32");
  await expect(page.getByTestId("gen-quant-prefill")).toContainText("matrix-vector");
  await expect(page.getByTestId("gen-weights-split")).toContainText("equal to their formula, to the byte");
  await page.screenshot({ path: `${shots}/generate-390-after-int4-bf16.png`, fullPage: true });
  expect(errors).toEqual([]);
});

test("an old address's `weights` key reads as the setting whose word it is, with a note", async ({ page }) => {
  await page.goto("/generate?model=llama_tiny&device=cpu&weights=int4&group_size=32");
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  await expect(page.getByTestId("gen-quant")).toHaveValue("int4");
  await expect(page.getByTestId("gen-group-size")).toHaveValue("32");
  await expect(page.getByTestId("gen-dtype")).toHaveValue("fp32");
  await expect(page.getByTestId("gen-address-notes")).toContainText("quant=int4");
});

test("a refused run leaves the previous run's charts labelled as the previous run's", async ({ page }) => {
  await page.goto("/generate?model=llama_tiny&device=cpu&batch=1&prompt=8&new_tokens=4&cache=dynamic&eval=1&grad=no_grad&autocast=off");
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  await page.getByTestId("gen-run").click();
  await expect(page.getByTestId("gen-status")).toContainText("Done", { timeout: 90_000 });
  // fp8 is refused on a CPU, up front.
  await page.getByTestId("gen-kv-dtype").selectOption("fp8_e4m3");
  await page.getByTestId("gen-run").click();
  await expect(page.getByTestId("gen-status")).toContainText("Failed", { timeout: 30_000 });
  await expect(page.getByTestId("gen-previous")).toContainText("previous run's");
});
