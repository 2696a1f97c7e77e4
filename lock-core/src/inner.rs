//! The state every internal operation works on: one [`Inner`] per client, shared
//! as `Arc<Inner>` by the client's clones, its guards and its requests. Internal
//! code takes `&Arc<Inner>`, never the public `LockClient`.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::DropGuard;

use crate::backend::link::Links;
use crate::backend::sentinel::NodeOptions;
use crate::backend::tls::TlsCertificates;
use crate::backend::Backend;
use crate::batch::{self, Acquisition, Batcher, Item};
use crate::detach::{Background, Counted};
use crate::error::LockError;
use crate::keys::{Kind, LockKeys};
use crate::ops::{self, Operators};
use crate::owner::Owner;
use crate::scripts::Scripts;
use crate::waiters::Waiters;
use crate::watchdog::Watchdog;
use crate::who::Describer;

/// Numbers clients apart within the process (the lock context's key).
static NEXT_CLIENT_ID: AtomicU64 = AtomicU64::new(1);

/// The settings of a client: plain values, made and checked by the builder (which
/// also gives their defaults), fed to connecting (`connect.rs`), and kept by the
/// client it makes.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// The certificates of `tls_root_ca` and `tls_client_cert`, when set (read
    /// from their PEM when the builder connects).
    pub(crate) certs: Option<TlsCertificates>,
    pub(crate) namespace: String,
    /// The service the connections are named after.
    pub(crate) service: String,
    pub(crate) default_wait: Duration,
    pub(crate) default_lease: Duration,
    pub(crate) fencing: bool,
    pub(crate) group_commit: bool,
    /// Whether each acquisition names its holder (else its first renewal does).
    pub(crate) name_at_once: bool,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) replicas: Option<(u32, Duration)>,
    pub(crate) redlock_node_timeout: Duration,
    /// How to reach the data nodes behind Sentinel.
    pub(crate) sentinel_node: NodeOptions,
    pub(crate) max_hold: Option<Duration>,
    /// The operator features' settings.
    pub(crate) operators: ops::Settings,
}

/// The shortest and longest a final release is remembered (four response
/// timeouts in between), for its retry to be told apart from a lost one.
const MIN_REMEMBER: Duration = Duration::from_secs(1);
const MAX_REMEMBER: Duration = Duration::from_secs(60);

impl Settings {
    /// How long a final release is remembered for its retry (`release.lua`'s
    /// `ARGV[2]`): well past the response timeout, after which a retry is sent.
    pub(crate) fn remember_release(&self) -> Duration {
        (self.response_timeout * 4).clamp(MIN_REMEMBER, MAX_REMEMBER)
    }
}

/// One client's connections, scripts, background tasks and id counters.
pub(crate) struct Inner {
    /// Unique within the process.
    pub(crate) id: u64,
    /// The random part of every owner id of this client.
    uuid: String,
    pub(crate) backend: Backend,
    /// Every connection's name and state, and which server answers at each address:
    /// new acquisitions wait while the holds of a replaced server are checked.
    pub(crate) links: Arc<Links>,
    pub(crate) scripts: Arc<Scripts>,
    pub(crate) config: Settings,
    /// Whether a server of the client persists nothing (read at connect): fencing
    /// asked for by a request of a client without fencing is warned of once.
    persists_nothing: bool,
    owners: AtomicU64,
    holds: AtomicU64,
    pub(crate) waiters: Waiters,
    pub(crate) watchdog: Watchdog,
    /// Sends releases: in batches on one endpoint, one by one on a cluster or Redlock.
    pub(crate) batcher: Arc<Batcher<Item>>,
    /// Sends new acquisitions, as `batcher` sends releases.
    pub(crate) acquisitions: Arc<Batcher<Acquisition>>,
    /// The operator features (`ops/`), called at their fixed points.
    pub(crate) ops: Arc<Operators>,
    /// What this client writes of its holders (see `who.rs`).
    pub(crate) who: Describer,
    /// Releases of dropped guards on their way: a shutdown waits for them.
    pub(crate) background: Arc<Background>,
    /// Acquisitions and re-entries under way, from their first check that the client
    /// is open until they return: a shutdown waits for them, so that none yields a
    /// guard after it (see `admit` in `acquire/grant.rs`).
    pub(crate) attempts: Arc<Background>,
    /// Holds granted to acquisitions after the shutdown began, and given back at
    /// once instead of becoming guards: the shutdown's report counts them.
    given_back_late: AtomicUsize,
    /// Set by the client's shutdown: no new acquisition from then on.
    closing: AtomicBool,
    /// Whether a request's own fencing against a server that persists nothing was
    /// warned of (once per client; a client with fencing on warns at connect).
    fencing_warned: AtomicBool,
    /// Whether a wait for a lock this client holds in another call chain was
    /// warned of (once per client).
    self_wait_warned: AtomicBool,
    /// Stops the background tasks when the last clone, guard and request are gone.
    _shutdown: DropGuard,
}

