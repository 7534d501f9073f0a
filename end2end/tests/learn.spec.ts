// An onboarding path, walked as a learner walks it: every step predicted (some right, some
// wrong) before it runs, each prediction shown against its measurement, the path finished,
// and /learn/{id}/answers counting exactly those answers. Once with the mouse, once with the
// keyboard alone; axe checks the learn pages. Screenshots of the path and its answers
// (1440 and 390 px) land in end2end/test-results/shots/ (GRADLESS_SHOTS).
import { expect, test, Page } from "@playwright/test";
import * as path from "node:path";

const shots = process.env.GRADLESS_SHOTS ?? "test-results/shots";
const ID = "inference-settings";
const AXE = path.join(__dirname, "..", "node_modules", "axe-core", "axe.min.js");

test.describe.configure({ mode: "serial" });

type Summary = { steps: { step: number; answers: number; right: number }[]; kept: number };

async function answers(page: Page): Promise<Summary> {
  return (await page.request.get(`/api/learn/${ID}/answers`)).json();
}

/// Walks every step; `answer(n, question)` picks the prediction through the page (mouse or
/// keyboard) and locks it in. Returns, per step, whether the page said right (`null`: the
/// noise decided nothing, so nothing was graded or kept).
async function walk(page: Page, answer: (n: number, step: any) => Promise<void>): Promise<(boolean | null)[]> {
  const learnPath = await (await page.request.get(`/api/learn/${ID}`)).json();
  await page.goto(`/learn/${ID}`);
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  // Keyboard: a test that walks by mouse does the same with its clicks.
  await page.getByRole("button", { name: "Start over" }).focus();
  await page.keyboard.press("Enter");
  await expect(page.getByTestId("path-progress")).toContainText(`0 of ${learnPath.steps.length} steps done`);
  // The team's answers hold the measured values: no link to them before a step is done.
  await expect(page.locator("section.tour")).not.toContainText("What the team predicted");
  await expect(page.getByTestId("team-answers")).toHaveCount(0);
  const right: (boolean | null)[] = [];
  for (let n = 1; n <= learnPath.steps.length; n++) {
    const step = page.getByTestId(`step-${n}`);
    await step.scrollIntoViewIfNeeded();
    await answer(n, learnPath.steps[n - 1]);
    const scored = step.getByTestId("step-outcome").getByTestId("scored");
    await expect(scored).toBeVisible({ timeout: 180_000 });
    // The prediction and the measurement, a marker each, on one axis.
    await expect(scored).toContainText(/predicted .+, measured /);
    await expect(step.locator(".axis .predicted")).toHaveCount(1);
    const word = (await scored.locator("strong").first().innerText()).trim();
    expect(word).toMatch(/^Your prediction: (right|off by ×[\d.]+|wrong: it was .+|not decided)$/);
    if (word === "Your prediction: not decided") {
      // Too noisy to tell: the page says so, marks no band as measured, keeps no answer.
      await expect(scored).toContainText("rerun on a quieter machine, or with more iterations");
      await expect(step.locator(".axis .marker.measured")).toHaveCount(0);
      await expect(step).not.toContainText("Your prediction was added to the path's answers.");
      right.push(null);
    } else {
      await expect(step.locator(".axis .marker.measured")).toHaveCount(1);
      right.push(word === "Your prediction: right");
      await expect(step).toContainText("Your prediction was added to the path's answers.");
    }
    // Done: the team's answers at this step are one link away, and only now.
    await expect(step.getByTestId("team-answers")).toHaveAttribute("href", `/learn/${ID}/answers#answers-${n}`);
    if (n < learnPath.steps.length) await expect(page.getByTestId(`step-${n + 1}`).getByTestId("team-answers")).toHaveCount(0);
    await expect(page.getByTestId("path-progress")).toContainText(`${n} of ${learnPath.steps.length} steps done`);
  }
  const finished = page.getByTestId("path-finished");
  await expect(finished).toContainText(`${right.filter((r) => r).length} of ${right.filter((r) => r !== null).length} predictions right`);
  return right;
}

/// The answers page and the API agree with what was walked: each step got one more answer,
/// one more right where the page said right.
async function checkAnswers(page: Page, before: Summary, right: (boolean | null)[]) {
  const after = await answers(page);
  expect(after.kept).toBe(before.kept + right.filter((r) => r !== null).length);
  await page.goto(`/learn/${ID}/answers`);
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  for (let n = 1; n <= right.length; n++) {
    const a = after.steps[n - 1], b = before.steps[n - 1];
    expect(a.answers, `step ${n}`).toBe(b.answers + (right[n - 1] === null ? 0 : 1));
    expect(a.right, `step ${n}`).toBe(b.right + (right[n - 1] ? 1 : 0));
    await expect(page.getByTestId(`share-${n}`)).toContainText(`${a.answers} answer${a.answers === 1 ? "" : "s"}, ${a.right} right`);
    if (a.answers > 0) await expect(page.getByTestId(`answers-${n}`).locator(".bar-row.truth")).toHaveCount(1);
    if (a.right < a.answers) await expect(page.getByTestId(`common-wrong-${n}`)).toContainText("Most common wrong answer");
  }
  const csv = await page.request.get(`/api/learn/${ID}/answers?format=csv`);
  expect(csv.headers()["content-type"]).toContain("text/csv");
  expect((await csv.text()).trim().split("\n").length).toBe(after.kept + 1);
}

