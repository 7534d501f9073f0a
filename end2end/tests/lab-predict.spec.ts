// Predict, then measure, in the Lab: after a run, changing exactly one setting asks what the
// change does to peak memory and p50; Run scores both against the two runs. Two settings at
// once ask nothing. Screenshots of the question and of the score (1440 and 390 px) land in
// end2end/test-results/shots/ (GRADLESS_SHOTS).
import { expect, test } from "@playwright/test";
import { LabPage } from "./lab-page";

const shots = process.env.GRADLESS_SHOTS ?? "test-results/shots";

for (const [name, viewport] of [["1440", { width: 1440, height: 900 }], ["390", { width: 390, height: 844 }]] as const) {
  test(`a change of one setting is predicted, then scored against the run before (${name} px)`, async ({ page }) => {
    await page.setViewportSize(viewport);
    const lab = new LabPage(page);
    await lab.open("model=tiny_mlp&device=cpu&eval=1&grad=enabled&autocast=off&batch=64&warmup=1&iters=20");
    await expect(lab.testid("lab-predict")).toHaveCount(0);
    await lab.run();
    await lab.waitDone();
    // Nothing changed yet: nothing to predict.
    await expect(lab.testid("lab-predict")).toHaveCount(0);

    // One setting: autograd off. The box names the change and asks both questions.
    await lab.testid("grad-no_grad").check();
    const box = lab.testid("lab-predict");
    // Named as the controls name them.
    await expect(box).toContainText("Grad mode from enabled (no context) to torch.no_grad()");
    // What the setting does would answer the question: it is not on the page until the run.
    const help = lab.testid("grad-explain");
    await expect(help).toHaveText("Predict first: what this setting does shows after the run.");
    await expect(box.getByTestId("predict-lab-peak")).toContainText("peak memory");
    await expect(box.getByTestId("predict-lab-p50")).toContainText("median latency");
    await box.scrollIntoViewIfNeeded();
    await page.screenshot({ path: `${shots}/lab-predict-before-${name}.png` });

    // Two settings at once: no single change, no question.
    await lab.testid("batch").fill("32");
    await lab.testid("batch").press("Enter");
    await expect(page).toHaveURL(/batch=32/);
    await expect(lab.testid("lab-predict")).toHaveCount(0);
    // Back to one change from the run on the charts.
    await lab.testid("batch").fill("64");
    await lab.testid("batch").press("Enter");
    await expect(page).toHaveURL(/batch=64/);
    await expect(box).toContainText("Grad mode from enabled (no context) to torch.no_grad()");
    // Keyboard: the choice is a radio, picked with the keyboard like any other.
    await box.getByTestId("predict-lab-peak").getByLabel("lower").check();
    await box.getByTestId("predict-lab-p50").getByLabel("about the same").focus();
    await page.keyboard.press("Space");
    // Still held back while the run that answers it is under way: it opens with the result.
    await lab.watchBeforeDone("grad-explain", "no graph is recorded");
    await lab.run();
    await lab.waitDone();
    await expect(help).toContainText("no graph is recorded");
    expect(await lab.leaked(), "the explanation opened before the run was done").toBe(false);

    const scored = lab.testid("lab-predict-scored");
    await expect(scored).toBeVisible();
    await expect(scored.getByTestId("scored")).toHaveCount(2);
    // no_grad frees the activations autograd kept: peak memory is lower, and "lower" is right.
    const peak = scored.getByTestId("scored").first();
    await expect(peak).toContainText("Your prediction: right");
    await expect(peak).toContainText(/predicted lower, measured ×0\.\d+/);
    // The latency answer is graded by the one rule: decided (right or wrong, with the reading
    // in the same direction) or, where the noise is too wide, not decided and not graded,
    // saying why once.
    const latency = scored.getByTestId("scored").nth(1);
    const word = (await latency.locator("strong").first().innerText()).trim();
    expect(word).toMatch(/^Your prediction: (right|wrong: it was (lower|about the same|higher)|not decided)$/);
    if (word.endsWith("not decided")) {
      await expect(latency).toContainText(/not decided: .*rerun on a quieter machine, or with more iterations/);
      await expect(scored).not.toContainText("Against the runs' noise");
      await expect(scored.locator(".axis .marker.measured")).toHaveCount(1);
      await expect(scored.locator("h2")).toContainText("Your prediction: 1 of 1 right");
    } else {
      await expect(scored).toContainText("Against the runs' noise, the median latency:");
      await expect(scored.locator(".axis .marker.measured")).toHaveCount(2);
      await expect(scored.locator("h2")).toContainText(/Your prediction: [12] of 2 right/);
    }
    await expect(scored).not.toContainText("no difference beyond run-to-run noise: the two runs' medians differ by less");
    await scored.scrollIntoViewIfNeeded();
    await page.screenshot({ path: `${shots}/lab-predict-after-${name}.png` });
  });
}

test("the Generate page asks the same before a change of one of its settings", async ({ page }) => {
  await page.goto("/generate?model=llama_tiny&device=cpu&batch=1&prompt=16&new_tokens=16&cache=dynamic&eval=1&grad=no_grad&autocast=off");
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  await page.getByTestId("gen-run").click();
  await expect(page.getByTestId("gen-summary")).toBeVisible({ timeout: 90_000 });
  await page.getByTestId("gen-grad").selectOption("enabled");
  const box = page.getByTestId("lab-predict");
  await expect(box).toContainText("Grad mode from torch.no_grad() to enabled (no context)");
  await expect(box).toContainText("press Generate");
  // Autograd on in a generation loop keeps every step's graph: peak memory is higher.
  await box.getByTestId("predict-lab-peak").getByLabel("higher").check();
  await page.getByTestId("gen-run").click();
  const scored = page.getByTestId("lab-predict-scored");
  await expect(scored).toBeVisible({ timeout: 90_000 });
  await expect(scored.getByTestId("scored")).toHaveCount(2);
  await expect(scored.getByTestId("scored").first()).toContainText(/Your prediction: right — predicted higher, measured ×\d/);
  // Not answered: shown, not scored.
  await expect(scored.getByTestId("scored").nth(1)).toContainText("Your prediction: not predicted");
  await expect(scored.locator("h2")).toContainText("Your prediction: 1 of 1 right");
});
