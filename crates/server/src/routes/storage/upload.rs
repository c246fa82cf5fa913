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
    object::{self, ObjectPath, form_object_path},
    ports::storage::ByteStream,
};

use crate::{
    error::{ApiError, ApiResult},
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
    let stored = state
        .services
        .storage
        .put(instance, &path, &content_type, stream)
        .await;
    // A failure of the body is reported as what was wrong with it, not as the store saw it.
    let meta = stored.map_err(|e| ApiError(errors.take().unwrap_or(e)))?;
    let mut res = reply::ok(StatusCode::OK);
    if let Ok(etag) = HeaderValue::from_str(&format!("\"{}\"", meta.etag)) {
        res.headers_mut().insert(header::ETAG, etag);
    }
    Ok::<Response, ApiError>(res)
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
