// Settings: each control changes the URL, the explanation and the snippet; a URL restores them.
import { expect, test } from "@playwright/test";
import { LabPage } from "./lab-page";

test("a URL with settings restores every control", async ({ page }) => {
  const lab = new LabPage(page);
  await lab.open("model=resnet18&device=cpu&eval=0&grad=inference_mode&autocast=bf16&batch=64");
  await expect(lab.testid("model")).toHaveValue("resnet18");
  await expect(lab.testid("device")).toHaveValue("cpu");
  await expect(lab.testid("mode-train")).toBeChecked();
  await expect(lab.testid("mode-eval")).not.toBeChecked();
  await expect(lab.testid("grad-inference_mode")).toBeChecked();
  await expect(lab.testid("autocast-bf16")).toBeChecked();
  await expect(lab.testid("batch")).toHaveValue("64");
  const snippet = lab.testid("snippet");
  await expect(snippet).toContainText("model.train()");
  await expect(snippet).toContainText("torch.inference_mode()");
  await expect(snippet).toContainText("dtype=torch.bfloat16");
  await expect(snippet).toContainText("torch.randn(64, 3, 224, 224");
});

test("toggling each control updates URL, explanation and snippet; back restores", async ({ page }) => {
  const lab = new LabPage(page);
  await lab.open("model=tiny_mlp&grad=enabled&eval=1&autocast=off&batch=32");

  await lab.testid("grad-no_grad").check();
  await expect(page).toHaveURL(/grad=no_grad/);
  await expect(lab.testid("grad-explain")).toContainText("no graph is recorded");
  await expect(lab.testid("snippet")).toContainText("with torch.no_grad():");

  await lab.testid("mode-train").check();
  await expect(page).toHaveURL(/eval=0/);
  await expect(lab.testid("eval-explain")).toContainText("model.train()");
  await expect(lab.testid("snippet")).toContainText("model.train()");

  await lab.testid("autocast-fp16").check();
  await expect(page).toHaveURL(/autocast=fp16/);
  await expect(lab.testid("snippet")).toContainText("torch.float16");

  await lab.testid("model").selectOption("transformer");
  await expect(page).toHaveURL(/model=transformer/);
  await expect(lab.testid("snippet")).toContainText("TransformerEncoder");

  await lab.testid("batch").fill("128");
  await lab.testid("batch").press("Enter");
  await expect(page).toHaveURL(/batch=128/);
  await expect(lab.testid("snippet")).toContainText("torch.randn(128, 128, 256");

  // Back undoes one change at a time: first the batch, then the model.
  await page.goBack();
  await expect(lab.testid("batch")).toHaveValue("32");
  await expect(lab.testid("model")).toHaveValue("transformer");
  await page.goBack();
  await expect(lab.testid("model")).toHaveValue("tiny_mlp");
  await expect(lab.testid("snippet")).toContainText("nn.BatchNorm1d(512)");
  await page.goForward();
  await expect(lab.testid("model")).toHaveValue("transformer");
});

test("an invalid batch gets a clear message and no run", async ({ page }) => {
  const lab = new LabPage(page);
  await lab.open("model=tiny_mlp");
  await lab.testid("batch").fill("abc");
  await lab.testid("batch").press("Enter");
  await expect(lab.testid("batch-error")).toContainText("not a whole number");
  await lab.testid("batch").fill("0");
  await lab.testid("batch").press("Enter");
  await expect(lab.testid("batch-error")).toContainText("at least 1");
  await lab.testid("batch").fill("-3");
  await lab.testid("batch").press("Enter");
  await expect(lab.testid("batch-error")).toContainText("at least 1");
  await expect(lab.testid("run")).toBeDisabled();
  await expect(lab.testid("run-blocked")).toContainText("at least 1");
  await lab.testid("batch").fill("8");
  await lab.testid("batch").press("Enter");
  await expect(lab.testid("batch-error")).toBeEmpty();
});

test("the copied snippet matches the settings", async ({ page, context }) => {
  await context.grantPermissions(["clipboard-read", "clipboard-write"]);
  const lab = new LabPage(page);
  await lab.open("model=resnet50&grad=no_grad&eval=1&batch=8");
  await lab.testid("copy-snippet").click();
  await expect(lab.testid("copy-snippet")).toHaveText("Copied");
  const copied = await page.evaluate(() => navigator.clipboard.readText());
  expect(copied).toBe(await lab.testid("snippet").innerText());
  expect(copied).toContain("torchvision.models.resnet50()");
  expect(copied).toContain("with torch.no_grad():");
});

