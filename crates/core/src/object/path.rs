//! [`ObjectPath`]: where an object lives inside its storage instance.

use std::{fmt, str::FromStr};

use crate::{Error, Result};

/// Longest object path, in bytes of UTF-8.
pub const MAX_OBJECT_PATH_LEN: usize = 1024;

/// The path of an object within its instance: `/`-separated segments.
///
/// Rules, enforced by [`FromStr`]:
/// - 1 to [`MAX_OBJECT_PATH_LEN`] bytes of UTF-8;
/// - no empty segment (so no leading, trailing or doubled `/`), and no `.` or `..` segment;
/// - no backslash and no control character (`U+0000`–`U+001F`, `U+007F`–`U+009F`).
///
/// Together these guarantee that a path never names anything outside its instance,
/// whatever an adapter maps it to, and that it can be written into a signed text line.
///
/// ```
/// use quintet_core::object::ObjectPath;
/// assert!("photos/2024/cat.png".parse::<ObjectPath>().is_ok());
/// assert!("photos/../secret".parse::<ObjectPath>().is_err());
/// assert!("/absolute".parse::<ObjectPath>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectPath(String);

impl ObjectPath {
    /// The path as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The last segment (the object's file name).
    pub fn file_name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or(&self.0)
    }

    /// The path for a URL: every segment percent-encoded, the separators kept.
    pub fn to_url_path(&self) -> String {
        let mut out = String::with_capacity(self.0.len() + 8);
        for b in self.0.bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
                out.push(char::from(b));
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
        out
    }
}

/// A short, printable rendering of untrusted text for error messages.
pub(crate) fn quote(s: &str) -> String {
    const SHOWN: usize = 80;
    if s.chars().count() <= SHOWN {
        format!("{s:?}")
    } else {
        let head: String = s.chars().take(SHOWN).collect();
        format!("{head:?}…")
    }
}

impl FromStr for ObjectPath {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let shown = quote(s);
        if s.is_empty() {
            return Err(Error::invalid(
                "the object path is empty: name the object after the instance, \
                 as in /storage/<instance>/<path>",
            ));
        }
        if s.len() > MAX_OBJECT_PATH_LEN {
            return Err(Error::invalid(format!(
                "object path {shown} is {} bytes long: use at most {MAX_OBJECT_PATH_LEN} bytes",
                s.len()
            )));
        }
        if s.contains('\\') {
            return Err(Error::invalid(format!(
                "object path {shown} contains a backslash: separate segments with '/'"
            )));
        }
        if s.chars().any(char::is_control) {
            return Err(Error::invalid(format!(
                "object path {shown} contains a control character: use printable characters only"
            )));
        }
        for segment in s.split('/') {
            match segment {
                "" => {
                    return Err(Error::invalid(format!(
                        "object path {shown} has an empty segment: separate segments with a \
                         single '/' and do not start or end the path with one"
                    )));
                }
                "." | ".." => {
                    return Err(Error::invalid(format!(
                        "object path {shown} has a \"{segment}\" segment: relative segments \
                         are not allowed, name the object by its full path"
                    )));
                }
                _ => {}
            }
        }
        Ok(Self(s.to_owned()))
    }
}

