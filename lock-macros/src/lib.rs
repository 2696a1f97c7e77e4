//! The `#[distributed_lock]` attribute macro of distlock.
//!
//! Use it through the facade crate: `use distlock::distributed_lock;` (its default
//! feature `macros`). The documentation is on [`macro@distributed_lock`].
//!
//! ```
//! use distlock::{distributed_lock, LockError};
//!
//! #[distributed_lock(key = "order:{id}", wait = "5s")]
//! async fn place_order(id: u64) -> Result<(), LockError> {
//!     // Runs while this process holds `order:<id>`.
//!     Ok(())
//! }
//! # fn main() {}
//! ```
//!
//! How to work on this crate is in the repository's `CONTRIBUTING.md`.

mod attr;
mod expand;
mod template;

use proc_macro::TokenStream;

/// Runs an `async fn` under a distributed lock, named from its arguments.
///
/// ```no_run
/// use std::time::Duration;
/// use distlock::{distributed_lock, LockClient, LockError};
///
/// # pub struct Order { pub id: u64 }
/// # pub struct Receipt;
/// #[derive(Debug)]
/// pub enum AppError {
///     Lock(LockError),
///     OutOfStock,
/// }
///
/// impl From<LockError> for AppError {
///     fn from(error: LockError) -> Self {
///         AppError::Lock(error)
///     }
/// }
///
/// /// Places an order; two calls for the same order never overlap, in any process.
/// #[distributed_lock(key = "order:{order.id}", wait = "5s")]
/// async fn place_order(order: &Order, quantity: u32) -> Result<Receipt, AppError> {
///     if quantity == 0 {
///         return Err(AppError::OutOfStock);
///     }
///     // ... runs while this call chain holds `order:<id>` ...
///     Ok(Receipt)
/// }
///
/// # async fn start() -> Result<(), Box<dyn std::error::Error>> {
/// // Once, at startup: the client that annotated functions use by default (another
/// // client installed later is refused, with `distlock::InstallGlobalError`).
/// LockClient::builder()
///     .url("redis://127.0.0.1:6379")
///     .connect()
///     .await?
///     .install_global()?;
///
/// match place_order(&Order { id: 42 }, 1).await {
///     Ok(Receipt) => println!("placed"),
///     Err(AppError::OutOfStock) => println!("out of stock"),
///     Err(AppError::Lock(error)) => return Err(error.into()),
/// }
/// # Ok(()) }
/// # fn main() {}
/// ```
///
/// A call formats the key, takes the lock, runs the body inside the lock's scope and
/// releases the lock. If the lock cannot be taken (another holder kept it for the
/// whole wait, no client, Redis unreachable), the body does not run and the call
/// returns the `LockError` converted into the function's error type.
///
/// # The function
///
/// - It must be an `async fn` with a body: a free function, an inherent method, or
///   a trait method in an `impl` (native `async fn` in traits, or `#[async_trait]`:
///   see below).
/// - It must return `Result<T, E>` where `E: From<distlock::LockError>`. That covers
///   `LockError` itself, `anyhow::Error` (`anyhow::Result<T>`),
///   `Box<dyn std::error::Error + Send + Sync>`, and your own error type with a
///   `From<LockError>` impl. Aliases such as `io::Result<T>` are checked by type, not
///   by name. Any other return type, `Result<(), String>` included, is a compile
///   error on the return type that lists these.
/// - Its signature is kept as written: visibility, attributes and docs, generics,
///   lifetimes and `where` clauses, `impl Trait` arguments and return types, patterns
///   in arguments, and every receiver (`&self`, `&mut self`, `self`,
///   `self: Arc<Self>`). Only the body changes.
///
/// # Arguments
///
/// | argument | value | default |
/// |---|---|---|
/// | `key` | a template of the arguments: `"order:{order.id}"` | required (or `keys`, or `semaphore`) |
/// | `kind` | `"read"` or `"write"` (a read-write lock), `"fair"` (in arrival order), with `key` | a plain lock |
/// | `keys` | templates, every lock taken at once: `["order:{id}", "inventory:{sku}"]`, or one per element of a collection: `"inventory:{sku in order.skus}"` | — |
/// | `semaphore`, `permits` | a semaphore's key template and its permit count: `semaphore = "exports", permits = 4` | — |
/// | `wait` | how long to wait for a busy lock: `"5s"`, `"0s"` fails at once | the client's `default_wait` |
/// | `skip_if_held` | a flag: try once; held elsewhere, skip the body and return `Ok(None)` (the function returns `Result<Option<T>, E>`); not with `wait` | wait, then fail |
/// | `lease` | a fixed lease, with no watchdog: `"30s"` | a watchdog lease, renewed while the body runs |
/// | `max_hold` | the longest the lock is held (renewal stops then): `"5m"` | the client's `max_hold` (none unless set) |
/// | `hold_at_least` | the shortest the lock is held, from its acquisition, even if the body returns sooner: `"30s"` (1 ms to 24 h) | released when the body returns |
/// | `client` | the client, an expression: `self.locks` | the global client |
/// | `fencing` | a flag: issue a fencing token | the client's `fencing` setting |
/// | `on_lost` | `"finish"` or `"abort"`: what a lost lease does to the body | `"finish"` |
/// | `crate` | the path of the facade crate, when renamed: `"my_distlock"` | `::distlock` |
///
/// Durations are a whole number and a unit, `ms`, `s`, `m` or `h` (`"250ms"`, `"5s"`,
/// `"2m"`, `"1h"`), parsed at compile time. An unknown or repeated argument, a bad
/// duration or a bad template is a compile error that says what to write instead.
///
/// ## `key = "…"`
///
/// The lock name, formatted from the arguments on every call (once: one `String`;
/// a template without placeholders is used as is, with no allocation). Each `{…}`
/// is an argument, a field path into one, or `self`:
///
/// ```
/// # use distlock::{distributed_lock, LockError};
/// pub struct Order { pub id: u64, pub customer: (u32, String) }
/// pub struct Shop { pub tenant: String }
///
/// impl Shop {
///     // `{self.tenant}`, nested fields, tuple fields, and a format spec.
///     #[distributed_lock(key = "{self.tenant}:order:{order.id:08}:{order.customer.0}")]
///     pub async fn ship(&self, order: &Order) -> Result<(), LockError> {
///         Ok(())
///     }
/// }
///
/// // `{{` and `}}` are literal braces: this lock is `{report}:2024`.
/// #[distributed_lock(key = "{{report}}:{year}")]
/// pub async fn report(year: u16) -> Result<(), LockError> {
///     Ok(())
/// }
/// # fn main() {}
/// ```
///
/// Values are formatted with `Display`, or with the format spec after `:` (`{id:08}`,
/// `{id:?}`, `{id:>6}`; the specs of `format!`, without `$` or `.*`, checked at compile
/// time). A name that is not an argument is a compile error listing the arguments;
/// a field that does not exist is rustc's error, on the template; method calls and
/// other expressions are not allowed (compute the value into an argument). A key
/// written in SpEL, as Spring's and Redisson's lock annotations take it
/// (`"'order:' + #id"`), is a compile error that gives the template it means
/// (`"order:{id}"`): a quote outside the placeholders, `#` before a name, or a `+`
/// beside a space is taken for SpEL (`"order#{id}"` and `"{a}+{b}"` are text). Lock names
/// are bytes, 1 to `distlock::MAX_NAME_LEN` long; an empty or longer name is a
/// `LockError::InvalidName` at run time, whose `function` field and message name the
/// function (`` `shop::checkout`: invalid lock name: ... ``).
///
/// ## `keys = ["…", "…"]`
///
/// Several locks, all taken before the body runs and all released after it, with
/// `LockClient::lock_all`: whatever order the templates list them in, they are taken
/// in one canonical order, so two functions that list the same locks in different
/// orders never deadlock each other; when one cannot be had, none is left held and
/// the body does not run. Each template follows the rules of `key`; inside the body
/// any of the names re-enters. Give `key` or `keys`, not both.
///
/// ```
/// # use distlock::{distributed_lock, LockError};
/// // Moves stock between two SKUs: `move_stock("a", "b")` and `move_stock("b", "a")`
/// // take the same two locks in the same order.
/// #[distributed_lock(keys = ["inventory:{from}", "inventory:{to}"], wait = "5s")]
/// pub async fn move_stock(from: &str, to: &str, units: u32) -> Result<(), LockError> {
///     Ok(())
/// }
/// # fn main() {}
/// ```
///
/// ### `{element in collection}`: one lock per element
///
/// A template of `keys` may hold one collection placeholder: `{sku in order.skus}`
/// makes one lock per element of `order.skus` (anything that `&collection`
/// iterates: a `Vec`, a slice, a set), each element formatted where the placeholder
/// stands (with a spec after its name: `{sku:>4 in order.skus}`). The collection is
/// an argument or a field path, checked as a placeholder is; `keys = "…"` is one such
/// template, and a list may mix them with fixed templates. Duplicates count once; an
/// empty collection (and nothing else in the list) is `LockError::InvalidName` at
/// run time.
///
/// ```
/// # use distlock::{distributed_lock, LockError};
/// pub struct Order { pub id: u64, pub skus: Vec<String> }
///
/// // The order and every SKU it lists, at once, in one canonical order.
/// #[distributed_lock(keys = ["order:{order.id}", "inventory:{sku in order.skus}"])]
/// pub async fn checkout(order: &Order) -> Result<(), LockError> {
///     Ok(())
/// }
/// # fn main() {}
/// ```
///
/// ## `kind = "read" | "write" | "fair"`
///
/// With `key`: `"read"` and `"write"` take the read or the write hold of a read-write
/// lock (`LockClient::read_lock`, `write_lock`: many readers or one writer; a chain
/// holding the read lock that asks for the write lock gets
/// `LockError::UpgradeNotAllowed`); `"fair"` takes a fair lock (`LockClient::fair_lock`:
/// granted in arrival order across processes). A read lock takes no fencing token:
/// `fencing` with `kind = "read"` is a compile error. Not with `keys`.
///
/// ```
/// # use distlock::{distributed_lock, LockError};
/// #[distributed_lock(key = "catalogue:{shop}", kind = "read")]
/// pub async fn prices(shop: u32) -> Result<Vec<u64>, LockError> {
///     Ok(Vec::new())
/// }
///
/// #[distributed_lock(key = "catalogue:{shop}", kind = "write", fencing)]
/// pub async fn reprice(shop: u32) -> Result<(), LockError> {
///     Ok(())
/// }
/// # fn main() {}
/// ```
///
/// ## `semaphore = "…", permits = N`
///
/// A permit of the semaphore named by the template (`LockClient::semaphore`): at most
/// `permits` calls run the body at once, across processes. `permits` is a whole
/// number from 1 to `distlock::MAX_PERMITS`, checked at compile time; a semaphore
/// whose holders asked for another number serves both (the count in force is the
/// smallest any holder asked for: see `LockClient::semaphore`).
/// Instead of `key`; no `kind`, no `fencing`.
///
/// ```
/// # use distlock::{distributed_lock, LockError};
/// #[distributed_lock(semaphore = "exports:{tenant}", permits = 4, wait = "1m")]
/// pub async fn export(tenant: &str) -> Result<(), LockError> {
///     Ok(())
/// }
/// # fn main() {}
/// ```
///
/// The lock-order checker classes an annotated function's lock by its template
/// (`order:{order.id}`), and names the function's attribute as the call site.
///
/// ## `wait = "…"`
///
/// How long to wait while another owner holds the lock before giving up with
/// `LockError::Timeout` (on Redlock, `LockError::QuorumNotReached`;
/// `LockError::is_busy` is true for both). `"0s"` fails fast. Re-entries never wait. Default: the
/// client's `LockClientBuilder::default_wait`.
///
/// ## `skip_if_held`
///
/// Try the lock once, without waiting: when another owner holds it (another
/// instance, or another call chain of this process), the body does not run and the
/// call returns `Ok(None)`; no error, and the caller sees the skip. The function
/// must return `Result<Option<T>, E>`, written out (`anyhow::Result<Option<T>>` and
/// `std::result::Result<Option<T>, E>` work; an alias of it is not seen through): the
/// body returns `Ok(Some(..))` when it ran. Another return type is a compile error
/// on it. Any other failure to take the lock (no client, Redis unreachable, a
/// shutdown) is still the error. It never waits, so `wait` with it is a compile
/// error; a call chain that holds the lock already re-enters it and runs the body.
///
/// With `hold_at_least`, it is a job that runs once per period across instances
/// (ShedLock's `@SchedulerLock` with `lockAtLeastFor`): every instance's timer calls
/// it, the first to fire runs the job, and the others, firing a little later, skip.
///
/// ```
/// use distlock::{distributed_lock, LockError};
/// # pub struct Report;
/// # async fn build_report() -> Report { Report }
///
/// /// Called by every instance's timer at 02:00; one of them builds the report.
/// #[distributed_lock(key = "job:nightly-report", skip_if_held, hold_at_least = "30s")]
/// pub async fn nightly_report() -> Result<Option<Report>, LockError> {
///     Ok(Some(build_report().await))
/// }
///
/// # async fn on_timer() -> Result<(), LockError> {
/// match nightly_report().await? {
///     Some(_report) => println!("built the report"),
///     None => println!("another instance builds it"),
/// }
/// # Ok(()) }
/// # fn main() {}
/// ```
///
/// ## `hold_at_least = "…"`
///
/// A minimum hold time, counted from the acquisition: when the body returns sooner
/// (`Ok` or `Err`), the call still returns at once, but the lock stays held until
/// then (renewed by the watchdog, its lease extended once to cover the rest) and is
/// released in the background at its end (`LockGuard::unlock_after_holding`). So an
/// instance whose timer fires a little later finds the lock held: with
/// `skip_if_held` it skips, otherwise it waits (up to `wait`). A panic or a cancelled
/// call releases the lock at once, as without it (the job did not complete). A
/// `LockClient::shutdown` during the minimum does not give the lock back: its lease
/// is extended to cover the rest of the minimum and the lock is left to it
/// (`ShutdownReport::kept_for_minimum`); a process that dies leaves it to its
/// lease too, which ends no earlier than the minimum and no later than the
/// minimum or one lease after the last renewal, whichever comes later. From 1 ms to
/// 24 h (`distlock::MAX_LEASE`), checked at compile time.
///
/// ## `lease = "…"`
///
/// A fixed lease: the lock ends after this long unless the body finished before, and
/// no watchdog renews it. Use it when the work has a hard deadline. Default: a
/// watchdog lease (the client's `default_lease`, 30 s unless configured), renewed
/// for as long as the body runs. A lease outside 10ms to 24h (`distlock::MIN_LEASE`
/// to `distlock::MAX_LEASE`) is a compile error.
///
/// ## `max_hold = "…"`
///
/// The longest the lock is held: the watchdog stops renewing it once this long has
/// passed since it was taken, and when the lease then runs out the lock is lost
/// with `LostReason::MaxHoldExceeded` (and a warning names the lock). With
/// `on_lost = "abort"` the body is cancelled then and the function returns
/// `LockError::Lost`; with `"finish"` (the default) the body runs to its end and its
/// result is returned as is, with the warning. So a body that is stuck, but whose
/// process is alive, cannot keep the lock forever. Default: the client's
/// `LockClientBuilder::max_hold` (no bound unless set). Zero, or a `max_hold`
/// shorter than a fixed `lease` given with it, is a compile error; one shorter
/// than a third of the watchdog lease is refused at run time with
/// `LockError::InvalidOption`.
///
/// ```
/// use distlock::{distributed_lock, LockError};
///
/// #[distributed_lock(key = "import:{batch}", max_hold = "10m", on_lost = "abort")]
/// async fn import(batch: u64) -> Result<u64, LockError> {
///     // Cancelled once it has held the lock for 10 minutes (plus one lease).
///     Ok(batch)
/// }
/// ```
///
/// ## `client = expr`
///
/// The `LockClient` to use: any expression of type `LockClient`, `&LockClient`,
/// `Arc<LockClient>` or `Box<LockClient>`, evaluated on each call before the body runs.
/// It can use the arguments and `self`:
///
/// ```
/// use std::sync::LazyLock;
/// use distlock::{distributed_lock, LockClient, LockError};
///
/// pub struct Billing {
///     locks: LockClient,
/// }
///
/// impl Billing {
///     #[distributed_lock(key = "invoice:{id}", client = self.locks)]
///     pub async fn issue(&self, id: u64) -> Result<(), LockError> {
///         Ok(())
///     }
/// }
///
/// pub struct App {
///     pub locks: LockClient,
/// }
/// # fn connect() -> App { unimplemented!() }
/// static APP: LazyLock<App> = LazyLock::new(connect);
///
/// #[distributed_lock(key = "nightly", client = &APP.locks)]
/// pub async fn nightly() -> Result<(), LockError> {
///     Ok(())
/// }
///
/// #[distributed_lock(key = "user:{user}", client = locks)]
/// pub async fn rename(locks: &LockClient, user: u64, name: &str) -> Result<(), LockError> {
///     Ok(())
/// }
/// # fn main() {}
/// ```
///
/// Without `client`, the call uses the client installed with
/// `LockClient::install_global` (once per process: another client is refused). If none was installed, it returns
/// `LockError::NoGlobalClient` (converted into your error type), whose `function`
/// field and message name the function (`` `shop::checkout`: no global lock client is
/// installed: ... ``): it never panics.
///
/// ## `fencing`
///
/// Issue a fencing token for this lock (also `fencing = true` / `fencing = false`, to
/// override the client's setting). The body reads it through `current_lock()`. When
/// the call re-enters a lock its caller already holds, the token is the outermost
/// acquisition's; if that one took none, the call returns `LockError::InvalidOption`
/// (the body does not run): ask for fencing on the outermost acquisition.
///
/// ```
/// use distlock::{current_lock, distributed_lock, LockError};
/// # pub struct Ledger;
/// # impl Ledger { async fn write(&self, _: u64, _: i64, _: u64) -> Result<(), LockError> { Ok(()) } }
///
/// #[distributed_lock(key = "ledger:{account}", fencing)]
/// pub async fn post(ledger: &Ledger, account: u64, amount: i64) -> Result<(), LockError> {
///     let token = current_lock()
///         .and_then(|held| held.fencing_token())
///         .expect("fencing is on");
///     // The ledger refuses writes with a token lower than one it has seen.
///     ledger.write(account, amount, token).await
/// }
/// # fn main() {}
/// ```
///
/// ## `on_lost = "finish" | "abort"`
///
/// A lock is lost when its lease ends before it is released (the watchdog could not
/// renew it in time, the fixed lease ran out, or someone force-unlocked it); another
/// owner may then take it while the body still runs.
///
/// - `"finish"` (default): the body runs to the end. If the release then reports the
///   loss, a `tracing` warning is logged and the body's result is returned as is.
///   The body can watch for the loss itself: `current_lock()` gives `is_lost()` and a
///   `lost()` future.
/// - `"abort"`: the body is dropped (cancelled at its current `.await`) as soon as the
///   loss is seen, and the call returns `LockError::Lost` converted into your error
///   type. A loss first reported by the release, after the body finished, also
///   returns `LockError::Lost`: the body's result is dropped, as its work was not
///   protected to the end.
///
/// ```
/// use distlock::{distributed_lock, LockError};
///
/// // Stop copying as soon as exclusivity is gone.
/// #[distributed_lock(key = "copy:{table}", on_lost = "abort")]
/// pub async fn copy_table(table: &str) -> Result<u64, LockError> {
///     Ok(0)
/// }
/// # fn main() {}
/// ```
///
/// ## `crate = "…"`
///
/// The generated code calls into `::distlock`. If the facade is reached under another
/// name (renamed in `Cargo.toml`, or re-exported by your own crate), give its path:
///
/// ```
/// extern crate distlock as locking;
///
/// #[locking::distributed_lock(key = "job:{id}", crate = "locking")]
/// pub async fn job(id: u32) -> Result<(), locking::LockError> {
///     Ok(())
/// }
/// # fn main() {}
/// ```
///
/// # What the body sees
///
/// The body runs inside the lock's scope, as with `LockGuard::scope`:
///
/// - `distlock::current_lock()` returns the innermost lock: its `name()`,
///   `hold_count()` (1 for the outermost acquisition), `fencing_token()`, `is_lost()`
///   and `lost()`. Outside any annotated call it returns `None`.
/// - Acquiring the same lock again within the body, at any depth (another annotated
///   function, `LockClient::lock`, `with_lock`) re-enters it: no waiting, one round
///   trip, and the hold count in Redis goes up and back down.
/// - Concurrent branches (`tokio::join!`, `select!`) and spawned tasks are other
///   holders: two of them calling an annotated function with the same key exclude
///   each other; with different keys they run in parallel.
///
/// ```
/// use distlock::{current_lock, distributed_lock, LockError};
///
/// #[distributed_lock(key = "cart:{cart}")]
/// pub async fn checkout(cart: u64) -> Result<(), LockError> {
///     // Re-enters `cart:<cart>`: no wait, hold count 2.
///     reserve(cart).await?;
///     Ok(())
/// }
///
/// #[distributed_lock(key = "cart:{cart}")]
/// pub async fn reserve(cart: u64) -> Result<(), LockError> {
///     let held = current_lock().expect("inside the lock");
///     assert_eq!(held.name(), format!("cart:{cart}"));
///     Ok(())
/// }
/// # fn main() {}
/// ```
///
/// # Release guarantees
///
/// The lock is given back on every way out of the body:
///
/// - **return** (`Ok` or `Err`, including `?` and early `return`): the call awaits the
///   release before it returns, so the lock is free when the caller sees the result
///   (with `hold_at_least`, at the end of the minimum, in the background);
/// - **panic**: the lock guard is dropped while unwinding and releases the lock in
///   the background at once;
/// - **cancellation** (the call's future is dropped: a timeout, `select!`, an aborted
///   task): the same, in the background at once.
///
/// In no case is the lock left until its lease runs out, unless Redis cannot be
/// reached. A release that fails (Redis unreachable) is logged as a warning and the
/// body's result is returned; the lease then ends the lock.
///
/// The call adds nothing beyond the lock itself: the key is formatted once, and the
/// only round trips are the acquire and the release (one each when uncontended).
///
/// # Methods and `#[async_trait]`
///
/// Native `async fn` in traits need nothing special: annotate the method in the
/// `impl`. With `#[async_trait]`, the attribute on the `impl` block expands first and
/// turns each method into a plain `fn` returning `Pin<Box<dyn Future>>`; the macro
/// recognises that shape and locks inside the boxed future. So the supported order
/// is `#[async_trait]` on the `impl` (or trait), `#[distributed_lock]` on the method:
///
/// ```
/// use async_trait::async_trait;
/// use distlock::{distributed_lock, LockClient, LockError};
///
/// #[async_trait]
/// pub trait Stock {
///     async fn reserve(&self, sku: &str, n: u32) -> Result<(), LockError>;
/// }
///
/// pub struct Warehouse {
///     locks: LockClient,
/// }
///
/// #[async_trait]
/// impl Stock for Warehouse {
///     #[distributed_lock(key = "sku:{sku}", client = self.locks)]
///     async fn reserve(&self, sku: &str, n: u32) -> Result<(), LockError> {
///         Ok(())
///     }
/// }
/// # fn main() {}
/// ```
///
/// Under `#[async_trait]` the key can use `self` and arguments bound by a plain name
/// (not arguments destructured by a pattern). The lock cannot go on a method
/// declaration in the trait itself (it has no body): annotate each implementation.
///
/// # What it expands to
///
/// Roughly, for `#[distributed_lock(key = "order:{order.id}", wait = "5s")]`:
///
/// ```text
/// async fn place_order(order: &Order, quantity: u32) -> Result<Receipt, AppError> {
///     let request = ::distlock::__private::request(
///         format!("order:{}", order.id),
///         Options { wait: Some(5 s), lease: None, max_hold: None, fencing: None },
///     );
///     ::distlock::__private::run_finish(
///         request,
///         async move { /* the original body */ },
///         ::distlock::__private::lock_error, // LockError -> AppError
///         Job { skipped: None, hold_at_least: None }, // skip_if_held, hold_at_least
///         "my_crate::place_order",
///     )
///     .await
/// }
/// ```
///
/// `run_finish` takes the lock (or returns the converted error; under
/// `skip_if_held`, `Ok(None)` for a lock held elsewhere), runs the body with
/// `guard.scope(body)` and releases with `guard.unlock()` (with `hold_at_least`,
/// `guard.unlock_after_holding(..)`). The generated names are
/// hygienic and all paths are absolute, so the expansion is unaffected by your own
/// items named `distlock`, `core`, `Option` and so on.
#[proc_macro_attribute]
pub fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    let original = proc_macro2::TokenStream::from(item.clone());
    let expanded = syn::parse::<attr::Args>(args)
        .and_then(attr::Args::build)
        .and_then(|config| {
            let function = syn::parse::<syn::ItemFn>(item).map_err(|err| {
                syn::Error::new(
                    err.span(),
                    "`#[distributed_lock]` goes on an `async fn` with a body; for a trait, put it on \
                     the method of the `impl`",
                )
            })?;
            expand::expand(config, function)
        });
    match expanded {
        Ok(tokens) => tokens.into(),
        Err(error) => {
            // The function as written, so that the rest of the crate still compiles
            // and IDEs keep working, plus the one error. Without the key that used
            // them, its parameters may look unused: that is no news to report.
            let mut tokens = quote::quote!(#[allow(unused_variables)]);
            tokens.extend(original);
            tokens.extend(error.into_compile_error());
            tokens.into()
        }
    }
}
