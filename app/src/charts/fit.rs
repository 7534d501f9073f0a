//! Fitting a chart's option to the width it is drawn at, just before it is drawn. The
//! builders lay charts out for a laptop's column; where the names do not fit on one line
//! (a phone's few hundred pixels, or six series on a laptop) a plain legend wraps over the
//! plot (a scrolling one would show a page of names, "1/3", so the colours could not be
//! matched to the runs), a long subtitle is clipped at both ends, and ECharts drops
//! category labels that would overlap (a bar group left unnamed). Here the legend gets the
//! rows it wraps onto, the subtitle
//! breaks onto lines, a few categories are all labelled (each wrapping in its share of the
//! width), and the plot makes room for the extra lines. Pure, so it is tested natively;
//! `draw.rs` calls it with the element's width.

use serde_json::Value;

/// About the width of a character of ECharts' 12 px sans-serif, for estimating lines
/// (counted in bytes: a "·" counts twice, which errs towards room to spare).
const CHAR_PX: f64 = 6.6;
/// A legend item's symbol and the gap after it.
const LEGEND_ITEM_PX: f64 = 40.0;
const LINE_PX: f64 = 18.0;
/// At most this many categories are all labelled (iterations are many: ECharts thins them).
const FEW_CATEGORIES: usize = 8;

/// `option` as it should be drawn `width` px wide.
pub fn fit_to_width(option: &Value, width: f64) -> Value {
    let mut o = option.clone();
    label_every_category(&mut o, width);
    if width <= 0.0 {
        return o;
    }
    let mut extra_top = 0.0;
    let mut extra_bottom = 0.0;
    // Subtitles break onto as many lines as they need; later titles (a reading placed under
    // the subtitle) move down with it.
    let mut shift = 0.0;
    for_each(&mut o["title"], |t| {
        if shift > 0.0 {
            if let Some(top) = t["top"].as_f64() {
                t["top"] = (top + shift).into();
            }
        }
        let lines = lines_for(t["subtext"].as_str().unwrap_or(""), width - 24.0);
        if lines > 1 {
            t["subtextStyle"]["width"] = (width - 24.0).into();
            t["subtextStyle"]["overflow"] = "break".into();
            t["subtextStyle"]["lineHeight"] = 15.into();
            shift += 15.0 * (lines - 1) as f64;
        }
    });
    extra_top += shift;
    let legend = &mut o["legend"];
    let rows = legend_rows(&legend_names(option), width - 20.0);
    // The legends are plain (never a paged "1/3"): one that needs more lines than one gets
    // the room for them.
    if legend.is_object() && legend["show"] != false && rows > 1 {
        let grow = LINE_PX * 1.3 * rows.saturating_sub(1) as f64;
        if legend["bottom"].is_null() {
            if let Some(top) = legend["top"].as_f64() {
                legend["top"] = (top + shift).into();
            }
            extra_top += grow;
        } else {
            extra_bottom += grow;
        }
    }
    for_each(&mut o["grid"], |g| {
        for (side, extra) in [("top", extra_top), ("bottom", extra_bottom)] {
            if extra > 0.0 {
                let at = g[side].as_f64().unwrap_or(60.0);
                g[side] = (at + extra).into();
            }
        }
    });
    o
}

/// A category axis with a few entries labels every one, each wrapping within its share of
/// the plot's width, instead of ECharts hiding those that would overlap.
fn label_every_category(o: &mut Value, width: f64) {
    for_each(&mut o["xAxis"], |axis| {
        let n = axis["data"].as_array().map_or(0, |d| d.len());
        if axis["type"] == "category" && (2..=FEW_CATEGORIES).contains(&n) && axis["axisLabel"]["rotate"].is_null() {
            let share = ((width - 110.0) / n as f64 - 12.0).max(44.0);
            axis["axisLabel"]["interval"] = 0.into();
            axis["axisLabel"]["width"] = share.floor().into();
            axis["axisLabel"]["overflow"] = "break".into();
            // Broken lines of one label must not overprint each other.
            axis["axisLabel"]["lineHeight"] = 14.into();
        }
    });
}

/// Calls `f` on the value, or on each element of an array (ECharts takes both).
fn for_each(v: &mut Value, mut f: impl FnMut(&mut Value)) {
    match v {
        Value::Array(items) => items.iter_mut().for_each(f),
        Value::Object(_) => f(v),
        _ => {}
    }
}

fn lines_for(text: &str, width: f64) -> usize {
    let px = text.len() as f64 * CHAR_PX;
    (px / width.max(1.0)).ceil().max(1.0) as usize
}

/// The legend's entries: its `data`, or the series' names (ECharts' default).
fn legend_names(o: &Value) -> Vec<String> {
    let from = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().or_else(|| x["name"].as_str()).map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let data = from(&o["legend"]["data"]);
    if !data.is_empty() {
        return data;
    }
    let mut names: Vec<String> = from(&o["series"]);
    names.dedup();
    names
}

/// How many rows a plain legend of `names` takes at `width`.
fn legend_rows(names: &[String], width: f64) -> usize {
    let mut rows = 1;
    let mut x = 0.0;
    for n in names {
        let w = LEGEND_ITEM_PX + n.len() as f64 * CHAR_PX;
        if x > 0.0 && x + w > width {
            rows += 1;
            x = 0.0;
        }
        x += w;
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn option() -> Value {
        json!({
            "title": {"text": "Memory", "subtext": "ResNet-18 · after each module, in execution order · libtorch's CPU allocation reporting", "left": "center"},
            "legend": {"bottom": 0},
            "grid": {"top": 64, "bottom": 48},
            "xAxis": {"type": "category", "data": ["dynamic cache · no_grad", "static cache · no_grad", "off cache · no_grad"]},
            "series": [
                {"name": "dynamic cache · no_grad: held"}, {"name": "dynamic cache · no_grad: KV cache"},
                {"name": "static cache · no_grad: held"}, {"name": "static cache · no_grad: KV cache"},
            ],
        })
    }

    #[test]
    fn a_phone_wraps_the_legend_and_the_subtitle_and_makes_room() {
        let o = fit_to_width(&option(), 360.0);
        // Four long names: one a row at 340 px.
        assert!(o["grid"]["bottom"].as_f64().unwrap() >= 48.0 + 3.0 * LINE_PX);
        assert_eq!(o["title"]["subtextStyle"]["overflow"], "break");
        assert!(o["grid"]["top"].as_f64().unwrap() > 64.0);
        // Every bar group keeps its name.
        assert_eq!(o["xAxis"]["axisLabel"]["interval"], 0);
    }

    #[test]
    fn a_laptop_keeps_the_layout_but_names_every_group() {
        let o = fit_to_width(&option(), 1400.0);
        assert_eq!(o["legend"], option()["legend"]);
        assert_eq!(o["grid"], option()["grid"]);
        assert_eq!(o["xAxis"]["axisLabel"]["interval"], 0);
        // Many categories (iterations) are left to ECharts.
        let mut many = option();
        many["xAxis"]["data"] = json!((1..40).map(|i| i.to_string()).collect::<Vec<_>>());
        assert!(fit_to_width(&many, 900.0)["xAxis"]["axisLabel"].is_null());
    }
}
