//! The arguments of `#[distributed_lock(..)]`.
//!
//! Two stages: [`Args`] parses each argument on its own (syntax, durations,
//! duplicates); [`Args::build`] checks the rules between them and yields a [`Config`].

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned;
use syn::{Expr, Ident, LitBool, LitStr, Path, Token};

use crate::template::Template;

mod kw {
    syn::custom_keyword!(key);
    syn::custom_keyword!(keys);
    syn::custom_keyword!(wait);
    syn::custom_keyword!(lease);
    syn::custom_keyword!(max_hold);
    syn::custom_keyword!(client);
    syn::custom_keyword!(fencing);
    syn::custom_keyword!(on_lost);
    syn::custom_keyword!(kind);
    syn::custom_keyword!(semaphore);
    syn::custom_keyword!(permits);
    syn::custom_keyword!(skip_if_held);
    syn::custom_keyword!(hold_at_least);
}

/// Every argument, in the order the docs list them.
const VALID: &str = "`key`, `keys`, `kind`, `semaphore`, `permits`, `wait`, `skip_if_held`, \
     `lease`, `max_hold`, `hold_at_least`, `client`, `fencing`, `on_lost`, `crate`";

/// `distlock::MAX_PERMITS` (the facade's tests check that they agree).
const MAX_PERMITS: u32 = 1_000_000;

/// `distlock::MIN_LEASE` and `distlock::MAX_LEASE`, in milliseconds (the facade's
/// tests check that they agree).
const MIN_LEASE_MS: u64 = 10;
const MAX_LEASE_MS: u64 = 24 * 60 * 60 * 1000;

/// Names users reach for, and the argument they mean.
const RENAMED: &[(&str, &str)] = &[
    ("name", "key"),
    ("lock", "key"),
    ("names", "keys"),
    ("locks", "keys"),
    ("timeout", "wait"),
    ("wait_time", "wait"),
    ("wait_timeout", "wait"),
    ("ttl", "lease"),
    ("lease_time", "lease"),
    ("expire", "lease"),
    ("max_hold_time", "max_hold"),
    ("max_lease", "max_hold"),
    ("hold_limit", "max_hold"),
    ("fence", "fencing"),
    ("fencing_token", "fencing"),
    ("on_lose", "on_lost"),
    ("on_loss", "on_lost"),
    ("lost", "on_lost"),
    ("krate", "crate"),
    ("mode", "kind"),
    ("lock_kind", "kind"),
    ("sem", "semaphore"),
    ("permit", "permits"),
    ("max", "permits"),
    ("skip", "skip_if_held"),
    ("skip_if_locked", "skip_if_held"),
    ("skip_if_busy", "skip_if_held"),
    ("try_once", "skip_if_held"),
    ("try_lock", "skip_if_held"),
    ("lock_at_least_for", "hold_at_least"),
    ("lock_at_least", "hold_at_least"),
    ("min_hold", "hold_at_least"),
    ("hold_min", "hold_at_least"),
    ("at_least", "hold_at_least"),
    ("lock_at_most_for", "max_hold"),
];

/// What `key = ..` takes (`kind = ..`, or `semaphore = ..` with `permits = ..`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The plain lock.
    Lock,
    /// `kind = "read"`.
    Read,
    /// `kind = "write"`.
    Write,
    /// `kind = "fair"`.
    Fair,
    /// `semaphore = "..", permits = N`.
    Semaphore(u32),
}

/// What to do when the lease is lost while the body runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnLost {
    /// Let the body finish, warn, return its result.
    Finish,
    /// Cancel the body, return `LockError::Lost`.
    Abort,
}

/// A duration written as `"5s"`, in whole milliseconds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Millis {
    pub(crate) millis: u64,
    pub(crate) span: Span,
}

