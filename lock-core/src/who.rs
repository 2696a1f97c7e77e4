//! Who holds a lock: what a client writes of each holder once it has held the lock
//! for [`NAME_AFTER`](crate::lease::NAME_AFTER) (`lua/lock.lua`'s `#who:`,
//! `"<pid> <service> <host> <site>"`, by the hold's first renewal), and what
//! [`LockClient::inspect`](crate::LockClient::inspect) reads back, [`HolderInfo`].
//!
//! The text is bounded: a service name of at most [`MAX_SERVICE_LEN`] bytes (checked
//! by the builder), a host
//! name of at most 64 and a site of at most 128 (longer ones are cut at a character
//! boundary), with no control characters; never an owner id.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::sync::locked;

/// The longest service name [`LockClientBuilder::service`] accepts, in bytes.
///
/// [`LockClientBuilder::service`]: crate::LockClientBuilder::service
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// assert_eq!(distlock::MAX_SERVICE_LEN, 64);
/// ```
pub const MAX_SERVICE_LEN: usize = 64;
/// The longest host name kept, in bytes.
const MAX_HOST_LEN: usize = 64;
/// The longest site kept, in bytes.
const MAX_SITE_LEN: usize = 128;
/// The longest `who` written with a lock, in bytes: with the time it is stored
/// with (14 bytes), it fits a value of a Redis listpack (64 bytes), so a lock's
/// hash stays compact (see `layout/`). Long names are shortened to fit: the site
/// keeps its end, down to [`MIN_SITE_LEN`]; then the service and host names keep
/// their start, down to [`MIN_NAME_LEN`] each.
const MAX_WHO_LEN: usize = 50;
/// The shortest a long site is cut to, in bytes.
const MIN_SITE_LEN: usize = 16;
/// The shortest a long service or host name is cut to in what is stored, in bytes.
const MIN_NAME_LEN: usize = 12;

/// The most call sites whose `who` a client keeps: a program has a bounded number of
/// them; past this many, the `who` of a new one is made each time.
const MAX_KEPT_SITES: usize = 1024;

/// A call site, as [`Describer::who_at`] keeps its `who`: the addresses (and the
/// length) of what the site's text is made from.
pub(crate) type SiteKey = (usize, usize, usize);

/// What one client says of its holders: `"<pid> <service> <host>"`, worked out once,
/// and the `who` of each call site, made at its first acquisition.
#[derive(Debug)]
pub(crate) struct Describer {
    prefix: Box<str>,
    /// The client as people read it: `"<service> on <host>, pid <pid>"`.
    client: Box<str>,
    /// The `who` of the call sites seen, by [`SiteKey`].
    sites: Mutex<HashMap<SiteKey, Arc<str>>>,
}

impl Describer {
    /// The describer of a client of `service`, on this host, in this process.
    pub(crate) fn new(service: &str) -> Self {
        let mut host = word(&gethostname::gethostname().to_string_lossy(), MAX_HOST_LEN);
        let mut service = word(service, MAX_SERVICE_LEN);
        let pid = std::process::id();
        let client = format!("{service} on {host}, pid {pid}").into();
        // What is stored leaves at least MIN_SITE_LEN for the site.
        let budget = MAX_WHO_LEN - 1 - MIN_SITE_LEN;
        let fixed = pid.to_string().len() + 2;
        while fixed + service.len() + host.len() > budget {
            let longer = if service.len() >= host.len() {
                &mut service
            } else {
                &mut host
            };
            if longer.len() <= MIN_NAME_LEN {
                break;
            }
            longer.pop();
        }
        Self {
            prefix: format!("{pid} {service} {host}").into(),
            client,
            sites: Mutex::default(),
        }
    }

    /// The `who` of a holder whose acquisition was asked for at the call site
    /// `key`, whose text `site` gives: made at the site's first acquisition, then
    /// shared (making it is a few thousand instructions, a few per cent of an
    /// uncontended acquisition's client CPU).
    pub(crate) fn who_at(&self, key: SiteKey, site: impl FnOnce() -> String) -> Arc<str> {
        let mut sites = locked(&self.sites);
        if let Some(who) = sites.get(&key) {
            return who.clone();
        }
        let who: Arc<str> = self.who(&site()).into();
        if sites.len() < MAX_KEPT_SITES {
            sites.insert(key, who.clone());
        }
        who
    }

