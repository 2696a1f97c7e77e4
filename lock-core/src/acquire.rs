//! Taking a lock: the request builders, the acquire loop, re-entry, and the
//! machinery that keeps a dropped request from leaving a hold behind.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::Conn;
use crate::client::{outcome_unknown, LockClient, MAX_LEASE, MIN_LEASE};
use crate::context::LockContext;
use crate::faults::{self, Fault};
use crate::guard::{HeldLock, Hold, HoldState, LockGuard};
use crate::name::LockKeys;
use crate::scripts::{unexpected_reply, AcquireReply};
use crate::LockError;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// How long a waiter pauses after a transient failure before asking again.
const TRANSIENT_PAUSE: Duration = Duration::from_millis(100);

/// Whether an error may pass by itself (a failover, a restart, a lost connection),
/// so that a waiter with time left should ask again rather than give up.
fn transient(err: &LockError) -> bool {
    let LockError::Redis(err) = err else {
        return false;
    };
    err.is_io_error()
        || err.is_timeout()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_cluster_error()
        || matches!(
            err.code(),
            Some("CLUSTERDOWN" | "TRYAGAIN" | "READONLY" | "LOADING" | "MASTERDOWN")
        )
}

/// Whether a waiter with time left should ask again after `err`: a transient
/// failure, or too few replica acknowledgements (the hold was given back; replicas
/// resyncing after a failover, or lagging for a moment, catch up).
fn may_pass(err: &LockError) -> bool {
    transient(err) || matches!(err, LockError::ReplicationNotConfirmed { .. })
}

/// How long a waiter sleeps when the holder's lease has no expiry to cap it.
const UNKNOWN_LEASE_CAP: Duration = Duration::from_secs(1);

/// A request for a lock, made by [`LockClient::lock`]. Await it to get the guard.
///
/// # Errors
///
/// - [`LockError::Timeout`]: another owner held the lock for the whole wait.
/// - [`LockError::InvalidName`], [`LockError::InvalidOption`]: refused before anything
///   was sent to Redis.
/// - [`LockError::Lost`]: a re-entry found that the chain's hold was lost.
/// - [`LockError::KeyConflict`]: the lock's key holds another type (left untouched).
/// - [`LockError::QuorumNotReached`]: on Redlock, the wait ended without a majority
///   of grants (another owner held the lock on the other nodes, or they did not
///   answer); where one server gives [`LockError::Timeout`].
/// - [`LockError::ReplicationNotConfirmed`]: too few replicas acknowledged the new
///   lock in time (see [`LockClientBuilder::replicas`](crate::LockClientBuilder::replicas))
///   on the last attempt of the wait; each refused lock was released.
/// - [`LockError::PermissionDenied`]: the Redis user may not run the scripts.
/// - [`LockError::Redis`]: Redis failed or could not be reached (a waiter with time left
///   retries failures that may pass, such as a failover, within its wait).
///
/// # Cancel safety
///
/// Dropping the future at any point leaves no hold that no guard owns: a request in
/// flight is run to completion in a background task, and the hold it took (if any) is
/// given back. A hold count is never decremented that this request did not add.
#[must_use = "a lock request does nothing until it is awaited"]
pub struct LockRequest {
    client: LockClient,
    keys: Result<Arc<LockKeys>, LockError>,
    wait: Option<Duration>,
    lease: Option<Duration>,
    fencing: Option<bool>,
}

impl LockRequest {
    pub(crate) fn new(client: LockClient, keys: Result<Arc<LockKeys>, LockError>) -> Self {
        Self {
            client,
            keys,
            wait: None,
            lease: None,
            fencing: None,
        }
    }

    /// How long to wait while another owner holds the lock; zero fails at once.
    /// Default: the client's [`default_wait`](crate::LockClientBuilder::default_wait).
    /// Re-entries never wait.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// A fixed lease: the lock ends after `lease` unless released before, and no
    /// watchdog renews it; the guard reports the loss when it ends. From
    /// [`MIN_LEASE`] to [`MAX_LEASE`] (whole milliseconds). Default: a watchdog lease.
    ///
    /// On a re-entry, the lease of the outermost acquisition stays in charge; a fixed
    /// lease here can only lengthen it.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Whether the first acquisition issues a fencing token. Default: the client's
    /// [`fencing`](crate::LockClientBuilder::fencing). Re-entries keep the token (or
    /// its absence) of the outermost acquisition.
    pub fn fencing(mut self, fencing: bool) -> Self {
        self.fencing = Some(fencing);
        self
    }
}