/// The arguments as parsed, before the rules between them are checked.
#[derive(Default)]
pub(crate) struct Args {
    key: Option<LitStr>,
    /// The templates, where `keys` is, and whether it was one string (not a list).
    keys: Option<(Vec<LitStr>, Span, bool)>,
    kind: Option<(Kind, Span)>,
    semaphore: Option<(LitStr, Span)>,
    permits: Option<(u32, Span)>,
    wait: Option<Millis>,
    /// Where the `skip_if_held` flag is.
    skip_if_held: Option<Span>,
    lease: Option<Millis>,
    max_hold: Option<Millis>,
    hold_at_least: Option<Millis>,
    client: Option<Expr>,
    fencing: Option<LitBool>,
    on_lost: Option<(OnLost, Span)>,
    krate: Option<Path>,
}

/// The locks an annotated function takes.
pub(crate) enum Locks {
    /// `key = ".."` (with `kind = ..`), or `semaphore = ".."`: one lock.
    One(Template, Kind),
    /// `keys = [..]`: every lock of the list at once (`LockClient::lock_all`).
    All(Vec<Template>),
}

impl Locks {
    /// Every template.
    pub(crate) fn templates(&self) -> &[Template] {
        match self {
            Locks::One(template, _) => std::slice::from_ref(template),
            Locks::All(templates) => templates,
        }
    }
}

/// The checked configuration of one annotated function.
pub(crate) struct Config {
    pub(crate) locks: Locks,
    /// `wait = ".."`; zero under `skip_if_held`.
    pub(crate) wait: Option<Millis>,
    /// `skip_if_held`: where the flag is. The lock is tried once; held elsewhere, the
    /// body does not run and the call returns `Ok(None)`.
    pub(crate) skip_if_held: Option<Span>,
    pub(crate) lease: Option<Millis>,
    pub(crate) max_hold: Option<Millis>,
    /// `hold_at_least = ".."`: released no earlier than this after the acquisition.
    pub(crate) hold_at_least: Option<Millis>,
    pub(crate) client: Option<Expr>,
    pub(crate) fencing: Option<LitBool>,
    pub(crate) on_lost: OnLost,
    pub(crate) krate: Option<Path>,
}

