// A page object for the Lab: the tests talk about settings and runs, not selectors.
import { expect, Page } from "@playwright/test";

export class LabPage {
  constructor(readonly page: Page) {}

  async open(query = "") {
    await this.page.goto(`/${query ? "?" + query : ""}`);
    // Hydrated: the wasm app has taken over the server-rendered page.
    await expect(this.page.locator("html[data-hydrated=true]")).toHaveCount(1);
  }

  testid(id: string) {
    return this.page.getByTestId(id);
  }

  async run() {
    await this.testid("run").click();
  }

  async waitDone(timeout = 90_000) {
    await expect(this.testid("status")).toContainText("Done", { timeout });
  }

  /**
   * From now on, watches element `id`: whether its text ever holds `phrase` while the status
   * does not say Done (a run too quick to catch between two checks is still seen). Read it
   * with `leaked()`.
   */
  async watchBeforeDone(id: string, phrase: string) {
    await this.page.evaluate(([id, phrase]) => {
      const w = window as any;
      w.__leaked = false;
      const check = () => {
        const el = document.querySelector(`[data-testid="${id}"]`);
        const status = document.querySelector('[data-testid="status"]')?.textContent ?? "";
        if (el?.textContent?.includes(phrase) && !status.includes("Done")) w.__leaked = true;
      };
      new MutationObserver(check).observe(document.body, { subtree: true, childList: true, characterData: true });
    }, [id, phrase]);
  }

  async leaked(): Promise<boolean> {
    return this.page.evaluate(() => (window as any).__leaked === true);
  }

  /** The data of series `index` of the chart drawn in element `id`, read from ECharts itself. */
  async chartData(id: string, index = 0): Promise<unknown[]> {
    return this.page.evaluate(
      ([id, index]) => {
        const el = document.getElementById(id as string);
        const chart = el && (window as any).echarts?.getInstanceByDom(el);
        const series = chart?.getOption()?.series ?? [];
        return (series[index as number]?.data ?? []) as unknown[];
      },
      [id, index],
    );
  }

  async chartSeriesCount(id: string): Promise<number> {
    return this.page.evaluate((id) => {
      const el = document.getElementById(id);
      const chart = el && (window as any).echarts?.getInstanceByDom(el);
      return (chart?.getOption()?.series ?? []).length;
    }, id);
  }
}
