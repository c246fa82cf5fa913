//! Secrets kept out of messages and logs: how a URL or setting that may carry one is shown.

/// Query parameters whose values are secrets.
const SECRET_PARAMS: [&str; 2] = ["password=", "secret_access_key="];

/// `value` with every secret it may carry replaced by `***`: the password of a URL's user
/// part (`scheme://user:***@host`) and the values of `password` and `secret_access_key`
/// parameters. A value with neither is returned as it is.
///
/// ```
/// use quintet_core::redact;
/// assert_eq!(redact::url("postgres://q:pw@db/q?password=x"), "postgres://q:***@db/q?password=***");
/// assert_eq!(redact::url("s3://b?secret_access_key=s&region=r"), "s3://b?secret_access_key=***&region=r");
/// assert_eq!(redact::url("embedded"), "embedded");
/// ```
pub fn url(value: &str) -> String {
    let mut out = value.to_owned();
    for name in SECRET_PARAMS {
        out = hide_param(&out, name);
    }
    hide_password(&out)
}

/// `value` with what follows each `name` up to the next `&` replaced by `***`.
fn hide_param(value: &str, name: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find(name) {
        out.push_str(&rest[..at + name.len()]);
        out.push_str("***");
        rest = &rest[at + name.len()..];
        rest = rest.find('&').map_or("", |end| &rest[end..]);
    }
    out.push_str(rest);
    out
}

/// `value` with the password of its user part (before the last `@` ahead of any query)
/// replaced by `***`.
fn hide_password(value: &str) -> String {
    let Some((scheme, rest)) = value.split_once("://") else {
        return value.to_owned();
    };
    let before_query = rest.split('?').next().unwrap_or_default();
    match before_query.rsplit_once('@') {
        Some((user, _)) if user.contains(':') => {
            let name = user.split(':').next().unwrap_or_default();
            format!("{scheme}://{name}:***{}", &rest[user.len()..])
        }
        _ => value.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_hidden_and_the_rest_kept() {
        for (given, shown) in [
            ("embedded", "embedded"),
            ("redis://cache:6379/0", "redis://cache:6379/0"),
            ("redis://:s3cret@cache:6379/0", "redis://:***@cache:6379/0"),
            ("redis://u:pa/ss@cache:6379", "redis://u:***@cache:6379"),
            ("postgres://q@db:5432/q", "postgres://q@db:5432/q"),
            (
                "postgres://q:pw@db/q?password=x&pool_size=4",
                "postgres://q:***@db/q?password=***&pool_size=4",
            ),
            ("mysql://u:pw@h/db", "mysql://u:***@h/db"),
            ("postgres://h", "postgres://h"),
            (
                "postgresql://u:p@ss@h/db?password=x&options=-c",
                "postgresql://u:***@h/db?password=***&options=-c",
            ),
            (
                "s3://media/a@b?access_key_id=AK&secret_access_key=hidden&region=r",
                "s3://media/a@b?access_key_id=AK&secret_access_key=***&region=r",
            ),
            (
                "gs://b?secret_access_key=hidden",
                "gs://b?secret_access_key=***",
            ),
            ("s3://b?x=1&y=u:p@h", "s3://b?x=1&y=u:p@h"),
        ] {
            assert_eq!(url(given), shown, "{given}");
        }
    }
}