impl fmt::Debug for LockRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockRequest")
            .field("name", &self.keys.as_ref().map(|keys| keys.display()).ok())
            .field("wait", &self.wait)
            .field("lease", &self.lease)
            .field("fencing", &self.fencing)
            .finish()
    }
}

/// The future of a [`LockRequest`]: resolves to the guard, or to why there is none.
///
/// # Cancel safety
///
/// As [`LockRequest`]: dropping it at any point leaves no hold that no guard owns.
#[must_use = "futures do nothing unless polled"]
pub struct LockFuture {
    inner: BoxFuture<Result<LockGuard, LockError>>,
}

impl Future for LockFuture {
    type Output = Result<LockGuard, LockError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl fmt::Debug for LockFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockFuture").finish_non_exhaustive()
    }
}

impl IntoFuture for LockRequest {
    type Output = Result<LockGuard, LockError>;
    type IntoFuture = LockFuture;

    fn into_future(self) -> LockFuture {
        LockFuture {
            inner: Box::pin(acquire(self)),
        }
    }
}

/// A request that does not wait, made by [`LockClient::try_lock`]. Await it: `Ok(None)`
/// means another owner holds the lock.
///
/// # Errors
///
/// As [`LockRequest`], except that a busy lock is `Ok(None)`, not an error: on one
/// server a lock held by another owner; on Redlock, a majority missed because
/// other owners held some of the nodes that answered ([`LockError::is_busy`]; too
/// few answers is still [`LockError::QuorumNotReached`]).
///
/// # Cancel safety
///
/// As [`LockRequest`]: a dropped request leaves no hold behind.
#[must_use = "a lock request does nothing until it is awaited"]
#[derive(Debug)]
pub struct TryLockRequest {
    request: LockRequest,
}

impl TryLockRequest {
    pub(crate) fn new(request: LockRequest) -> Self {
        Self {
            request: request.wait(Duration::ZERO),
        }
    }

    /// A fixed lease, as [`LockRequest::lease`].
    pub fn lease(mut self, lease: Duration) -> Self {
        self.request = self.request.lease(lease);
        self
    }

    /// Whether to issue a fencing token, as [`LockRequest::fencing`].
    pub fn fencing(mut self, fencing: bool) -> Self {
        self.request = self.request.fencing(fencing);
        self
    }
}

impl IntoFuture for TryLockRequest {
    type Output = Result<Option<LockGuard>, LockError>;
    type IntoFuture = BoxFuture<Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        let request = self.request.into_future();
        Box::pin(async move {
            match request.await {
                Ok(guard) => Ok(Some(guard)),
                Err(err) if err.is_busy() => Ok(None),
                Err(err) => Err(err),
            }
        })
    }
}

/// A lease as whole milliseconds, if it is in range.
pub(crate) fn lease_millis(option: &'static str, lease: Duration) -> Result<u64, LockError> {
    if faults::active(Fault::LeaseNotValidated) {
        return Ok(lease.as_millis() as u64);
    }
    if lease < MIN_LEASE || lease > MAX_LEASE {
        return Err(LockError::invalid_option(
            option,
            format!("{lease:?} is out of range; use {MIN_LEASE:?} to {MAX_LEASE:?}"),
        ));
    }
    // In range, so it fits.
    Ok(lease.as_millis() as u64)
}

