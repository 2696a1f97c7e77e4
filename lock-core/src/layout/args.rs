//! The keys and arguments of every script call, written and read in one place:
//! one plain struct per script's request, in the order the script's header in
//! `lua/` gives them. The client sends what [`Args::push_to`] writes; the tests and
//! the explorer build their calls with the same structs, and read a call they
//! catch on the wire back with their `decode`.
//!
//! A script that takes several requests in one run (`acquire.lua`, `release.lua`,
//! `renew.lua`) takes each request's keys and arguments after those of the ones
//! before it, behind a header of the run's own ([`ReleaseRun`]). Numbers are sent
//! as decimal text, flags as `"1"` and `"0"`.
//!
//! Hidden from the documentation: what the scripts take changes with them (the
//! function library is named after their text), so it is no promise of the API;
//! the hash they write ([`crate::layout`]) is.

use super::keys::{channel_parts, fence_parts, freed_parts};
use super::Kind;

/// The keys and arguments of one script call (`KEYS` and `ARGV`).
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// use distlock::layout::args::{Args, Withdraw};
///
/// let call = Withdraw { lock: b"ns:{a}", publish: "PUBLISH", owner: "c:1" }.to_call();
/// assert_eq!(call.keys, [&b"ns:{a}"[..], b"ns:{a}:released"]);
/// assert_eq!(call.args, [&b"PUBLISH"[..], b"c:1"]);
/// assert_eq!(call.to_args()[0], b"2", "the number of keys comes first");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Call {
    /// `KEYS`, in order.
    pub keys: Vec<Vec<u8>>,
    /// `ARGV`, in order.
    pub args: Vec<Vec<u8>>,
}

impl Call {
    /// What follows the function's name in `FCALL` (or the SHA in `EVALSHA`): the
    /// number of keys, the keys, the arguments.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::layout::args::Call;
    /// assert_eq!(Call::default().to_args(), [b"0"]);
    /// ```
    pub fn to_args(&self) -> Vec<Vec<u8>> {
        std::iter::once(self.keys.len().to_string().into_bytes())
            .chain(self.keys.iter().cloned())
            .chain(self.args.iter().cloned())
            .collect()
    }

    /// The call that follows a function's name (or a SHA) in `args`, as
    /// [`to_args`](Self::to_args) writes it; `None` when the number of keys is not
    /// one.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::layout::args::{Args, Call, ForceRelease};
    /// let call = ForceRelease { lock: b"ns:{a}", publish: "PUBLISH" }.to_call();
    /// assert_eq!(Call::from_args(&call.to_args()), Some(call));
    /// ```
    pub fn from_args(args: &[Vec<u8>]) -> Option<Call> {
        let (numkeys, rest) = args.split_first()?;
        let numkeys: usize = std::str::from_utf8(numkeys).ok()?.parse().ok()?;
        let (keys, args) = rest.split_at_checked(numkeys)?;
        Some(Call {
            keys: keys.to_vec(),
            args: args.to_vec(),
        })
    }
}

/// Where a request's keys and arguments are written: a [`Call`], which keeps each
/// one apart (for the tests and the explorer to read), or the client's own buffer,
/// which keeps them end to end and allocates nothing per key or argument.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// use distlock::layout::args::{Call, Sink};
///
/// let mut call = Call::default();
/// call.key(&[b"ns:{a}", b":fence"]);
/// call.number(42);
/// call.flag(true);
/// assert_eq!(call.keys, [b"ns:{a}:fence"]);
/// assert_eq!(call.args, [&b"42"[..], b"1"]);
/// ```
pub trait Sink {
    /// Adds a key made of `parts`, end to end.
    fn key(&mut self, parts: &[&[u8]]);

    /// Adds an argument made of `parts`, end to end.
    fn arg(&mut self, parts: &[&[u8]]);

    /// Adds a text argument.
    fn text(&mut self, text: &str) {
        self.arg(&[text.as_bytes()]);
    }

    /// Adds a number argument, in decimal.
    fn number(&mut self, mut number: u64) {
        // Written from its last digit back, with nothing allocated.
        let mut digits = [0u8; 20];
        let mut start = digits.len();
        loop {
            start -= 1;
            digits[start] = b'0' + (number % 10) as u8;
            number /= 10;
            if number == 0 {
                break;
            }
        }
        self.arg(&[&digits[start..]]);
    }

