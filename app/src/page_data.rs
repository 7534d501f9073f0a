//! The JSON the server renders into a page (`<script type="application/json" id=...>`)
//! and the hydrating app reads back: how data read on the server reaches the browser
//! without a second request. Imports nothing of the app, so any page may use it.

/// `value` as JSON to put inside a `<script type="application/json">` element. The HTML
/// parser ends that element at `</script`, and `<!--` / `<script` switch it into "escaped"
/// states that can swallow the rest of the page; `&` matters if the text is ever read as
/// markup, and U+2028/U+2029 end a line in older JavaScript. So `<`, `>`, `&`, U+2028 and
/// U+2029 go out as JSON `\uXXXX` escapes (inside JSON strings, the only place they can
/// occur): the same value reads back, and no data can reach the HTML parser as markup.
pub(crate) fn script_json<T: serde::Serialize>(value: &T) -> String {
    let json = serde_json::to_string(value).unwrap_or_default();
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// The text of the `<script type="application/json" id=...>` the server rendered into the
/// page: how data read on the server reaches the hydrating app without a second request.
#[cfg(feature = "hydrate")]
pub(crate) fn page_json(id: &str) -> Option<String> {
    web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.get_element_by_id(id))
        .and_then(|e| e.text_content())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_json_cannot_close_its_script_element() {
        let json = script_json(&"</script><script>alert(1)</script>");
        assert!(!json.contains("</"), "{json}");
        assert_eq!(
            serde_json::from_str::<String>(&json).unwrap(),
            "</script><script>alert(1)</script>"
        );
    }
    #[test]
    fn page_json_carries_no_markup_and_reads_back_the_same() {
        let hostile = "<!--<script>a & b > c\u{2028}d\u{2029}e</SCRIPT>";
        let json = script_json(&vec![hostile.to_string()]);
        for c in ['<', '>', '&', '\u{2028}', '\u{2029}'] {
            assert!(!json.contains(c), "{c:?} in {json}");
        }
        assert_eq!(
            serde_json::from_str::<Vec<String>>(&json).unwrap(),
            [hostile]
        );
    }
}