async fn acquire(request: LockRequest) -> Result<LockGuard, LockError> {
    let LockRequest {
        client,
        keys,
        wait,
        lease,
        fencing,
    } = request;
    let keys = keys?;
    let (lease, watchdog) = match lease {
        Some(lease) => (Duration::from_millis(lease_millis("lease", lease)?), false),
        None => (client.default_lease(), true),
    };
    let wait = wait.unwrap_or(client.default_wait());
    let start = Instant::now();
    let deadline = start.checked_add(wait).ok_or_else(|| {
        LockError::invalid_option(
            "wait",
            format!("{wait:?} is too long to wait (the deadline overflows); use a shorter wait"),
        )
    })?;
    let fencing = fencing.unwrap_or(client.fencing());
    if fencing && client.inner.backend.is_redlock() {
        return Err(LockError::invalid_option(
            "fencing",
            "fencing tokens are not available on Redlock; use a single server, Sentinel or a \
             cluster where fencing matters",
        ));
    }
    let context = LockContext::current();
    let span = tracing::debug_span!(
        "distlock.acquire",
        lock.name = %keys.display(),
        lock.waited_ms = tracing::field::Empty,
        lock.hold_count = tracing::field::Empty,
    );
    async move {
        let result = match context.find(client.inner.id, &keys) {
            Some(held) => {
                let held = held.clone();
                reenter(&client, held, &context, lease, watchdog).await
            }
            None => {
                let mode = Mode {
                    lease,
                    watchdog,
                    fencing,
                };
                acquire_new(&client, keys, &context, mode, start, deadline).await
            }
        };
        let span = tracing::Span::current();
        span.record("lock.waited_ms", start.elapsed().as_millis() as u64);
        if let Ok(guard) = &result {
            span.record("lock.hold_count", guard.hold_count());
        }
        result
    }
    .instrument(span)
    .await
}

#[derive(Debug, Clone, Copy)]
struct Mode {
    lease: Duration,
    watchdog: bool,
    fencing: bool,
}

