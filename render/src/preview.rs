//! What a link to a recorded result says where it is pasted: the Open Graph and
//! Twitter-card tags of its page (title naming the model and settings, a description with
//! the headline figures, the 1200×630 PNG with its size) and its oEmbed answer
//! (<https://oembed.com>: `rich`, the iframe embed with the PNG as thumbnail, or `photo`,
//! the PNG). Every URL is absolute, on the origin the caller passes (the server's public
//! URL).

use protocol::{format_bytes, PitfallReport, Report};
use serde_json::{json, Value};

use crate::picture::{compare_cells, compare_title, run_title, verdict_word};
use crate::{format_ms, height_for, short_date, MIN_WIDTH, VIEW_HEIGHT, VIEW_WIDTH};

/// A result's link preview: what its page's tags and its oEmbed answer carry.
#[derive(Clone, Debug, PartialEq)]
pub struct Preview {
    pub title: String,
    pub description: String,
    /// The permalink, absolute.
    pub url: String,
    /// The 1200×630 PNG, absolute (options are appended as `?width=...`/`&width=...`).
    pub image: String,
    pub image_alt: String,
    /// The page to frame (`/embed/runs/{id}`), absolute; none for a comparison.
    pub embed: Option<String>,
    /// This server's origin (`https://gradless.example.com`).
    pub origin: String,
}

/// One tag for a page's `<head>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tag {
    /// `<meta {attr}="{key}" content="{content}">`: `attr` is `property` (Open Graph) or
    /// `name` (Twitter).
    Meta {
        attr: &'static str,
        key: &'static str,
        content: String,
    },
    /// `<link rel=... type=... href=... title=...>`.
    Link {
        rel: &'static str,
        kind: &'static str,
        href: String,
        title: String,
    },
}

/// `s` as one query-string value (RFC 3986 unreserved characters kept).
pub fn encode_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn with_query(url: &str, query: &str) -> String {
    if query.is_empty() {
        url.to_string()
    } else if url.contains('?') {
        format!("{url}&{query}")
    } else {
        format!("{url}?{query}")
    }
}

fn trim(origin: &str) -> &str {
    origin.trim_end_matches('/')
}

/// A recorded run's preview (`/runs/{id}`).
pub fn run(origin: &str, id: &str, r: &Report) -> Preview {
    let o = trim(origin);
    let description = format!(
        "p50 latency {} · peak {} above the baseline · {:.1} samples/s, on {}, libtorch {}, {}. Measured by Gradless.",
        format_ms(r.latency_ms.p50),
        format_bytes(r.memory.peak_above_baseline_bytes),
        r.throughput_per_s,
        r.env.device_label(),
        r.env.libtorch_version,
        short_date(&r.env.measured_at)
    );
    Preview {
        title: run_title(r),
        image_alt: format!(
            "Latency and memory per iteration of {}: p50 {}, peak {} above the baseline",
            run_title(r),
            format_ms(r.latency_ms.p50),
            format_bytes(r.memory.peak_above_baseline_bytes)
        ),
        description,
        url: format!("{o}/runs/{id}"),
        image: format!("{o}/runs/{id}.png"),
        embed: Some(format!("{o}/embed/runs/{id}")),
        origin: o.to_string(),
    }
}

/// A recorded pitfall experiment's preview (also `/runs/{id}`).
pub fn pitfall(origin: &str, id: &str, card_title: &str, p: &PitfallReport) -> Preview {
    let o = trim(origin);
    let word = verdict_word(p.verdict);
    Preview {
        title: format!("{card_title}: {word}"),
        description: format!(
            "{} Measured on {}, libtorch {}, {} by Gradless.",
            p.reason,
            p.env.device_label(),
            p.env.libtorch_version,
            short_date(&p.env.measured_at)
        ),
        url: format!("{o}/runs/{id}"),
        image: format!("{o}/runs/{id}.png"),
        image_alt: format!("{card_title}: {word}. {}", p.reason),
        embed: Some(format!("{o}/embed/runs/{id}")),
        origin: o.to_string(),
    }
}

/// Recorded runs side by side (`/compare?runs=a,b`); `ids` in the page's order.
pub fn compare(origin: &str, ids: &[String], runs: &[&Report]) -> Preview {
    let o = trim(origin);
    let list = ids.join(",");
    let cells = compare_cells(runs);
    let each: Vec<String> = runs
        .iter()
        .zip(&cells)
        .enumerate()
        .map(|(i, (r, (p50, peak)))| {
            format!("#{} {}: p50 {p50}, peak {peak}", i + 1, r.spec.label())
        })
        .collect();
    Preview {
        title: compare_title(runs),
        description: format!("{}. Measured by Gradless.", each.join("; ")),
        url: format!("{o}/compare?runs={list}"),
        image: format!("{o}/compare.png?runs={list}"),
        image_alt: format!(
            "p50 latency and peak memory of {} recorded runs side by side",
            runs.len()
        ),
        embed: None,
        origin: o.to_string(),
    }
}

