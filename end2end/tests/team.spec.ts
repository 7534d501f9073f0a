// A team's own TorchScript model (scripts/test.sh serves engine/tests/fixtures' models with
// --models-dir): listed apart in the picker with its parameter count, explained by what was
// measured when it was loaded, and run like a built-in model.
import { expect, test } from "@playwright/test";
import { LabPage } from "./lab-page";

test("a team model is picked in the Lab and run", async ({ page }) => {
  const lab = new LabPage(page);
  await lab.open("device=cpu&grad=no_grad&batch=8&warmup=1&iters=10");
  const group = page.locator("optgroup[label=\"This team's models\"]");
  await expect(group.locator("option")).toHaveText([
    "Drop + Batch (test) — 11.5K params",
    "picky — 68 params",
    "ResNet-18 (traced, test) — 11.7M params",
  ]);
  // The refused files (not TorchScript, a mismatched sidecar) are not offered.
  await expect(page.locator("#model option[value=broken]")).toHaveCount(0);
  await expect(page.locator("#model option[value=mismatched]")).toHaveCount(0);

  await lab.testid("model").selectOption("drop_batch");
  await expect(page).toHaveURL(/model=drop_batch/);
  await expect(lab.testid("model-explain")).toContainText("A scripted test module with Dropout and BatchNorm.");
  await expect(lab.testid("model-explain")).toContainText("measured at load");
  await expect(lab.testid("eval-explain")).toContainText("Dropout-like");

  await lab.run();
  await lab.waitDone();
  await expect(lab.testid("summary")).toContainText("back at baseline");
  await expect(lab.testid("reading")).toContainText("eval · no_grad · batch 8");
  expect((await lab.chartData("latency-chart")).length).toBe(11);

  // The permalink of the settings brings the team model back.
  await lab.open("model=traced_resnet18&device=cpu");
  await expect(lab.testid("model")).toHaveValue("traced_resnet18");
  await expect(lab.testid("eval-explain")).toContainText("ignores train()/eval()");
});