async fn acquire_new(
    client: &LockClient,
    keys: Arc<LockKeys>,
    context: &LockContext,
    mode: Mode,
    start: Instant,
    deadline: Instant,
) -> Result<LockGuard, LockError> {
    let mut owner = client.next_owner();
    let lease_ms = mode.lease.as_millis() as u64;
    // The lease as this client may count on it: less the clock drift between the
    // client and the servers.
    let validity = mode.lease.saturating_sub(drift(mode.lease));
    // Queue behind the local waiters of this lock, if there are any: listening
    // before asking means that a release after this attempt wakes us.
    let mut subscription = client.inner.subscriber.join(&keys.channel);
    // Redlock: the last attempt got too few grants (granted, held by another owner).
    let mut short_of_quorum = None;
    // The failure of the last attempt, when it was one that may pass.
    let mut retried_after = None;
    loop {
        // A wake-up before this attempt is used up by it: its reply reflects the release.
        if let Some(subscription) = &subscription {
            subscription.rearm();
        }

        let sent = Instant::now();
        let call = AcquireCall {
            client,
            keys: &keys,
            owner: &owner,
            lease_ms,
            fencing: mode.fencing,
            reentry: false,
        };
        // A wait bounds the round trip too: a server that does not answer in time
        // (paused, overloaded) is a lock not had within the wait. A request cut
        // short here is finished, and its hold given back, in the background.
        let answer = if deadline > sent {
            tokio::time::timeout_at(deadline, call.run()).await
        } else {
            Ok(call.run().await)
        };
        let Ok(answer) = answer else {
            // The wait ended during an attempt: the failure that made us ask again,
            // if there was one, says more than a timeout.
            return Err(retried_after.unwrap_or_else(|| LockError::Timeout {
                name: keys.display(),
                waited: start.elapsed(),
            }));
        };
        let reply = match answer {
            Ok(reply) => reply,
            Err(err) if may_pass(&err) && Instant::now() + TRANSIENT_PAUSE < deadline => {
                // A failover, a restart, a dropped connection, replicas resyncing: wait
                // and ask again, under a fresh owner id (the old one's attempt is
                // settled in the background).
                tracing::debug!(error = %err, lock.name = %keys.display(), "distlock: acquire failed; retrying within the wait");
                retried_after = Some(err);
                owner = client.next_owner();
                tokio::time::sleep(TRANSIENT_PAUSE).await;
                continue;
            }
            Err(err) => return Err(err),
        };
        retried_after = None;
        match reply {
            AcquireReply::Acquired { count, fence } => {
                let late = Instant::now() >= sent + validity;
                if late && !faults::active(Fault::NoPostReplyLeaseCheck) {
                    // The reply came after the lease could have ended: the lock may
                    // already belong to someone else. Give it back and try again.
                    tracing::debug!(lock.name = %keys.display(), "distlock: acquire reply arrived after the lease; retrying");
                    client.release_owner_in_background(keys.clone(), owner.clone(), lease_ms);
                    if Instant::now() >= deadline {
                        return Err(LockError::Timeout {
                            name: keys.display(),
                            waited: start.elapsed(),
                        });
                    }
                } else {
                    let hold = Arc::new(Hold::new(
                        client.next_hold_id(),
                        client.inner.id,
                        keys,
                        owner,
                        (fence > 0).then_some(fence),
                        HoldState {
                            guards: 1,
                            deadline: sent + validity,
                            watchdog: mode.watchdog,
                            lease: mode.lease,
                            next_renew: sent + mode.lease / 3,
                        },
                    ));
                    client.inner.watchdog.register(hold.clone());
                    if let Some(subscription) = subscription.take() {
                        subscription.settle();
                    }
                    let held = HeldLock { hold, count };
                    return Ok(LockGuard {
                        client: client.clone(),
                        context: context.with(held.clone()),
                        held,
                        released: false,
                    });
                }
            }
            reply @ (AcquireReply::Busy { .. } | AcquireReply::NoQuorum { .. }) => {
                let pttl_ms = match reply {
                    AcquireReply::NoQuorum {
                        granted,
                        held,
                        retry_ms,
                    } => {
                        short_of_quorum = Some((granted, held));
                        retry_ms
                    }
                    AcquireReply::Busy { pttl_ms } => {
                        short_of_quorum = None;
                        pttl_ms
                    }
                    _ => 0,
                };
                let now = Instant::now();
                if now >= deadline {
                    if let Some((granted, held)) = short_of_quorum {
                        return Err(LockError::QuorumNotReached {
                            got: usize::try_from(granted).unwrap_or(usize::MAX),
                            needed: client.inner.backend.quorum(),
                            held_elsewhere: usize::try_from(held).unwrap_or(usize::MAX),
                        });
                    }
                    return Err(LockError::Timeout {
                        name: keys.display(),
                        waited: now - start,
                    });
                }
                if subscription.is_none() {
                    let subscribe = client.inner.subscriber.subscribe(&keys.channel);
                    match tokio::time::timeout(deadline - now, subscribe).await {
                        Ok(Ok(subscribed)) => {
                            subscription = Some(subscribed);
                            continue;
                        }
                        Ok(Err(err)) => {
                            tracing::debug!(error = %err, "distlock: could not subscribe; waiting for the lease instead");
                        }
                        Err(_) => continue,
                    }
                }
                let hint = u64::try_from(pttl_ms)
                    .ok()
                    .filter(|ms| *ms > 0)
                    .map_or(UNKNOWN_LEASE_CAP, Duration::from_millis);
                let sleep = hint.min(deadline - Instant::now());
                let waited = async {
                    match &subscription {
                        Some(subscription) => {
                            let _ = tokio::time::timeout(sleep, subscription.notified()).await;
                        }
                        None => tokio::time::sleep(sleep).await,
                    }
                };
                waited
                    .instrument(tracing::trace_span!(
                        "distlock.wait",
                        lock.pttl_ms = pttl_ms
                    ))
                    .await;
            }
            AcquireReply::NotHeld => {
                return Err(unexpected_reply("acquire.lua", &[-1]).into());
            }
            AcquireReply::Conflict => {
                return Err(LockError::KeyConflict {
                    name: keys.display(),
                })
            }
        }
    }
}

