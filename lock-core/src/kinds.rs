//! The kinds a lock and a hold are, as distlock reads them back from Redis:
//! [`LockKind`] (what is at a name) and [`HoldMode`] (how one holder holds it).
//! What a request asks for is `keys::Kind`: a hold of one of these kinds
//! (`Kind::lock_kind`), in one of these modes.

use crate::layout::kind::Kind;

/// The kind of lock at a name, as [`LockClient::inspect`](crate::LockClient::inspect) finds it.
///
/// # Examples
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
/// use distlock::LockKind;
///
/// match locks.inspect("exports").await?.kind {
///     Some(LockKind::Semaphore { permits }) => println!("a semaphore of {permits} permits"),
///     Some(kind) => println!("a {kind:?}"),
///     None => println!("nothing holds `exports`"),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockKind {
    /// A plain lock ([`LockClient::lock`](crate::LockClient::lock)), held.
    Exclusive,
    /// A read-write lock ([`LockClient::read_lock`](crate::LockClient::read_lock), [`LockClient::write_lock`](crate::LockClient::write_lock)).
    ReadWrite,
    /// A semaphore ([`LockClient::semaphore`](crate::LockClient::semaphore)) of `permits` permits.
    Semaphore {
        /// Its permit count.
        permits: u32,
    },
    /// A fair lock ([`LockClient::fair_lock`](crate::LockClient::fair_lock)).
    Fair,
}

impl LockKind {
    /// The kind numbered `code` in a script's reply (the kind table,
    /// `layout/kind.rs`), a semaphore counting `permits` permits.
    pub(crate) fn from_code(code: i64, permits: i64) -> Option<Self> {
        match Kind::of_code(code, 0)? {
            Kind::Permit { .. } => Some(Self::Semaphore {
                permits: u32::try_from(permits).ok()?,
            }),
            kind => Some(kind.lock_kind()),
        }
    }

    /// The word for this kind in the `distlock` tool's JSON, from the kind table
    /// (`layout::Kind::json_word`): `exclusive`, `read_write`, `semaphore` or
    /// `fair`.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// assert_eq!(distlock::LockKind::ReadWrite.json_word(), "read_write");
    /// ```
    #[doc(hidden)]
    pub fn json_word(self) -> &'static str {
        let kind = match self {
            Self::Exclusive => Kind::Exclusive,
            Self::ReadWrite => Kind::Read,
            Self::Semaphore { permits } => Kind::Permit { permits },
            Self::Fair => Kind::Fair,
        };
        kind.json_word()
    }

    /// What the kind is called in messages.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Self::Exclusive => "a lock",
            Self::ReadWrite => "a read-write lock",
            Self::Semaphore { .. } => "a semaphore",
            Self::Fair => "a fair lock",
        }
    }
}

/// How a [`Holder`](crate::Holder) holds its lock.
///
/// # Examples
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
/// use distlock::HoldMode;
///
/// let info = locks.inspect("catalogue").await?;
/// let writing = info.holders.iter().any(|h| h.mode == HoldMode::Write);
/// # let _ = writing;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum HoldMode {
    /// The holder of a plain lock or a fair lock.
    Exclusive,
    /// The writer of a read-write lock.
    Write,
    /// A reader of a read-write lock.
    Read,
    /// A permit of a semaphore.
    Permit,
}
