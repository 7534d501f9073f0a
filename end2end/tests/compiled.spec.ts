// The Lab's "Compiled (AOTInductor)" switch: one click runs the model compiled ahead of time
// (the package built by the server's Python, or taken from its cache) and shows its one-time
// cost apart from the passes, the eager model's passes beside them, and how far their
// outputs differ. A small MLP keeps a cold compile to tens of seconds (its package is the
// one engine/tests/compiled.rs built, at the same width and thread count).
import { expect, test } from "@playwright/test";
import { LabPage } from "./lab-page";

test("a compiled run shows its compile cost, the eager model beside it and their difference", async ({ page }) => {
  test.setTimeout(240_000);
  const lab = new LabPage(page);
  await lab.open("model=tiny_mlp&device=cpu&eval=1&grad=no_grad&batch=8&input_size=512&threads=1&warmup=2&iters=12&compiled=1");
  await expect(page.getByTestId("compiled")).toBeChecked();
  await lab.run();
  await lab.waitDone(200_000);
  await expect(lab.testid("compiled-cost")).toContainText(/export [\d.]+ s \+ Inductor [\d.]+ s \+ the C\+\+ build [\d.]+ s/);
  await expect(lab.testid("compiled-eager")).toContainText(/p50 [\d.]+ ms \(compiled [\d.]+ ms/);
  await expect(lab.testid("compiled-diff")).toContainText(/largest \|Δ\| [\d.]+e-?\d+/);
  // The snippet compiles the same way.
  await expect(page.locator("body")).toContainText("torch._inductor.aoti_compile_and_package");
});

// A compiled-model card: the answer is predicted first (yes or no), then the card runs the
// package under each grad mode and grades it. The Tiny MLP's package is already built.
test("a compiled-model card is predicted, run and graded: a package's output never requires grad", async ({ page }) => {
  test.setTimeout(240_000);
  await page.goto("/pitfalls#compiled-settings");
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  const card = page.getByTestId("card-compiled-settings");
  await expect(card).not.toContainText("records no autograd graph");
  await card.getByTestId("predict-compiled-settings").getByLabel("no", { exact: true }).check();
  await page.getByTestId("run-compiled-settings").click();
  await expect(card.getByTestId("scored")).toBeVisible({ timeout: 200_000 });
  await expect(card.getByTestId("grade")).toContainText("Your prediction: right");
  await expect(page.getByTestId("verdict-compiled-settings")).toContainText("The claim: Confirmed");
  await expect(card.locator("table.figures")).toContainText("compiled, grad enabled: output requires grad");
});
