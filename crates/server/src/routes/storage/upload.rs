//! Receiving an object: the raw body, or the `file` part of a `multipart/form-data` body,
//! streamed to the store as it arrives.

use std::sync::{Arc, Mutex};

use axum::{
    body::Body,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::Response,
};
use futures_util::StreamExt;
use quintet_core::{
    Error, Instance,
    accounts::{Limits, human_bytes},
    object::{self, ObjectPath, form_object_path},
    ports::storage::ByteStream,
};

use crate::{
    error::{ApiError, ApiResult},
    quota::Counted,
    reply,
    state::AppState,
};

/// Longest `path` field of a form, bytes.
const MAX_PATH_FIELD: u64 = 4096;

/// Store the request body as an object: `multipart/form-data` (when `multipart` is
/// allowed) takes its `file` part, anything else is the object itself. `url_path` names the
/// object; without it only a form can, with its `path` field and file name.
pub(super) async fn upload(
    state: &AppState,
    instance: &Instance,
    url_path: Option<ObjectPath>,
    headers: &HeaderMap,
    body: Body,
    multipart: bool,
) -> ApiResult {
    let content_type = match headers.get(header::CONTENT_TYPE) {
        None => None,
        Some(v) => Some(v.to_str().map_err(|_| {
            ApiError(Error::invalid(
                "the Content-Type header is not valid: use a media type such as image/png",
            ))
        })?),
    };
    let is_form = content_type.is_some_and(|ct| {
        ct.trim_start()
            .get(..19)
            .is_some_and(|t| t.eq_ignore_ascii_case("multipart/form-data"))
    });
    let errors = BodyErrors::default();
    let (path, content_type, stream) = match (is_form && multipart, url_path) {
        (true, url_path) => {
            let boundary = multer::parse_boundary(content_type.unwrap_or_default())
                .map_err(|e| form_error(&e))?;
            form_upload(url_path, boundary, body, errors.clone()).await?
        }
        (false, Some(path)) => {
            let ct = object::content_type(content_type, &path)?;
            (path, ct, raw_stream(body, errors.clone()))
        }
        (false, None) => {
            return Err(ApiError(Error::invalid(format!(
                "a body sent to /storage/{} must be multipart/form-data with a \"file\" \
                 field and an optional \"path\" field; to upload raw bytes, name the object: \
                 POST /storage/{}/<path>",
                instance.name, instance.name
            ))));
        }
    };
    let stream = match quota_cap(state, instance, headers, is_form && multipart).await? {
        Some((limit, over)) => capped(stream, limit, over, errors.clone()),
        None => stream,
    };
    let stored = state
        .services
        .storage
        .put(instance, &path, &content_type, stream)
        .await;
    // A failure of the body is reported as what was wrong with it, not as the store saw it.
    let meta = stored.map_err(|e| ApiError(errors.take().unwrap_or(e)))?;
    state.usage.add(&instance.app, Counted::Storage, meta.size);
    let mut res = reply::ok(StatusCode::OK);
    if let Ok(etag) = HeaderValue::from_str(&format!("\"{}\"", meta.etag)) {
        res.headers_mut().insert(header::ETAG, etag);
    }
    Ok::<Response, ApiError>(res)
}

/// What the application's plan lets this upload take: the bytes it may stream and the
/// error past them. A declared `Content-Length` over a limit is refused before anything
/// is read. `None` for applications without a plan.
async fn quota_cap(
    state: &AppState,
    instance: &Instance,
    headers: &HeaderMap,
    form: bool,
) -> Result<Option<(u64, Error)>, ApiError> {
    let Some((plan, limits)) = state.quotas.of(&instance.app).await? else {
        return Ok(None);
    };
    // A form's length counts its boundaries and fields too: only a raw body's is the
    // object's.
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|_| !form);
    let too_large = Error::TooLarge(format!(
        "the object is larger than {}, the largest object the {plan} plan allows; upload \
         a smaller one or move the account to a larger plan",
        human_bytes(limits.object_bytes)
    ));
    if declared.is_some_and(|n| n > limits.object_bytes) {
        return Err(ApiError(too_large));
    }
    let used = state.usage.of(&instance.app, Counted::Storage).await?;
    let quota = limits.stored_bytes_per_app;
    let over_quota = |adding| Limits::check_bytes(plan, "storage objects", quota, used, adding);
    over_quota(declared.unwrap_or(0))?;
    let left = quota.saturating_sub(used);
    Ok(Some(if left < limits.object_bytes {
        (
            left,
            over_quota(left.saturating_add(1))
                .err()
                .unwrap_or(too_large),
        )
    } else {
        (limits.object_bytes, too_large)
    }))
}

/// `stream`, failing with `over` (recorded in `errors`) once it has yielded more than
/// `limit` bytes: the store never commits an object past a quota.
fn capped(stream: ByteStream, limit: u64, over: Error, errors: BodyErrors) -> ByteStream {
    let mut seen = 0u64;
    let mut over = Some(over);
    Box::pin(stream.map(move |chunk| {
        let chunk = chunk?;
        seen = seen.saturating_add(chunk.len() as u64);
        if seen > limit {
            let e = over
                .take()
                .unwrap_or_else(|| Error::TooLarge("the object is too large".into()));
            return Err(errors.record(e));
        }
        Ok(chunk)
    }))
}