impl Preview {
    /// This page's oEmbed endpoint, absolute.
    pub fn oembed_url(&self) -> String {
        format!(
            "{}/oembed?url={}&format=json",
            self.origin,
            encode_component(&self.url)
        )
    }

    /// The tags for the page's `<head>`, in order: Open Graph, Twitter card, oEmbed link.
    pub fn tags(&self) -> Vec<Tag> {
        let meta = |attr, key, content: &str| Tag::Meta {
            attr,
            key,
            content: content.to_string(),
        };
        vec![
            meta("property", "og:type", "website"),
            meta("property", "og:site_name", "Gradless"),
            meta("property", "og:title", &self.title),
            meta("property", "og:description", &self.description),
            meta("property", "og:url", &self.url),
            meta("property", "og:image", &self.image),
            meta("property", "og:image:type", "image/png"),
            meta("property", "og:image:width", &VIEW_WIDTH.to_string()),
            meta("property", "og:image:height", &VIEW_HEIGHT.to_string()),
            meta("property", "og:image:alt", &self.image_alt),
            meta("name", "twitter:card", "summary_large_image"),
            meta("name", "twitter:title", &self.title),
            meta("name", "twitter:description", &self.description),
            meta("name", "twitter:image", &self.image),
            meta("name", "twitter:image:alt", &self.image_alt),
            Tag::Link {
                rel: "alternate",
                kind: "application/json+oembed",
                href: self.oembed_url(),
                title: self.title.clone(),
            },
        ]
    }
}

/// What an oEmbed consumer asked for besides the URL.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OembedAsk {
    pub maxwidth: Option<u32>,
    pub maxheight: Option<u32>,
    /// `photo` instead of `rich` (asked with `type=photo`, or a URL of the PNG itself).
    pub photo: bool,
}

/// The size of the iframe an oEmbed `rich` answer hands out, unless bounded.
pub const FRAME_WIDTH: u32 = 800;
pub const FRAME_HEIGHT: u32 = 720;

/// The largest picture width within the consumer's bounds, `None` when even the smallest
/// picture does not fit them.
fn picture_width(ask: &OembedAsk) -> Option<u32> {
    let mut w = VIEW_WIDTH;
    if let Some(m) = ask.maxwidth {
        w = w.min(m);
    }
    if let Some(h) = ask.maxheight {
        // The widest picture whose height is within the bound.
        let by_height = (u64::from(h) * u64::from(VIEW_WIDTH) / u64::from(VIEW_HEIGHT)) as u32;
        w = w.min(by_height);
        while w > 0 && height_for(w) > h {
            w -= 1;
        }
    }
    (w >= MIN_WIDTH).then_some(w)
}

fn attr(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The oEmbed answer (format json) for `preview`, or `None` when no picture fits the
/// consumer's `maxwidth`/`maxheight` (the server answers 404, as the spec asks).
pub fn oembed(preview: &Preview, ask: &OembedAsk) -> Option<Value> {
    let w = picture_width(ask)?;
    let h = height_for(w);
    let image = if w == VIEW_WIDTH {
        preview.image.clone()
    } else {
        with_query(&preview.image, &format!("width={w}"))
    };
    let mut answer = json!({
        "version": "1.0",
        "title": preview.title,
        "provider_name": "Gradless",
        "provider_url": format!("{}/", preview.origin),
        // A record never changes.
        "cache_age": 31_536_000,
        "thumbnail_url": image,
        "thumbnail_width": w,
        "thumbnail_height": h,
    });
    let fields: Value = match (&preview.embed, ask.photo) {
        (_, true) => json!({"type": "photo", "url": image, "width": w, "height": h}),
        (Some(embed), false) => {
            let fw = ask.maxwidth.map_or(FRAME_WIDTH, |m| m.min(FRAME_WIDTH));
            let fh = ask.maxheight.map_or(FRAME_HEIGHT, |m| m.min(FRAME_HEIGHT));
            json!({
                "type": "rich",
                "width": fw,
                "height": fh,
                "html": format!(
                    "<iframe src=\"{}\" width=\"{fw}\" height=\"{fh}\" style=\"border:0;max-width:100%\" loading=\"lazy\" title=\"{}\"></iframe>",
                    attr(embed),
                    attr(&preview.title)
                ),
            })
        }
        // No page to frame: the picture, linked to the comparison.
        (None, false) => json!({
            "type": "rich",
            "width": w,
            "height": h,
            "html": format!(
                "<a href=\"{}\"><img src=\"{}\" width=\"{w}\" height=\"{h}\" alt=\"{}\"></a>",
                attr(&preview.url),
                attr(&image),
                attr(&preview.image_alt)
            ),
        }),
    };
    if let (Value::Object(a), Value::Object(f)) = (&mut answer, fields) {
        a.extend(f);
    }
    Some(answer)
}
