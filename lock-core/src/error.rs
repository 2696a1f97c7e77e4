//! The one error type of distlock.

use std::time::Duration;

use crate::who::HolderInfo;

/// Everything that can go wrong when taking, holding or giving back a lock.
///
/// Each message says what happened and what to do about it; every variant's docs
/// show its message. Match on the variant (with `..`: variants may gain fields), or
/// use the `is_*` predicates, which keep working when variants are added.
///
/// # Examples
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
/// use std::time::Duration;
/// use distlock::LockError;
///
/// match locks.lock("report:daily").wait(Duration::from_secs(1)).await {
///     Ok(guard) => guard.unlock().await?,
///     // Another process has it: skip this run.
///     Err(err) if err.is_busy() => println!("busy: {err}"),
///     Err(LockError::InvalidName { reason, .. }) => panic!("a bug in the caller: {reason}"),
///     // Redis is down, the user lacks a permission, ...: report it.
///     Err(err) => return Err(err),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The lock stayed held by another owner for the whole wait (or, in this
    /// client, by tasks that asked for it first).
    ///
    /// Its message names the holder once it is named (it has held the lock for 1 s;
    /// see [`Holder::info`](crate::Holder::info)): ``timed out after 2s waiting for
    /// lock `order:42`: held by orders-api on host-3, pid 4121, in
    /// orders::place_order, for 2.1s; wait longer with `.wait(..)`, use `try_lock` to
    /// skip busy locks, or look at the holder with `LockClient::inspect` or
    /// `distlock inspect` `` (else ``another owner still holds it (not named yet: a
    /// holder is named once it has held the lock for 1 s)``).
    #[error(
        "timed out after {waited:?} waiting for lock `{name}`: {}; wait longer with \
         `.wait(..)`, use `try_lock` to skip busy locks, or look at the holder with \
         `LockClient::inspect` or `distlock inspect`",
        held_by(.holder, .held_here)
    )]
    #[non_exhaustive]
    Timeout {
        /// The lock name.
        name: String,
        /// How long the caller waited.
        waited: Duration,
        /// Who held the lock when the wait ended, when its client wrote who it is
        /// (read once, right after the wait ran out).
        holder: Option<Box<HolderInfo>>,
        /// Where this same client took the lock, when another call chain of the
        /// caller's own client held it as the wait began (`src/orders.rs:42`, or the
        /// annotated function): the message then says that a nested acquisition
        /// re-enters only inside the holder's scope.
        held_here: Option<String>,
    },
    /// The lease ended (or the lock was force-unlocked) while this owner believed it held it.
    ///
    /// Its message: ``lock `order:42` was lost: its lease ended or it was
    /// force-unlocked before this owner released it, so another owner may have held it
    /// meanwhile; check `is_lost()` before committing work, and use fencing tokens so
    /// that stale writes are refused``; with the reason when it is known, as in
    /// ``lock `order:42` was lost (it was held for its whole max_hold): ...``. Treat
    /// the work done under the lock as unprotected.
    #[error(
        "lock `{name}` was lost{}: its lease ended or it was force-unlocked before this owner \
         released it, so another owner may have held it meanwhile; check `is_lost()` before \
         committing work, and use fencing tokens so that stale writes are refused",
        because(.reason)
    )]
    #[non_exhaustive]
    Lost {
        /// The lock name.
        name: String,
        /// Why, when the guard knew it (as [`LockGuard::lost_reason`](crate::LockGuard::lost_reason)).
        reason: Option<LostReason>,
    },
    /// The lock name cannot be used; nothing was sent to Redis.
    ///
    /// Its message: `invalid lock name: ` and the reason, which says what to use
    /// instead, such as ``invalid lock name: the name is empty; give each resource a
    /// non-empty name such as `order:42` ``. From a `#[distributed_lock]` function,
    /// whose key template made the name, the message starts with that function:
    /// `` `shop::checkout`: invalid lock name: the name is empty; ... ``.
    #[error(
        "{function}invalid lock name: {reason}",
        function = .function.map_or_else(String::new, |function| format!("`{function}`: "))
    )]
    #[non_exhaustive]
    InvalidName {
        /// Why the name was refused, and what to use instead.
        reason: String,
        /// The `#[distributed_lock]` function whose key was refused, as
        /// `module::path::name`; `None` for a name given to the client directly.
        function: Option<&'static str>,
    },
    /// An option is out of its range; nothing was sent to Redis.
    ///
    /// Its message: ``invalid option `lease`: `` and the reason, which gives the range
    /// to use.
    #[error("invalid option `{option}`: {reason}")]
    #[non_exhaustive]
    InvalidOption {
        /// The option, as the builder method that sets it is named.
        option: &'static str,
        /// Why the value was refused, and what range to use.
        reason: String,
    },
    /// A Redis key that distlock needs for this lock holds a value of another type,
    /// or a hash that distlock did not write (see `distlock::layout`).
    ///
    /// Its message: ``the Redis keys of lock `order:42` hold a value of another type,
    /// which distlock left untouched; pick another lock name or another namespace
    /// (`LockClientBuilder::namespace`), or remove the foreign key``.
    #[error(
        "the Redis keys of lock `{name}` hold a value of another type, which distlock left \
         untouched; pick another lock name or another namespace (`LockClientBuilder::namespace`), \
         or remove the foreign key"
    )]
    #[non_exhaustive]
    KeyConflict {
        /// The lock name.
        name: String,
    },
    /// The name is held (or waited for) as another kind of lock than the one asked
    /// for: a name is one kind of lock at a time. Nothing was changed; once every
    /// holder of the other kind is gone, the name can be taken as any kind.
    ///
    /// Its message: ``lock `m:dual` is held as a read-write lock, and a lock was asked
    /// for; a name is one kind of lock at a time: use another name for the lock, or
    /// take it once the read-write lock is released``.
    #[error(
        "lock `{name}` is held as {held_as}, and {asked} was asked for; a name is one kind \
         of lock at a time: use another name for the {asked_short}, or take it once the \
         {held_short} is released",
        held_short = held_as.trim_start_matches("a "),
        asked_short = asked.trim_start_matches("a ")
    )]
    #[non_exhaustive]
    KindConflict {
        /// The lock name.
        name: String,
        /// The kind it is held as: "a lock", "a read-write lock", "a semaphore" or
        /// "a fair lock".
        held_as: &'static str,
        /// The kind asked for, in the same words ("a read lock", "a write lock" for
        /// the two holds of a read-write lock).
        asked: &'static str,
    },
    /// A call chain that holds a read lock asked for the write lock of the same name.
    /// Waiting could never end (the writer would wait for its own reader), so the
    /// request is refused at once; nothing was sent to Redis.
    ///
    /// Its message: ``the call chain holds a read lock on `catalogue` and asked for its
    /// write lock, which would wait for itself forever; take the write lock first
    /// (a chain holding the write lock may take the read lock too), or release the read
    /// lock before asking for the write lock``.
    #[error(
        "the call chain holds a read lock on `{name}` and asked for its write lock, which \
         would wait for itself forever; take the write lock first (a chain holding the write \
         lock may take the read lock too), or release the read lock before asking for the \
         write lock"
    )]
    #[non_exhaustive]
    UpgradeNotAllowed {
        /// The lock name.
        name: String,
    },
    /// A call chain holding a lock of one class asked for a lock of another class
    /// that some chain took before while holding the first: two chains taking them
    /// in opposite orders can deadlock. Returned only with
    /// [`LockOrderCheck::Strict`](crate::LockOrderCheck::Strict) (the default
    /// warns); nothing was sent.
    ///
    /// Its message: ``lock `inventory:{sku}` is asked for while holding `order:{id}`
    /// (src/orders.rs:40:5 then src/orders.rs:52:9), but a call chain took them the
    /// other way round before (src/refund.rs:10:5 then src/refund.rs:18:9): chains
    /// that take them in opposite orders can deadlock; take them in one order
    /// everywhere, or together with `lock_all` ``.
    #[error(
        "lock `{taking}` is asked for while holding `{holding}` ({here}), but a call chain \
         took them the other way round before ({before}): chains that take them in opposite \
         orders can deadlock; take them in one order everywhere, or together with `lock_all`"
    )]
    #[non_exhaustive]
    LockOrderInversion {
        /// The class of the lock held.
        holding: String,
        /// The class of the lock asked for.
        taking: String,
        /// Where the held lock was taken, then where the other is asked for.
        here: String,
        /// The same two places of the chain that took them the other way round.
        before: String,
    },
    /// This request waited in a cycle of call chains, each holding a lock that the
    /// next waits for (across processes and clients), and was chosen to break it:
    /// it gave up its wait, so that the others proceed. Its chain's locks are
    /// released as its guards go. Found only after the wait passed
    /// [`deadlock_check_after`](crate::LockClientBuilder::deadlock_check_after).
    ///
    /// Its message: ``deadlock: this call chain waited for lock `inventory:7` in a
    /// cycle of chains each waiting for a lock the next holds (`inventory:7` →
    /// `order:42` → back to this chain); this request gave up to break it: take the
    /// locks in one order everywhere, or together with `lock_all`, and try again``.
    #[error(
        "deadlock: this call chain waited for lock `{waited}` in a cycle of chains each \
         waiting for a lock the next holds ({path} → back to this chain); this request gave \
         up to break it: take the locks in one order everywhere, or together with `lock_all`, \
         and try again",
        waited = cycle.first().map_or("", String::as_str),
        path = cycle.iter().map(|name| format!("`{name}`")).collect::<Vec<_>>().join(" → ")
    )]
    #[non_exhaustive]
    Deadlock {
        /// The locks of the cycle, from the one this request waited for: each is held
        /// by a chain that waits for the next; this chain holds the last.
        cycle: Vec<String>,
    },
    /// This kind of lock cannot be had on the client's backend; nothing was sent.
    ///
    /// Its message: ``semaphores are not available on Redlock: `` and why, then what to
    /// use instead.
    #[error("{kind} are not available on {backend}: {reason}")]
    #[non_exhaustive]
    UnsupportedKind {
        /// The kind of lock, as a plural (`semaphores`).
        kind: &'static str,
        /// The backend (`Redlock`).
        backend: &'static str,
        /// Why, and what to use instead.
        reason: &'static str,
    },
    /// Too few Redis nodes granted the lock for it to be safe (Redlock): because
    /// another owner held it on the others, because they did not answer in time, or
    /// both. On one server, the same wait ends in [`LockError::Timeout`].
    ///
    /// Its message: ``only 1 of the 3 Redis nodes needed granted the lock (2 held it
    /// for another owner); wait longer if another owner holds it, otherwise check that
    /// a majority of the nodes is reachable within `redlock_node_timeout` ``.
    #[error(
        "only {got} of the {needed} Redis nodes needed granted the lock ({held_elsewhere} held it \
         for another owner); wait longer if another owner holds it, otherwise check that a \
         majority of the nodes is reachable within `redlock_node_timeout`"
    )]
    #[non_exhaustive]
    QuorumNotReached {
        /// How many nodes granted the lock (the grants were given back).
        got: usize,
        /// How many were needed (a majority).
        needed: usize,
        /// How many nodes answered that another owner held the lock. When these and
        /// `got` make a majority, the lock was busy, not out of reach
        /// ([`LockError::is_busy`]).
        held_elsewhere: usize,
    },
    /// Fewer replicas than required acknowledged a new lock in time; it was released.
    ///
    /// Its message: ``only 0 of the 1 replicas required acknowledged the lock in time,
    /// so it was released; check the replicas' health and lag, or lower
    /// `replicas(..)` ``.
    #[error(
        "only {acked} of the {needed} replicas required acknowledged the lock in time, so it \
         was released; check the replicas' health and lag, or lower `replicas(..)`"
    )]
    #[non_exhaustive]
    ReplicationNotConfirmed {
        /// How many replicas acknowledged.
        acked: u32,
        /// How many were required.
        needed: u32,
    },
    /// A global client was asked for, and none is installed.
    ///
    /// Its message: ``no global lock client is installed: call
    /// `LockClient::builder().url(..).connect().await?.install_global()` at startup, or
    /// pass a client explicitly``. From a `#[distributed_lock]` function without
    /// `client = ..`, the message starts with that function: `` `shop::checkout`: no
    /// global lock client is installed: ... ``.
    #[error(
        "{function}no global lock client is installed: call \
         `LockClient::builder().url(..).connect().await?.install_global()` at startup, or pass \
         a client explicitly",
        function = .function.map_or_else(String::new, |function| format!("`{function}`: "))
    )]
    #[non_exhaustive]
    NoGlobalClient {
        /// The `#[distributed_lock]` function that asked for the global client, as
        /// `module::path::name`; `None` for a call of [`global`](crate::global).
        function: Option<&'static str>,
    },
    /// The client was shut down ([`LockClient::shutdown`](crate::LockClient::shutdown)):
    /// it takes no lock any more; nothing was sent.
    ///
    /// Its message: ``lock `order:42` was not taken: its client is shut down; connect a
    /// new client to take locks again``.
    #[error(
        "lock `{name}` was not taken: its client is shut down; connect a new client to take \
         locks again"
    )]
    #[non_exhaustive]
    ClientShutDown {
        /// The lock name.
        name: String,
    },
    /// The Redis server cannot run distlock.
    ///
    /// Its message: `unsupported Redis server: ` and what is missing, such as a server
    /// older than 7.0, with what to run instead.
    #[error("unsupported Redis server: {reason}")]
    #[non_exhaustive]
    UnsupportedServer {
        /// What is missing, and what to run instead.
        reason: String,
    },
    /// The Redis user may not run distlock's scripts or publish on its channels;
    /// nothing was changed.
    ///
    /// Its message: ``Redis refused permission (NOPERM ...); grant the lock user the
    /// commands and keys distlock needs (see the README's ACL section)``.
    #[error(
        "Redis refused permission ({detail}); grant the lock user the commands and keys \
         distlock needs (see the README's ACL section)"
    )]
    #[non_exhaustive]
    PermissionDenied {
        /// What Redis said.
        detail: String,
    },
    /// [`LockGuard::unlock`](crate::LockGuard::unlock) sent the release, and Redis
    /// did not answer it, nor its retry, or answered "not held" only once the record
    /// that would say an applied release was applied may have expired (a retry that
    /// waited out an outage): the release may have been applied or not. Either way
    /// the hold is no longer renewed, so the lock is free at the latest when its
    /// lease ends.
    ///
    /// Its message: ``the release of lock `order:42` is unconfirmed: Redis did not
    /// answer in time (timed out); it may have been applied, and if it was not, the lock stays
    /// held until its lease ends, within 29.9s, since it is no longer renewed; don't
    /// count on holding it, and check that the server is reachable``.
    #[error(
        "the release of lock `{name}` is unconfirmed: Redis did not answer in time ({source}); it \
         may have been applied, and if it was not, the lock stays held until its lease \
         ends, within {ends_within:.1?}, since it is no longer renewed; don't count on \
         holding it, and check that the server is reachable"
    )]
    #[non_exhaustive]
    ReleaseUnconfirmed {
        /// The lock name.
        name: String,
        /// The longest the lock can stay held if the release was not applied: what is
        /// left of the lease the last renewal gave it.
        ends_within: Duration,
        /// What redis-rs said of the release's last try.
        source: redis::RedisError,
    },
    /// Redis answered with an error, or could not be reached in time.
    ///
    /// Its message: `Redis error: ` and what redis-rs said, then a hint of what to
    /// check (that the server is reachable and healthy, a failover, a password).
    #[error("Redis error: {0}; {hint}", hint = redis_hint(.0))]
    Redis(redis::RedisError),
    /// [`LockClientBuilder::connect`](crate::LockClientBuilder::connect) could not
    /// connect to a server, or the server refused the connection (credentials,
    /// database, TLS). The message names the server and what to check.
    ///
    /// Its message: `could not connect to Redis at 127.0.0.1:6379: ` and what the
    /// server or redis-rs said, then what to check (the password, the database
    /// number, `rediss://` against a plain port, the CA).
    #[error("could not connect to Redis at {server}: {source}; {hint}", hint = redis_hint(.source))]
    #[non_exhaustive]
    Connect {
        /// The server, as `host:port` (or the Sentinels, or the cluster nodes, that
        /// were tried); never with a password.
        server: String,
        /// What redis-rs or the server said.
        source: redis::RedisError,
    },
}

