// Watching an element's text over time, in the page itself (a MutationObserver), so a state
// that lasts less than one poll of the test is still seen: what a long run says as it goes.
import { Page } from "@playwright/test";

/** From now on, records every distinct text of the element with data-testid `id`. */
export async function watchTexts(page: Page, id: string) {
  await page.evaluate((id) => {
    const w = window as any;
    w.__seen = w.__seen ?? {};
    const seen: string[] = (w.__seen[id] = []);
    const note = () => {
      const t = document.querySelector(`[data-testid="${id}"]`)?.textContent?.trim();
      if (t && seen[seen.length - 1] !== t) seen.push(t);
    };
    note();
    new MutationObserver(note).observe(document.body, { subtree: true, childList: true, characterData: true });
  }, id);
}

/** The texts recorded since `watchTexts(page, id)`, in order. */
export async function seenTexts(page: Page, id: string): Promise<string[]> {
  return page.evaluate((id) => ((window as any).__seen?.[id] ?? []) as string[], id);
}
