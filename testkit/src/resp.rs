//! A minimal blocking RESP2 client for assertions in tests.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::error::TestkitError;

/// The longest line or bulk string the client accepts (a guard against garbage).
const MAX_LEN: usize = 512 * 1024 * 1024;

/// A parsed RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    Simple(String),
    Error(String),
    Integer(i64),
    Bulk(Vec<u8>),
    Nil,
    Array(Vec<Reply>),
}

impl Reply {
    /// Renders the reply as text: strings as they are, integers in decimal, nil as
    /// `(nil)`, array elements joined by `\n`, nested errors as `(error) MESSAGE`.
    pub(crate) fn render(&self) -> String {
        match self {
            Reply::Simple(text) => text.clone(),
            Reply::Error(text) => format!("(error) {text}"),
            Reply::Integer(n) => n.to_string(),
            Reply::Bulk(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            Reply::Nil => "(nil)".to_owned(),
            Reply::Array(items) => items
                .iter()
                .map(Reply::render)
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

/// Encodes `args` as a RESP2 array of bulk strings.
pub(crate) fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Opens a fresh connection to `addr`, sends one command and reads its reply; with
/// a password, `AUTH` goes first on the same connection, and a refused `AUTH` is
/// the reply.
///
/// `timeout` bounds the connect, and each write and read.
pub(crate) fn request(
    addr: SocketAddr,
    password: Option<&str>,
    args: &[&str],
    timeout: Duration,
) -> Result<Reply, TestkitError> {
    let label = args.first().copied().unwrap_or("(empty command)");
    let io_err = |what: &str, source| {
        TestkitError::io(format!("{what} redis at {addr} (command {label})"), source)
    };
    let stream = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| io_err("could not connect to", e))?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .and_then(|()| stream.set_nodelay(true))
        .map_err(|e| io_err("could not configure the connection to", e))?;
    let mut out = Vec::new();
    if let Some(password) = password {
        out.extend_from_slice(&encode(&["AUTH", password]));
    }
    out.extend_from_slice(&encode(args));
    (&stream)
        .write_all(&out)
        .map_err(|e| io_err("could not send to", e))?;
    let mut reader = BufReader::new(&stream);
    let mut read = || {
        read_reply(&mut reader).map_err(|err| match err {
            ReadError::Io(e) => io_err("no reply from", e),
            ReadError::Protocol(msg) => TestkitError::Protocol(msg),
        })
    };
    if password.is_some() {
        if let error @ Reply::Error(_) = read()? {
            return Ok(error);
        }
    }
    read()
}

/// Why a reply could not be read.
#[derive(Debug)]
pub(crate) enum ReadError {
    Io(std::io::Error),
    Protocol(String),
}

impl From<std::io::Error> for ReadError {
    fn from(err: std::io::Error) -> Self {
        ReadError::Io(err)
    }
}

/// Reads one RESP2 reply.
pub(crate) fn read_reply(reader: &mut impl BufRead) -> Result<Reply, ReadError> {
    let line = read_line(reader)?;
    let (kind, rest) = match line.split_first() {
        Some((kind, rest)) => (*kind, rest),
        None => return Err(ReadError::Protocol("empty reply line".into())),
    };
    let text = || String::from_utf8_lossy(rest).into_owned();
    match kind {
        b'+' => Ok(Reply::Simple(text())),
        b'-' => Ok(Reply::Error(text())),
        b':' => parse_int(rest).map(Reply::Integer),
        b'$' => {
            let Some(len) = parse_len(rest)? else {
                return Ok(Reply::Nil);
            };
            let mut body = vec![0; len + 2];
            reader.read_exact(&mut body)?;
            if !body.ends_with(b"\r\n") {
                return Err(ReadError::Protocol("bulk string not ended by CRLF".into()));
            }
            body.truncate(len);
            Ok(Reply::Bulk(body))
        }
        b'*' => {
            let Some(len) = parse_len(rest)? else {
                return Ok(Reply::Nil);
            };
            let mut items = Vec::with_capacity(len.min(1024));
            for _ in 0..len {
                items.push(read_reply(reader)?);
            }
            Ok(Reply::Array(items))
        }
        other => Err(ReadError::Protocol(format!(
            "unexpected reply type byte {:?} (is this a RESP2 server?)",
            char::from(other)
        ))),
    }
}

/// Reads a line ended by CRLF and returns it without the CRLF.
fn read_line(reader: &mut impl BufRead) -> Result<Vec<u8>, ReadError> {
    let mut line = Vec::new();
    let read = Read::take(&mut *reader, MAX_LEN as u64).read_until(b'\n', &mut line)?;
    if read == 0 {
        return Err(ReadError::Io(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "connection closed before a reply",
        )));
    }
    if !line.ends_with(b"\r\n") {
        return Err(ReadError::Protocol("reply line not ended by CRLF".into()));
    }
    line.truncate(line.len() - 2);
    Ok(line)
}

fn parse_int(digits: &[u8]) -> Result<i64, ReadError> {
    std::str::from_utf8(digits)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            ReadError::Protocol(format!("bad integer {:?}", String::from_utf8_lossy(digits)))
        })
}

/// Parses a length; `-1` means nil.
fn parse_len(digits: &[u8]) -> Result<Option<usize>, ReadError> {
    match parse_int(digits)? {
        -1 => Ok(None),
        n => usize::try_from(n)
            .ok()
            .filter(|&n| n <= MAX_LEN)
            .map(Some)
            .ok_or_else(|| ReadError::Protocol(format!("bad length {n}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Result<Reply, ReadError> {
        read_reply(&mut &bytes[..])
    }

    #[test]
    fn encodes_bulk_array() {
        assert_eq!(
            encode(&["SET", "k", ""]),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"
        );
    }

    #[test]
    fn parses_and_renders_every_type() {
        let cases: [(&[u8], &str); 7] = [
            (b"+OK\r\n", "OK"),
            (b":-42\r\n", "-42"),
            (b"$5\r\nhe\r\nl\r\n", "he\r\nl"),
            (b"$-1\r\n", "(nil)"),
            (b"*-1\r\n", "(nil)"),
            (b"*0\r\n", ""),
            (
                b"*3\r\n$1\r\na\r\n:1\r\n*2\r\n$-1\r\n-ERR x\r\n",
                "a\n1\n(nil)\n(error) ERR x",
            ),
        ];
        for (bytes, text) in cases {
            let reply = parse(bytes).expect("valid reply");
            assert_eq!(
                reply.render(),
                text,
                "for {:?}",
                String::from_utf8_lossy(bytes)
            );
        }
        assert_eq!(
            parse(b"-WRONGTYPE nope\r\n").expect("valid reply"),
            Reply::Error("WRONGTYPE nope".into())
        );
    }

    #[test]
    fn rejects_garbage() {
        assert!(matches!(
            parse(b"HTTP/1.1 400\r\n"),
            Err(ReadError::Protocol(_))
        ));
        assert!(matches!(parse(b"+OK\n"), Err(ReadError::Protocol(_))));
        assert!(matches!(parse(b"$3\r\nab"), Err(ReadError::Io(_))));
        assert!(matches!(parse(b""), Err(ReadError::Io(_))));
        assert!(matches!(parse(b"$-2\r\n"), Err(ReadError::Protocol(_))));
    }
}
