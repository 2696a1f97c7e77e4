//! Code generation: replace the body of the annotated function, keep the rest.
//!
//! For an `async fn` the new body is:
//!
//! ```text
//! let __distlock_request = <krate>::__private::request(<key>, <options>);
//! <krate>::__private::run_finish(
//!     __distlock_request,
//!     async move { <anchor> <the body's statements> },
//!     <krate>::__private::lock_error,
//!     "<module>::<fn>",
//! )
//! .await
//! ```
//!
//! `request` formats the key (once) and builds the lock request from the global
//! client (`request_with` takes the `client = ..` expression); `run_finish` (or
//! `run_abort`) takes the lock, runs the body in the lock scope and releases it.
//! `lock_error` converts a `LockError` into the return type; it is spanned on the
//! return type, so a type that does not fit is reported there. The anchor gives the
//! body's async block the declared return type, so `?` and `return` infer as in the
//! original function.
//!
//! A function already expanded by `#[async_trait]` is a plain `fn` whose body is
//! `Box::pin(async move { .. })`: the same code goes inside that async block, around
//! its original content.

use std::collections::BTreeSet;

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{
    Block, Expr, FnArg, GenericArgument, ItemFn, Pat, PathArguments, ReturnType, Stmt, Type,
};

use crate::attr::{Config, Kind, Locks, Millis, OnLost};
use crate::template::Template;