    /// Adds a flag argument: `"1"` or `"0"`.
    fn flag(&mut self, flag: bool) {
        self.arg(&[if flag { b"1" } else { b"0" }]);
    }
}

impl Sink for Call {
    fn key(&mut self, parts: &[&[u8]]) {
        self.keys.push(parts.concat());
    }

    fn arg(&mut self, parts: &[&[u8]]) {
        self.args.push(parts.concat());
    }
}

/// A script call's keys and arguments as the client sends them: the keys end to
/// end in one buffer and the arguments in another, each with where its items end.
#[derive(Debug, Clone)]
pub(crate) struct Flat {
    keys: Vec<u8>,
    key_ends: Vec<usize>,
    args: Vec<u8>,
    arg_ends: Vec<usize>,
}

impl Flat {
    /// An empty call, with room for one request's keys and arguments.
    pub(crate) fn new() -> Self {
        Flat {
            keys: Vec::with_capacity(128),
            key_ends: Vec::with_capacity(4),
            args: Vec::with_capacity(128),
            arg_ends: Vec::with_capacity(12),
        }
    }

    /// The keys, in order.
    pub(crate) fn keys(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        items(&self.keys, &self.key_ends)
    }

    /// The arguments, in order.
    pub(crate) fn args(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        items(&self.args, &self.arg_ends)
    }

    /// The bytes of every key and argument.
    pub(crate) fn len(&self) -> usize {
        self.keys.len() + self.args.len()
    }
}

/// The items of `buffer` that end at `ends`.
fn items<'a>(buffer: &'a [u8], ends: &'a [usize]) -> impl ExactSizeIterator<Item = &'a [u8]> + 'a {
    ends.iter().enumerate().map(move |(index, &end)| {
        &buffer[index.checked_sub(1).map_or(0, |before| ends[before])..end]
    })
}

impl Sink for Flat {
    fn key(&mut self, parts: &[&[u8]]) {
        for part in parts {
            self.keys.extend_from_slice(part);
        }
        self.key_ends.push(self.keys.len());
    }

    fn arg(&mut self, parts: &[&[u8]]) {
        for part in parts {
            self.args.extend_from_slice(part);
        }
        self.arg_ends.push(self.args.len());
    }
}

/// What a request (or a run's header) adds to a script call.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// use distlock::layout::args::{Args, Call, Inspect};
/// let mut call = Call::default();
/// Inspect { lock: b"ns:{a}", numsub: "NUMSUB" }.push_to(&mut call);
/// assert_eq!(call.keys.len(), 3);
/// ```
pub trait Args {
    /// Adds this request's keys and arguments after those already in `call`.
    fn push_to(&self, call: &mut impl Sink);

    /// A call of this request alone.
    fn to_call(&self) -> Call {
        let mut call = Call::default();
        self.push_to(&mut call);
        call
    }
}

/// A call's keys and arguments are a request's: a run's header made once, say.
impl Args for Call {
    fn push_to(&self, call: &mut impl Sink) {
        for key in &self.keys {
            call.key(&[key]);
        }
        for arg in &self.args {
            call.arg(&[arg]);
        }
    }
}

/// The text of an argument; `None` when it is not UTF-8.
fn text(arg: &[u8]) -> Option<&str> {
    std::str::from_utf8(arg).ok()
}

/// One argument of a request, as it is written and read back.
trait Arg<'a>: Sized {
    /// Adds it to `call`.
    fn push(&self, call: &mut impl Sink);

    /// The value `arg` spells; `None` when it spells none.
    fn parse(arg: &'a [u8]) -> Option<Self>;
}

/// A text argument.
impl<'a> Arg<'a> for &'a str {
    fn push(&self, call: &mut impl Sink) {
        call.text(self);
    }

    fn parse(arg: &'a [u8]) -> Option<Self> {
        text(arg)
    }
}

/// A number, in decimal.
impl Arg<'_> for u64 {
    fn push(&self, call: &mut impl Sink) {
        call.number(*self);
    }

    fn parse(arg: &[u8]) -> Option<Self> {
        text(arg)?.parse().ok()
    }
}

/// A flag: `"1"` or `"0"`.
impl Arg<'_> for bool {
    fn push(&self, call: &mut impl Sink) {
        call.flag(*self);
    }

    fn parse(arg: &[u8]) -> Option<Self> {
        match arg {
            b"1" => Some(true),
            b"0" => Some(false),
            _ => None,
        }
    }
}

