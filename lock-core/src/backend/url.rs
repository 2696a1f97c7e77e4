//! Redis URLs: parsing (with a message that says how to write one), redaction of
//! passwords for messages, and the RESP3 variant of a connection for pub/sub.

use redis::{ConnectionInfo, IntoConnectionInfo, ProtocolVersion};

use crate::error::LockError;

/// Parses the URL given to the builder option `option`.
pub(crate) fn parse_url(option: &'static str, url: &str) -> Result<ConnectionInfo, LockError> {
    let scheme = url.split("://").next().unwrap_or_default();
    if !cfg!(feature = "tls") && ["rediss", "valkeys"].contains(&scheme) {
        return Err(LockError::invalid_option(
            option,
            super::tls::needs_feature(&format!("`{}` (a `{scheme}://` URL)", redact(url))),
        ));
    }
    url.into_connection_info().map_err(|err| {
        LockError::invalid_option(
            option,
            format!(
                "`{}` is not a Redis URL ({err}); write it as \
                 `redis://[user:password@]host:port[/db]` or `rediss://...` for TLS",
                redact(url)
            ),
        )
    })
}

/// Parses the URLs of a multi-node target; none at all is refused, with a hint of
/// which nodes to list.
pub(crate) fn parse_urls(
    option: &'static str,
    urls: &[String],
    nodes: &str,
) -> Result<Vec<ConnectionInfo>, LockError> {
    if urls.is_empty() {
        return Err(LockError::invalid_option(
            option,
            format!("no node URL was given; pass the URLs of {nodes}"),
        ));
    }
    urls.iter().map(|url| parse_url(option, url)).collect()
}

/// The same server, spoken to in RESP3 (push messages for pub/sub).
pub(crate) fn resp3(info: ConnectionInfo) -> ConnectionInfo {
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    info.set_redis_settings(settings)
}

/// A URL with any password replaced, for messages.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***{}", &url[..scheme], &url[at..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("redis://user:pw@host:6379/2"),
            "redis://***@host:6379/2"
        );
        assert_eq!(redact("redis://host:6379"), "redis://host:6379");
    }

    #[test]
    fn a_bad_url_names_the_option_and_hides_the_password() {
        let err = parse_url("url", "http://user:secret@host").expect_err("not a Redis URL");
        let text = err.to_string();
        assert!(text.contains("`url`") && !text.contains("secret"), "{text}");
        assert!(parse_urls("cluster", &[], "one or more cluster nodes").is_err());
        assert_eq!(
            parse_urls("cluster", &["redis://127.0.0.1:7000".to_owned()], "nodes")
                .map(|nodes| nodes.len())
                .ok(),
            Some(1)
        );
    }
}