impl Parse for Args {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut args = Args::default();
        while !input.is_empty() {
            let lookahead = input.lookahead1();
            if lookahead.peek(kw::key) {
                let name = input.parse::<kw::key>()?;
                let value = string_value(input, "key", "key = \"order:{order.id}\"")?;
                set(&mut args.key, value, name.span, "key")?;
            } else if lookahead.peek(kw::keys) {
                let name = input.parse::<kw::keys>()?;
                let (value, single) = string_list(input)?;
                set(
                    &mut args.keys,
                    (value, name.span, single),
                    name.span,
                    "keys",
                )?;
            } else if lookahead.peek(kw::kind) {
                let name = input.parse::<kw::kind>()?;
                let lit = string_value(input, "kind", "kind = \"read\"")?;
                let value = match lit.value().as_str() {
                    "read" => Kind::Read,
                    "write" => Kind::Write,
                    "fair" => Kind::Fair,
                    other => {
                        return Err(syn::Error::new(
                            lit.span(),
                            format!(
                                "unknown `kind` value `{other}`; use \"read\" or \"write\" (a \
                                 read-write lock), or \"fair\" (granted in arrival order); leave \
                                 `kind` out for a plain lock, and use `semaphore = \"..\", permits \
                                 = N` for a semaphore"
                            ),
                        ))
                    }
                };
                set(&mut args.kind, (value, lit.span()), name.span, "kind")?;
            } else if lookahead.peek(kw::semaphore) {
                let name = input.parse::<kw::semaphore>()?;
                let value = string_value(input, "semaphore", "semaphore = \"exports\"")?;
                set(
                    &mut args.semaphore,
                    (value, name.span),
                    name.span,
                    "semaphore",
                )?;
            } else if lookahead.peek(kw::permits) {
                let name = input.parse::<kw::permits>()?;
                let value = permits_value(input)?;
                set(&mut args.permits, value, name.span, "permits")?;
            } else if lookahead.peek(kw::wait) {
                let name = input.parse::<kw::wait>()?;
                let value = duration_value(input, "wait", "wait = \"5s\"")?;
                set(&mut args.wait, value, name.span, "wait")?;
            } else if lookahead.peek(kw::skip_if_held) {
                let name = input.parse::<kw::skip_if_held>()?;
                if input.peek(Token![=]) {
                    return Err(syn::Error::new(
                        input.span(),
                        "`skip_if_held` is a flag: write `skip_if_held` alone (leave it out to \
                         wait for the lock)",
                    ));
                }
                set(&mut args.skip_if_held, name.span, name.span, "skip_if_held")?;
            } else if lookahead.peek(kw::hold_at_least) {
                let name = input.parse::<kw::hold_at_least>()?;
                let value = duration_value(input, "hold_at_least", "hold_at_least = \"30s\"")?;
                if !(1..=MAX_LEASE_MS).contains(&value.millis) {
                    return Err(syn::Error::new(
                        value.span,
                        "`hold_at_least` is out of range: from 1ms to 24h (`distlock::MAX_LEASE`, \
                         the longest lease that can cover it); leave it out to release the lock \
                         as soon as the body returns",
                    ));
                }
                set(&mut args.hold_at_least, value, name.span, "hold_at_least")?;
            } else if lookahead.peek(kw::lease) {
                let name = input.parse::<kw::lease>()?;
                let value = duration_value(input, "lease", "lease = \"30s\"")?;
                if !(MIN_LEASE_MS..=MAX_LEASE_MS).contains(&value.millis) {
                    return Err(syn::Error::new(
                        value.span,
                        "`lease` is out of range: a lease is from 10ms to 24h \
                         (`distlock::MIN_LEASE` to `distlock::MAX_LEASE`)",
                    ));
                }
                set(&mut args.lease, value, name.span, "lease")?;
            } else if lookahead.peek(kw::max_hold) {
                let name = input.parse::<kw::max_hold>()?;
                let value = duration_value(input, "max_hold", "max_hold = \"5m\"")?;
                if value.millis == 0 {
                    return Err(syn::Error::new(
                        value.span,
                        "`max_hold` is zero: give the longest the body may hold the lock, like \
                         `max_hold = \"5m\"`, or leave it out for no bound",
                    ));
                }
                set(&mut args.max_hold, value, name.span, "max_hold")?;
            } else if lookahead.peek(kw::client) {
                let name = input.parse::<kw::client>()?;
                if !input.peek(Token![=]) {
                    return Err(syn::Error::new(
                        name.span,
                        "`client` takes an expression, like `client = self.locks`",
                    ));
                }
                input.parse::<Token![=]>()?;
                let value = input.parse::<Expr>()?;
                set(&mut args.client, value, name.span, "client")?;
            } else if lookahead.peek(kw::fencing) {
                let name = input.parse::<kw::fencing>()?;
                let value = if input.peek(Token![=]) {
                    input.parse::<Token![=]>()?;
                    input.parse::<LitBool>().map_err(|err| {
                        syn::Error::new(
                            err.span(),
                            "`fencing` is a flag: write `fencing` (or `fencing = false`)",
                        )
                    })?
                } else {
                    LitBool::new(true, name.span)
                };
                set(&mut args.fencing, value, name.span, "fencing")?;
            } else if lookahead.peek(kw::on_lost) {
                let name = input.parse::<kw::on_lost>()?;
                let lit = string_value(input, "on_lost", "on_lost = \"abort\"")?;
                let value = match lit.value().as_str() {
                    "finish" => OnLost::Finish,
                    "abort" => OnLost::Abort,
                    other => {
                        return Err(syn::Error::new(
                            lit.span(),
                            format!(
                                "unknown `on_lost` value `{other}`; use \"finish\" (the default: \
                                 let the body complete, warn, and return its result) or \
                                 \"abort\" (cancel the body and return `LockError::Lost`)"
                            ),
                        ))
                    }
                };
                set(&mut args.on_lost, (value, lit.span()), name.span, "on_lost")?;
            } else if lookahead.peek(Token![crate]) {
                let name = input.parse::<Token![crate]>()?;
                let lit = string_value(input, "crate", "crate = \"my_distlock\"")?;
                let path = lit.parse::<Path>().map_err(|_| {
                    syn::Error::new(
                        lit.span(),
                        format!(
                            "`crate` takes the path of the distlock crate, like \
                             `crate = \"my_distlock\"`; `{}` is not a path",
                            lit.value()
                        ),
                    )
                })?;
                set(&mut args.krate, path, name.span, "crate")?;
            } else if input.peek(Ident) {
                return Err(unknown_argument(input.parse::<Ident>()?));
            } else {
                return Err(lookahead.error());
            }
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        Ok(args)
    }
}