/// A kind, as the scripts spell it.
impl Arg<'_> for Kind {
    fn push(&self, call: &mut impl Sink) {
        call.text(&self.script_arg());
    }

    fn parse(arg: &[u8]) -> Option<Self> {
        Kind::parse_script_arg(text(arg)?)
    }
}

/// An optional argument of its own `encode` and `decode`, `""` for none: a
/// release's successor, a renewal's write-back.
macro_rules! optional_arg {
    ($($spelled:ty),*) => {$(
        impl<'a> Arg<'a> for Option<$spelled> {
            fn push(&self, call: &mut impl Sink) {
                call.text(&self.map(|some| some.encode()).unwrap_or_default());
            }

            fn parse(arg: &'a [u8]) -> Option<Self> {
                match text(arg)? {
                    "" => Some(None),
                    some => <$spelled>::decode(some).map(Some),
                }
            }
        }
    )*};
}

optional_arg!(Successor<'a>, WriteBack, Naming<'a>);

/// A request's arguments, written and read in the order of its fields.
trait Fields<'a>: Sized {
    /// Adds its arguments after those already in `call`.
    fn push_args(&self, call: &mut impl Sink);

    /// The request of `args`, its lock's key (if it has one) first of `keys`;
    /// `None` when they are not one.
    fn parse(keys: &'a [Vec<u8>], args: &'a [Vec<u8>]) -> Option<Self>;
}

/// Every request of a run whose keys are `all_keys` and arguments `all_args`, each
/// request taking `keys` keys and `args` arguments; `None` when they are not one.
fn decode_each<'a, T: Fields<'a>>(
    all_keys: &'a [Vec<u8>],
    all_args: &'a [Vec<u8>],
    keys: usize,
    args: usize,
) -> Option<Vec<T>> {
    let requests = all_keys.len() / keys;
    if !all_keys.len().is_multiple_of(keys) || all_args.len() != requests * args {
        return None;
    }
    all_keys
        .chunks_exact(keys)
        .zip(all_args.chunks_exact(args))
        .map(|(keys, args)| T::parse(keys, args))
        .collect()
}

