//! Link previews of recorded results: the oEmbed answer (`GET /oembed`), and the Open
//! Graph / Twitter-card tags and oEmbed link a permalink page carries ([`head_tags`]); what
//! a page path shows ([`subject_of_page`]). The pictures themselves are the parent's.

use super::*;

/// The preview of `subject` from its records.
pub(super) fn preview_of(
    origin: &str,
    subject: &Subject,
    records: &[Record],
    info: &ServerInfo,
) -> Result<Preview, ApiError> {
    Ok(match (subject, records) {
        (Subject::Record(id), [record]) => match &record.body {
            RecordBody::Run(r) => render::preview::run(origin, id, r),
            RecordBody::Pitfall(p) => {
                render::preview::pitfall(origin, id, &card_title(info, &p.id), p)
            }
            RecordBody::Unfinished(u) => return Err(ApiError::NoReport(u.message.clone())),
        },
        (Subject::Compare(ids), _) => render::preview::compare(origin, ids, &runs_of(records)?),
        _ => return Err(ApiError::NotFound("this page".into())),
    })
}

/// What a page path shows, for previews: `/runs/{id}`, `/embed/runs/{id}`, `/compare?runs=`
/// (`photo`: a URL of the picture itself).
pub(super) fn subject_of_page(path: &str, query: &str) -> Option<(Subject, bool)> {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let runs = || {
        let q: BTreeMap<String, String> =
            axum::extract::Query::<Vec<(String, String)>>::try_from_uri(
                &format!("/?{query}").parse().ok()?,
            )
            .ok()?
            .0
            .into_iter()
            .collect();
        compare_subject(&q).ok()
    };
    match segments.as_slice() {
        ["runs", file] if run_image_path(path).is_some() => {
            let _ = file;
            run_image_path(path).map(|(id, _)| (Subject::Record(id), true))
        }
        ["runs", id] | ["embed", "runs", id] => Some((Subject::Record(id.to_string()), false)),
        ["compare"] => runs().map(|s| (s, false)),
        ["compare.png"] | ["compare.svg"] => runs().map(|s| (s, true)),
        _ => None,
    }
}

/// `{"error": ...}` with a status ApiError has no variant for.
pub(super) fn error_with(status: StatusCode, code: &str, message: String, field: &str) -> Response {
    let body = protocol::ApiErrorBody {
        error: protocol::ApiError {
            code: code.into(),
            message,
            field: Some(field.into()),
        },
    };
    (status, Json(body)).into_response()
}

/// `GET /oembed?url=...&format=json[&maxwidth=N&maxheight=N&type=photo]`.
#[utoipa::path(get, path = "/oembed", tag = "embeds",
    params(
        ("url" = String, Query, description = "A permalink of this server"),
        ("format" = Option<String>, Query, description = "Only `json`"),
        ("maxwidth" = Option<u32>, Query, minimum = 1),
        ("maxheight" = Option<u32>, Query, minimum = 1),
    ),
    responses(
        (status = 200, description = "The oEmbed answer (`rich` or `photo`)", body = Object),
        (status = 400, description = "No `url`, a format other than JSON, or a malformed `maxwidth`/`maxheight` (the field is named)", body = protocol::ApiErrorBody),
        (status = 404, description = "A URL this server does not serve", body = protocol::ApiErrorBody),
    ))]
pub(super) async fn oembed(State(state): State<AppState>, uri: Uri, headers: HeaderMap) -> Response {
    answer_oembed(&state, &uri, &headers)
        .await
        .unwrap_or_else(|e| e)
}

