//! Pages served without the app's wasm: an embedded recorded run (`/embed/runs/{id}`).
//!
//! A recorded run in a doc page is read, not operated: its figures, charts, exports and a
//! link to the full page. The server renders it as it renders any page, and instead of the
//! wasm (the Lab's code, the router, the reactive system: 385 KB brotli'd) the page loads
//! ECharts and `app/js/record-embed.js` (2 KB), which draws the charts from the options
//! the server wrote into the page, keeps them in step with the frame's width and the
//! colour scheme, saves them as PNG and tells the parent document the page's height.
//!
//! The shell ([`crate::shell`]) decides: a page [`routes::Page::is_static`] says is one,
//! on a site whose manifest names the script, gets [`StaticPage`] in context; without it
//! (an unsplit `cargo leptos` build) the same page hydrates as before. The components read
//! [`is_static`] to leave out what only the hydrating app would read (the record's JSON, the
//! server's info, the Embed dialog) and to write the charts' options.

use leptos::prelude::*;

use crate::charts::ChartOption;

/// In context while the server renders a page that will not hydrate.
#[derive(Clone, Copy, Debug)]
pub struct StaticPage;

/// Whether the page being rendered is served without the wasm.
pub fn is_static() -> bool {
    use_context::<StaticPage>().is_some()
}

/// The options of the chart drawn in element `id`, for `record-embed.js` (which finds them by
/// `data-chart-for`, the element's id): the chart fitted
/// to each of [`ChartOption::FIT_WIDTHS`], as `[[width, option], ...]`. Nothing on a page
/// that hydrates (the app draws its charts itself), where `chart` is not called.
pub fn chart_data(id: &'static str, chart: impl FnOnce() -> Option<ChartOption>) -> impl IntoView {
    let chart = is_static().then(chart).flatten()?;
    let json = crate::script_json(&chart.fitted_by_width());
    Some(view! { <script type="application/json" data-chart-for=id inner_html=json></script> })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_is_fitted_narrowest_first_and_a_narrow_legend_gets_more_room() {
        let chart = ChartOption(serde_json::json!({
            "legend": { "top": 30, "data": ["eval · no_grad · batch 4", "train · grad enabled · batch 4", "eval · inference_mode · batch 4"] },
            "grid": { "top": 70 },
            "series": [
                { "type": "line", "name": "eval · no_grad · batch 4", "data": [1.0, 2.0] },
                { "type": "line", "name": "train · grad enabled · batch 4", "data": [1.0, 2.0] },
                { "type": "line", "name": "eval · inference_mode · batch 4", "data": [1.0, 2.0] }
            ]
        }));
        let fits = chart.fitted_by_width();
        assert_eq!(fits[0].0, ChartOption::FIT_WIDTHS[0]);
        assert!(fits.windows(2).all(|w| w[0].0 < w[1].0), "widths ascend");
        assert!(fits.windows(2).all(|w| w[0].1 != w[1].1), "no width repeats the one before");
        let top = |o: &serde_json::Value| o["grid"]["top"].as_f64().unwrap();
        // Three long names wrap at a phone's width and fit on one line at a laptop's.
        assert!(top(&fits[0].1) > top(&fits.last().unwrap().1));
        assert_eq!(top(&fits.last().unwrap().1), 70.0);
    }

    #[test]
    fn a_hydrating_page_carries_no_chart_options() {
        let owner = Owner::new();
        owner.with(|| {
            let html = chart_data("latency-chart", || panic!("not called on a page that hydrates")).to_html();
            assert!(!html.contains("data-chart-for"), "{html}");
            provide_context(StaticPage);
            let html = chart_data("latency-chart", || Some(ChartOption(serde_json::json!({"a": "</script>"})))).to_html();
            assert!(html.contains("data-chart-for=\"latency-chart\""), "{html}");
            assert!(!html.contains("</script>\"") && html.contains("\\u003c/script\\u003e"), "{html}");
        });
    }
}