/// Declares one request: its struct (the lock's key, when `[lock]` says it has
/// one, then one field per argument, in the order the script takes them), its
/// [`Fields`], and, given its keys, its [`Args`].
macro_rules! request {
    (
        $(#[$doc:meta])*
        pub struct $name:ident { $([$lock:ident])?
            $( $(#[$field_doc:meta])* $field:ident: $ty:ty, )*
        }
        $( keys($this:ident) [$($key:expr),* $(,)?] )?
    ) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<'a> {
            $(
                /// The lock's key ([`lock_key`](crate::layout::lock_key)).
                pub $lock: &'a [u8],
            )?
            $( $(#[$field_doc])* pub $field: $ty, )*
        }

        impl<'a> Fields<'a> for $name<'a> {
            fn push_args(&self, call: &mut impl Sink) {
                $( Arg::push(&self.$field, call); )*
            }

            fn parse(keys: &'a [Vec<u8>], args: &'a [Vec<u8>]) -> Option<Self> {
                let _ = keys;
                let [$($field),*] = args else { return None };
                Some($name {
                    $( $lock: keys.first()?, )?
                    $( $field: Arg::parse($field)?, )*
                })
            }
        }

        $(
            impl Args for $name<'_> {
                fn push_to(&self, call: &mut impl Sink) {
                    let $this = self;
                    $( call.key(&$key); )*
                    self.push_args(call);
                }
            }
        )?
    };
}

request! {
    /// One acquisition, as `acquire.lua` takes it (three keys, ten arguments).
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::layout::{self, args::{Acquire, Args}, Kind};
    ///
    /// let lock = layout::lock_key("ns", b"a");
    /// let acquire = Acquire::new(&lock, "c:1", 10_000, 1, 0);
    /// let call = acquire.to_call();
    /// assert_eq!(call.keys[1], layout::fence_key(&lock));
    /// assert_eq!(call.args[6], b"x");
    /// assert_eq!(Acquire::decode_all(&call), Some(vec![acquire]));
    /// ```
    pub struct Acquire { [lock]
        /// The owner id.
        owner: &'a str,
        /// The lease, in milliseconds.
        lease_ms: u64,
        /// Whether a new hold is given a fencing token.
        fencing: bool,
        /// The operation's number among its owner's.
        seq: u64,
        /// The owner's floor: every operation numbered at or below it is settled.
        floor: u64,
        /// A re-entry: the lock is never taken.
        reentry: bool,
        /// What it takes.
        kind: Kind,
        /// For a read hold, the owner id of its call chain's write hold, else `""`.
        writer: &'a str,
        /// Whether the caller waits (a writer or a fair waiter keeps its place).
        stays: bool,
        /// What the client says of the holder, `""` for nothing.
        who: &'a str,
    }
    keys(this) [[this.lock], fence_parts(this.lock), freed_parts(this.lock, this.owner)]
}

impl<'a> Acquire<'a> {
    /// A new plain acquisition of `lock` by `owner`, its operation `seq` over the
    /// floor `floor`, for `lease_ms`: no fencing, no wait, nothing said of it.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::layout::{args::Acquire, Kind};
    /// let write = Acquire { kind: Kind::Write, ..Acquire::new(b"ns:{a}", "c:1", 500, 2, 1) };
    /// assert!(!write.reentry);
    /// ```
    pub fn new(lock: &'a [u8], owner: &'a str, lease_ms: u64, seq: u64, floor: u64) -> Self {
        Acquire {
            lock,
            owner,
            lease_ms,
            fencing: false,
            seq,
            floor,
            reentry: false,
            kind: Kind::Exclusive,
            writer: "",
            stays: false,
            who: "",
        }
    }

    /// Every acquisition of a run of `acquire.lua`; `None` when `call` is not one.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::layout::args::{Acquire, Call};
    /// assert_eq!(Acquire::decode_all(&Call::default()), Some(vec![]));
    /// ```
    pub fn decode_all(call: &'a Call) -> Option<Vec<Self>> {
        decode_each(&call.keys, &call.args, 3, 10)
    }
}

/// A set taken whole or not at all, as `acquire_all.lua` takes it: its fencing
/// flag, five arguments per name, what the client says of the holder.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// use distlock::layout::args::{AcquireAll, Args, SetName};
///
/// let set = AcquireAll {
///     fencing: false,
///     names: vec![SetName { lock: b"ns:{a}", owner: "c:1", lease_ms: 500, seq: 1, floor: 0, reentry: false }],
///     who: "",
/// };
/// let call = set.to_call();
/// assert_eq!((call.keys.len(), call.args.len()), (3, 7));
/// assert_eq!(AcquireAll::decode(&call), Some(set));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcquireAll<'a> {
    /// Whether each lock taken is given a fencing token.
    pub fencing: bool,
    /// The names, in the client's canonical order.
    pub names: Vec<SetName<'a>>,
    /// What the client says of the holder, `""` for nothing.
    pub who: &'a str,
}

request! {
    /// One name of an [`AcquireAll`] (three keys, five arguments).
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::layout::args::SetName;
    /// let name = SetName { lock: b"ns:{a}", owner: "c:1", lease_ms: 500, seq: 1, floor: 0, reentry: false };
    /// assert_eq!(name.seq, 1);
    /// ```
    pub struct SetName { [lock]
        /// The set's owner id, or that of the caller's hold for a re-entry.
        owner: &'a str,
        /// The lease, in milliseconds.
        lease_ms: u64,
        /// The operation's number among its owner's.
        seq: u64,
        /// The owner's floor.
        floor: u64,
        /// A re-entry: the lock is never taken.
        reentry: bool,
    }
    keys(this) [[this.lock], fence_parts(this.lock), freed_parts(this.lock, this.owner)]
}

impl Args for AcquireAll<'_> {
    fn push_to(&self, call: &mut impl Sink) {
        call.flag(self.fencing);
        for name in &self.names {
            name.push_to(call);
        }
        call.text(self.who);
    }
}

impl<'a> AcquireAll<'a> {
    /// The set of a call of `acquire_all.lua`; `None` when `call` is not one.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::layout::args::{AcquireAll, Call};
    /// assert_eq!(AcquireAll::decode(&Call::default()), None);
    /// ```
    pub fn decode(call: &'a Call) -> Option<Self> {
        let (fencing, rest) = call.args.split_first()?;
        let (who, names) = rest.split_last()?;
        Some(AcquireAll {
            fencing: Arg::parse(fencing)?,
            names: decode_each(&call.keys, names, 3, 5)?,
            who: text(who)?,
        })
    }
}

