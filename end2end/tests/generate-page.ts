// A page object for the Generate page: the tests talk about settings and generations, not
// selectors.
import { expect, Page } from "@playwright/test";

export class GeneratePage {
  constructor(readonly page: Page) {}

  async open(query = "") {
    await this.page.goto(`/generate${query ? "?" + query : ""}`);
    await expect(this.page.locator("html[data-hydrated=true]")).toHaveCount(1);
  }

  testid(id: string) {
    return this.page.getByTestId(id);
  }

  /** The prediction box a change of one setting raises. */
  get predictBox() {
    return this.testid("lab-predict");
  }

  async typePrompt(text: string) {
    const box = this.testid("gen-prompt-text");
    await box.fill(text);
    await box.dispatchEvent("change");
  }

  async generate() {
    await this.testid("gen-run").click();
  }

  async waitDone(timeout = 120_000) {
    await expect(this.testid("gen-status")).toContainText("Done", { timeout });
  }
}
