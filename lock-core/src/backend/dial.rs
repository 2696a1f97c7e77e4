//! The first connection to a server, made once before its connection managers are
//! built: those retry every failure for seconds (which is right for a server that
//! restarts, and wrong for a password it refuses), so a refusal that trying again
//! cannot fix ([`refusal`]) ends the connect here, at once; a password the server
//! refused because it has none is told apart from a wrong one. It also tells a
//! `rediss://` URL that points at a plain-text port, whose handshake would
//! otherwise wait out the connect timeout (the server waits for a line that never
//! comes), by asking the port in plain text.

use std::time::Duration;

use redis::{AsyncConnectionConfig, ConnectionAddr, RedisConnectionInfo, RedisError, RedisResult};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::error::{refusal, Refusal, NOT_TLS, NO_PASSWORD_SET};

/// How long a TLS handshake may go unanswered before the port is asked, in plain
/// text, whether it speaks TLS at all.
const ASK_PLAIN_TEXT_AFTER: Duration = Duration::from_millis(500);
/// How long that question may take.
const PLAIN_TEXT_TIMEOUT: Duration = Duration::from_millis(500);

/// A plain connection's settings: how long connecting, and each reply, may take.
pub(crate) fn timeouts(connect: Duration, response: Duration) -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(connect))
        .set_response_timeout(Some(response))
}

/// Connects to `client`'s server once. Returns the error when the server refused
/// the connection for good (see [`refusal`]; a plain-text port behind `rediss://`
/// is one) or nothing listens at its address (a refused TCP connection), and `Ok` when it connected or failed in a way that may pass, which the
/// connection managers' retries then meet again.
///
/// # Cancel safety
///
/// Safe to drop: the connection, and the plain-text question, are dropped with it.
pub(crate) async fn dial_once(
    client: &redis::Client,
    connect_timeout: Duration,
    response_timeout: Duration,
) -> RedisResult<()> {
    let config = timeouts(connect_timeout, response_timeout);
    match dial(client, &config).await {
        Err(err) if refusal(&err) == Some(Refusal::Credentials) => {
            Err(no_password_set(client, &config).await.unwrap_or(err))
        }
        result => result,
    }
}

/// [`dial_once`], before a refused password is looked at more closely.
///
/// # Cancel safety
///
/// Safe to drop, as [`dial_once`].
async fn dial(client: &redis::Client, config: &AsyncConnectionConfig) -> RedisResult<()> {
    let attempt = client.get_multiplexed_async_connection_with_config(config);
    let tls = match client.get_connection_info().addr() {
        ConnectionAddr::TcpTls { host, port, .. } => Some((host.as_str(), *port)),
        _ => None,
    };
    tokio::pin!(attempt);
    let result = tokio::select! {
        result = &mut attempt => result,
        plain = async {
            tokio::time::sleep(ASK_PLAIN_TEXT_AFTER).await;
            speaks_plain_text(tls).await
        }, if tls.is_some() => {
            if plain {
                return Err(not_tls());
            }
            attempt.await
        }
    };
    match result {
        Ok(conn) => ping(conn).await,
        // Nothing listens there: waiting out the connect timeout tells no more.
        Err(err) if refusal(&err).is_some() || err.is_connection_refusal() => Err(err),
        // A TLS handshake that failed at once (the port closed the connection, or
        // answered something that is not TLS) may also be a plain-text port.
        Err(_) if speaks_plain_text(tls).await => Err(not_tls()),
        Err(_) => Ok(()),
    }
}

/// One `PING` on a fresh connection: a server that wants a password the URL does
/// not give answers `NOAUTH` only to the first command, not to the connection, and
/// that is final too. Anything else (a slow answer, a lost connection) is left to
/// the connection managers, which try again.
///
/// # Cancel safety
///
/// Safe to drop: the connection is dropped with it.
async fn ping(mut conn: redis::aio::MultiplexedConnection) -> RedisResult<()> {
    match redis::cmd("PING").query_async::<()>(&mut conn).await {
        Err(err) if refusal(&err).is_some() => Err(err),
        _ => Ok(()),
    }
}

/// When the server refused the URL's password because it has none (the URL gives a
/// password and no user name, and the server answers without one): the error that
/// says so, with the server's own words for the `AUTH` it refused. redis-rs reports
/// that refusal as any other (`Password authentication failed`), without them.
/// `None` when the server wants a password, or cannot be asked.
///
/// # Cancel safety
///
/// Safe to drop: the connection is dropped with it.
async fn no_password_set(
    client: &redis::Client,
    config: &AsyncConnectionConfig,
) -> Option<RedisError> {
    let info = client.get_connection_info();
    let settings = info.redis_settings();
    // Not for a user of an ACL (a username): its password may be wrong although
    // the default user needs none.
    let password = settings
        .password()
        .filter(|_| settings.username().is_none())?;
    let without = RedisConnectionInfo::default()
        .set_protocol(settings.protocol())
        .set_skip_set_lib_name();
    let bare = redis::Client::open(info.clone().set_redis_settings(without)).ok()?;
    let mut conn = bare
        .get_multiplexed_async_connection_with_config(config)
        .await
        .ok()?;
    redis::cmd("PING").query_async::<()>(&mut conn).await.ok()?;
    // It answers without a password. Its words for the one it was given (Redis:
    // "AUTH <password> called without any password configured for the default user").
    let err = redis::cmd("AUTH")
        .arg(password)
        .query_async::<()>(&mut conn)
        .await
        .err()?;
    let words = err.detail().map_or_else(|| err.to_string(), str::to_owned);
    Some(RedisError::from((
        redis::ErrorKind::AuthenticationFailed,
        NO_PASSWORD_SET,
        format!("AUTH refused: {words}"),
    )))
}

/// The error of a `rediss://` URL that points at a plain-text port.
fn not_tls() -> RedisError {
    RedisError::from((
        redis::ErrorKind::InvalidClientConfig,
        NOT_TLS,
        "it answered a plain-text PING".to_owned(),
    ))
}

/// Whether `host:port` (a TLS address; `None`: a plain one, not asked) answers a
/// plain-text `PING` with a RESP reply (`+PONG`, or an error such as `-NOAUTH`): a
/// TLS port answers with a TLS alert, or not at all.
///
/// # Cancel safety
///
/// Safe to drop: the question's connection is closed with it.
async fn speaks_plain_text(tls: Option<(&str, u16)>) -> bool {
    let Some((host, port)) = tls else {
        return false;
    };
    let ask = async {
        let mut stream = TcpStream::connect((host, port)).await?;
        stream.write_all(b"PING\r\n").await?;
        let mut first = [0_u8; 1];
        stream.read_exact(&mut first).await?;
        Ok::<bool, std::io::Error>(matches!(first[0], b'+' | b'-'))
    };
    matches!(
        tokio::time::timeout(PLAIN_TEXT_TIMEOUT, ask).await,
        Ok(Ok(true))
    )
}