request! {
    /// The header of a run of `release.lua`: how release messages go out, and how
    /// long a final release's record lasts.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::layout::args::{Args, ReleaseRun};
    /// let call = ReleaseRun { publish: "PUBLISH", remember_ms: 2_000 }.to_call();
    /// assert_eq!(call.args, [&b"PUBLISH"[..], b"2000"]);
    /// ```
    pub struct ReleaseRun {
        /// `PUBLISH`, or `SPUBLISH` on a cluster.
        publish: &'a str,
        /// How long, in ms, the record of a final release lasts.
        remember_ms: u64,
    }
    keys(_this) []
}

request! {
    /// One release, as `release.lua` takes it (three keys, four with a fenced
    /// successor; six arguments).
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::layout::args::{Args, Release, ReleaseRun, Successor};
    ///
    /// let next = Successor { owner: "c:2", lease_ms: 500, seq: 1, floor: 0, fencing: true, who: "1 svc host site" };
    /// let release = Release {
    ///     lock: b"ns:{a}", owner: "c:1", lease_ms: 500, seq: 2, floor: 1, successor: Some(next), record: true,
    /// };
    /// let mut call = ReleaseRun { publish: "PUBLISH", remember_ms: 2_000 }.to_call();
    /// release.push_to(&mut call);
    /// assert_eq!(call.keys.len(), 4, "a fenced successor takes the fencing counter");
    /// assert_eq!(call.args[6], b"c:2 500 1 0 1 1 svc host site");
    /// let (run, releases) = Release::decode_all(&call).expect("a run of release.lua");
    /// assert_eq!((run.remember_ms, releases), (2_000, vec![release]));
    /// ```
    pub struct Release { [lock]
        /// The owner id.
        owner: &'a str,
        /// The lease to keep at least while holds remain, in milliseconds.
        lease_ms: u64,
        /// The operation's number among its owner's.
        seq: u64,
        /// The owner's floor.
        floor: u64,
        /// The waiter of the releasing client the lock goes to if this release gives
        /// back the last hold.
        successor: Option<Successor<'a>>,
        /// Whether a final release leaves its record for a retry
        /// (`<ns>:{name}:freed:<owner>`, see `lua/release.lua`, "Records").
        record: bool,
    }
}

/// The waiter a final release hands a plain lock to: its owner, and the
/// operation of that owner the hand-off is (numbered as an acquire).
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// use distlock::layout::args::Successor;
/// let next = Successor { owner: "c:2", lease_ms: 500, seq: 3, floor: 2, fencing: false, who: "" };
/// assert_eq!(next.encode(), "c:2 500 3 2 0 ");
/// assert_eq!(Successor::decode(&next.encode()), Some(next));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Successor<'a> {
    /// Its owner id.
    pub owner: &'a str,
    /// Its lease, in milliseconds.
    pub lease_ms: u64,
    /// The hand-off's number among its owner's operations.
    pub seq: u64,
    /// Its owner's floor.
    pub floor: u64,
    /// Whether it is given the next fencing token.
    pub fencing: bool,
    /// What its client says of it, `""` for nothing.
    pub who: &'a str,
}

impl<'a> Successor<'a> {
    /// The argument it is: `"<owner> <lease> <seq> <floor> <fencing> <who>"`.
    ///
    /// # Examples
    ///
    /// See [`Successor`].
    pub fn encode(&self) -> String {
        format!(
            "{} {} {} {} {} {}",
            self.owner,
            self.lease_ms,
            self.seq,
            self.floor,
            u8::from(self.fencing),
            self.who
        )
    }

    /// The successor an argument names; `None` when it names none.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::layout::args::Successor;
    /// assert_eq!(Successor::decode(""), None);
    /// ```
    pub fn decode(arg: &'a str) -> Option<Self> {
        let mut parts = arg.splitn(6, ' ');
        let mut next = || parts.next();
        Some(Successor {
            owner: next()?,
            lease_ms: next()?.parse().ok()?,
            seq: next()?.parse().ok()?,
            floor: next()?.parse().ok()?,
            fencing: Arg::parse(next()?.as_bytes())?,
            who: next().unwrap_or(""),
        })
    }
}

