//! Work that must not be lost with its caller: [`Detached`] finishes a request in
//! the background when the future awaiting it is dropped, and [`spawn`] starts a
//! background task where a runtime is there to run it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::error::{outcome_unknown, LockError};

/// A boxed, sendable future.
pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Spawns `fut` on the current runtime, if there is one.
pub(crate) fn spawn(fut: impl Future<Output = ()> + Send + 'static) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(fut);
    }
}

/// Background operations that a shutdown waits for: each spawned through
/// [`Background::spawn`] counts until it ends.
#[derive(Debug, Default)]
pub(crate) struct Background {
    running: std::sync::atomic::AtomicUsize,
    idle: tokio::sync::Notify,
}

impl Background {
    /// Spawns `fut` (when a runtime is there), counted until it ends.
    pub(crate) fn spawn(
        self: &std::sync::Arc<Self>,
        fut: impl Future<Output = ()> + Send + 'static,
    ) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let running = self.count();
        runtime.spawn(async move {
            let _running = running;
            fut.await;
        });
    }

    /// Counts one operation until the returned token is dropped (the operation
    /// ended, or its future was dropped).
    pub(crate) fn count(self: &std::sync::Arc<Self>) -> Counted {
        self.running
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Counted(self.clone())
    }

    /// How many counted operations run now.
    pub(crate) fn running(&self) -> usize {
        self.running.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Waits until no counted operation runs.
    ///
    /// # Cancel safety
    ///
    /// Only waits: dropping it changes nothing.
    pub(crate) async fn idle(&self) {
        use std::sync::atomic::Ordering;
        loop {
            let idle = self.idle.notified();
            if self.running.load(Ordering::Acquire) == 0 {
                return;
            }
            idle.await;
        }
    }
}

/// One operation that a [`Background`] counts, until it is dropped.
#[derive(Debug)]
pub(crate) struct Counted(std::sync::Arc<Background>);

impl Drop for Counted {
    fn drop(&mut self) {
        use std::sync::atomic::Ordering;
        if self.0.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// Runs a background operation, logging its failure at debug level.
pub(crate) async fn log_failure<T>(operation: impl Future<Output = Result<T, LockError>>) {
    if let Err(err) = operation.await {
        tracing::debug!(error = %err, "distlock: background release failed; the lease will end the lock");
    }
}

/// Runs `futures` concurrently and collects their outputs in order.
///
/// # Cancel safety
///
/// Dropping it aborts the futures not finished yet (they run as tasks of a
/// `JoinSet`): give it only futures that are themselves safe to drop, as releases
/// (which finish in the background) are.
pub(crate) async fn join_all<F>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let mut set = tokio::task::JoinSet::new();
    let mut count = 0;
    for (index, future) in futures.into_iter().enumerate() {
        set.spawn(async move { (index, future.await) });
        count += 1;
    }
    let mut outputs: Vec<Option<F::Output>> = (0..count).map(|_| None).collect();
    while let Some(joined) = set.join_next().await {
        if let Ok((index, output)) = joined {
            outputs[index] = Some(output);
        }
    }
    outputs.into_iter().flatten().collect()
}

/// Sends again a request whose reply was lost (a no-op where it was applied, as
/// every script replays), up to five times with a growing pause, until its outcome
/// is known: the reply, or `None` when it failed for good or stayed unknown (then
/// the lease of whatever it took ends it; logged for `what` on lock `name`).
///
/// # Cancel safety
///
/// Dropping it stops the replays: the outcome stays unknown, as when they run out,
/// and the lease ends what the request took.
pub(crate) async fn replay_until_known<T, F, Fut>(name: &str, what: &str, mut send: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = redis::RedisResult<T>>,
{
    for round in 1..=5u32 {
        tokio::time::sleep(std::time::Duration::from_millis(50) * round).await;
        match send().await {
            Ok(reply) => return Some(reply),
            Err(err) if outcome_unknown(&err) => continue,
            Err(_) => return None,
        }
    }
    tracing::debug!(
        lock.name = name,
        "distlock: outcome of a lost {what} unknown; its lease will end it"
    );
    None
}

/// A request in flight that must not be lost with its caller: if the future is
/// dropped before it completes, the request runs to completion in a background
/// task, and `abandon` receives its output there.
pub(crate) struct Detached<T, A>
where
    T: Send + 'static,
    A: FnOnce(T) -> BoxFuture<()> + Send + Unpin + 'static,
{
    fut: Option<BoxFuture<T>>,
    /// Not boxed: a request that completes (the usual case) allocates nothing for it.
    abandon: Option<A>,
}

impl<T, A> Detached<T, A>
where
    T: Send + 'static,
    A: FnOnce(T) -> BoxFuture<()> + Send + Unpin + 'static,
{
    pub(crate) fn new(fut: BoxFuture<T>, abandon: A) -> Self {
        Self {
            fut: Some(fut),
            abandon: Some(abandon),
        }
    }
}

impl<T, A> Future for Detached<T, A>
where
    T: Send + 'static,
    A: FnOnce(T) -> BoxFuture<()> + Send + Unpin + 'static,
{
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

impl<T, A> Drop for Detached<T, A>
where
    T: Send + 'static,
    A: FnOnce(T) -> BoxFuture<()> + Send + Unpin + 'static,
{
    fn drop(&mut self) {
        if let (Some(fut), Some(abandon)) = (self.fut.take(), self.abandon.take()) {
            spawn(async move { abandon(fut.await).await });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_dropped_request_finishes_and_hands_its_output_on() {
        let seen = Arc::new(AtomicBool::new(false));
        let (tx, rx) = tokio::sync::oneshot::channel();
        // The request cannot finish before it is dropped: it waits for `go`, sent
        // only then (a timer would race a loaded machine).
        let (go, gone) = tokio::sync::oneshot::channel::<()>();
        let request = Detached::new(
            Box::pin(async {
                let _ = gone.await;
                7
            }),
            {
                let seen = seen.clone();
                move |output: i32| {
                    Box::pin(async move {
                        seen.store(output == 7, Ordering::SeqCst);
                        let _ = tx.send(());
                    })
                }
            },
        );
        // Polled once, then dropped mid-flight.
        let polled = tokio::time::timeout(Duration::from_millis(1), request).await;
        assert!(polled.is_err(), "the request was still waiting");
        let _ = go.send(());
        rx.await.expect("the abandoned request ran to completion");
        assert!(seen.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_finished_request_is_not_handed_on() {
        let abandoned = Arc::new(AtomicBool::new(false));
        let request = Detached::new(Box::pin(async { 3 }), {
            let abandoned = abandoned.clone();
            move |_: i32| -> BoxFuture<()> {
                Box::pin(async move { abandoned.store(true, Ordering::SeqCst) })
            }
        });
        assert_eq!(request.await, 3);
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(!abandoned.load(Ordering::SeqCst));
    }
}