/// The annotated function, checked, ready to expand.
pub(crate) fn expand(config: Config, mut function: ItemFn) -> syn::Result<TokenStream> {
    let shape = Shape::of(&function)?;
    check_template(&config, &function, shape)?;
    if config.skip_if_held.is_some() {
        check_skip_output(&function, shape)?;
    }

    let private = private(&config, Span::call_site());
    let request = format_ident!("__distlock_request", span = Span::mixed_site());

    let format_key = quote!(#private::format_key);
    let (key, request_fn, request_with_fn) = match &config.locks {
        Locks::One(template, _) => (
            template.to_expr(&format_key),
            quote!(request),
            quote!(request_with),
        ),
        Locks::All(templates) if templates.iter().any(Template::is_collection) => {
            // One key per element of a collection: a list made at run time.
            let keys = templates
                .iter()
                .map(|template| template.to_keys_expr(&format_key));
            let all = format_ident!("__distlock_keys", span = Span::mixed_site());
            (
                quote!({
                    let mut #all: ::std::vec::Vec<::std::string::String> = ::std::vec::Vec::new();
                    #(#all.extend(#keys);)*
                    #all
                }),
                quote!(request_all),
                quote!(request_all_with),
            )
        }
        Locks::All(templates) => {
            let keys = templates
                .iter()
                .map(|template| template.to_expr(&format_key));
            (
                quote!([#(::std::string::String::from(#keys)),*]),
                quote!(request_all),
                quote!(request_all_with),
            )
        }
    };
    let options = options(&config, &private);
    let make_request = match &config.client {
        None => quote!(#private::#request_fn(#key, #options)),
        Some(client) => {
            // Spanned on the expression: a value that is not a client is reported there.
            let span = client.span();
            let request_with = respan(quote!(#private::#request_with_fn), span);
            let client = quote_spanned!(span=> &(#client));
            quote!(#request_with(#client, #key, #options))
        }
    };
    let run = match config.on_lost {
        OnLost::Finish => quote!(run_finish),
        OnLost::Abort => quote!(run_abort),
    };
    let name = function.sig.ident.unraw().to_string();
    let function_name = quote!(::core::concat!(::core::module_path!(), "::", #name));

    // Spanned on the return type: a type that is not a `Result` of an error that a
    // `LockError` converts into is reported there, once.
    let ret_span = match (&function.sig.output, shape) {
        // `Pin<Box<dyn Future<Output = Ret> + ..>>`: point at `Ret`.
        (ReturnType::Type(_, ty), Shape::AsyncTrait) => future_output(ty).unwrap_or(ty).span(),
        (ReturnType::Type(_, ty), Shape::Async) => ty.span(),
        (ReturnType::Default, _) => function.sig.span(),
    };
    let lock_error = respan(quote!(#private::lock_error), ret_span);
    let job = job(&config, &private, ret_span);
    let run = quote!(#private::#run);

    match shape {
        Shape::Async => {
            let anchor = anchor(&function.sig.output);
            // The body's statements go straight into the async block, which takes
            // the body's braces: a block nested in it would be a one-expression
            // block returned as is, which `unused_braces` reports on one-line
            // bodies with a fix that removes the function's braces.
            let stmts = &function.block.stmts;
            let mut body =
                proc_macro2::Group::new(proc_macro2::Delimiter::Brace, quote!(#anchor #(#stmts)*));
            body.set_span(function.block.brace_token.span.join());
            let body: Block = syn::parse2(quote! {{
                let #request = #make_request;
                #run(
                    #request,
                    async move #body,
                    #lock_error,
                    #job,
                    #function_name,
                ).await
            }})?;
            *function.block = body;
        }
        Shape::AsyncTrait => {
            let inner = async_trait_block(&mut function.block).ok_or_else(|| {
                syn::Error::new(Span::call_site(), "unexpected #[async_trait] expansion")
            })?;
            let block = &*inner;
            let body: Block = syn::parse2(quote! {{
                let #request = #make_request;
                #run(#request, async move #block, #lock_error, #job, #function_name).await
            }})?;
            *inner = body;
        }
    }
    Ok(function.into_token_stream())
}

/// The path of the facade's `__private` module: `::distlock::__private`, or under
/// `crate = ".."`.
fn private(config: &Config, span: Span) -> TokenStream {
    let krate = match &config.krate {
        Some(path) => path.to_token_stream(),
        None => quote!(::distlock),
    };
    respan(quote!(#krate::__private), span)
}

/// `tokens`, every one located at `span` (hygiene unchanged), so that errors about
/// the expression they form point at `span`.
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut token| {
            if let proc_macro2::TokenTree::Group(group) = &token {
                let mut respanned =
                    proc_macro2::Group::new(group.delimiter(), respan(group.stream(), span));
                respanned.set_span(group.span().located_at(span));
                token = respanned.into();
            } else {
                token.set_span(token.span().located_at(span));
            }
            token
        })
        .collect()
}

/// How the body is written.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// `async fn`.
    Async,
    /// A `fn` that `#[async_trait]` expanded: `Box::pin(async move { .. })`.
    AsyncTrait,
}

impl Shape {
    fn of(function: &ItemFn) -> syn::Result<Shape> {
        let sig = &function.sig;
        if sig.asyncness.is_none() {
            let mut block = function.block.clone();
            if async_trait_block(&mut block).is_some() {
                return Ok(Shape::AsyncTrait);
            }
            return Err(syn::Error::new(
                sig.fn_token.span,
                format!(
                    "`#[distributed_lock]` needs an `async fn`: the lock is awaited before the \
                     body runs; write `async fn {}`",
                    sig.ident
                ),
            ));
        }
        if let ReturnType::Default = sig.output {
            return Err(syn::Error::new(
                sig.paren_token.span.close(),
                format!(
                    "`{}` returns `()`; `#[distributed_lock]` needs `-> Result<T, E>` with \
                     `E: From<distlock::LockError>`: when the lock cannot be taken, the body does \
                     not run and the function returns the error",
                    sig.ident
                ),
            ));
        }
        Ok(Shape::Async)
    }
}

/// The block of the async block in `Box::pin(async move { .. })`, the body that
/// `#[async_trait]` leaves.
fn async_trait_block(block: &mut Block) -> Option<&mut Block> {
    let [Stmt::Expr(Expr::Call(call), None)] = &mut block.stmts[..] else {
        return None;
    };
    let Expr::Path(func) = &*call.func else {
        return None;
    };
    let pin = func.path.segments.last()?.ident == "pin";
    if !pin || call.args.len() != 1 {
        return None;
    }
    match call.args.first_mut()? {
        Expr::Async(inner) if inner.capture.is_some() => Some(&mut inner.block),
        _ => None,
    }
}

/// `Ret` in `Pin<Box<dyn Future<Output = Ret> + ..>>`, the return type that
/// `#[async_trait]` writes.
fn future_output(ty: &Type) -> Option<&Type> {
    match ty {
        Type::Path(path) => {
            let PathArguments::AngleBracketed(args) = &path.path.segments.last()?.arguments else {
                return None;
            };
            args.args.iter().find_map(|arg| match arg {
                GenericArgument::Type(ty) => future_output(ty),
                GenericArgument::AssocType(assoc) if assoc.ident == "Output" => Some(&assoc.ty),
                _ => None,
            })
        }
        Type::TraitObject(object) => object.bounds.iter().find_map(|bound| match bound {
            syn::TypeParamBound::Trait(bound) => {
                let PathArguments::AngleBracketed(args) = &bound.path.segments.last()?.arguments
                else {
                    return None;
                };
                args.args.iter().find_map(|arg| match arg {
                    GenericArgument::AssocType(assoc) if assoc.ident == "Output" => Some(&assoc.ty),
                    _ => None,
                })
            }
            _ => None,
        }),
        Type::Paren(paren) => future_output(&paren.elem),
        Type::Group(group) => future_output(&group.elem),
        _ => None,
    }
}

/// Every name the template may start with, and whether `self` is one.
fn parameters(function: &ItemFn, shape: Shape) -> (BTreeSet<String>, bool) {
    let mut names = BTreeSet::new();
    let mut has_self = false;
    for input in &function.sig.inputs {
        match input {
            FnArg::Receiver(_) => has_self = true,
            FnArg::Typed(typed) => match shape {
                Shape::Async => bindings(&typed.pat, &mut names),
                // `#[async_trait]` renamed patterns to hidden `__argN`; only plain
                // names are bound where the key is formatted.
                Shape::AsyncTrait => {
                    if let Pat::Ident(ident) = &*typed.pat {
                        if !ident.ident.to_string().starts_with("__arg") {
                            names.insert(ident.ident.unraw().to_string());
                        }
                    }
                }
            },
        }
    }
    (names, has_self)
}

/// The names a parameter pattern binds.
fn bindings(pat: &Pat, names: &mut BTreeSet<String>) {
    match pat {
        Pat::Ident(ident) => {
            names.insert(ident.ident.unraw().to_string());
            if let Some((_, sub)) = &ident.subpat {
                bindings(sub, names);
            }
        }
        Pat::Tuple(tuple) => tuple.elems.iter().for_each(|p| bindings(p, names)),
        Pat::TupleStruct(tuple) => tuple.elems.iter().for_each(|p| bindings(p, names)),
        Pat::Struct(s) => s.fields.iter().for_each(|f| bindings(&f.pat, names)),
        Pat::Slice(slice) => slice.elems.iter().for_each(|p| bindings(p, names)),
        Pat::Reference(reference) => bindings(&reference.pat, names),
        Pat::Paren(paren) => bindings(&paren.pat, names),
        Pat::Type(typed) => bindings(&typed.pat, names),
        _ => {}
    }
}

/// Every placeholder of every template must start with a parameter.
fn check_template(config: &Config, function: &ItemFn, shape: Shape) -> syn::Result<()> {
    let (names, has_self) = parameters(function, shape);
    let mut errors: Option<syn::Error> = None;
    for (template, placeholder) in config
        .locks
        .templates()
        .iter()
        .flat_map(|template| template.placeholders().map(move |p| (template, p)))
    {
        let known = if placeholder.root == "self" {
            has_self
        } else {
            // `{type}` and `{r#type}` both name `r#type`.
            names.contains(placeholder.root.trim_start_matches("r#"))
        };
        if known {
            continue;
        }
        let mut available: Vec<String> = Vec::new();
        if has_self {
            available.push("`self`".to_owned());
        }
        available.extend(names.iter().map(|name| format!("`{name}`")));
        let list = if available.is_empty() {
            format!("`{}` has no parameters", function.sig.ident)
        } else {
            format!("the parameters are {}", available.join(", "))
        };
        let hint = if shape == Shape::AsyncTrait {
            " (under #[async_trait], only parameters bound by a plain name)"
        } else {
            ""
        };
        let error = syn::Error::new(
            template.lit.span(),
            format!(
                "`{{{}}}` in the key template is not a parameter of `{}`; {list}{hint}",
                placeholder.source, function.sig.ident
            ),
        );
        match &mut errors {
            Some(errors) => errors.combine(error),
            None => errors = Some(error),
        }
    }
    errors.map_or(Ok(()), Err)
}

/// `skip_if_held` needs `-> Result<Option<T>, E>`, written out (an alias is not
/// seen through): a skip returns `Ok(None)`, the body `Ok(Some(..))`. The error is
/// on the return type.
fn check_skip_output(function: &ItemFn, shape: Shape) -> syn::Result<()> {
    let ReturnType::Type(_, ty) = &function.sig.output else {
        // `Shape::of` refused it already.
        return Ok(());
    };
    let ty = match shape {
        Shape::AsyncTrait => future_output(ty).unwrap_or(ty),
        Shape::Async => ty,
    };
    if first_argument_of(ty, "Result").is_some_and(|ok| first_argument_of(ok, "Option").is_some()) {
        return Ok(());
    }
    Err(syn::Error::new_spanned(
        ty,
        format!(
            "`skip_if_held` needs `{name}` to return `Result<Option<T>, E>`, not `{written}`: when \
             another owner holds the lock the body does not run and the call returns `Ok(None)`, \
             so the caller sees the skip; the body returns `Ok(Some(..))` when it ran. Write the \
             `Option` out (an alias is not seen through), like `Result<Option<Report>, AppError>`",
            name = function.sig.ident,
            written = type_text(ty),
        ),
    ))
}

/// `ty` as a person writes it: `Result<u32, E>`, not `Result < u32 , E >`.
fn type_text(ty: &Type) -> String {
    ty.to_token_stream()
        .to_string()
        .replace(" :: ", "::")
        .replace(" < ", "<")
        .replace(" >", ">")
        .replace(" ,", ",")
        .replace("& ", "&")
}

/// The first type argument of `ty` when it is a path whose last segment is `name`
/// (`Result<A, B>`, `std::result::Result<A, B>`, `anyhow::Result<A>`).
fn first_argument_of<'a>(ty: &'a Type, name: &str) -> Option<&'a Type> {
    match ty {
        Type::Path(path) if path.qself.is_none() => {
            let last = path.path.segments.last()?;
            if last.ident != name {
                return None;
            }
            let PathArguments::AngleBracketed(args) = &last.arguments else {
                return None;
            };
            args.args.iter().find_map(|arg| match arg {
                GenericArgument::Type(ty) => Some(ty),
                _ => None,
            })
        }
        Type::Paren(paren) => first_argument_of(&paren.elem, name),
        Type::Group(group) => first_argument_of(&group.elem, name),
        _ => None,
    }
}

/// `Job { skipped, hold_at_least }` for `run_finish` and `run_abort`: what a lock
/// held elsewhere returns (`skip_if_held`: `Ok(None)`, through `skipped`, spanned on
/// the return type as `lock_error` is), and the minimum hold time.
fn job(config: &Config, private: &TokenStream, ret_span: Span) -> TokenStream {
    let skipped = match config.skip_if_held {
        Some(_) => {
            let skipped = respan(quote!(#private::skipped), ret_span);
            quote!(::core::option::Option::Some(#skipped))
        }
        None => quote!(::core::option::Option::None),
    };
    let hold_at_least = match config.hold_at_least {
        Some(Millis { millis, span }) => quote_spanned! {span=>
            ::core::option::Option::Some(::core::time::Duration::from_millis(#millis))
        },
        None => quote!(::core::option::Option::None),
    };
    quote! {
        #private::Job {
            skipped: #skipped,
            hold_at_least: #hold_at_least,
        }
    }
}

/// `Options { wait, lease, max_hold, fencing, kind, label }` for `request`.
fn options(config: &Config, private: &TokenStream) -> TokenStream {
    let duration = |d: Option<Millis>| match d {
        Some(Millis { millis, span }) => quote_spanned! {span=>
            ::core::option::Option::Some(::core::time::Duration::from_millis(#millis))
        },
        None => quote!(::core::option::Option::None),
    };
    let wait = duration(config.wait);
    let lease = duration(config.lease);
    let max_hold = duration(config.max_hold);
    let fencing = match &config.fencing {
        Some(value) => quote!(::core::option::Option::Some(#value)),
        None => quote!(::core::option::Option::None),
    };
    let (kind, label) = match &config.locks {
        Locks::One(template, kind) => {
            let kind = match kind {
                Kind::Lock => quote!(#private::Kind::Lock),
                Kind::Read => quote!(#private::Kind::Read),
                Kind::Write => quote!(#private::Kind::Write),
                Kind::Fair => quote!(#private::Kind::Fair),
                Kind::Semaphore(permits) => quote!(#private::Kind::Semaphore(#permits)),
            };
            (kind, template.label())
        }
        Locks::All(templates) => {
            // Every name of the set is labelled by the set's templates, so that a
            // series counts the templates, not the names (one per SKU).
            let joined: Vec<String> = templates.iter().map(|t| t.label().value()).collect();
            let label = syn::LitStr::new(&joined.join(", "), templates[0].label().span());
            (quote!(#private::Kind::Lock), label)
        }
    };
    quote! {
        #private::Options {
            wait: #wait,
            lease: #lease,
            max_hold: #max_hold,
            fencing: #fencing,
            kind: #kind,
            label: #label,
        }
    }
}

/// `if let Some(r) = None::<Ret> { return r; }`: tells the body's async block its
/// output type before the body is checked (`impl Trait` becomes `_`).
fn anchor(output: &ReturnType) -> TokenStream {
    let ReturnType::Type(_, ty) = output else {
        return TokenStream::new();
    };
    let mut ty = (**ty).clone();
    replace_impl_trait(&mut ty);
    let ret = format_ident!("__distlock_ret", span = Span::mixed_site());
    quote_spanned! {ty.span()=>
        if let ::core::option::Option::Some(#ret) = ::core::option::Option::None::<#ty> {
            #[allow(unreachable_code)]
            return #ret;
        }
    }
}

/// Replaces every `impl Trait` in `ty` with `_`.
fn replace_impl_trait(ty: &mut Type) {
    match ty {
        Type::ImplTrait(impl_trait) => {
            *ty = Type::Infer(syn::TypeInfer {
                underscore_token: syn::Token![_](impl_trait.impl_token.span),
            });
        }
        Type::Array(array) => replace_impl_trait(&mut array.elem),
        Type::Group(group) => replace_impl_trait(&mut group.elem),
        Type::Paren(paren) => replace_impl_trait(&mut paren.elem),
        Type::Ptr(ptr) => replace_impl_trait(&mut ptr.elem),
        Type::Reference(reference) => replace_impl_trait(&mut reference.elem),
        Type::Slice(slice) => replace_impl_trait(&mut slice.elem),
        Type::Tuple(tuple) => tuple.elems.iter_mut().for_each(replace_impl_trait),
        Type::Path(path) => {
            if let Some(qself) = &mut path.qself {
                replace_impl_trait(&mut qself.ty);
            }
            for segment in &mut path.path.segments {
                if let PathArguments::AngleBracketed(args) = &mut segment.arguments {
                    for arg in &mut args.args {
                        if let GenericArgument::Type(ty) = arg {
                            replace_impl_trait(ty);
                        }
                    }
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attr::Args;

    fn expand_str(args: TokenStream, function: TokenStream) -> String {
        let config = syn::parse2::<Args>(args)
            .and_then(Args::build)
            .unwrap_or_else(|err| panic!("{err}"));
        let function = syn::parse2::<ItemFn>(function).unwrap_or_else(|err| panic!("{err}"));
        expand(config, function)
            .unwrap_or_else(|err| panic!("{err}"))
            .to_string()
    }

    fn idents(tokens: TokenStream, out: &mut Vec<String>) {
        for token in tokens {
            match token {
                proc_macro2::TokenTree::Ident(ident) => out.push(ident.to_string()),
                proc_macro2::TokenTree::Group(group) => idents(group.stream(), out),
                _ => {}
            }
        }
    }

    #[test]
    fn crate_path_replaces_distlock_everywhere() {
        let out = expand_str(
            quote!(
                key = "a:{id}",
                crate = "renamed",
                client = locks,
                on_lost = "abort"
            ),
            quote!(
                async fn f(locks: &Client, id: u32) -> Result<(), E> {
                    Ok(())
                }
            ),
        );
        let mut names = Vec::new();
        idents(out.parse().expect("tokens"), &mut names);
        assert!(!names.iter().any(|name| name == "distlock"), "{out}");
        assert!(out.contains("renamed :: __private :: run_abort"), "{out}");
        assert!(
            out.contains("renamed :: __private :: request_with"),
            "{out}"
        );
    }

    #[test]
    fn signature_is_kept() {
        let function = quote!(
            #[doc = "docs"]
            #[must_use]
            pub(crate) async fn f<'a, T: Clone>(
                &'a self,
                x: impl Send,
                (a, b): (T, T),
            ) -> Result<impl Clone + 'a, E>
            where
                T: Send,
            {
                Ok(a)
            }
        );
        let out = expand_str(quote!(key = "{a}"), function.clone());
        let parsed = syn::parse2::<ItemFn>(function).expect("fn");
        let expanded = syn::parse_str::<ItemFn>(&out).expect("fn");
        assert_eq!(
            parsed.sig.to_token_stream().to_string(),
            expanded.sig.to_token_stream().to_string()
        );
        assert_eq!(parsed.attrs.len(), expanded.attrs.len());
        assert_eq!(
            parsed.vis.to_token_stream().to_string(),
            expanded.vis.to_token_stream().to_string()
        );
        // `impl Trait` in the return type becomes `_` in the anchor.
        assert!(out.contains("None :: < Result < _ , E > >"), "{out}");
    }

    #[test]
    fn skip_if_held_needs_an_option_in_the_result() {
        let check = |ret: TokenStream| {
            let function =
                syn::parse2::<ItemFn>(quote!(async fn f() -> #ret { todo!() })).expect("fn");
            check_skip_output(&function, Shape::Async).map_err(|err| err.to_string())
        };
        for ok in [
            quote!(Result<Option<u8>, E>),
            quote!(std::result::Result<std::option::Option<u8>, E>),
            quote!(anyhow::Result<Option<()>>),
            quote!((Result<Option<u8>, E>)),
        ] {
            assert!(check(ok.clone()).is_ok(), "{ok}");
        }
        for bad in [
            quote!(Result<u8, E>),
            quote!(Option<Result<u8, E>>),
            quote!(JobResult),
            quote!(Result<Vec<Option<u8>>, E>),
        ] {
            let err = check(bad.clone()).expect_err("refused");
            assert!(
                err.contains("to return `Result<Option<T>, E>`"),
                "{bad}: {err}"
            );
        }
        let err = check(quote!(std::result::Result<&'static u8, E>)).expect_err("refused");
        assert!(
            err.contains("not `std::result::Result<&'static u8, E>`"),
            "{err}"
        );
    }

    #[test]
    fn unknown_parameters_are_listed() {
        let config = syn::parse2::<Args>(quote!(key = "{a}:{nope}:{self.x}"))
            .and_then(Args::build)
            .expect("config");
        let function = syn::parse2::<ItemFn>(quote!(
            async fn f(a: u8, b: u8) -> Result<(), E> {
                Ok(())
            }
        ))
        .expect("fn");
        let err = expand(config, function)
            .expect_err("unknown")
            .into_compile_error();
        let err = err.to_string();
        assert!(err.contains("`{nope}` in the key template is not a parameter of `f`; the parameters are `a`, `b`"), "{err}");
        assert!(err.contains("`{self.x}`"), "{err}");
    }
}