/// The first error of a request body, as the client should hear it.
#[derive(Debug, Clone, Default)]
struct BodyErrors(Arc<Mutex<Option<Error>>>);

impl BodyErrors {
    /// Remember `e` (the first one wins) and turn it into the stream's error.
    fn record(&self, e: Error) -> std::io::Error {
        let io = std::io::Error::other(e.public_message());
        if let Ok(mut slot) = self.0.lock()
            && slot.is_none()
        {
            *slot = Some(e);
        }
        io
    }

    fn take(&self) -> Option<Error> {
        self.0.lock().ok().and_then(|mut slot| slot.take())
    }
}

fn raw_stream(body: Body, errors: BodyErrors) -> ByteStream {
    Box::pin(body.into_data_stream().map(move |chunk| {
        chunk.map_err(|e| {
            errors.record(Error::BadRequest(format!(
                "the request body could not be read to its end: {e}"
            )))
        })
    }))
}

/// A malformed form is a bad request; a `path` field over its limit breaks a rule.
fn form_error(e: &multer::Error) -> ApiError {
    ApiError(match e {
        multer::Error::FieldSizeExceeded { field_name, .. } => Error::invalid(format!(
            "the form's {} field is longer than {MAX_PATH_FIELD} bytes",
            field_name.as_deref().unwrap_or("path")
        )),
        other => Error::BadRequest(format!(
            "the multipart/form-data body could not be read: {other}"
        )),
    })
}

/// Read a form up to its `file` field: the object's path, its content type, and a stream
/// of the file's bytes that, once the file ends, reads the rest of the form and fails if
/// the form was not acceptable (so the store never commits it).
async fn form_upload(
    url_path: Option<ObjectPath>,
    boundary: String,
    body: Body,
    errors: BodyErrors,
) -> Result<(ObjectPath, String, ByteStream), ApiError> {
    let constraints = multer::Constraints::new()
        .size_limit(multer::SizeLimit::new().for_field("path", MAX_PATH_FIELD));
    let mut form =
        multer::Multipart::with_constraints(body.into_data_stream(), boundary, constraints);
    let mut path_field = None;
    let file = loop {
        let field = form.next_field().await.map_err(|e| form_error(&e))?;
        let Some(field) = field else {
            return Err(ApiError(Error::invalid(
                "the form has no \"file\" field: send the object as a file part named \"file\"",
            )));
        };
        match field.name() {
            Some("file") => break field,
            Some("path") => {
                // Not `text()`: it would replace bytes that are not UTF-8 and so store the
                // object under another path than the one sent.
                let bytes = field.bytes().await.map_err(|e| form_error(&e))?;
                let text = String::from_utf8(bytes.to_vec()).map_err(|_| {
                    ApiError(Error::invalid(
                        "the form's \"path\" field is not UTF-8 text",
                    ))
                })?;
                // A byte order mark is an encoding signal, never part of the path.
                path_field = Some(match text.strip_prefix('\u{feff}') {
                    Some(rest) => rest.to_owned(),
                    None => text,
                });
            }
            _ => {} // other fields are ignored, as hyper did
        }
    };
    let path_from_form = url_path.is_none();
    let path = match url_path {
        Some(path) => path,
        None => form_object_path(path_field.as_deref(), file.file_name())?,
    };
    let content_type = object::content_type(file.content_type().map(|m| m.as_ref()), &path)?;
    Ok((
        path,
        content_type,
        file_stream(file, form, path_from_form, errors),
    ))
}

/// The file part being read and the form it belongs to; `None` once the stream failed.
type FormState = Option<(multer::Field<'static>, multer::Multipart<'static>)>;

fn file_stream(
    file: multer::Field<'static>,
    form: multer::Multipart<'static>,
    path_from_form: bool,
    errors: BodyErrors,
) -> ByteStream {
    let start: FormState = Some((file, form));
    Box::pin(futures_util::stream::unfold(
        start,
        move |state: FormState| {
            let errors = errors.clone();
            async move {
                let (mut file, mut form) = state?;
                match file.chunk().await {
                    Ok(Some(bytes)) => Some((Ok(bytes), Some((file, form)))),
                    Ok(None) => {
                        drop(file);
                        match rest_of_form(&mut form, path_from_form).await {
                            Ok(()) => None,
                            Err(e) => Some((Err(errors.record(e)), None)),
                        }
                    }
                    Err(e) => Some((Err(errors.record(form_error(&e).0)), None)),
                }
            }
        },
    ))
}

/// Read the fields after the file: a second file, or a `path` field that came too late to
/// name the object, refuse the whole upload.
async fn rest_of_form(
    form: &mut multer::Multipart<'static>,
    path_from_form: bool,
) -> Result<(), Error> {
    while let Some(field) = form.next_field().await.map_err(|e| form_error(&e).0)? {
        match field.name() {
            Some("file") => {
                return Err(Error::invalid(
                    "the form has more than one \"file\" field: upload one file per request",
                ));
            }
            Some("path") if path_from_form => {
                return Err(Error::invalid(
                    "the form's \"path\" field comes after its \"file\" field: put the path \
                     field first, so the object is named before its bytes arrive",
                ));
            }
            _ => {}
        }
    }
    Ok(())
}