    /// The client as people read it: `"<service> on <host>, pid <pid>"`.
    pub(crate) fn client(&self) -> &str {
        &self.client
    }

    /// The `who` of a holder whose acquisition was asked for at `site` (a function's
    /// path, or a source location). A site too long for [`MAX_WHO_LEN`] keeps its
    /// end (the function, or the file and line), after `..`.
    pub(crate) fn who(&self, site: &str) -> String {
        let site = clean(site, MAX_SITE_LEN);
        let room = MAX_WHO_LEN
            .saturating_sub(self.prefix.len() + 1)
            .max(MIN_SITE_LEN);
        format!("{} {}", self.prefix, tail(&site, room))
    }
}

/// `text` as one word of at most `max` bytes: every character that is not
/// printable ASCII, or is a space, becomes `_`.
fn word(text: &str, max: usize) -> String {
    let mut word: String = text
        .chars()
        .map(|c| if c.is_ascii_graphic() { c } else { '_' })
        .collect();
    word.truncate(max);
    if word.is_empty() {
        word.push('_');
    }
    word
}

/// `text` without control characters (each becomes `_`), cut to at most `max`
/// bytes at a character boundary.
fn clean(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max));
    for c in text.chars() {
        let c = if c.is_control() { '_' } else { c };
        if out.len() + c.len_utf8() > max {
            break;
        }
        out.push(c);
    }
    out
}

/// The end of `text` in at most `max` bytes: `text` itself when it fits, else
/// `..` and as many of its last characters as fit.
fn tail(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return text.into();
    }
    let keep = max.saturating_sub(2);
    let mut start = text.len() - keep;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("..{}", &text[start..]).into()
}

/// Who holds a lock, as its client wrote it with the first acquisition: the
/// service, host and process, where the lock was taken, and since when. Shown by
/// [`LockClient::inspect`](crate::LockClient::inspect) (in [`Holder::info`] and
/// [`LockInfo::holder`]), by the message of a [`LockError::Timeout`], and by the
/// `distlock` command-line tool. Times are the Redis server's, never a client's.
///
/// [`Holder::info`]: crate::Holder::info
/// [`LockInfo::holder`]: crate::LockInfo::holder
/// [`LockError::Timeout`]: crate::LockError::Timeout
///
/// # Examples
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
/// if let Some(holder) = locks.inspect("order:42").await?.holder() {
///     // "orders-api on host-3, pid 4121, in orders::place_order, for 2.1s"
///     println!("{holder}");
///     println!("held for {:?} by pid {}", holder.held_for, holder.pid);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HolderInfo {
    /// The holder's service: the client's
    /// [`LockClientBuilder::service`](crate::LockClientBuilder::service), by default
    /// the executable's name.
    pub service: String,
    /// The host name of the holder's machine.
    pub host: String,
    /// The holder's process id.
    pub pid: u32,
    /// Where the lock was taken: the annotated function (`module::function`) of
    /// `#[distributed_lock]`, the name given to
    /// [`LockRequest::function`](crate::LockRequest::function), or the caller's
    /// source location (`src/orders.rs:42`).
    pub site: String,
    /// When the holder took the lock (re-entries and renewals do not change it), on
    /// the Redis server's clock.
    pub acquired_at: SystemTime,
    /// How long it has held it, on the server's clock.
    pub held_for: Duration,
}

impl HolderInfo {
    /// Reads what `inspect.lua` answers of a holder: `"<held ms> <at ms> <pid>
    /// <service> <host> <site>"`, or `None` (nothing, or not of that form).
    pub(crate) fn parse(text: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(text).ok()?;
        let (held_ms, record) = text.split_once(' ')?;
        let held_ms: u64 = held_ms.parse().ok()?;
        let info = Self::of_record(record, 0)?;
        Some(Self {
            held_for: Duration::from_millis(held_ms),
            ..info
        })
    }