impl From<redis::RedisError> for LockError {
    fn from(err: redis::RedisError) -> Self {
        let text = err.to_string();
        // Redis 7.0 reports a command, a key or a PUBLISH refused inside a script
        // without the NOPERM code, and redis-rs reports a refused SELECT at connect
        // under a message of its own.
        let refused_without_code = text.contains("can't publish to the channel")
            || text.contains("can't run this command")
            || text.contains("can't access at least one of the keys")
            || text.contains("no permissions to run");
        if err.code() == Some("NOPERM") || refused_without_code {
            return Self::PermissionDenied { detail: text };
        }
        Self::Redis(err)
    }
}

/// The error codes of a node that is not, or no longer, a writable master: a
/// failover is under way or done. A request refused with one was not applied.
const FAILOVER_CODES: [&str; 2] = ["READONLY", "MASTERDOWN"];

/// Whether `code` (of an error inside a reply) says that a failover refused the
/// request, which was then not applied.
pub(crate) fn is_failover_code(code: &str) -> bool {
    FAILOVER_CODES.contains(&code)
}

/// Whether a request may have been applied although its reply did not arrive (a
/// lost or late reply, a dropped connection): its outcome must be found out.
pub(crate) fn outcome_unknown(err: &redis::RedisError) -> bool {
    err.is_io_error() || err.is_timeout() || err.is_connection_dropped()
}