impl Args for Release<'_> {
    fn push_to(&self, call: &mut impl Sink) {
        call.key(&[self.lock]);
        call.key(&channel_parts(self.lock));
        call.key(&freed_parts(self.lock, self.owner));
        if self.successor.is_some_and(|next| next.fencing) {
            call.key(&fence_parts(self.lock));
        }
        self.push_args(call);
    }
}

impl<'a> Release<'a> {
    /// The header and every release of a run of `release.lua`; `None` when `call`
    /// is not one.
    ///
    /// # Examples
    ///
    /// See [`Release`].
    pub fn decode_all(call: &'a Call) -> Option<(ReleaseRun<'a>, Vec<Self>)> {
        let (header, rest) = call.args.split_at_checked(2)?;
        let run = ReleaseRun::parse(&[], header)?;
        if !rest.len().is_multiple_of(6) {
            return None;
        }
        let mut keys = call.keys.iter();
        let mut releases = Vec::with_capacity(rest.len() / 6);
        for args in rest.chunks_exact(6) {
            let lock = keys.next()?;
            let (_channel, _freed) = (keys.next()?, keys.next()?);
            let release = Release::parse(std::slice::from_ref(lock), args)?;
            if release.successor.is_some_and(|next| next.fencing) {
                keys.next()?;
            }
            releases.push(release);
        }
        keys.next().is_none().then_some((run, releases))
    }
}

request! {
    /// One renewal, as `renew.lua` takes it (one key, four arguments).
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::layout::args::{Args, Naming, Renew, WriteBack};
    ///
    /// let renew = Renew {
    ///     lock: b"ns:{a}",
    ///     owner: "c:1",
    ///     lease_ms: 500,
    ///     write_back: Some(WriteBack { count: 2, seq: 4, floor: 3 }),
    ///     name: Some(Naming { held_ms: 1_000, who: "4242 svc host main.rs:7" }),
    /// };
    /// let call = renew.to_call();
    /// assert_eq!(call.args[2], b"2 4 3");
    /// assert_eq!(call.args[3], b"1000 4242 svc host main.rs:7");
    /// assert_eq!(Renew::decode_all(&call), Some(vec![renew]));
    /// ```
    pub struct Renew { [lock]
        /// The owner id.
        owner: &'a str,
        /// The lease, in milliseconds: it only ever moves later.
        lease_ms: u64,
        /// How to write the hold back where the lock is free; `None` to renew only.
        write_back: Option<WriteBack>,
        /// The holder named, unless it is already (a hold's first renewal); `None`
        /// for nothing more.
        name: Option<Naming<'a>>,
    }
    keys(this) [[this.lock]]
}

/// What a renewal writes of a holder not named yet (`lua/lock.lua`'s `#who:`): how
/// long ago it took the lock, and what its client says of it.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// use distlock::layout::args::Naming;
/// let name = Naming { held_ms: 1_000, who: "4242 svc host main.rs:7" };
/// assert_eq!(name.encode(), "1000 4242 svc host main.rs:7");
/// assert_eq!(Naming::decode(&name.encode()), Some(name));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Naming<'a> {
    /// How long ago the holder took the lock, in milliseconds.
    pub held_ms: u64,
    /// What its client says of it (`"<pid> <service> <host> <site>"`, never empty).
    pub who: &'a str,
}

impl<'a> Naming<'a> {
    /// The argument it is: `"<held ms> <who>"`.
    ///
    /// # Examples
    ///
    /// See [`Naming`].
    pub fn encode(&self) -> String {
        format!("{} {}", self.held_ms, self.who)
    }

    /// The naming an argument asks for; `None` when it asks for none.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::layout::args::Naming;
    /// assert_eq!(Naming::decode(""), None);
    /// ```
    pub fn decode(arg: &'a str) -> Option<Self> {
        let (held_ms, who) = arg.split_once(' ')?;
        let held_ms = held_ms.parse().ok()?;
        (!who.is_empty()).then_some(Naming { held_ms, who })
    }
}

