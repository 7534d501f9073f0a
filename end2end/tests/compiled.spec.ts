// The Lab's "Compiled (AOTInductor)" switch: one click runs the model compiled ahead of time
// (the package built by the server's Python, or taken from its cache) and shows its one-time
// cost apart from the passes, the eager model's passes beside them, and how far their
// outputs differ. A small MLP keeps a cold compile to tens of seconds (its package is the
// one engine/tests/compiled.rs built, at the same width and thread count).
import { expect, test } from "@playwright/test";
import { LabPage } from "./lab-page";
import { seenTexts, watchTexts } from "./watch";

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

// Issue 68: a compile takes a minute on a CPU, and the status said "Queued: next on the
// device." under an empty bar the whole time. Each part now names itself as it begins, and
// the bar moves with them. Another input size than the test above: a package of its own
// (compiled cold once per machine; from the cache after, when only its load is said).
test("a compile names each of its parts as it goes", async ({ page }) => {
  test.setTimeout(300_000);
  const lab = new LabPage(page);
  await lab.open("model=tiny_mlp&device=cpu&eval=1&grad=no_grad&batch=8&input_size=384&threads=1&warmup=2&iters=8&compiled=1");
  await watchTexts(page, "status");
  await lab.run();
  await lab.waitDone(280_000);
  const seen = (await seenTexts(page, "status")).join("\n");
  expect(seen).toMatch(/Compiling ahead of time \(AOTInductor\): loading the package, part 5 of 5\./);
  const cost = await lab.testid("compiled-cost").innerText();
  if (!cost.includes("from the cache")) {
    for (const part of ["starting Python and building the model in PyTorch, part 1 of 5", "export (torch.export), part 2 of 5", "Inductor (lowering, generating the kernels), part 3 of 5"]) {
      expect(seen).toContain(`Compiling ahead of time (AOTInductor): ${part}.`);
    }
    // The C++ build is said when Inductor runs one (its own cache may hold the kernels).
  }
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