impl Args {
    /// Checks the rules between the arguments.
    pub(crate) fn build(mut self) -> syn::Result<Config> {
        if let (Some(_), Some(wait)) = (&self.skip_if_held, &self.wait) {
            return Err(syn::Error::new(
                wait.span,
                "`skip_if_held` and `wait` together: `skip_if_held` tries the lock once and \
                 never waits (held elsewhere, the body does not run and the call returns \
                 `Ok(None)`); leave `wait` out, or leave `skip_if_held` out to wait for the lock \
                 (with `wait = \"0s\"` a held lock is an error, `LockError::Timeout`, not a skip)",
            ));
        }
        if let Some(span) = self.skip_if_held {
            self.wait = Some(Millis { millis: 0, span });
        }
        if let (Some(lease), Some(max_hold)) = (&self.lease, &self.max_hold) {
            if lease.millis > max_hold.millis {
                return Err(syn::Error::new(
                    max_hold.span,
                    "`max_hold` is shorter than the fixed `lease`, which is never renewed: give \
                     a `lease` no longer than `max_hold`, or leave one of them out",
                ));
            }
        }
        if let (Some((_, span)), Some(_)) = (&self.kind, &self.semaphore) {
            return Err(syn::Error::new(
                *span,
                "`kind` and `semaphore` together: a semaphore is a kind of its own; give \
                 `semaphore = \"..\", permits = N` alone, or `key = \"..\"` with `kind`",
            ));
        }
        if let (Some((_, span)), None) = (&self.permits, &self.semaphore) {
            return Err(syn::Error::new(
                *span,
                "`permits` without `semaphore`: name the semaphore, like \
                 `semaphore = \"exports\", permits = 4`",
            ));
        }
        if let Some((semaphore, span)) = self.semaphore {
            if self.key.is_some() || self.keys.is_some() {
                return Err(syn::Error::new(
                    span,
                    "`semaphore` names the semaphore's key: give it instead of `key` and `keys`, \
                     like `semaphore = \"exports:{tenant}\", permits = 4`",
                ));
            }
            let Some((permits, _)) = self.permits else {
                return Err(syn::Error::new(
                    span,
                    "`semaphore` without `permits`: say how many may hold it at once, like \
                     `semaphore = \"exports\", permits = 4`",
                ));
            };
            if let Some(fencing) = &self.fencing {
                return Err(syn::Error::new(
                    fencing.span,
                    "a semaphore's permits take no fencing token (several owners hold one at \
                     once); leave `fencing` out",
                ));
            }
            let template = Template::parse(&semaphore)?;
            refuse_collection(&template, "semaphore")?;
            return Ok(Config {
                locks: Locks::One(template, Kind::Semaphore(permits)),
                wait: self.wait,
                skip_if_held: self.skip_if_held,
                lease: self.lease,
                max_hold: self.max_hold,
                hold_at_least: self.hold_at_least,
                client: self.client,
                fencing: None,
                on_lost: self.on_lost.map_or(OnLost::Finish, |(on_lost, _)| on_lost),
                krate: self.krate,
            });
        }
        let kind = self.kind.map_or(Kind::Lock, |(kind, _)| kind);
        if let (Some((Kind::Read, span)), Some(fencing)) = (&self.kind, &self.fencing) {
            if fencing.value {
                return Err(syn::Error::new(
                    *span,
                    "a read lock takes no fencing token (readers hold it together); fence the \
                     writes under `kind = \"write\"`, or leave `fencing` out",
                ));
            }
        }
        if let (Some((_, span)), Some(_)) = (&self.kind, &self.keys) {
            return Err(syn::Error::new(
                *span,
                "`kind` applies to one lock (`key`); `keys = [..]` takes plain locks, all at \
                 once",
            ));
        }
        let locks = match (self.key, self.keys) {
            (Some(_), Some((_, span, _))) => {
                return Err(syn::Error::new(
                    span,
                    "`key` and `keys` together: give `key` for one lock, or `keys` for \
                     several taken at once, like `keys = [\"order:{order.id}\", \"inventory:{sku}\"]`",
                ));
            }
            (Some(key), None) => {
                let template = Template::parse(&key)?;
                refuse_collection(&template, "key")?;
                Locks::One(template, kind)
            }
            (None, Some((keys, span, single))) => {
                if single {
                    let template = Template::parse(&keys[0])?;
                    if !template.is_collection() {
                        return Err(syn::Error::new(
                            template.lit.span(),
                            "`keys = \"..\"` takes one template with a collection placeholder, \
                             like `keys = \"inventory:{sku in order.skus}\"`; for one lock write \
                             `key = \"..\"`, for a fixed list `keys = [\"..\", \"..\"]`",
                        ));
                    }
                }
                if keys.is_empty() {
                    return Err(syn::Error::new(
                        span,
                        "`keys` is empty: list the locks to take at once, like \
                         `keys = [\"order:{order.id}\", \"inventory:{sku}\"]`",
                    ));
                }
                Locks::All(
                    keys.iter()
                        .map(Template::parse)
                        .collect::<syn::Result<_>>()?,
                )
            }
            (None, None) => {
                return Err(syn::Error::new(
                    Span::call_site(),
                    "missing `key`: name the lock with a template of the parameters, like \
                     `#[distributed_lock(key = \"order:{order.id}\")]` (or several locks at \
                     once with `keys = [..]`)",
                ));
            }
        };
        Ok(Config {
            locks,
            wait: self.wait,
            skip_if_held: self.skip_if_held,
            lease: self.lease,
            max_hold: self.max_hold,
            hold_at_least: self.hold_at_least,
            client: self.client,
            fencing: self.fencing,
            on_lost: self.on_lost.map_or(OnLost::Finish, |(on_lost, _)| on_lost),
            krate: self.krate,
        })
    }
}