/// A plain lock's hold written back by `renew.lua` where the lock is free: held
/// `count` times, with the replay record of its operation `seq` over `floor`.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// use distlock::layout::args::WriteBack;
/// let back = WriteBack { count: 1, seq: 7, floor: 6 };
/// assert_eq!(back.encode(), "1 7 6");
/// assert_eq!(WriteBack::decode("1 7 6"), Some(back));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteBack {
    /// The hold count written back.
    pub count: u64,
    /// The write-back's number among its owner's operations.
    pub seq: u64,
    /// Its owner's floor.
    pub floor: u64,
}

impl WriteBack {
    /// The argument it is: `"<count> <seq> <floor>"`.
    ///
    /// # Examples
    ///
    /// See [`WriteBack`].
    pub fn encode(&self) -> String {
        format!("{} {} {}", self.count, self.seq, self.floor)
    }

    /// The write-back an argument asks for; `None` when it asks for none.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::layout::args::WriteBack;
    /// assert_eq!(WriteBack::decode(""), None);
    /// ```
    pub fn decode(arg: &str) -> Option<Self> {
        let mut parts = arg.split(' ').map(str::parse);
        let back = WriteBack {
            count: parts.next()?.ok()?,
            seq: parts.next()?.ok()?,
            floor: parts.next()?.ok()?,
        };
        parts.next().is_none().then_some(back)
    }
}

impl<'a> Renew<'a> {
    /// Every renewal of a run of `renew.lua`; `None` when `call` is not one.
    ///
    /// # Examples
    ///
    /// See [`Renew`].
    pub fn decode_all(call: &'a Call) -> Option<Vec<Self>> {
        decode_each(&call.keys, &call.args, 1, 4)
    }
}

request! {
    /// A waiter's place taken back, as `withdraw.lua` takes it.
    ///
    /// # Examples
    ///
    /// See [`Call`].
    pub struct Withdraw { [lock]
        /// `PUBLISH`, or `SPUBLISH` on a cluster.
        publish: &'a str,
        /// The waiter's owner id.
        owner: &'a str,
    }
    keys(this) [[this.lock], channel_parts(this.lock)]
}

request! {
    /// A lock deleted whoever holds it, as `force_release.lua` takes it (three keys:
    /// the lock, its channel, and the start of its holders' final-release records).
    ///
    /// # Examples
    ///
    /// See [`Call::from_args`].
    pub struct ForceRelease { [lock]
        /// `PUBLISH`, or `SPUBLISH` on a cluster.
        publish: &'a str,
    }
    keys(this) [[this.lock], channel_parts(this.lock), freed_parts(this.lock, "")]
}

request! {
    /// A lock read, as `inspect.lua` takes it.
    ///
    /// # Examples
    ///
    /// See [`Args`].
    pub struct Inspect { [lock]
        /// The `PUBSUB` subcommand that counts a channel's subscribers: `NUMSUB`, or
        /// `SHARDNUMSUB` on a cluster.
        numsub: &'a str,
    }
    keys(this) [[this.lock], fence_parts(this.lock), channel_parts(this.lock)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flat_buffer_holds_what_a_call_holds() {
        let lock = b"ns:{a}";
        let acquire = Acquire {
            who: "1 svc host site",
            ..Acquire::new(lock, "c:1", 30_000, 7, 6)
        };
        let release = Release {
            lock,
            owner: "c:1",
            lease_ms: 30_000,
            seq: 8,
            floor: 7,
            successor: None,
            record: false,
        };
        let header = ReleaseRun {
            publish: "PUBLISH",
            remember_ms: 2_000,
        }
        .to_call();
        let (mut flat, mut call) = (Flat::new(), Call::default());
        header.push_to(&mut flat);
        header.push_to(&mut call);
        acquire.push_to(&mut flat);
        acquire.push_to(&mut call);
        release.push_to(&mut flat);
        release.push_to(&mut call);
        assert_eq!(flat.keys().collect::<Vec<_>>(), call.keys);
        assert_eq!(flat.args().collect::<Vec<_>>(), call.args);
        assert_eq!(flat.keys().len(), 6);
        let bytes: usize = call.keys.iter().chain(&call.args).map(Vec::len).sum();
        assert_eq!(flat.len(), bytes);
    }

    #[test]
    fn numbers_are_written_in_decimal() {
        for number in [0, 7, 10, 99, 1_000_000, u64::MAX] {
            let mut call = Call::default();
            call.number(number);
            assert_eq!(call.args, [number.to_string().into_bytes()]);
        }
    }
}
