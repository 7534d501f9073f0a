//! SVG to PNG: usvg parses the picture with the compiled-in font as its only font, resvg
//! draws it with tiny-skia, and the pixmap is written as a PNG. Nothing here reads the
//! system: the same SVG gives the same bytes on every host.

use std::sync::{Arc, OnceLock};

use resvg::{tiny_skia, usvg};

use crate::RenderError;

fn fonts() -> Arc<usvg::fontdb::Database> {
    static DB: OnceLock<Arc<usvg::fontdb::Database>> = OnceLock::new();
    DB.get_or_init(|| {
        let mut db = usvg::fontdb::Database::new();
        db.load_font_data(crate::text::REGULAR.to_vec());
        db.load_font_data(crate::text::BOLD.to_vec());
        db.set_sans_serif_family(crate::text::FAMILY);
        Arc::new(db)
    })
    .clone()
}

/// The PNG of `svg` at `scale` device pixels per px of its own width and height.
pub fn png(svg: &str, scale: u32) -> Result<Vec<u8>, RenderError> {
    let options = usvg::Options {
        font_family: crate::text::FAMILY.to_string(),
        fontdb: fonts(),
        ..usvg::Options::default()
    };
    let tree = usvg::Tree::from_str(svg, &options).map_err(|e| RenderError(format!("svg: {e}")))?;
    let size = tree.size();
    let s = scale.clamp(1, 4) as f32;
    let (w, h) = (
        (size.width() * s).round() as u32,
        (size.height() * s).round() as u32,
    );
    let mut pixmap =
        tiny_skia::Pixmap::new(w, h).ok_or_else(|| RenderError(format!("no {w}×{h} pixmap")))?;
    resvg::render(
        &tree,
        tiny_skia::Transform::from_scale(s, s),
        &mut pixmap.as_mut(),
    );
    encode_rgb(&pixmap)
}

/// The pixmap as an 8-bit RGB PNG: every picture is drawn on an opaque background, so
/// the alpha channel says nothing (and dropping it makes the file about a quarter
/// smaller); adaptive filtering suits the flat areas and antialiased text.
fn encode_rgb(pixmap: &tiny_skia::Pixmap) -> Result<Vec<u8>, RenderError> {
    let rgb: Vec<u8> = pixmap
        .pixels()
        .iter()
        .flat_map(|p| {
            let c = p.demultiply();
            [c.red(), c.green(), c.blue()]
        })
        .collect();
    let mut out = Vec::with_capacity(rgb.len() / 8);
    {
        let mut encoder = png::Encoder::new(&mut out, pixmap.width(), pixmap.height());
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        encoder.set_compression(png::Compression::Default);
        encoder.set_adaptive_filter(png::AdaptiveFilterType::Adaptive);
        let mut writer = encoder
            .write_header()
            .map_err(|e| RenderError(format!("png: {e}")))?;
        writer
            .write_image_data(&rgb)
            .map_err(|e| RenderError(format!("png: {e}")))?;
    }
    Ok(out)
}
