//! Compile-time behaviour of `#[distributed_lock]`: what compiles, and the message of
//! every error. After an intended change to a message, regenerate the `.stderr` files
//! with `TRYBUILD=overwrite cargo test -p distlock-macros --test ui` and review the diff.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}