async fn reenter(
    client: &LockClient,
    held: HeldLock,
    context: &LockContext,
    lease: Duration,
    watchdog: bool,
) -> Result<LockGuard, LockError> {
    let hold = held.hold;
    if hold.is_lost() {
        return Err(hold.lost_error());
    }
    let lease = if watchdog { hold.state().lease } else { lease };
    let sent = Instant::now();
    let call = AcquireCall {
        client,
        keys: &hold.keys,
        owner: &hold.owner,
        lease_ms: lease.as_millis() as u64,
        fencing: false,
        reentry: true,
    };
    match call.run().await? {
        AcquireReply::Acquired { count, .. } => {
            client
                .inner
                .watchdog
                .guard_added(&hold, sent + lease.saturating_sub(drift(lease)));
            let held = HeldLock { hold, count };
            Ok(LockGuard {
                client: client.clone(),
                context: context.with(held.clone()),
                held,
                released: false,
            })
        }
        AcquireReply::NotHeld | AcquireReply::Busy { .. } | AcquireReply::NoQuorum { .. } => {
            hold.mark_lost("a re-entry found the lock no longer held by its owner");
            Err(hold.lost_error())
        }
        AcquireReply::Conflict => Err(LockError::KeyConflict {
            name: hold.display.to_string(),
        }),
    }
}

/// One run of `acquire.lua`.
struct AcquireCall<'a> {
    client: &'a LockClient,
    keys: &'a Arc<LockKeys>,
    owner: &'a Arc<str>,
    lease_ms: u64,
    fencing: bool,
    reentry: bool,
}

impl AcquireCall<'_> {
    /// Sends the script; if the caller drops the future mid-flight, the request runs
    /// to completion in the background and a hold it took is given back. If the
    /// reply is lost, the same attempt is replayed in the background until its outcome
    /// is known, and a hold it took is given back.
    async fn run(self) -> Result<AcquireReply, LockError> {
        let attempt = self.client.next_attempt();
        let invoke = Invoke {
            client: self.client.clone(),
            keys: self.keys.clone(),
            owner: self.owner.clone(),
            lease_ms: self.lease_ms,
            fencing: self.fencing,
            reentry: self.reentry,
            attempt,
        };
        let abandoned = invoke.clone();
        let call = Detached::new(Box::pin(invoke.clone().send_acked()), move |result| {
            Box::pin(abandoned.settle(result.map(|(reply, _)| reply)))
        });
        match call.await {
            Ok((reply, acked)) => {
                let decoded = AcquireReply::decode(&reply)
                    .ok_or_else(|| unexpected_reply("acquire.lua", &reply))?;
                if let (AcquireReply::Acquired { .. }, Some(acked)) = (decoded, acked) {
                    let needed = self.client.inner.config.replicas.map_or(0, |(n, _)| n);
                    if acked < i64::from(needed) {
                        // Too few replicas have the lock: a failover could lose it.
                        invoke.release().await;
                        return Err(LockError::ReplicationNotConfirmed {
                            acked: u32::try_from(acked).unwrap_or(0),
                            needed,
                        });
                    }
                }
                Ok(decoded)
            }
            Err(err) => {
                if outcome_unknown(&err) {
                    spawn(invoke.resolve());
                }
                Err(err.into())
            }
        }
    }
}

/// Everything needed to send (or replay) one acquire attempt.
#[derive(Clone)]
struct Invoke {
    client: LockClient,
    keys: Arc<LockKeys>,
    owner: Arc<str>,
    lease_ms: u64,
    fencing: bool,
    reentry: bool,
    attempt: u64,
}

impl Invoke {
    async fn send(self) -> redis::RedisResult<Vec<i64>> {
        self.send_acked().await.map(|(reply, _)| reply)
    }

    /// Sends the attempt to the backend: one endpoint, or every Redlock node.
    async fn send_acked(self) -> redis::RedisResult<(Vec<i64>, Option<i64>)> {
        if self.client.inner.backend.is_redlock() {
            return self.send_redlock().await.map(|reply| (reply, None));
        }
        let conn = self.client.inner.backend.first();
        self.send_to(conn).await
    }