/// A collection placeholder makes many keys: only `keys` takes it.
fn refuse_collection(template: &Template, argument: &str) -> syn::Result<()> {
    if template.is_collection() {
        return Err(syn::Error::new(
            template.lit.span(),
            format!(
                "a collection placeholder (`{{sku in order.skus}}`) makes one lock per element: \
                 use it in `keys`, like `keys = \"inventory:{{sku in order.skus}}\"`, not in \
                 `{argument}`"
            ),
        ));
    }
    Ok(())
}

/// `= N` after `permits`: 1 to `MAX_PERMITS`.
fn permits_value(input: ParseStream<'_>) -> syn::Result<(u32, Span)> {
    let error = |span: Span| {
        syn::Error::new(
            span,
            format!("`permits` takes a whole number from 1 to {MAX_PERMITS}, like `permits = 4`"),
        )
    };
    if !input.peek(Token![=]) {
        return Err(error(input.span()));
    }
    input.parse::<Token![=]>()?;
    if !input.peek(syn::LitInt) {
        let value = input.parse::<Expr>().map_err(|err| error(err.span()))?;
        return Err(error(value.span()));
    }
    let lit = input.parse::<syn::LitInt>()?;
    match lit.base10_parse::<u32>() {
        Ok(permits) if (1..=MAX_PERMITS).contains(&permits) => Ok((permits, lit.span())),
        _ => Err(error(lit.span())),
    }
}

fn set<T>(slot: &mut Option<T>, value: T, span: Span, name: &str) -> syn::Result<()> {
    if slot.is_some() {
        return Err(syn::Error::new(
            span,
            format!("duplicate argument `{name}`: give it once"),
        ));
    }
    *slot = Some(value);
    Ok(())
}

fn unknown_argument(name: Ident) -> syn::Error {
    let written = name.to_string();
    let hint = RENAMED
        .iter()
        .find(|(from, _)| *from == written)
        .map(|(_, to)| format!(" (did you mean `{to}`?)"))
        .unwrap_or_default();
    syn::Error::new(
        name.span(),
        format!("unknown argument `{written}`{hint}; valid arguments are {VALID}"),
    )
}