test("the lab fits a phone's width, before and after a run", async ({ page }) => {
  await page.setViewportSize({ width: 390, height: 844 });
  const lab = new LabPage(page);
  await lab.open("model=tiny_mlp&device=cpu&grad=no_grad&batch=8&iters=3");
  expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
  await lab.run();
  await lab.waitDone();
  expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
});

test("iteration settings go into the URL; values outside the limits are refused, not replaced", async ({ page }) => {
  const lab = new LabPage(page);
  await lab.open("model=tiny_mlp&warmup=3&iters=20");
  await page.getByText("Advanced: iterations").click();
  await lab.testid("iters").fill("5");
  await lab.testid("iters").press("Enter");
  await expect(page).toHaveURL(/iters=5(&|$)/);
  for (const bad of ["101", "999999", "-1", "2.5"]) {
    await lab.testid("warmup").fill(bad);
    await lab.testid("warmup").press("Enter");
    await expect(lab.testid("warmup-error")).toContainText("from 0 to 100");
    // What is shown is what was typed; the URL (what a run uses) keeps the last valid value.
    await expect(lab.testid("warmup")).toHaveValue(bad);
    await expect(page).toHaveURL(/warmup=3(&|$)/);
    await expect(lab.testid("run")).toBeDisabled();
    await expect(lab.testid("run-blocked")).toContainText("from 0 to 100");
  }
  await lab.testid("warmup").fill("7");
  await lab.testid("warmup").press("Enter");
  await expect(lab.testid("warmup-error")).toBeEmpty();
  await expect(page).toHaveURL(/warmup=7(&|$)/);
  await expect(lab.testid("run")).toBeEnabled();
});

test("a link with a setting this page does not know says what it ignored", async ({ page }) => {
  const lab = new LabPage(page);
  await lab.open("model=resnet999&batch=8");
  await expect(lab.testid("ignored")).toContainText("resnet999");
  // The model shown is the one the message names: this server's default for its device.
  const shown = (await lab.testid("ignored").innerText()).match(/showing (\w+)/)![1];
  await expect(lab.testid("model")).toHaveValue(shown);
});

test("keyboard: focus stays on Run while it runs, with a visible ring", async ({ page }) => {
  const lab = new LabPage(page);
  await lab.open("model=tiny_mlp&device=cpu&batch=4&warmup=1&iters=5");
  await lab.testid("run").focus();
  await page.keyboard.press("Enter");
  await expect(lab.testid("status")).toContainText("Done", { timeout: 90_000 });
  expect(await page.evaluate(() => document.activeElement?.getAttribute("data-testid"))).toBe("run");
  const ring = await lab.testid("run").evaluate((b) => getComputedStyle(b).outlineStyle);
  expect(ring).not.toBe("none");
});

test("the Advanced section's settings live in the URL and the snippet; a CPU says why pinned is off", async ({ page }) => {
  const lab = new LabPage(page);
  await lab.open("model=resnet18&device=cpu&dtype=bf16&memory_format=channels_last&input_source=pageable");
  await page.locator("details.control summary").click();
  await expect(lab.testid("dtype-bf16")).toBeChecked();
  await expect(lab.testid("memory_format-channels_last")).toBeChecked();
  await expect(lab.testid("input_source-pageable")).toBeChecked();
  const snippet = lab.testid("snippet");
  await expect(snippet).toContainText("model = model.to(torch.bfloat16)");
  await expect(snippet).toContainText("model = model.to(memory_format=torch.channels_last)");
  await expect(snippet).toContainText("x = x_host.to(device)");
  // On a CPU, pinned memory and the CUDA switches are disabled, with the reason.
  await expect(lab.testid("input_source-pinned")).toBeDisabled();
  await expect(lab.testid("input_source-reason")).toContainText("page-locked");
  await expect(lab.testid("tf32")).toBeDisabled();
  await expect(lab.testid("tf32-reason")).toContainText("TF32");
  await lab.testid("dtype-fp32").check();
  await expect(page).not.toHaveURL(/dtype=/);
  // channels_last means nothing for a model without convolutions: it is dropped and disabled.
  await lab.testid("model").selectOption("tiny_mlp");
  await expect(page).not.toHaveURL(/memory_format=/);
  await expect(lab.testid("memory_format-channels_last")).toBeDisabled();
  await expect(lab.testid("memory_format-reason")).toContainText("convolutions");
});
