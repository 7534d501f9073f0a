// A pitfall card asks its question before it runs: the answer is locked with the run, then
// the prediction and the measurement stand on one axis above the verdict, and the
// permalink says the same. Keyboard only; screenshots of a card before and after (1440 and
// 390 px) land in end2end/test-results/shots/ (GRADLESS_SHOTS) for a person to look at.
import { expect, test } from "@playwright/test";

const shots = process.env.GRADLESS_SHOTS ?? "test-results/shots";

for (const [name, viewport] of [["1440", { width: 1440, height: 900 }], ["390", { width: 390, height: 844 }]] as const) {
  test(`a card's prediction is locked, scored and recorded (${name} px)`, async ({ page }) => {
    await page.setViewportSize(viewport);
    await page.goto("/pitfalls#gqa");
    await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
    const card = page.getByTestId("card-gqa");
    const question = (await (await page.request.get("/api/pitfalls")).json()).find((c: any) => c.id === "gqa").question;
    await expect(card.getByTestId("predict-gqa")).toContainText(question.text);
    await expect(card.getByTestId("predict-gqa")).toContainText("right within a factor of 1.5");
    // Keyboard only: the slider moves with the arrow keys; its value is shown.
    const slider = page.getByTestId("predict-slider-gqa");
    await slider.focus();
    for (let i = 0; i < 3; i++) await page.keyboard.press("ArrowLeft");
    const shown = (await page.getByTestId("predict-value-gqa").innerText()).trim();
    expect(shown).toMatch(/^×0\.\d+$/);
    await card.scrollIntoViewIfNeeded();
    await card.screenshot({ path: `${shots}/predict-before-${name}.png` });
    await page.getByTestId("run-gqa").focus();
    await page.keyboard.press("Enter");
    // Locked while its run goes: the slider cannot change the answer sent.
    const scored = card.getByTestId("scored");
    await expect(scored).toBeVisible({ timeout: 90_000 });
    await expect(scored).toContainText(`predicted ${shown}, measured ×0.25`);
    await expect(scored).toContainText(/^Your prediction: (right|off by ×[\d.]+)/);
    await expect(card.locator(".axis .marker.measured")).toHaveCount(1);
    await expect(card.locator(".axis .predicted")).toHaveCount(1);
    await expect(page.getByTestId("verdict-gqa")).toContainText("The claim: Confirmed");
    await card.screenshot({ path: `${shots}/predict-after-${name}.png` });
    // The permalink shows the same prediction, from the record.
    const href = await page.getByTestId("permalink-gqa").getAttribute("href");
    await page.goto(href!);
    await expect(page.getByTestId("scored")).toContainText(`predicted ${shown}, measured ×0.25`);
    const id = href!.split("/").pop();
    // Sent after its run started, a prediction is refused.
    const late = await page.request.post(`/api/records/${id}/prediction`, { data: { prediction: { value: 0.25 } } });
    expect(late.status()).toBe(409);
  });
}

test("a choice must be picked before locking in; running without predicting is recorded", async ({ page }) => {
  await page.goto("/pitfalls#half-weights");
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  await expect(page.getByTestId("run-half-weights")).toBeDisabled();
  await page.getByTestId("skip-half-weights").click();
  await expect(page.getByTestId("card-half-weights").getByTestId("scored")).toContainText("run without predicting", { timeout: 120_000 });
});
