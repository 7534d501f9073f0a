//! The recorded results: the list (`GET /api/records`), one record (`GET
//! /api/records/{id}`) and its downloads (`GET /api/records/{id}/export/{format}`), read off
//! the async threads.

use super::*;

/// A recorded result, read off the async threads (SQLite blocks), its model resolved in the
/// server's catalog (read from JSON, a team model's id is its name).
pub(super) async fn find_record(state: &AppState, id: &str) -> Result<Record, ApiError> {
    if !protocol::is_record_id(id) {
        return Err(ApiError::NotFound(id.to_string()));
    }
    let store = state.store.clone();
    let key = id.to_string();
    let mut record = tokio::task::spawn_blocking(move || store.get(&key))
        .await
        .map_err(|_| ApiError::Storage)?
        .map_err(storage_error)?
        .ok_or_else(|| ApiError::NotFound(id.to_string()))?;
    record.resolve(&state.catalog);
    Ok(record)
}

/// `GET /api/records?kind=run|pitfall&limit=N`: the newest recorded results first.
#[utoipa::path(get, path = "/records", tag = "records",
    params(
        ("kind" = Option<protocol::RecordKind>, Query, description = "Only runs or only pitfall results"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000, description = "How many, newest first (1 to 1000; 50 by default)"),
    ),
    responses(
        (status = 200, description = "Recorded results, newest first", body = Vec<protocol::RecordSummary>),
        (status = 400, description = "A bad `kind` or `limit` (the field is named)", body = protocol::ApiErrorBody),
    ))]
pub async fn list_records(
    State(state): State<AppState>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Vec<RecordSummary>>, ApiError> {
    let bad = |field: &str, message: String| ApiError::BadRequest {
        message,
        field: Some(field.into()),
    };
    let kind = query
        .get("kind")
        .map(|k| k.parse::<RecordKind>())
        .transpose()
        .map_err(|m| bad("kind", m))?;
    let limit = match query.get("limit") {
        None => 50,
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=1000).contains(n))
            .ok_or_else(|| {
                bad(
                    "limit",
                    format!("limit `{l}` must be a whole number from 1 to 1000"),
                )
            })?,
    };
    let store = state.store.clone();
    let list = tokio::task::spawn_blocking(move || store.list(kind, limit))
        .await
        .map_err(|_| ApiError::Storage)?
        .map_err(storage_error)?;
    Ok(Json(list))
}

/// `GET /api/records/{id}`: one recorded run or experiment, with its kind.
#[utoipa::path(get, path = "/records/{id}", tag = "records",
    params(("id" = String, Path, description = "The record's id (a run's id, or a pitfall result's `record_id`)")),
    responses(
        (status = 200, description = "One recorded result with its kind", body = protocol::Record),
        (status = 404, description = "No such record", body = protocol::ApiErrorBody),
    ))]
pub async fn get_record(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Record>, ApiError> {
    find_record(&state, &id).await.map(Json)
}

/// `GET /api/records/{id}/export/{json|csv|py|trace|trace-csv}`: a file to download.
#[utoipa::path(get, path = "/records/{id}/export/{format}", tag = "records",
    params(
        ("id" = String, Path, description = "The record's id"),
        ("format" = String, Path, description = "`json` (the record), `csv` (its samples or series), `py` (the reproducing PyTorch script; runs only), `trace` (the traced pass as Chrome trace-event JSON) or `trace-csv`"),
    ),
    responses(
        (status = 200, description = "A download (`Content-Disposition: attachment`)", content(
            (protocol::Record = "application/json"),
            (String = "text/csv"),
            (String = "text/x-python"),
        )),
        (status = 400, description = "An unknown format", body = protocol::ApiErrorBody),
        (status = 404, description = "No such record, or nothing of that kind to export", body = protocol::ApiErrorBody),
        (status = 422, description = "Nothing of that kind in this record (a pitfall result has no script; a run without a report no table; a run without a traced pass no trace): the message says what it has (field `format`)", body = protocol::ApiErrorBody),
    ))]
pub async fn export_record(
    State(state): State<AppState>,
    Path((id, format)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let format: Format = format.parse().map_err(|m| ApiError::BadRequest {
        message: m,
        field: Some("format".into()),
    })?;
    let record = find_record(&state, &id).await?;
    let file = export(&record, format).map_err(|m| {
        ApiError::InvalidSpec(SpecError {
            field: "format".into(),
            message: m,
        })
    })?;
    let disposition = format!("attachment; filename=\"{}\"", file.filename);
    Ok((
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static(file.content_type),
            ),
            (
                header::CONTENT_DISPOSITION,
                HeaderValue::from_str(&disposition).map_err(|_| ApiError::Storage)?,
            ),
        ],
        file.body,
    )
        .into_response())
}