/// Whether the server could not be reached at all.
fn unreachable(err: &redis::RedisError) -> bool {
    outcome_unknown(err) || err.is_connection_refusal()
}

/// Whether a failed request may mean that the master moved (Sentinel): the master
/// is unreachable, refuses writes after a failover, or is still loading.
pub(crate) fn master_may_have_moved(err: &redis::RedisError) -> bool {
    unreachable(err)
        || matches!(err.code(), Some(code) if is_failover_code(code) || code == "LOADING")
}

/// Whether an error may pass by itself (a failover, a restart, a lost connection),
/// so that a waiter with time left should ask again rather than give up: the
/// master may have moved, or the cluster is reconfiguring.
pub(crate) fn transient(err: &redis::RedisError) -> bool {
    master_may_have_moved(err)
        || err.is_cluster_error()
        || matches!(err.code(), Some("CLUSTERDOWN" | "TRYAGAIN"))
}

/// Whether the server refused the credentials, or wanted some. redis-rs reports a
/// `SELECT` refused at connect under a message of its own, without the code.
pub(crate) fn refused_credentials(err: &redis::RedisError) -> bool {
    if err.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(err.code(), Some("NOAUTH" | "WRONGPASS"))
    {
        return true;
    }
    let text = err.to_string();
    text.contains("Authentication required") || text.contains("WRONGPASS")
}