    /// Sends the attempt to one endpoint; when the client wants replica
    /// acknowledgements and this is a first acquisition, `WAIT` goes in the same
    /// pipeline (it counts only the writes of its own connection) and its answer
    /// comes back too.
    async fn send_to(self, mut conn: Conn) -> redis::RedisResult<(Vec<i64>, Option<i64>)> {
        let scripts = &self.client.inner.scripts;
        let mut invocation = scripts.acquire.prepare_invoke();
        invocation
            .key(&self.keys.lock)
            .key(&self.keys.fence)
            .arg(&*self.owner)
            .arg(self.lease_ms)
            .arg(u8::from(self.fencing))
            .arg(self.attempt)
            .arg(u8::from(self.reentry));
        let replicas = self.client.inner.config.replicas.filter(|_| !self.reentry);
        let Some((needed, timeout)) = replicas else {
            return Ok((invocation.invoke_async(&mut conn).await?, None));
        };
        let mut pipe = redis::pipe();
        pipe.cmd("EVALSHA")
            .arg(scripts.acquire.get_hash())
            .arg(2)
            .arg(&self.keys.lock)
            .arg(&self.keys.fence)
            .arg(&*self.owner)
            .arg(self.lease_ms)
            .arg(u8::from(self.fencing))
            .arg(self.attempt)
            .arg(u8::from(self.reentry))
            .cmd("WAIT")
            .arg(needed)
            .arg(timeout.as_millis() as u64);
        let result: redis::RedisResult<(Vec<i64>, i64)> = pipe.query_async(&mut conn).await;
        let (reply, acked) = match result {
            Err(err)
                if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
            {
                invocation.load_async(&mut conn).await?;
                pipe.query_async(&mut conn).await?
            }
            other => other?,
        };
        Ok((reply, Some(acked)))
    }

    /// Redlock: the attempt goes to every node at once. It is granted when a
    /// majority granted it; otherwise every grant is given back before answering.
    /// The answer has the shape of `acquire.lua`'s, except that too few grants is
    /// `{-3, granted, held by another owner, retry in ms}`.
    async fn send_redlock(self) -> redis::RedisResult<Vec<i64>> {
        let backend = self.client.inner.backend.clone();
        let replies = backend
            .each(|conn| {
                let invoke = self.clone();
                async move { invoke.send_to(conn).await.map(|(reply, _)| reply) }
            })
            .await;
        let decoded: Vec<Option<AcquireReply>> = replies
            .iter()
            .map(|reply| {
                reply
                    .as_ref()
                    .ok()
                    .and_then(|reply| AcquireReply::decode(reply))
            })
            .collect();
        let granted: Vec<usize> = (0..decoded.len())
            .filter(|&i| matches!(decoded[i], Some(AcquireReply::Acquired { .. })))
            .collect();
        let quorum = backend.quorum();
        if granted.len() >= quorum {
            let count = decoded
                .iter()
                .filter_map(|reply| match reply {
                    Some(AcquireReply::Acquired { count, .. }) => Some(*count),
                    _ => None,
                })
                .max()
                .unwrap_or(1);
            return Ok(vec![1, i64::try_from(count).unwrap_or(i64::MAX), 0]);
        }
        // Too few: give back what this attempt took, wherever it may have taken it.
        for (index, reply) in replies.iter().enumerate() {
            let conn = backend.nodes()[index].clone();
            if granted.contains(&index) {
                self.release_on(conn).await;
            } else if matches!(reply, Err(err) if outcome_unknown(err)) {
                spawn(self.clone().resolve_on(conn));
            }
        }
        if decoded.contains(&Some(AcquireReply::Conflict)) {
            return Ok(vec![-2]);
        }
        if self.reentry {
            return Ok(vec![-1]);
        }
        let busy: Vec<i64> = decoded
            .iter()
            .filter_map(|reply| match reply {
                Some(AcquireReply::Busy { pttl_ms }) => Some(*pttl_ms),
                _ => None,
            })
            .collect();
        // Held by a majority elsewhere: wait for its release (or its lease). Too few
        // answers, or a split vote: everyone gave back, so try again after a short
        // random delay.
        let retry_ms = if busy.len() >= quorum {
            busy.iter()
                .copied()
                .filter(|ms| *ms > 0)
                .min()
                .unwrap_or(-1)
        } else {
            retry_delay_ms()
        };
        Ok(vec![-3, granted.len() as i64, busy.len() as i64, retry_ms])
    }

