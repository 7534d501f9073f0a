//! Link previews: the tags a permalink's page carries and the oEmbed answers, with the
//! fields the spec requires for `rich` and `photo` and the consumer's bounds respected.

mod common;

use render::preview::{self, OembedAsk, Tag};

fn meta<'a>(tags: &'a [Tag], key: &str) -> &'a str {
    tags.iter()
        .find_map(|t| match t {
            Tag::Meta {
                key: k, content, ..
            } if *k == key => Some(content.as_str()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no {key} in {tags:?}"))
}

#[test]
fn a_run_preview_names_the_run_and_its_figures() {
    let r = common::run("no_grad", 8, 9.1, 24.5, 4);
    let p = preview::run("https://g.corp/", "0123456789abcdef", &r);
    let tags = p.tags();
    assert_eq!(
        meta(&tags, "og:title"),
        "ResNet-18 · eval · no_grad · batch 8"
    );
    let d = meta(&tags, "og:description");
    assert!(
        d.contains(&format!("{:.3} ms", r.latency_ms.p50))
            && d.contains(&protocol::format_bytes(r.memory.peak_above_baseline_bytes)),
        "{d}"
    );
    assert_eq!(
        meta(&tags, "og:image"),
        "https://g.corp/runs/0123456789abcdef.png"
    );
    assert_eq!(meta(&tags, "og:image:width"), "1200");
    assert_eq!(meta(&tags, "og:image:height"), "630");
    assert_eq!(
        meta(&tags, "og:url"),
        "https://g.corp/runs/0123456789abcdef"
    );
    assert_eq!(meta(&tags, "twitter:card"), "summary_large_image");
    assert!(tags.contains(&Tag::Link {
        rel: "alternate",
        kind: "application/json+oembed",
        href:
            "https://g.corp/oembed?url=https%3A%2F%2Fg.corp%2Fruns%2F0123456789abcdef&format=json"
                .into(),
        title: p.title.clone(),
    }));
}

fn required(answer: &serde_json::Value, fields: &[&str]) {
    for f in fields {
        assert!(!answer[f].is_null(), "{f} missing from {answer}");
    }
}

#[test]
fn oembed_answers_carry_what_the_spec_requires() {
    let r = common::run("no_grad", 8, 9.1, 24.5, 4);
    let p = preview::run("https://g.corp", "0123456789abcdef", &r);
    let rich = preview::oembed(&p, &OembedAsk::default()).unwrap();
    required(&rich, &["version", "type", "html", "width", "height"]);
    assert_eq!(rich["version"], "1.0");
    assert_eq!(rich["type"], "rich");
    assert!(rich["html"]
        .as_str()
        .unwrap()
        .contains("src=\"https://g.corp/embed/runs/0123456789abcdef\""));
    // A thumbnail comes with all three of its fields.
    required(
        &rich,
        &["thumbnail_url", "thumbnail_width", "thumbnail_height"],
    );
    assert_eq!(rich["thumbnail_width"], 1200);

    let photo = preview::oembed(
        &p,
        &OembedAsk {
            photo: true,
            maxwidth: Some(640),
            ..Default::default()
        },
    )
    .unwrap();
    required(&photo, &["version", "type", "url", "width", "height"]);
    assert_eq!(photo["type"], "photo");
    assert_eq!(photo["width"], 640);
    assert_eq!(photo["height"], 336);
    assert_eq!(
        photo["url"],
        "https://g.corp/runs/0123456789abcdef.png?width=640"
    );

    // maxheight bounds the width through the picture's shape; nothing fits 100 px.
    let bounded = preview::oembed(
        &p,
        &OembedAsk {
            photo: true,
            maxheight: Some(400),
            ..Default::default()
        },
    )
    .unwrap();
    assert!(
        bounded["height"].as_u64().unwrap() <= 400 && bounded["width"].as_u64().unwrap() >= 760,
        "{bounded}"
    );
    let rich = preview::oembed(
        &p,
        &OembedAsk {
            maxwidth: Some(500),
            maxheight: Some(300),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(
        (rich["width"].as_u64(), rich["height"].as_u64()),
        (Some(500), Some(300))
    );
    assert_eq!(
        preview::oembed(
            &p,
            &OembedAsk {
                maxwidth: Some(100),
                ..Default::default()
            }
        ),
        None
    );
}

#[test]
fn comparisons_and_experiments_preview_too() {
    let runs: Vec<_> = (0..2)
        .map(|i| common::run("no_grad", 8 << i, 9.0 + i as f64, 24.5, i))
        .collect();
    let refs: Vec<&protocol::Report> = runs.iter().collect();
    let ids = vec![
        "0123456789abcdef".to_string(),
        "fedcba9876543210".to_string(),
    ];
    let p = preview::compare("https://g.corp", &ids, &refs);
    assert_eq!(
        p.url,
        "https://g.corp/compare?runs=0123456789abcdef,fedcba9876543210"
    );
    assert_eq!(
        p.image,
        "https://g.corp/compare.png?runs=0123456789abcdef,fedcba9876543210"
    );
    let rich = preview::oembed(&p, &OembedAsk::default()).unwrap();
    assert!(
        rich["html"]
            .as_str()
            .unwrap()
            .contains("<img src=\"https://g.corp/compare.png?runs="),
        "{rich}"
    );
    let photo = preview::oembed(
        &p,
        &OembedAsk {
            photo: true,
            maxwidth: Some(600),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(
        photo["url"],
        "https://g.corp/compare.png?runs=0123456789abcdef,fedcba9876543210&width=600"
    );

    let pit = common::pitfall();
    let p = preview::pitfall(
        "https://g.corp",
        "0123456789abcdef",
        "no_grad saves memory",
        &pit,
    );
    assert_eq!(p.title, "no_grad saves memory: Confirmed");
    assert!(p.description.contains("98.0 MiB"));
}