/// Why a server refused a connection in a way that trying again cannot fix; each
/// has its own hint ([`redis_hint`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The password (or user) was refused, or one is required.
    Credentials,
    /// A password was sent to a server that has none set (made by the dialer, which
    /// asks the server without one when a password is refused).
    NoPasswordSet,
    /// The database number is beyond the server's `databases`.
    Database,
    /// A cluster node refused `SELECT`: a cluster has database 0 only.
    ClusterDatabase,
    /// `rediss://` to a port that speaks plain text.
    NotTls,
    /// The server's certificate is not signed by a CA the client trusts.
    UnknownCa,
    /// The server's certificate does not name the host the client dialed.
    WrongName,
    /// The server asked for a client certificate and got none.
    ClientCertRequired,
    /// The platform's roots could not be read (`SSL_CERT_FILE`, `SSL_CERT_DIR`).
    PlatformRoots,
}

/// What redis-rs says when the server's certificate is not signed by a trusted CA
/// (a CA of another name, or one of the same name with another key).
const UNKNOWN_CA: [&str; 2] = ["UnknownIssuer", "BadSignature"];

/// What rustls-native-certs says when a file of the platform's roots (named by
/// `SSL_CERT_FILE` or `SSL_CERT_DIR`, or the system's bundle) cannot be read.
const PLATFORM_ROOTS: [&str; 2] = ["failed to read PEM from file", "failed to open file"];

/// The message of a `rediss://` connection that found a plain-text port (made by
/// the dialer, which asks the port in plain text when a handshake fails).
pub(crate) const NOT_TLS: &str = "this port does not speak TLS";

/// The message of a password refused by a server that has none set (made by the
/// dialer, which then asks the server without one).
pub(crate) const NO_PASSWORD_SET: &str = "the server has no password set";

/// Why `err` refused the connection for good, if it did.
pub(crate) fn refusal(err: &redis::RedisError) -> Option<Refusal> {
    let text = err.to_string();
    let has = |needle: &str| text.contains(needle);
    if has(NO_PASSWORD_SET) {
        Some(Refusal::NoPasswordSet)
    } else if refused_credentials(err) {
        Some(Refusal::Credentials)
    } else if has("DB index is out of range") || has("invalid DB index") {
        Some(Refusal::Database)
    } else if has("SELECT is not allowed in cluster mode") {
        Some(Refusal::ClusterDatabase)
    } else if has(NOT_TLS) || has("InvalidContentType") {
        Some(Refusal::NotTls)
    } else if UNKNOWN_CA.iter().any(|needle| has(needle)) {
        Some(Refusal::UnknownCa)
    } else if has("NotValidForName") || has("not valid for name") {
        Some(Refusal::WrongName)
    } else if has("CertificateRequired") {
        Some(Refusal::ClientCertRequired)
    } else if PLATFORM_ROOTS.iter().any(|needle| has(needle)) {
        Some(Refusal::PlatformRoots)
    } else {
        None
    }
}

/// What to do about a Redis error, for its message.
fn redis_hint(err: &redis::RedisError) -> &'static str {
    match refusal(err) {
        Some(Refusal::Credentials) => {
            "check the user name and password (in the URL, or `sentinel_node_password` for \
             the data nodes behind Sentinel)"
        }
        Some(Refusal::NoPasswordSet) => {
            "remove the password from the URL (or `sentinel_node_password`), or set \
             `requirepass` on the server"
        }
        Some(Refusal::Database) => {
            "the database number (`/N` at the end of the URL, or `sentinel_node_db`) is \
             beyond the server's `databases` setting (16 by default, numbered from 0): use \
             a lower one, or raise `databases` in the server's configuration"
        }
        Some(Refusal::ClusterDatabase) => {
            "a Redis Cluster has database 0 only: leave the database out of the cluster \
             URLs"
        }
        Some(Refusal::NotTls) => {
            "use `redis://` for this port, or `rediss://` with the port of the server's \
             `tls-port`"
        }
        Some(Refusal::UnknownCa) => {
            "the server's certificate is not signed by a CA the client trusts: give that \
             CA's certificate with `.tls_root_ca(pem)` (or add it to the platform's roots, \
             e.g. through `SSL_CERT_FILE`)"
        }
        Some(Refusal::WrongName) => {
            "the server's certificate does not name the host in the URL: connect by a name \
             or IP address the certificate lists, or give the server a certificate for the \
             address clients use"
        }
        Some(Refusal::ClientCertRequired) => {
            "the server asks for a client certificate (`tls-auth-clients`): give one with \
             `.tls_client_cert(cert_pem, key_pem)`"
        }
        Some(Refusal::PlatformRoots) => {
            "the platform's roots could not be read: fix or unset `SSL_CERT_FILE` and \
             `SSL_CERT_DIR` (they are read even when `tls_root_ca` is set)"
        }
        None if err.is_connection_refusal() => {
            "connection refused: nothing listens at that address; check the host and port \
             (in the URL), and that redis-server runs there"
        }
        None => "check that the server is reachable and healthy",
    }
}

