//! The expansion uses absolute paths and hygienic locals: it works next to items that
//! shadow `distlock`, `core`, `std` and prelude names, and in a module without the
//! implicit prelude.
#![deny(warnings)]
#![allow(
    non_camel_case_types,
    non_upper_case_globals,
    dead_code,
    unused_imports
)]

use std as distlock_shadow;

mod shadows {
    pub mod distlock {}
    pub mod core {}
    pub mod std {}
    pub struct Option;
    pub struct Some;
    pub const None: () = ();
    pub struct Box;
    pub struct String;
    pub struct Future;
    pub fn format_args() {}
    pub fn module_path() {}
    pub fn concat() {}
}

mod user {
    use crate::shadows::*;
    use ::distlock::{distributed_lock, LockError};

    pub struct Ok;
    type Result<T> = ::core::result::Result<T, LockError>;

    // Locals named like the generated ones do not clash.
    #[distributed_lock(key = "shadow:{__distlock_request}:{__distlock_ret}")]
    pub async fn shadowed(__distlock_request: u32, __distlock_ret: u32) -> Result<u32> {
        let __distlock_request = __distlock_request + __distlock_ret;
        ::core::result::Result::Ok(__distlock_request)
    }
}

#[no_implicit_prelude]
mod bare {
    #[::distlock::distributed_lock(key = "bare:{id}", wait = "1s")]
    pub async fn bare(id: u32) -> ::std::result::Result<u32, ::distlock::LockError> {
        ::std::result::Result::Ok(id)
    }
}

fn main() {
    drop(user::shadowed(1, 2));
    drop(bare::bare(3));
}