pub(super) async fn answer_oembed(
    state: &AppState,
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<Response, Response> {
    let query = query_of(uri).map_err(IntoResponse::into_response)?;
    let url = query
        .get("url")
        .ok_or_else(|| bad("url", "url= names the permalink to embed").into_response())?;
    match query.get("format").map(String::as_str) {
        // Empty: as if absent. Another format is the request's mistake, a 400 naming the
        // field like every other (oEmbed's own answer would be 501, which reads as the
        // server failing).
        None | Some("json") | Some("") => {}
        Some(other) => {
            return Err(error_with(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!(
                    "format `{}` is not served: this server answers oEmbed in json only",
                    other.chars().take(40).collect::<String>()
                ),
                "format",
            ))
        }
    }
    let bound = |key: &str| -> Result<Option<u32>, Response> {
        query
            .get(key)
            .map(|v| {
                v.parse::<u32>().ok().filter(|n| *n > 0).ok_or_else(|| {
                    bad(
                        key,
                        format!(
                            "{key} `{}` must be a whole number of px",
                            v.chars().take(40).collect::<String>()
                        ),
                    )
                    .into_response()
                })
            })
            .transpose()
    };
    let (maxwidth, maxheight) = (bound("maxwidth")?, bound("maxheight")?);
    let asked_photo = match query.get("type").map(String::as_str) {
        None | Some("rich") => false,
        Some("photo") => true,
        Some(other) => {
            return Err(bad(
                "type",
                format!(
                    "type `{}` is not one of rich, photo",
                    other.chars().take(40).collect::<String>()
                ),
            )
            .into_response())
        }
    };
    let not_served = || {
        ApiError::NotFound(format!(
            "an embeddable page at {}",
            url.chars().take(200).collect::<String>()
        ))
        .into_response()
    };
    let (path, page_query) = state.origins.own_path(url).ok_or_else(not_served)?;
    let (subject, photo) = subject_of_page(&path, &page_query).ok_or_else(not_served)?;
    let records = records_of(state, &subject)
        .await
        .map_err(IntoResponse::into_response)?;
    let info = state.info.current();
    let origin = state.origins.public_origin(uri, headers);
    let preview =
        preview_of(&origin, &subject, &records, &info).map_err(IntoResponse::into_response)?;
    let ask = OembedAsk {
        maxwidth,
        maxheight,
        photo: photo || asked_photo,
    };
    let answer = render::preview::oembed(&preview, &ask).ok_or_else(|| {
        ApiError::NotFound(format!(
            "a picture within maxwidth/maxheight (the smallest is {} px wide)",
            render::MIN_WIDTH
        ))
        .into_response()
    })?;
    Ok((
        [(
            header::CACHE_CONTROL,
            HeaderValue::from_static("public, max-age=3600"),
        )],
        Json(answer),
    )
        .into_response())
}

/// The `<head>` additions of a page: a permalink's link-preview tags (its records read by
/// the router beforehand, in `records`) and an embed's pinned theme. `None`: nothing to add.
pub fn head_tags(
    parts: &axum::http::request::Parts,
    records: &HashMap<String, Result<Option<Record>, String>>,
    origins: &Origins,
    info: &ServerInfo,
) -> Option<app::embed::HeadTags> {
    let path = parts.uri.path();
    let query = parts.uri.query().unwrap_or("");
    let theme = if path.starts_with("/embed/") {
        let q: HashMap<String, String> = axum::extract::Query::try_from_uri(&parts.uri)
            .map(|q: axum::extract::Query<HashMap<String, String>>| q.0)
            .unwrap_or_default();
        app::embed::pinned_theme(q.get("theme").map(String::as_str))
    } else {
        None
    };
    let preview = subject_of_page(path, query)
        .filter(|(_, photo)| !photo)
        .and_then(|(subject, _)| {
            let found: Option<Vec<Record>> = subject
                .ids()
                .iter()
                .map(|id| {
                    records
                        .get(id)
                        .and_then(|r| r.as_ref().ok().cloned().flatten())
                })
                .collect();
            let origin = origins.public_origin(&parts.uri, &parts.headers);
            preview_of(&origin, &subject, &found?, info).ok()
        });
    if preview.is_none() && theme.is_none() {
        return None;
    }
    let mut tags = app::embed::HeadTags {
        theme,
        ..Default::default()
    };
    for tag in preview.map(|p| p.tags()).unwrap_or_default() {
        match tag {
            Tag::Meta { attr, key, content } => tags.meta.push((attr, key, content)),
            Tag::Link { href, title, .. } => tags.oembed = Some((href, title)),
        }
    }
    Some(tags)
}