/// The part of a timeout's message that says who holds the lock.
fn held_by(holder: &Option<Box<HolderInfo>>, held_here: &Option<String>) -> String {
    if let Some(site) = held_here {
        return format!(
            "held by another call chain of this same client (taken at {site}); a nested \
             acquisition re-enters only inside the holder's scope (`guard.scope(..)`, or \
             `LockContext::current()` carried into a spawned task), and a task that waits \
             for a guard it holds itself waits until the timeout"
        );
    }
    match holder {
        Some(holder) => format!("held by {holder}"),
        None => "another owner still holds it (not named yet: a holder is named once it \
                 has held the lock for 1 s)"
            .to_owned(),
    }
}

impl LockError {
    /// A [`LockError::Timeout`] on lock `name` after `waited`, its holder not read yet.
    pub(crate) fn timeout(name: String, waited: Duration) -> Self {
        Self::Timeout {
            name,
            waited,
            holder: None,
            held_here: None,
        }
    }

    /// [`LockError::Lost`] for lock `name`: for the code that `#[distributed_lock]`
    /// generates (the variants cannot be built outside this crate). Not a public API.
    #[doc(hidden)]
    pub fn lost_lock(name: impl Into<String>) -> Self {
        Self::Lost {
            name: name.into(),
            reason: None,
        }
    }

    /// Whether the wait for the lock ran out.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// use std::time::Duration;
    ///
    /// match locks.lock("report:daily").wait(Duration::from_secs(1)).await {
    ///     Ok(guard) => guard.unlock().await?,
    ///     Err(err) if err.is_timeout() => println!("another process is writing the report"),
    ///     Err(err) => return Err(err),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_timeout(&self) -> bool {
        matches!(self, Self::Timeout { .. })
    }

    /// Whether other owners kept the lock from this one for the whole wait, on any
    /// backend: a [`Timeout`](Self::Timeout), or on Redlock a
    /// [`QuorumNotReached`](Self::QuorumNotReached) where enough nodes answered for
    /// a majority but some named another owner (the lock held elsewhere, or a vote
    /// split between contenders). Contention, not an outage.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// use std::time::Duration;
    ///
    /// // The same on one server (a timeout) and on Redlock (a quorum held elsewhere).
    /// match locks.lock("job:reindex").wait(Duration::ZERO).await {
    ///     Ok(guard) => guard.unlock().await?,
    ///     Err(err) if err.is_busy() => println!("skipped: {err}"),
    ///     Err(err) => return Err(err),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_busy(&self) -> bool {
        match self {
            Self::Timeout { .. } => true,
            Self::QuorumNotReached {
                got,
                needed,
                held_elsewhere,
            } => *held_elsewhere > 0 && got + held_elsewhere >= *needed,
            _ => false,
        }
    }

    /// Whether the lock was lost while it was believed held.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// let guard = locks.lock("ledger:7").await?;
    /// // ... work ...
    /// match guard.unlock().await {
    ///     Ok(()) => {}
    ///     // Another owner may have held the lock meanwhile: check the work.
    ///     Err(err) if err.is_lost() => eprintln!("{err}"),
    ///     Err(err) => return Err(err),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        matches!(self, Self::Lost { .. })
    }

    /// Whether the input was refused before anything reached Redis (name or option).
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) {
    /// let err = locks.lock("").await.expect_err("an empty name");
    /// assert!(err.is_invalid_input()); // nothing was sent to Redis
    /// # }
    /// ```
    pub fn is_invalid_input(&self) -> bool {
        matches!(self, Self::InvalidName { .. } | Self::InvalidOption { .. })
    }

    /// Whether a Redis key of the lock holds a value distlock did not write, or the
    /// name is held as another kind of lock ([`LockError::KindConflict`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// match locks.lock("cache:users").await {
    ///     Ok(guard) => guard.unlock().await?,
    ///     // Another program stores a hash under the lock's key: use another namespace.
    ///     Err(err) if err.is_key_conflict() => eprintln!("{err}"),
    ///     Err(err) => return Err(err),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_key_conflict(&self) -> bool {
        matches!(self, Self::KeyConflict { .. } | Self::KindConflict { .. })
    }

    /// Whether too few nodes granted the lock.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// // On Redlock: a majority of the masters did not grant the lock.
    /// match locks.lock("order:42").await {
    ///     Ok(guard) => guard.unlock().await?,
    ///     Err(err) if err.is_quorum_not_reached() && !err.is_busy() => {
    ///         eprintln!("too few masters reachable: {err}");
    ///     }
    ///     Err(err) => return Err(err),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_quorum_not_reached(&self) -> bool {
        matches!(self, Self::QuorumNotReached { .. })
    }

    /// Whether the client was shut down, so that it takes no lock any more.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// locks.shutdown().await;
    /// let err = locks.lock("order:42").await.unwrap_err();
    /// assert!(err.is_client_shut_down());
    /// # Ok(()) }
    /// ```
    pub fn is_client_shut_down(&self) -> bool {
        matches!(self, Self::ClientShutDown { .. })
    }

    /// Whether no global client was installed.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// match distlock::global() {
    ///     Ok(locks) => drop(locks),
    ///     Err(err) => assert!(err.is_no_global_client()), // `install_global` was not called
    /// }
    /// ```
    pub fn is_no_global_client(&self) -> bool {
        matches!(self, Self::NoGlobalClient { .. })
    }

    /// Whether Redis refused permission for a command, key or channel.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// match locks.lock("order:42").await {
    ///     Ok(guard) => guard.unlock().await?,
    ///     // The ACL user lacks a rule: see the README's ACL section.
    ///     Err(err) if err.is_permission_denied() => eprintln!("{err}"),
    ///     Err(err) => return Err(err),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_permission_denied(&self) -> bool {
        matches!(self, Self::PermissionDenied { .. })
    }

    /// Whether the error came from Redis or the connection to it (including
    /// [`Connect`](Self::Connect)).
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// match locks.lock("order:42").await {
    ///     Ok(guard) => guard.unlock().await?,
    ///     // Redis failed or was out of reach: retry later, or report an outage.
    ///     Err(err) if err.is_redis() => eprintln!("Redis trouble: {err}"),
    ///     Err(err) => return Err(err),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_redis(&self) -> bool {
        matches!(
            self,
            Self::Redis(_) | Self::Connect { .. } | Self::ReleaseUnconfirmed { .. }
        )
    }

    /// Whether a release went unanswered ([`ReleaseUnconfirmed`](Self::ReleaseUnconfirmed)):
    /// it may have been applied; if not, the lock is free when its lease ends.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// let guard = locks.lock("order:42").await?;
    /// match guard.unlock().await {
    ///     Ok(()) => {}
    ///     // Nothing to undo: the lock is free by the end of its lease at the latest.
    ///     Err(err) if err.is_unconfirmed() => eprintln!("{err}"),
    ///     Err(err) => return Err(err),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_unconfirmed(&self) -> bool {
        matches!(self, Self::ReleaseUnconfirmed { .. })
    }

    /// Whether connecting to a server failed ([`Connect`](Self::Connect)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo() {
    /// use distlock::LockClient;
    ///
    /// match LockClient::builder().url("redis://127.0.0.1:6379").connect().await {
    ///     Ok(_locks) => {}
    ///     // "could not connect to Redis at 127.0.0.1:6379: ...; <what to check>"
    ///     Err(err) if err.is_connect() => eprintln!("{err}"),
    ///     Err(err) => eprintln!("distlock: {err}"),
    /// }
    /// # }
    /// ```
    pub fn is_connect(&self) -> bool {
        matches!(self, Self::Connect { .. })
    }

    /// Whether a waiter with time left should ask again after this error: a
    /// transient failure, or too few replica acknowledgements (the hold was given
    /// back; replicas resyncing after a failover, or lagging for a moment, catch up).
    pub(crate) fn may_pass(&self) -> bool {
        match self {
            Self::Redis(err) | Self::Connect { source: err, .. } => transient(err),
            Self::ReplicationNotConfirmed { .. } => true,
            _ => false,
        }
    }

    /// A failed connection to `server` (`host:port`, or a description of the nodes
    /// tried): [`Connect`](Self::Connect), unless the server refused permission.
    pub(crate) fn connect(server: impl Into<String>, err: redis::RedisError) -> Self {
        match Self::from(err) {
            Self::Redis(source) => Self::Connect {
                server: server.into(),
                source,
            },
            other => other,
        }
    }

    pub(crate) fn invalid_option(option: &'static str, reason: impl Into<String>) -> Self {
        Self::InvalidOption {
            option,
            reason: reason.into(),
        }
    }
}