    /// Reads a holder's `#who:<owner>` field, `"<at ms> <pid> <service> <host>
    /// <site>"`, held until `now_ms` (the server's clock, ms since the epoch); `None`
    /// when it is not of that form.
    pub(crate) fn of_record(record: &str, now_ms: u64) -> Option<Self> {
        let mut parts = record.splitn(5, ' ');
        let at_ms: u64 = parts.next()?.parse().ok()?;
        let pid = parts.next()?.parse().ok()?;
        let service = parts.next()?.to_owned();
        let host = parts.next()?.to_owned();
        let site = parts.next().unwrap_or_default().to_owned();
        Some(Self {
            service,
            host,
            pid,
            site,
            acquired_at: UNIX_EPOCH + Duration::from_millis(at_ms),
            held_for: Duration::from_millis(now_ms.saturating_sub(at_ms)),
        })
    }
}

impl fmt::Display for HolderInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on {}, pid {}", self.service, self.host, self.pid)?;
        if !self.site.is_empty() {
            write!(f, ", in {}", self.site)?;
        }
        let tenths = self.held_for.as_millis() / 100;
        write!(f, ", for {}.{}s", tenths / 10, tenths % 10)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_client_writes_is_read_back() {
        let who = Describer::new("orders api\n").who("orders::place_order");
        let mut parts = who.splitn(4, ' ');
        let pid = parts.next().unwrap_or_default().to_owned();
        assert_eq!(pid, std::process::id().to_string());
        assert_eq!(parts.next(), Some("orders_api_"));
        let host = parts.next().unwrap_or_default().to_owned();
        assert!(!host.is_empty() && host.chars().all(|c| c.is_ascii_graphic()));
        assert_eq!(parts.next(), Some("orders::place_order"));

        let info = HolderInfo::parse(format!("2140 1700000000000 {who}").as_bytes());
        let info = info.expect("the form inspect.lua answers");
        assert_eq!(info.service, "orders_api_");
        assert_eq!(info.host, host);
        assert_eq!(info.pid, std::process::id());
        assert_eq!(info.site, "orders::place_order");
        assert_eq!(info.held_for, Duration::from_millis(2140));
        assert_eq!(
            info.acquired_at,
            UNIX_EPOCH + Duration::from_millis(1_700_000_000_000)
        );
        assert!(info
            .to_string()
            .ends_with(", in orders::place_order, for 2.1s"));
    }

    /// A site's `who` is made once and shared; another site gets its own.
    #[test]
    fn the_who_of_a_call_site_is_made_once() {
        let describer = Describer::new("svc");
        let mut made = 0;
        let mut who_at = |key: SiteKey, site: &str| {
            describer.who_at(key, || {
                made += 1;
                site.to_owned()
            })
        };
        let first = who_at((1, 0, 0), "orders::place");
        let again = who_at((1, 0, 0), "orders::place");
        let other = who_at((2, 0, 0), "orders::refund");
        assert!(Arc::ptr_eq(&first, &again));
        assert!(first.ends_with(" orders::place"), "{first}");
        assert!(other.ends_with(" orders::refund"), "{other}");
        assert_eq!(made, 2);
    }

    #[test]
    fn sites_keep_spaces_and_lose_control_characters_and_length() {
        let who = Describer::new("svc").who("src/my orders.rs:4\t2");
        assert!(who.ends_with(" src/my orders.rs:4_2"), "{who}");
        let describer = Describer::new("svc");
        let long = Describer::new(&"s".repeat(64)).who(&"x".repeat(100));
        assert!(long.len() <= MAX_WHO_LEN, "{long}");
        let service = long.split(' ').nth(1).unwrap_or_default();
        assert!(
            service.len() >= MIN_NAME_LEN && service.len() < 64,
            "{long}"
        );
        let long = "é".repeat(100);
        let who = describer.who(&long);
        let site = who.splitn(4, ' ').nth(3).unwrap_or_default();
        assert!(site.starts_with("..é"), "{site}");
        assert!(site.len() >= MIN_SITE_LEN, "{site}");
        if describer.prefix.len() + 1 + MIN_SITE_LEN <= MAX_WHO_LEN {
            assert!(who.len() <= MAX_WHO_LEN, "{who}");
        }
        let who = describer.who("orders::handlers::checkout::place_order_with_a_long_name");
        assert!(who.ends_with("place_order_with_a_long_name"), "{who}");
        assert!(HolderInfo::parse(b"").is_none());
        assert!(HolderInfo::parse(b"12 x 1 a b c").is_none());
    }
}
