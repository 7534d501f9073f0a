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