/// Why a lock was lost: what [`LockGuard::lost_reason`](crate::LockGuard::lost_reason)
/// and [`HeldLock::lost_reason`](crate::HeldLock::lost_reason) say once
/// [`lost`](crate::HeldLock::lost) has fired, and [`LockError::Lost`] carries. The
/// first cause found is kept: later ones do not replace it.
///
/// # Examples
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
/// use distlock::LostReason;
///
/// let guard = locks.lock("export:nightly").await?;
/// guard.lost().await;
/// match guard.lost_reason() {
///     Some(LostReason::MaxHoldExceeded) => eprintln!("held for longer than max_hold"),
///     Some(LostReason::Expired) => eprintln!("Redis was unreachable for a whole lease"),
///     Some(reason) => eprintln!("lost: {reason}"),
///     None => {}
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LostReason {
    /// The lease ran out before a renewal succeeded: the server was unreachable or
    /// too slow for a whole lease (or a fixed lease simply ended).
    Expired,
    /// Redis said this owner no longer holds the lock (a renewal, re-entry or
    /// release found it gone): it was force-unlocked, its key deleted or expired in
    /// Redis (a server paused past the lease), or another owner holds it now.
    NotHeld,
    /// The hold lasted its `max_hold`: the watchdog stopped renewing it, and then
    /// the lease ran out.
    MaxHoldExceeded,
    /// The client was shut down ([`LockClient::shutdown`](crate::LockClient::shutdown)),
    /// which gave the lock back (or left it held until its lease ends, for the rest
    /// of a minimum hold time:
    /// [`LockGuard::unlock_after_holding`](crate::LockGuard::unlock_after_holding)).
    ShutDown,
    /// The Redis server that held it is not the one that granted it: it restarted
    /// without the lock (no persistence), or a failover moved to a master that never
    /// had it. The client checks every hold as soon as a connection comes back to
    /// such a server, before it grants anything new, and as soon as it is granted a
    /// lock another of its call chains holds (a failover its cluster connection
    /// followed on its own), before that grant counts.
    ServerReplaced,
}

impl LostReason {
    /// A short, stable name: `expired`, `not_held`, `max_hold_exceeded`,
    /// `shut_down`, `server_replaced` (the value of the `reason` label of the
    /// `distlock_lost_total` metric).
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// assert_eq!(distlock::LostReason::MaxHoldExceeded.as_str(), "max_hold_exceeded");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Expired => "expired",
            Self::NotHeld => "not_held",
            Self::MaxHoldExceeded => "max_hold_exceeded",
            Self::ShutDown => "shut_down",
            Self::ServerReplaced => "server_replaced",
        }
    }
}

impl std::fmt::Display for LostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Expired => {
                "its lease ended (a fixed lease runs out; a watchdog lease ends when it could \
                 not be renewed in time)"
            }
            Self::NotHeld => "Redis no longer had it held by this owner",
            Self::MaxHoldExceeded => "it was held for its whole max_hold",
            Self::ShutDown => "its client was shut down, which gave it back",
            Self::ServerReplaced => {
                "the Redis server restarted or failed over, and the new one did not have it"
            }
        })
    }
}

