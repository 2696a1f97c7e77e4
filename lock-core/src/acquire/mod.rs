//! Taking a lock: a new acquisition waits (attempt, then sleep until a release
//! message or the holder's lease, then attempt again) within its wait; a re-entry
//! adds one hold to the chain's hold, without waiting. One name or a set
//! ([`LockClient::lock_all`](crate::LockClient::lock_all)) goes through the same
//! wait loop.
//!
//! | file | owns |
//! | --- | --- |
//! | `options.rs` | [`Options`], [`LeasePolicy`](options::LeasePolicy), filled in with the client's defaults and checked (`fill_options`); refusals of a kind |
//! | `attempt.rs` | one attempt, for a name or a set: sent, finished when its caller goes away, replayed when its reply is lost, its reply decoded into the wait's `Answer` |
//! | `grant.rs` | the one place where a grant becomes a hold (and a guard) |
//! | `chain.rs` | what the call chain holds of a name; re-entry |
//! | `set_run.rs` | a set's attempt (`acquire_all.lua`) |
//! | `wait.rs` | one acquisition's wait (what it asks for, its place, its errors) and the one wait loop, top to bottom |
//! | `one.rs` | one name: re-entry or the wait, in its span |
//! | `set.rs` | [`MAX_LOCK_ALL`], canonical order, a set at once or name by name |

mod attempt;
mod chain;
mod grant;
mod one;
mod options;
mod set;
mod set_run;
mod wait;

pub(crate) use one::acquire;
pub(crate) use options::{
    check_deadlock_after, check_max_hold, fencing_on_redlock, kind_conflict, unsupported, Options,
};
pub use set::MAX_LOCK_ALL;
pub(crate) use set::{acquire_all, canonical};