test("a learner walks the shipped path, predicting; the answers page counts them", async ({ page }) => {
  test.setTimeout(20 * 60_000);
  await page.setViewportSize({ width: 1440, height: 900 });
  const before = await answers(page);
  const right = await walk(page, async (n, step) => {
    const s = page.getByTestId(`step-${n}`);
    const slider = s.locator("input[type=range]");
    if (await slider.count()) {
      // The far end of the scale: ×10 for a ratio, 1 TiB for bytes; always wrong here.
      await slider.focus();
      await page.keyboard.press(n === 1 ? "End" : "Home");
    } else if (step.kind.change) {
      // Sixteen samples a pass hold more than one: right.
      await s.getByLabel("higher").check();
    } else {
      await s.getByLabel("about the same").check();
    }
    await s.getByTestId(`lock-${n}`).click();
  });
  expect(right[0]).toBe(false);
  expect(right[3]).toBe(true);
  await page.screenshot({ path: `${shots}/learn-path-1440.png`, fullPage: true });
  await checkAnswers(page, before, right);
  await page.screenshot({ path: `${shots}/learn-answers-1440.png`, fullPage: true });
  await page.setViewportSize({ width: 390, height: 844 });
  await page.screenshot({ path: `${shots}/learn-answers-390.png`, fullPage: true });
  await page.goto(`/learn/${ID}`);
  await expect(page.getByTestId("earlier-4")).toContainText("From your earlier visit");
  await page.screenshot({ path: `${shots}/learn-path-390.png`, fullPage: true });
});

test("the same path with the keyboard alone", async ({ page }) => {
  test.setTimeout(20 * 60_000);
  const before = await answers(page);
  const right = await walk(page, async (n, step) => {
    const s = page.getByTestId(`step-${n}`);
    const slider = s.locator("input[type=range]");
    if (await slider.count()) {
      await slider.focus();
      for (let i = 0; i < 5; i++) await page.keyboard.press("ArrowLeft");
    } else {
      // The first radio of the group, by Tab from the step's heading's controls; an arrow
      // key moves the choice (lower -> about the same -> higher).
      const first = s.locator("input[type=radio]").first();
      await first.focus();
      await page.keyboard.press("Space");
      if (step.kind.change) {
        await page.keyboard.press("ArrowRight");
        await page.keyboard.press("ArrowRight");
        await expect(s.getByLabel("higher")).toBeChecked();
      }
    }
    // From the answer to "Lock in and run" by Tab.
    await page.keyboard.press("Tab");
    await expect(s.getByTestId(`lock-${n}`)).toBeFocused();
    await page.keyboard.press("Enter");
  });
  expect(right[3]).toBe(true);
  await checkAnswers(page, before, right);
});

test("a step run without predicting is shown but not counted; a composed path is served", async ({ page }) => {
  test.setTimeout(5 * 60_000);
  const before = await answers(page);
  await page.goto(`/learn/${ID}`);
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  await page.getByTestId("step-4").getByTestId("skip-4").click();
  await expect(page.getByTestId("step-4").getByTestId("scored")).toContainText("run without predicting", { timeout: 120_000 });
  expect((await answers(page)).kept).toBe(before.kept);
  // /learn/new: a card from the list, checked, saved, walked.
  await page.goto("/learn/new");
  await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
  const id = `e2e-${Date.now()}`;
  await page.getByTestId("compose-toml").fill(`id = "${id}"\ntitle = "Ours"\nnote = "Our own note."\n`);
  await page.getByTestId("compose-card").selectOption("warm-up");
  await page.getByRole("button", { name: "Add the card as a step" }).click();
  await expect(page.getByTestId("compose-toml")).toHaveValue(/card = "warm-up"/);
  await page.getByTestId("compose-check").click();
  await expect(page.getByTestId("compose-message")).toContainText("1 steps");
  await page.getByTestId("compose-toml").fill(`id = "${id}-bad"\ntitle = "Ours"\n[[step]]\ntitle = "x"\ncard = "nope"\n`);
  await page.getByTestId("compose-check").click();
  await expect(page.getByTestId("compose-message")).toContainText("step[1].card");
  await page.getByTestId("compose-toml").fill(`id = "${id}"\ntitle = "Ours"\nnote = "Our own note."\n[[step]]\ntitle = "Warm-up"\ncard = "warm-up"\n`);
  await page.getByTestId("compose-save").click();
  await page.getByTestId("compose-link").click();
  await expect(page.locator("h1")).toHaveText("Ours");
  await expect(page.getByTestId("step-1")).toContainText("Warm-up");
});

test.describe("axe", () => {
  // The injected checker is a script the pages' CSP refuses: here only, the browser ignores it.
  test.use({ bypassCSP: true });
test("axe finds no serious or critical violation on the learn pages", async ({ page }) => {
  test.setTimeout(3 * 60_000);
  for (const scheme of ["light", "dark"] as const) {
    await page.emulateMedia({ colorScheme: scheme });
    for (const p of [`/learn`, `/learn/${ID}`, `/learn/${ID}/answers`, `/learn/new`, `/embed/learn/${ID}`]) {
      await page.goto(p);
      await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
      const violations = await axe(page);
      expect(violations, `${p} (${scheme})`).toEqual([]);
    }
  }
});
});

async function axe(page: Page): Promise<string[]> {
  await page.addScriptTag({ path: AXE });
  const violations: any[] = await page.evaluate(async () => (await (window as any).axe.run(document, { resultTypes: ["violations"] })).violations);
  return violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => `${v.id} (${v.impact}): ${v.help} — ${v.nodes.slice(0, 3).map((n: any) => n.target.join(" ")).join(", ")}`);
}
