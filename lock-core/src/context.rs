//! Lock identity that follows the async call chain.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use crate::hold::HeldLock;
use crate::keys::LockKeys;

tokio::task_local! {
    static CONTEXT: LockContext;
}

/// The locks held by the current async call chain, and under which owner.
///
/// distlock ties a lock to the call chain that took it, never to the OS thread:
/// the body of [`with_lock`](crate::LockClient::with_lock),
/// [`LockGuard::scope`](crate::LockGuard::scope) or an annotated function runs inside
/// a context that records the lock, on whatever worker thread it is polled. An acquire
/// of a name the context already holds re-enters it with the same owner (the hold count
/// in Redis goes up); an acquire of any other name gets a fresh owner, so two
/// concurrent branches (`join!`, `select!`) that take the same new name exclude each
/// other.
///
/// A spawned task does not inherit the context: it is another holder, as another
/// thread is for a Java lock. To hand the context over on purpose, capture it with
/// [`LockContext::current`] and run the task's future inside [`LockContext::scope`].
///
/// Contexts are immutable and cheap to clone: taking a lock inside a context never
/// changes that context, it creates a child for the lock's own scope.
///
/// # Examples
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
/// use distlock::LockContext;
///
/// let guard = locks.lock("order:42").await?;
/// guard
///     .scope(async {
///         // Hand the chain's identity to a spawned task: it re-enters `order:42`.
///         let context = LockContext::current();
///         let task = tokio::spawn(context.scope({
///             let locks = locks.clone();
///             async move {
///                 let inner = locks.lock("order:42").await?;
///                 inner.unlock().await
///             }
///         }));
///         task.await.expect("task panicked")
///     })
///     .await?;
/// guard.unlock().await
/// # }
/// ```
#[derive(Clone, Default)]
pub struct LockContext {
    head: Option<Arc<Node>>,
}

struct Node {
    held: HeldLock,
    parent: Option<Arc<Node>>,
}

impl LockContext {
    /// The context of the current task, or an empty one outside of any lock scope.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// use distlock::LockContext;
    ///
    /// // Outside any lock scope.
    /// assert!(LockContext::current().is_empty());
    /// locks
    ///     .with_lock("order:42", |_| async {
    ///         // Inside the body of `with_lock`: the context holds `order:42`.
    ///         let context = LockContext::current();
    ///         assert_eq!(context.innermost().map(|held| held.name()), Some("order:42"));
    ///         Ok(())
    ///     })
    ///     .await
    /// # }
    /// ```
    pub fn current() -> LockContext {
        CONTEXT.try_with(Clone::clone).unwrap_or_default()
    }

    /// Runs `fut` inside this context: locks it holds are re-entered by `fut` and by
    /// everything `fut` awaits.
    ///
    /// # Cancel safety
    ///
    /// The returned future only sets the context around each poll of `fut`; dropping
    /// it drops `fut` and leaves nothing behind.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// let guard = locks.lock("order:42").await?;
    /// // A spawned task does not inherit the context: give it the guard's.
    /// let task = tokio::spawn(guard.context().scope({
    ///     let locks = locks.clone();
    ///     async move {
    ///         let inner = locks.lock("order:42").await?; // re-enters, no waiting
    ///         assert_eq!(inner.hold_count(), 2);
    ///         inner.unlock().await
    ///     }
    /// }));
    /// task.await.expect("task panicked")?;
    /// guard.unlock().await
    /// # }
    /// ```
    pub fn scope<F: Future>(self, fut: F) -> impl Future<Output = F::Output> {
        CONTEXT.scope(self, fut)
    }

    /// Whether this context holds no lock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// use distlock::LockContext;
    ///
    /// let guard = locks.lock("order:42").await?;
    /// assert!(!guard.context().is_empty());
    /// // The guard does not set the current context by itself; `scope` does.
    /// assert!(LockContext::current().is_empty());
    /// guard
    ///     .scope(async { assert!(!LockContext::current().is_empty()) })
    ///     .await;
    /// guard.unlock().await
    /// # }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.head.is_none()
    }

    /// The innermost lock of this context: the one whose scope was entered last.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// let outer = locks.lock("order:42").await?;
    /// let inner = outer.scope(async { locks.lock("customer:7").await }).await?;
    /// let context = inner.context();
    /// assert_eq!(context.innermost().map(|held| held.name()), Some("customer:7"));
    /// inner.unlock().await?;
    /// outer.unlock().await
    /// # }
    /// ```
    pub fn innermost(&self) -> Option<&HeldLock> {
        self.head.as_ref().map(|node| &node.held)
    }

    /// The locks of this context, innermost first (a re-entered lock appears once per scope).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// let outer = locks.lock("order:42").await?;
    /// let inner = outer.scope(async { locks.lock("order:42").await }).await?; // a re-entry
    /// // `order:42` twice: the re-entry (depth 2), then the outermost hold (depth 1).
    /// let context = inner.context();
    /// let depths: Vec<u64> = context.locks().map(|held| held.hold_count()).collect();
    /// assert_eq!(depths, [2, 1]);
    /// inner.unlock().await?;
    /// outer.unlock().await
    /// # }
    /// ```
    pub fn locks(&self) -> impl Iterator<Item = &HeldLock> {
        let mut next = self.head.as_deref();
        std::iter::from_fn(move || {
            let node = next?;
            next = node.parent.as_deref();
            Some(&node.held)
        })
    }

    /// The hold of `keys` (a hold of the same kind of lock) taken through the client
    /// numbered `client_id`, if this chain has one.
    pub(crate) fn find(&self, client_id: u64, keys: &LockKeys) -> Option<&HeldLock> {
        self.locks().find(|held| {
            held.hold.client_id == client_id
                && held.hold.keys.lock == keys.lock
                && held.hold.keys.kind.same_lock(keys.kind)
        })
    }

    /// A hold, of any kind, of the lock at the Redis key `lock` taken through the
    /// client numbered `client_id`, if this chain has one.
    pub(crate) fn find_any(&self, client_id: u64, lock: &[u8]) -> Option<&HeldLock> {
        self.locks()
            .find(|held| held.hold.client_id == client_id && held.hold.keys.lock == lock)
    }

    /// A child context that also holds `held`.
    pub(crate) fn with(&self, held: HeldLock) -> LockContext {
        LockContext {
            head: Some(Arc::new(Node {
                held,
                parent: self.head.clone(),
            })),
        }
    }
}

impl fmt::Debug for LockContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.locks().map(HeldLock::name))
            .finish()
    }
}

/// The innermost lock held by the current call chain, if any.
///
/// Inside a function annotated with `#[distributed_lock]`, or inside
/// [`LockClient::with_lock`](crate::LockClient::with_lock) and
/// [`LockGuard::scope`](crate::LockGuard::scope), this is the lock of that scope: its
/// name, fencing token, hold count and loss signal.
///
/// # Examples
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
/// use distlock::current_lock;
///
/// // Deep in the call chain, without the guard passed down.
/// fn log_step(step: &str) {
///     match current_lock() {
///         Some(held) => println!("{step} under `{}`", held.name()),
///         None => println!("{step} outside any lock"),
///     }
/// }
///
/// log_step("start"); // outside any lock
/// locks
///     .with_lock("order:42", |_| async {
///         log_step("charge"); // under `order:42`
///         Ok(())
///     })
///     .await
/// # }
/// ```
pub fn current_lock() -> Option<HeldLock> {
    CONTEXT
        .try_with(|context| context.innermost().cloned())
        .ok()
        .flatten()
}