impl Inner {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        backend: Backend,
        links: Arc<Links>,
        scripts: Arc<Scripts>,
        config: Settings,
        persists_nothing: bool,
        waiters: Waiters,
        watchdog: Watchdog,
        ops: Arc<Operators>,
        shutdown: DropGuard,
    ) -> Self {
        let one_endpoint = !backend.is_redlock() && !backend.first().is_cluster();
        let batches = one_endpoint && config.group_commit;
        let batcher = Arc::new(batch::releases(
            &scripts,
            backend.publish_command(),
            config.remember_release().as_millis() as u64,
            batches,
        ));
        let acquisitions = Arc::new(batch::acquisitions(&scripts, batches));
        let who = Describer::new(&config.service);
        Self {
            id: NEXT_CLIENT_ID.fetch_add(1, Ordering::Relaxed),
            uuid: client_id(uuid::Uuid::new_v4()),
            backend,
            links,
            scripts,
            config,
            persists_nothing,
            owners: AtomicU64::new(0),
            holds: AtomicU64::new(0),
            waiters,
            watchdog,
            batcher,
            acquisitions,
            ops,
            who,
            background: Arc::default(),
            attempts: Arc::default(),
            given_back_late: AtomicUsize::new(0),
            closing: AtomicBool::new(false),
            fencing_warned: AtomicBool::new(false),
            self_wait_warned: AtomicBool::new(false),
            _shutdown: shutdown,
        }
    }

    /// Refuses every new acquisition from now on (the client's shutdown).
    pub(crate) fn close(&self) {
        self.closing.store(true, Ordering::Release);
    }

    /// `Err(ClientShutDown)` once the client was shut down: no new acquisition of
    /// `name` is made.
    pub(crate) fn check_open(&self, name: impl FnOnce() -> String) -> Result<(), LockError> {
        if self.is_closed() {
            return Err(LockError::ClientShutDown { name: name() });
        }
        Ok(())
    }

    /// Starts an acquisition (or a re-entry) of `name`: `Err(ClientShutDown)` once the
    /// client was shut down; else a token that the shutdown waits for, held until
    /// the acquisition returns.
    pub(crate) fn start_attempt(
        &self,
        name: impl FnOnce() -> String,
    ) -> Result<Counted, LockError> {
        // Counted before the check: a shutdown that closes the client after the
        // check sees this attempt and waits for it.
        let counted = self.attempts.count();
        self.check_open(name)?;
        Ok(counted)
    }

    /// Whether the client's shutdown has begun.
    pub(crate) fn is_closed(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// `holds` holds that a grant made after the shutdown began gave back at once.
    pub(crate) fn gave_back_late(&self, holds: usize) {
        self.given_back_late.fetch_add(holds, Ordering::AcqRel);
    }

    /// The holds given back by grants made after the shutdown began, since the last
    /// call (the shutdown's report counts them once).
    pub(crate) fn take_given_back_late(&self) -> usize {
        self.given_back_late.swap(0, Ordering::AcqRel)
    }

    /// The service the client works for, as `LockClientBuilder::service` set it
    /// (or the executable's name).
    pub(crate) fn service(&self) -> &str {
        &self.config.service
    }

    /// The Redis keys of the lock `name` in this client's namespace.
    pub(crate) fn keys(&self, name: &[u8]) -> Result<Arc<LockKeys>, LockError> {
        self.keys_of(name, Kind::Exclusive)
    }

    /// The Redis keys of the lock `name`, taken as `kind`.
    pub(crate) fn keys_of(&self, name: &[u8], kind: Kind) -> Result<Arc<LockKeys>, LockError> {
        LockKeys::new(&self.config.namespace, name).map(|keys| Arc::new(LockKeys { kind, ..keys }))
    }

    /// A request waits for lock `name`, which the same Tokio task holds in another
    /// call chain (taken at `site`): says so once per client, at WARN, with what
    /// re-enters.
    pub(crate) fn waits_for_itself(&self, name: &str, site: &str) {
        if !self.self_wait_warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                lock.name = %name,
                held_at = %site,
                "distlock: this task waits for lock `{name}`, which it holds itself in \
                 another call chain (taken at {site}), so only the timeout ends the wait unless \
                 the guard went to another task; a nested acquisition re-enters only inside \
                 the holder's scope (`guard.scope(..)`, or `LockContext::current()` carried \
                 into a spawned task)"
            );
        }
    }

    /// A request asks for fencing tokens: when the client itself has fencing off
    /// and a server persists nothing, says so once (as a client with fencing on
    /// does at connect).
    pub(crate) fn fencing_asked(&self) {
        if self.persists_nothing
            && !self.config.fencing
            && !self.fencing_warned.swap(true, Ordering::Relaxed)
        {
            warn_of_no_persistence();
        }
    }

    /// A fresh, unguessable owner id: `<client id>:<counter>`, the client id 22
    /// characters of a random UUID (see [`client_id`]).
    pub(crate) fn next_owner(&self) -> Arc<Owner> {
        let n = self.owners.fetch_add(1, Ordering::Relaxed);
        Owner::new(format!("{}:{n}", self.uuid).into())
    }

    /// A fresh hold id, the watchdog's key.
    pub(crate) fn next_hold_id(&self) -> u64 {
        self.holds.fetch_add(1, Ordering::Relaxed)
    }
}