impl fmt::Display for ObjectPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The object path of a `multipart/form-data` upload to `POST /storage/<instance>` (no path
/// in the URL), following hyper: the form's `path` field names a folder (a last segment
/// containing a `.` is taken for a file name and dropped), and the uploaded file's name is
/// appended. Without a file name the `path` field is the whole path.
///
/// ```
/// use quintet_core::object::form_object_path;
/// let p = |f, n| form_object_path(f, n).map(|p| p.to_string());
/// assert_eq!(p(None, Some("cat.png")).unwrap(), "cat.png");
/// assert_eq!(p(Some("images/"), Some("cat.png")).unwrap(), "images/cat.png");
/// assert_eq!(p(Some("images/old.png"), Some("cat.png")).unwrap(), "images/cat.png");
/// assert_eq!(p(Some("notes/today.txt"), None).unwrap(), "notes/today.txt");
/// assert!(p(None, None).is_err());
/// ```
pub fn form_object_path(path_field: Option<&str>, file_name: Option<&str>) -> Result<ObjectPath> {
    // Browsers and old clients may send a full local path as the file name.
    let file_name = file_name
        .map(|n| n.rsplit(['/', '\\']).next().unwrap_or(n))
        .filter(|n| !n.is_empty());
    let field = path_field
        .map(|p| p.trim_start_matches('/'))
        .filter(|p| !p.is_empty());
    let Some(file_name) = file_name else {
        return match field {
            Some(p) => p.parse(),
            None => Err(Error::invalid(
                "the form names no object: give the file part a file name, add a \"path\" \
                 field before the \"file\" field, or upload to /storage/<instance>/<path>",
            )),
        };
    };
    let folder = match field {
        None => "",
        Some(p) => {
            let p = match p.rsplit_once('/') {
                Some((head, last)) if last.contains('.') => head,
                None if p.contains('.') => "",
                _ => p,
            };
            p.trim_end_matches('/')
        }
    };
    if folder.is_empty() {
        file_name.parse()
    } else {
        format!("{folder}/{file_name}").parse()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn path_rules_table() {
        let long = "a".repeat(MAX_OBJECT_PATH_LEN);
        let too_long = "a".repeat(MAX_OBJECT_PATH_LEN + 1);
        let cases: &[(&str, bool)] = &[
            ("a", true),
            ("a/b/c.txt", true),
            ("with space/ünïcode ✓.bin", true),
            ("a-b_c~d.e", true),
            ("...", true),
            ("a/.hidden", true),
            ("%2e%2e", true),
            (&long, true),
            (&too_long, false),
            ("", false),
            ("/a", false),
            ("a/", false),
            ("a//b", false),
            (".", false),
            ("..", false),
            ("a/../b", false),
            ("a/./b", false),
            ("../etc/passwd", false),
            ("a\\b", false),
            ("..\\x", false),
            ("a\u{0}b", false),
            ("a\nb", false),
            ("a\u{7f}", false),
            ("a\u{85}", false),
        ];
        for (path, ok) in cases {
            assert_eq!(path.parse::<ObjectPath>().is_ok(), *ok, "{path:?}");
        }
    }

    #[test]
    fn messages_name_the_path_and_the_fix() {
        let e = "a//b".parse::<ObjectPath>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "object path \"a//b\" has an empty segment: separate segments with a single '/' \
             and do not start or end the path with one"
        );
        let e = "a\nb".parse::<ObjectPath>().unwrap_err();
        assert!(e.to_string().contains(r#""a\nb""#), "{e}");
        let e = "x".repeat(2000).parse::<ObjectPath>().unwrap_err();
        assert!(e.to_string().len() < 300, "{e}");
    }

    #[test]
    fn url_path_encodes_everything_but_unreserved() {
        let p: ObjectPath = "dir one/a+b%c?d#e/ü.txt".parse().unwrap();
        assert_eq!(p.to_url_path(), "dir%20one/a%2Bb%25c%3Fd%23e/%C3%BC.txt");
        assert_eq!(p.file_name(), "ü.txt");
    }

    #[test]
    fn form_paths_follow_hyper() {
        let p = |f: Option<&str>, n: Option<&str>| form_object_path(f, n).map(|p| p.0);
        assert_eq!(p(Some("a/b"), Some("c.txt")).unwrap(), "a/b/c.txt");
        assert_eq!(p(Some("/a/b/"), Some("c.txt")).unwrap(), "a/b/c.txt");
        assert_eq!(p(Some("x.png"), Some("c.txt")).unwrap(), "c.txt");
        assert_eq!(p(Some(""), Some("c.txt")).unwrap(), "c.txt");
        assert_eq!(p(None, Some("C:\\Users\\me\\c.txt")).unwrap(), "c.txt");
        assert_eq!(p(None, Some("../../c.txt")).unwrap(), "c.txt");
        assert!(p(Some("a/../b"), Some("c.txt")).is_err());
        assert!(p(None, Some("..")).is_err());
        assert!(p(Some(""), None).is_err());
    }

    proptest! {
        #[test]
        fn valid_paths_never_escape(s in "[a-z./\\\\]{0,12}") {
            if let Ok(p) = s.parse::<ObjectPath>() {
                prop_assert!(!p.as_str().starts_with('/'));
                prop_assert!(p.as_str().split('/').all(|seg| !seg.is_empty() && seg != "." && seg != ".."));
                prop_assert!(!p.as_str().contains('\\'));
            }
        }

        #[test]
        fn url_path_round_trips(s in "[^/\\\\\\p{Cc}]{1,8}(/[^/\\\\\\p{Cc}]{1,8}){0,3}") {
            if let Ok(p) = s.parse::<ObjectPath>() {
                let encoded = p.to_url_path();
                prop_assert!(encoded.bytes().all(|b| b.is_ascii_graphic()));
                prop_assert_eq!(percent_decode(&encoded), s);
            }
        }
    }

    fn percent_decode(s: &str) -> String {
        let bytes = s.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' {
                out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
                i += 3;
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        String::from_utf8(out).unwrap()
    }
}
