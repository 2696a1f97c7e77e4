//! `crate = ".."` names the facade when it is reached under another name.
#![deny(warnings)]

extern crate distlock as renamed;

mod reexport {
    pub use ::distlock as locks;
}

use renamed::LockError;

#[renamed::distributed_lock(key = "a:{id}", crate = "renamed")]
async fn through_alias(id: u32) -> Result<u32, LockError> {
    Ok(id)
}

#[renamed::distributed_lock(key = "b:{id}", crate = "crate::reexport::locks")]
async fn through_reexport(id: u32) -> Result<u32, LockError> {
    Ok(id)
}

#[renamed::distributed_lock(key = "c", crate = "::renamed", client = renamed::global()?)]
async fn absolute(n: u32) -> Result<u32, LockError> {
    Ok(n)
}

fn main() {
    drop(through_alias(1));
    drop(through_reexport(2));
    drop(absolute(3));
}