/// A client's id: the 128 bits of `uuid` in 22 characters of `[0-9A-Za-z_-]`
/// (never `#`, which starts the layout's own fields). Shorter than the UUID's hex,
/// as it is part of every holder's field names (`layout/`).
fn client_id(uuid: uuid::Uuid) -> String {
    const DIGITS: &[u8; 64] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-_";
    let mut bits = uuid.as_u128();
    (0..22)
        .map(|_| {
            let digit = DIGITS[(bits & 63) as usize];
            bits >>= 6;
            char::from(digit)
        })
        .collect()
}

/// Warns that fencing is used against a server that persists nothing: said once
/// per client, at connect (fencing on) or at the first request that asks for it.
pub(crate) fn warn_of_no_persistence() {
    tracing::warn!(
        "distlock: fencing is on, but this Redis persists nothing (appendonly no, no save \
         schedule): a restart loses every lock (fencing tokens stay unique); use \
         `appendonly yes` on servers that hold fenced locks"
    );
}

#[cfg(test)]
mod tests {
    use super::client_id;

    #[test]
    fn client_ids_are_22_characters_of_the_whole_uuid() {
        let a = client_id(uuid::Uuid::from_u128(u128::MAX));
        assert_eq!(a, format!("{}3", "_".repeat(21)));
        let b = client_id(uuid::Uuid::from_u128(u128::MAX - 1));
        assert_ne!(a, b);
        assert_eq!(client_id(uuid::Uuid::from_u128(0)), "0".repeat(22));
    }
}