    /// Gives back this attempt's hold on one node.
    async fn release_on(&self, conn: Conn) {
        let scripts = self.client.inner.scripts.clone();
        let keys = [self.keys.lock.clone(), self.keys.channel.clone()];
        let publish = self.client.inner.backend.publish_command();
        let attempt = self.client.next_attempt();
        let result = crate::client::release_on(
            conn,
            scripts,
            keys,
            self.owner.to_string(),
            self.lease_ms,
            attempt,
            publish,
        )
        .await;
        if let Err(err) = result {
            tracing::debug!(error = %err, "distlock: could not give back a Redlock node's grant; its lease will end it");
        }
    }

    /// Replays the attempt on one node until its outcome is known, and gives back
    /// the grant if there was one.
    async fn resolve_on(self, conn: Conn) {
        for round in 1..=5u32 {
            tokio::time::sleep(Duration::from_millis(50) * round).await;
            match self.clone().send_to(conn.clone()).await {
                Ok((reply, _)) => {
                    if let Some(AcquireReply::Acquired { .. }) = AcquireReply::decode(&reply) {
                        self.release_on(conn).await;
                    }
                    return;
                }
                Err(err) if outcome_unknown(&err) => continue,
                Err(_) => return,
            }
        }
    }

    /// Gives back the hold that an abandoned attempt took, if it took one.
    async fn settle(self, result: redis::RedisResult<Vec<i64>>) {
        match result {
            Ok(reply) => {
                if let Some(AcquireReply::Acquired { .. }) = AcquireReply::decode(&reply) {
                    self.release().await;
                }
            }
            Err(err) if outcome_unknown(&err) => self.resolve().await,
            Err(_) => {}
        }
    }

    /// Replays the attempt (a no-op if it was applied) until the outcome is known,
    /// then gives back the hold if there is one.
    async fn resolve(self) {
        for round in 1..=5u32 {
            tokio::time::sleep(Duration::from_millis(50) * round).await;
            match self.clone().send().await {
                Ok(reply) => {
                    if let Some(AcquireReply::Acquired { .. }) = AcquireReply::decode(&reply) {
                        self.release().await;
                    }
                    return;
                }
                Err(err) if outcome_unknown(&err) => continue,
                Err(_) => return,
            }
        }
        tracing::debug!(lock.name = %self.keys.display(), "distlock: outcome of a lost acquire unknown; its lease will end it");
    }

    async fn release(&self) {
        let result = self
            .client
            .release_owner(&self.keys, &self.owner, self.lease_ms)
            .await;
        if let Err(err) = result {
            tracing::debug!(error = %err, "distlock: could not give back an abandoned hold; its lease will end it");
        }
    }
}

/// How much clock drift between client and servers a lease allows for: 1 % of it
/// plus 2 ms, as the Redlock analysis suggests.
pub(crate) fn drift(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// A short random delay before retrying after a split Redlock vote, in ms (5 to 50).
fn retry_delay_ms() -> i64 {
    5 + (uuid::Uuid::new_v4().as_u128() % 46) as i64
}

/// Spawns `fut` on the current runtime, if there is one.
pub(crate) fn spawn(fut: impl Future<Output = ()> + Send + 'static) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(fut);
    }
}

/// A request in flight that must not be lost with its caller: if the future is
/// dropped before it completes, the request runs to completion in a background
/// task, and `abandon` receives its output there.
pub(crate) struct Detached<T: Send + 'static> {
    fut: Option<BoxFuture<T>>,
    abandon: Option<Box<dyn FnOnce(T) -> BoxFuture<()> + Send>>,
}

impl<T: Send + 'static> Detached<T> {
    pub(crate) fn new(
        fut: BoxFuture<T>,
        abandon: impl FnOnce(T) -> BoxFuture<()> + Send + 'static,
    ) -> Self {
        Self {
            fut: Some(fut),
            abandon: Some(Box::new(abandon)),
        }
    }
}

impl<T: Send + 'static> Future for Detached<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let Some(fut) = self.fut.as_mut() else {
            return Poll::Pending;
        };
        let output = std::task::ready!(fut.as_mut().poll(cx));
        self.fut = None;
        self.abandon = None;
        Poll::Ready(output)
    }
}

impl<T: Send + 'static> Drop for Detached<T> {
    fn drop(&mut self) {
        if let (Some(fut), Some(abandon)) = (self.fut.take(), self.abandon.take()) {
            spawn(async move { abandon(fut.await).await });
        }
    }
}
