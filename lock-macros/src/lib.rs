//! The `#[distributed_lock]` attribute macro of distlock.
//!
//! Use it through the facade crate `distlock`.

mod attr;
mod expand;
mod template;

use proc_macro::TokenStream;

/// Runs an `async fn` under a distributed lock.
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
            // and IDEs keep working, plus the one error.
            let mut tokens = original;
            tokens.extend(error.into_compile_error());
            tokens.into()
        }
    }
}