/// `= "..."` after an argument name.
fn string_value(input: ParseStream<'_>, name: &str, example: &str) -> syn::Result<LitStr> {
    let error = |span: Span| {
        syn::Error::new(
            span,
            format!("`{name}` takes a string literal, like `{example}`"),
        )
    };
    if !input.peek(Token![=]) {
        return Err(error(input.span()));
    }
    input.parse::<Token![=]>()?;
    if input.peek(LitStr) {
        input.parse()
    } else {
        // Report on the value the user wrote, whatever it is.
        let value = input.parse::<Expr>().map_err(|err| error(err.span()))?;
        Err(error(value.span()))
    }
}

/// `= ["..", ".."]` after `keys`.
/// The templates, and whether they were one string rather than a list.
fn string_list(input: ParseStream<'_>) -> syn::Result<(Vec<LitStr>, bool)> {
    const EXAMPLE: &str = "keys = [\"order:{order.id}\", \"inventory:{sku}\"]";
    const EACH: &str = "keys = \"inventory:{sku in order.skus}\"";
    let error = |span: Span| {
        syn::Error::new(
            span,
            format!(
                "`keys` takes a list of string literals, like `{EXAMPLE}`, or one template with \
                 a collection placeholder, like `{EACH}`"
            ),
        )
    };
    if !input.peek(Token![=]) {
        return Err(error(input.span()));
    }
    input.parse::<Token![=]>()?;
    if input.peek(LitStr) {
        return Ok((vec![input.parse::<LitStr>()?], true));
    }
    if !input.peek(syn::token::Bracket) {
        let value = input.parse::<Expr>().map_err(|err| error(err.span()))?;
        return Err(error(value.span()));
    }
    let content;
    syn::bracketed!(content in input);
    let mut keys = Vec::new();
    while !content.is_empty() {
        if !content.peek(LitStr) {
            let value = content.parse::<Expr>().map_err(|err| error(err.span()))?;
            return Err(error(value.span()));
        }
        keys.push(content.parse::<LitStr>()?);
        if content.is_empty() {
            break;
        }
        content.parse::<Token![,]>()?;
    }
    Ok((keys, false))
}

fn duration_value(input: ParseStream<'_>, name: &str, example: &str) -> syn::Result<Millis> {
    let lit = string_value(input, name, example)?;
    let millis = parse_duration(&lit.value()).map_err(|reason| {
        syn::Error::new(
            lit.span(),
            format!(
                "invalid duration \"{}\" for `{name}`: {reason}; write a whole number and a \
                 unit (`ms`, `s`, `m` or `h`), like \"250ms\", \"5s\" or \"2m\"",
                lit.value()
            ),
        )
    })?;
    Ok(Millis {
        millis,
        span: lit.span(),
    })
}

/// The milliseconds in one `unit` (`ms`, `s`, `m` or `h`).
fn unit_scale(unit: &str) -> Option<u64> {
    match unit {
        "ms" => Some(1),
        "s" => Some(1_000),
        "m" => Some(60_000),
        "h" => Some(3_600_000),
        _ => None,
    }
}

/// `"250ms"`, `"5s"`, `"2m"`, `"1h"` in milliseconds.
pub(crate) fn parse_duration(text: &str) -> Result<u64, String> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    if number.is_empty() {
        return Err("it does not start with a number".into());
    }
    if let Some(fraction) = unit.strip_prefix('.') {
        return Err(fraction_hint(number, fraction));
    }
    let scale = match unit {
        "" => return Err("the unit is missing".into()),
        unit => unit_scale(unit).ok_or("unknown unit")?,
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| "it is too large".into())
}