/// ` (why)` after "was lost" in [`LockError::Lost`]'s message, when known.
fn because(reason: &Option<LostReason>) -> String {
    reason
        .map(|reason| format!(" ({reason})"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(kind: std::io::ErrorKind) -> redis::RedisError {
        redis::RedisError::from(std::io::Error::from(kind))
    }

    /// The messages that the variants' docs show.
    #[test]
    fn messages_are_the_ones_the_docs_show() {
        let name = || "order:42".to_owned();
        let cases = [
            (
                LockError::timeout(name(), Duration::from_secs(2)),
                "timed out after 2s waiting for lock `order:42`: another owner still holds it \
                 (not named yet: a holder is named once it has held the lock for 1 s); wait \
                 longer with `.wait(..)`, use `try_lock` to skip busy locks, or look at the \
                 holder with `LockClient::inspect` or `distlock inspect`",
            ),
            (
                LockError::Timeout {
                    name: name(),
                    waited: Duration::from_secs(2),
                    holder: Some(Box::new(HolderInfo {
                        service: "orders-api".into(),
                        host: "host-3".into(),
                        pid: 4121,
                        site: "orders::place_order".into(),
                        acquired_at: std::time::UNIX_EPOCH,
                        held_for: Duration::from_millis(2140),
                    })),
                    held_here: None,
                },
                "timed out after 2s waiting for lock `order:42`: held by orders-api on host-3, \
                 pid 4121, in orders::place_order, for 2.1s; wait longer with `.wait(..)`, use \
                 `try_lock` to skip busy locks, or look at the holder with `LockClient::inspect` \
                 or `distlock inspect`",
            ),
            (
                LockError::Lost {
                    name: name(),
                    reason: None,
                },
                "lock `order:42` was lost: its lease ended or it was force-unlocked before this \
                 owner released it, so another owner may have held it meanwhile; check \
                 `is_lost()` before committing work, and use fencing tokens so that stale \
                 writes are refused",
            ),
            (
                LockError::Lost {
                    name: name(),
                    reason: Some(LostReason::MaxHoldExceeded),
                },
                "lock `order:42` was lost (it was held for its whole max_hold): its lease ended \
                 or it was force-unlocked before this owner released it, so another owner may \
                 have held it meanwhile; check `is_lost()` before committing work, and use \
                 fencing tokens so that stale writes are refused",
            ),
            (
                LockError::KeyConflict { name: name() },
                "the Redis keys of lock `order:42` hold a value of another type, which distlock \
                 left untouched; pick another lock name or another namespace \
                 (`LockClientBuilder::namespace`), or remove the foreign key",
            ),
            (
                LockError::UpgradeNotAllowed {
                    name: "catalogue".into(),
                },
                "the call chain holds a read lock on `catalogue` and asked for its write lock, \
                 which would wait for itself forever; take the write lock first (a chain holding \
                 the write lock may take the read lock too), or release the read lock before \
                 asking for the write lock",
            ),
            (
                LockError::QuorumNotReached {
                    got: 1,
                    needed: 3,
                    held_elsewhere: 2,
                },
                "only 1 of the 3 Redis nodes needed granted the lock (2 held it for another \
                 owner); wait longer if another owner holds it, otherwise check that a majority \
                 of the nodes is reachable within `redlock_node_timeout`",
            ),
            (
                LockError::ReplicationNotConfirmed {
                    acked: 0,
                    needed: 1,
                },
                "only 0 of the 1 replicas required acknowledged the lock in time, so it was \
                 released; check the replicas' health and lag, or lower `replicas(..)`",
            ),
            (
                LockError::NoGlobalClient { function: None },
                "no global lock client is installed: call \
                 `LockClient::builder().url(..).connect().await?.install_global()` at startup, \
                 or pass a client explicitly",
            ),
            (
                LockError::NoGlobalClient {
                    function: Some("shop::checkout"),
                },
                "`shop::checkout`: no global lock client is installed: call \
                 `LockClient::builder().url(..).connect().await?.install_global()` at startup, \
                 or pass a client explicitly",
            ),
            (
                LockError::InvalidName {
                    reason: "the name is empty; give each resource a non-empty name such as \
                             `order:42`"
                        .into(),
                    function: None,
                },
                "invalid lock name: the name is empty; give each resource a non-empty name \
                 such as `order:42`",
            ),
            (
                LockError::InvalidName {
                    reason: "the name is empty; give each resource a non-empty name such as \
                             `order:42`"
                        .into(),
                    function: Some("shop::checkout"),
                },
                "`shop::checkout`: invalid lock name: the name is empty; give each resource a \
                 non-empty name such as `order:42`",
            ),
        ];
        for (error, message) in cases {
            assert_eq!(error.to_string(), message);
        }
    }

    #[test]
    fn errors_are_classified_in_one_place() {
        let lost = io(std::io::ErrorKind::TimedOut);
        assert!(outcome_unknown(&lost) && transient(&lost) && master_may_have_moved(&lost));
        let refused = io(std::io::ErrorKind::ConnectionRefused);
        assert!(transient(&refused) && master_may_have_moved(&refused));
        assert!(is_failover_code("READONLY") && is_failover_code("MASTERDOWN"));
        assert!(!is_failover_code("NOSCRIPT"));
        let wrong = redis::RedisError::from((redis::ErrorKind::Parse, "parse"));
        assert!(!outcome_unknown(&wrong) && !transient(&wrong) && !master_may_have_moved(&wrong));
        assert!(LockError::ReplicationNotConfirmed {
            acked: 0,
            needed: 1
        }
        .may_pass());
        assert!(LockError::Redis(lost).may_pass());
        assert!(!LockError::NoGlobalClient { function: None }.may_pass());
    }

    #[test]
    fn a_refused_password_points_at_the_credentials_and_other_errors_at_the_server() {
        let refused = LockError::from(redis::RedisError::from((
            redis::ErrorKind::AuthenticationFailed,
            "invalid password",
        )));
        assert!(refused.to_string().contains("password"), "{refused}");
        assert!(!refused.to_string().contains("reachable"), "{refused}");

        let gone = LockError::from(redis::RedisError::from(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )));
        assert!(gone.to_string().contains("nothing listens"), "{gone}");
        let slow = LockError::from(redis::RedisError::from(std::io::Error::from(
            std::io::ErrorKind::TimedOut,
        )));
        assert!(slow.to_string().contains("reachable"), "{slow}");
    }

    #[test]
    fn a_refused_select_at_connect_keeps_its_meaning() {
        // redis-rs's wording for a SELECT refused at connect, the server's code lost.
        let select = |detail: &str| {
            LockError::from(redis::RedisError::from((
                redis::ErrorKind::Client,
                "Redis server refused to switch database",
                detail.to_owned(),
            )))
        };
        let unauthenticated = select("Server(ResponseError): Authentication required.");
        assert!(
            unauthenticated.to_string().contains("password"),
            "{unauthenticated}"
        );
        let forbidden = select("NOPERM User nosel has no permissions to run the 'select' command");
        assert!(forbidden.is_permission_denied(), "{forbidden}");
    }

    /// The connect error of `err` at a made-up server.
    fn at_connect(err: redis::RedisError) -> String {
        LockError::connect("10.1.2.3:6390", err).to_string()
    }

    fn io_text(text: &str) -> redis::RedisError {
        redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            text.to_owned(),
        ))
    }

    #[test]
    fn each_refusal_at_connect_gets_its_own_hint_and_names_the_server() {
        // As redis-rs words them (seen against redis-server 7.0 and rustls 0.23).
        let cases = [
            (
                redis::RedisError::from((
                    redis::ErrorKind::AuthenticationFailed,
                    "Password authentication failed",
                )),
                Refusal::Credentials,
                "password",
            ),
            (
                redis::RedisError::from((
                    redis::ErrorKind::AuthenticationFailed,
                    NO_PASSWORD_SET,
                    "AUTH refused: AUTH <password> called without any password configured \
                     for the default user"
                        .to_owned(),
                )),
                Refusal::NoPasswordSet,
                "`requirepass`",
            ),
            (
                redis::RedisError::from((
                    redis::ErrorKind::Client,
                    "Redis server refused to switch database",
                    "Server(ResponseError): DB index is out of range".to_owned(),
                )),
                Refusal::Database,
                "`databases`",
            ),
            (
                redis::RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    NOT_TLS,
                    "it answered a plain-text PING".to_owned(),
                )),
                Refusal::NotTls,
                "`redis://`",
            ),
            (
                io_text("received corrupt message of type InvalidContentType"),
                Refusal::NotTls,
                "`redis://`",
            ),
            (
                io_text("invalid peer certificate: UnknownIssuer"),
                Refusal::UnknownCa,
                "tls_root_ca",
            ),
            (
                io_text("invalid peer certificate: BadSignature"),
                Refusal::UnknownCa,
                "tls_root_ca",
            ),
            (
                io_text("invalid peer certificate: NotValidForName"),
                Refusal::WrongName,
                "name",
            ),
            (
                io_text("received fatal alert: CertificateRequired"),
                Refusal::ClientCertRequired,
                "tls_client_cert",
            ),
            (
                io_text("failed to read PEM from file: No such file or directory (os error 2) at '/x.pem'"),
                Refusal::PlatformRoots,
                "SSL_CERT_FILE",
            ),
            (
                redis::RedisError::from((
                    redis::ErrorKind::Client,
                    "Redis server refused to switch database",
                    "Server(ResponseError): SELECT is not allowed in cluster mode".to_owned(),
                )),
                Refusal::ClusterDatabase,
                "database 0",
            ),
        ];
        for (err, expected, hint) in cases {
            assert_eq!(refusal(&err), Some(expected), "{err}");
            let text = at_connect(err);
            assert!(text.contains("10.1.2.3:6390"), "{text}");
            assert!(text.contains(hint), "{text}");
            assert!(!text.contains("reachable"), "{text}");
        }
        let refused = io(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(refusal(&refused), None);
        let text = at_connect(refused);
        assert!(
            text.contains("10.1.2.3:6390") && text.contains("nothing listens at that address"),
            "{text}"
        );
        let timed_out = at_connect(io(std::io::ErrorKind::TimedOut));
        assert!(timed_out.contains("reachable"), "{timed_out}");
    }

    #[test]
    fn a_connect_error_is_a_redis_error_and_keeps_permission_denied() {
        let err = LockError::connect("h:1", io(std::io::ErrorKind::ConnectionRefused));
        assert!(err.is_connect() && err.is_redis() && err.may_pass());
        let forbidden = LockError::connect(
            "h:1",
            redis::RedisError::from((
                redis::ErrorKind::Client,
                "Redis server refused to switch database",
                "NOPERM User nosel has no permissions to run the 'select' command".to_owned(),
            )),
        );
        assert!(forbidden.is_permission_denied(), "{forbidden}");
    }

    #[test]
    fn busy_is_contention_and_not_an_outage() {
        let short = |got, held_elsewhere| LockError::QuorumNotReached {
            got,
            needed: 3,
            held_elsewhere,
        };
        assert!(short(2, 3).is_busy(), "a majority held by another owner");
        assert!(short(2, 2).is_busy(), "a split vote, one node silent");
        assert!(
            short(1, 2).is_busy(),
            "a majority answered; another owner stood in the way"
        );
        assert!(!short(1, 1).is_busy(), "three nodes silent: out of reach");
        assert!(!short(2, 0).is_busy(), "three nodes silent");
        assert!(!short(0, 0).is_busy());
        let timeout = LockError::timeout("n".into(), std::time::Duration::ZERO);
        assert!(timeout.is_busy());
    }
}