/// Why `"<whole>.<fraction>"` is refused, with the whole number of milliseconds it
/// means when there is one (`"1.5s"`: write `"1500ms"`).
fn fraction_hint(whole: &str, fraction: &str) -> String {
    let decimals = fraction.bytes().take_while(u8::is_ascii_digit).count();
    let (decimals, unit) = fraction.split_at(decimals);
    let millis = unit_scale(unit).and_then(|scale| {
        let places = u32::try_from(decimals.len()).ok()?;
        let divisor = 10u64.checked_pow(places)?;
        let whole = whole.parse::<u64>().ok()?.checked_mul(scale)?;
        let part = decimals.parse::<u64>().unwrap_or(0).checked_mul(scale)?;
        (part % divisor == 0).then(|| whole.checked_add(part / divisor))?
    });
    match millis {
        Some(millis) => format!("fractions are not supported: write \"{millis}ms\""),
        None => "fractions are not supported: use a smaller unit".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Ok(250));
        assert_eq!(parse_duration("0s"), Ok(0));
        assert_eq!(parse_duration("5s"), Ok(5_000));
        assert_eq!(parse_duration("2m"), Ok(120_000));
        assert_eq!(parse_duration("1h"), Ok(3_600_000));
        assert_eq!(
            parse_duration("1.5s"),
            Err("fractions are not supported: write \"1500ms\"".to_owned())
        );
        assert_eq!(
            parse_duration("0.25m"),
            Err("fractions are not supported: write \"15000ms\"".to_owned())
        );
        assert_eq!(
            parse_duration("1.0005s"),
            Err("fractions are not supported: use a smaller unit".to_owned())
        );
        for bad in [
            "",
            "s",
            "5",
            "5 s",
            "5sec",
            "1.5s",
            "-1s",
            "5S",
            "99999999999999999999ms",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    fn parse(tokens: proc_macro2::TokenStream) -> Result<Config, String> {
        syn::parse2::<Args>(tokens)
            .and_then(Args::build)
            .map_err(|err| err.to_string())
    }

    #[test]
    fn all_arguments() {
        let config = parse(quote::quote!(
            key = "a:{b}",
            wait = "5s",
            lease = "30s",
            max_hold = "5m",
            client = self.locks,
            fencing,
            on_lost = "abort",
            crate = "renamed",
        ))
        .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(config.wait.map(|w| w.millis), Some(5_000));
        assert_eq!(config.lease.map(|l| l.millis), Some(30_000));
        assert_eq!(config.max_hold.map(|m| m.millis), Some(300_000));
        assert!(config.client.is_some());
        assert!(config.fencing.is_some_and(|f| f.value));
        assert_eq!(config.on_lost, OnLost::Abort);
        assert!(config.krate.is_some());
    }

    #[test]
    fn a_job_that_runs_once() {
        let config = parse(quote::quote!(
            key = "job:nightly-report",
            skip_if_held,
            hold_at_least = "30s"
        ))
        .unwrap_or_else(|err| panic!("{err}"));
        assert!(config.skip_if_held.is_some());
        assert_eq!(config.wait.map(|w| w.millis), Some(0), "tried once");
        assert_eq!(config.hold_at_least.map(|h| h.millis), Some(30_000));
        let config = parse(quote::quote!(key = "a", hold_at_least = "1s", wait = "5s"))
            .unwrap_or_else(|err| panic!("{err}"));
        assert!(config.skip_if_held.is_none());
        assert_eq!(config.wait.map(|w| w.millis), Some(5_000));
    }

    #[test]
    fn several_keys() {
        let config = parse(quote::quote!(
            keys = ["order:{id}", "inventory:{sku}",],
            wait = "1s"
        ))
        .unwrap_or_else(|err| panic!("{err}"));
        match config.locks {
            Locks::All(templates) => assert_eq!(templates.len(), 2),
            Locks::One(..) => panic!("expected several keys"),
        }
    }

    #[test]
    fn errors() {
        for (tokens, needle) in [
            (quote::quote!(), "missing `key`"),
            (quote::quote!(wait = "5s"), "missing `key`"),
            (
                quote::quote!(key = "a", key = "b"),
                "duplicate argument `key`",
            ),
            (
                quote::quote!(key = "a", timeout = "5s"),
                "did you mean `wait`",
            ),
            (quote::quote!(key = "a", foo), "valid arguments are"),
            (quote::quote!(key = a), "string literal"),
            (quote::quote!(key), "string literal"),
            (quote::quote!(key = "a", wait = "5"), "invalid duration"),
            (quote::quote!(key = "a", lease = "0s"), "out of range"),
            (quote::quote!(key = "a", lease = "25h"), "out of range"),
            (
                quote::quote!(key = "a", max_hold = "0s"),
                "`max_hold` is zero",
            ),
            (
                quote::quote!(key = "a", lease = "10m", max_hold = "5m"),
                "shorter than the fixed `lease`",
            ),
            (
                quote::quote!(key = "a", max_lease = "5m"),
                "did you mean `max_hold`",
            ),
            (
                quote::quote!(key = "a", on_lost = "stop"),
                "unknown `on_lost`",
            ),
            (quote::quote!(key = "a", crate = "a b"), "not a path"),
            (quote::quote!(key = "a", fencing = 1), "flag"),
            (quote::quote!(key = "a" wait = "5s"), "expected `,`"),
            (quote::quote!(keys = []), "`keys` is empty"),
            (quote::quote!(keys = "a"), "collection placeholder"),
            (quote::quote!(keys = 1), "list of string literals"),
            (quote::quote!(key = "{s in o.s}"), "use it in `keys`"),
            (
                quote::quote!(keys = "{s in o.s}:{t in o.t}"),
                "two collection",
            ),
            (quote::quote!(keys = "{s.x in o.s}"), "not a path"),
            (quote::quote!(key = "a", kind = "shared"), "unknown `kind`"),
            (
                quote::quote!(keys = ["a"], kind = "read"),
                "`kind` applies to one lock",
            ),
            (
                quote::quote!(key = "a", kind = "read", fencing),
                "no fencing token",
            ),
            (quote::quote!(semaphore = "a"), "without `permits`"),
            (quote::quote!(key = "a", permits = 2), "without `semaphore`"),
            (quote::quote!(semaphore = "a", permits = 0), "from 1 to"),
            (
                quote::quote!(semaphore = "a", permits = "4"),
                "whole number",
            ),
            (
                quote::quote!(semaphore = "a", key = "b", permits = 2),
                "instead of `key`",
            ),
            (
                quote::quote!(semaphore = "a", permits = 2, kind = "fair"),
                "a kind of its own",
            ),
            (
                quote::quote!(semaphore = "a", permits = 2, fencing),
                "no fencing token",
            ),
            (quote::quote!(keys = ["a", b]), "list of string literals"),
            (
                quote::quote!(key = "a", keys = ["b"]),
                "`key` and `keys` together",
            ),
            (
                quote::quote!(keys = ["a"], keys = ["b"]),
                "duplicate argument `keys`",
            ),
            (quote::quote!(names = ["a"]), "did you mean `keys`"),
            (
                quote::quote!(key = "a", skip_if_held, wait = "0s"),
                "`skip_if_held` and `wait` together",
            ),
            (
                quote::quote!(key = "a", wait = "1s", skip_if_held),
                "`skip_if_held` and `wait` together",
            ),
            (quote::quote!(key = "a", skip_if_held = true), "is a flag"),
            (
                quote::quote!(key = "a", skip_if_held, skip_if_held),
                "duplicate argument `skip_if_held`",
            ),
            (
                quote::quote!(key = "a", skip),
                "did you mean `skip_if_held`",
            ),
            (
                quote::quote!(key = "a", hold_at_least = "0s"),
                "`hold_at_least` is out of range",
            ),
            (
                quote::quote!(key = "a", hold_at_least = "25h"),
                "`hold_at_least` is out of range",
            ),
            (
                quote::quote!(key = "a", hold_at_least = "1.5s"),
                "write \"1500ms\"",
            ),
            (
                quote::quote!(key = "a", lock_at_least_for = "30s"),
                "did you mean `hold_at_least`",
            ),
        ] {
            let err = parse(tokens.clone())
                .err()
                .unwrap_or_else(|| panic!("{tokens}"));
            assert!(err.contains(needle), "{tokens}: {err}");
        }
    }
}
