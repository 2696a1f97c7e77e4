//! Key templates: `"order:{order.id}"` parsed at compile time.
//!
//! A template is literal text and placeholders. A placeholder is `{root.member…}`,
//! optionally followed by a format spec (`{id:08}`); `root` is a parameter of the
//! function or `self`, each member is a field name or a tuple index. `{{` and `}}` are
//! literal braces.

use std::fmt::Write as _;

use proc_macro2::{Span, TokenStream};
use quote::{quote, ToTokens};
use syn::{Ident, Index, LitStr};

/// A parsed key template.
pub(crate) struct Template {
    /// The template as written, for error spans.
    pub(crate) lit: LitStr,
    pieces: Vec<Piece>,
}

/// A part of a template.
enum Piece {
    /// Text used as is (braces already unescaped).
    Text(String),
    /// A value formatted into the key.
    Value(Placeholder),
}

/// `{order.id:08}`.
pub(crate) struct Placeholder {
    /// `order` in `{order.id}`, or `self`.
    pub(crate) root: String,
    /// `id` in `{order.id}`: field names or tuple indices.
    members: Vec<Member>,
    /// `08` in `{id:08}`, empty when there is none.
    spec: String,
    /// The placeholder as written, without braces, for messages.
    pub(crate) source: String,
}

/// A field access in a placeholder.
enum Member {
    Named(String),
    Index(u32),
}

const PLACEHOLDER_HELP: &str = "a placeholder names a parameter or a field of one, like \
     `{id}`, `{order.id}` or `{self.tenant}`, optionally with a format spec: `{id:08}`";

impl Template {
    /// Parses `lit`. Errors are spanned on the template.
    pub(crate) fn parse(lit: &LitStr) -> syn::Result<Template> {
        let text = lit.value();
        let error = |message: String| syn::Error::new(lit.span(), message);
        let mut pieces = Vec::new();
        let mut buf = String::new();
        let mut chars = text.char_indices().peekable();
        while let Some((start, c)) = chars.next() {
            match c {
                '{' if chars.peek().map(|&(_, c)| c) == Some('{') => {
                    chars.next();
                    buf.push('{');
                }
                '}' if chars.peek().map(|&(_, c)| c) == Some('}') => {
                    chars.next();
                    buf.push('}');
                }
                '}' => {
                    return Err(error(format!(
                        "unmatched `}}` at byte {start} of the key template; write `}}}}` for \
                         a literal brace"
                    )))
                }
                '{' => {
                    let inner_start = start + 1;
                    let end = loop {
                        match chars.next() {
                            Some((end, '}')) => break end,
                            Some((_, '{')) | None => {
                                return Err(error(format!(
                                    "unclosed `{{` at byte {start} of the key template; close \
                                     the placeholder with `}}`, or write `{{{{` for a literal \
                                     brace"
                                )))
                            }
                            Some(_) => {}
                        }
                    };
                    if !buf.is_empty() {
                        pieces.push(Piece::Text(std::mem::take(&mut buf)));
                    }
                    let placeholder = Placeholder::parse(&text[inner_start..end]).map_err(error)?;
                    pieces.push(Piece::Value(placeholder));
                }
                c => buf.push(c),
            }
        }
        if !buf.is_empty() {
            pieces.push(Piece::Text(buf));
        }
        if pieces.is_empty() {
            return Err(error(
                "the key template is empty; name the lock, like `key = \"order:{order.id}\"`"
                    .to_owned(),
            ));
        }
        Ok(Template {
            lit: lit.clone(),
            pieces,
        })
    }

    /// The placeholders, in order.
    pub(crate) fn placeholders(&self) -> impl Iterator<Item = &Placeholder> {
        self.pieces.iter().filter_map(|piece| match piece {
            Piece::Value(placeholder) => Some(placeholder),
            Piece::Text(_) => None,
        })
    }

    /// An expression for the key: a `&'static str` when the template has no
    /// placeholder, else a `String` formatted once through `format_key`, a function
    /// taking `fmt::Arguments`.
    ///
    /// Its tokens are located at the template, so that errors point there, but
    /// resolved at the macro's call site: rustc then knows they come from an
    /// expansion, and makes no suggestion that would rewrite the template as if it
    /// were the code (`key = id` for a misspelt field), nor points inside it as if
    /// the format string were the template's text.
    pub(crate) fn to_expr(&self, format_key: &TokenStream) -> TokenStream {
        let span = Span::call_site().located_at(self.lit.span());
        let mut format = String::new();
        let mut args = Vec::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => {
                    for c in text.chars() {
                        match c {
                            '{' => format.push_str("{{"),
                            '}' => format.push_str("}}"),
                            c => format.push(c),
                        }
                    }
                }
                Piece::Value(placeholder) => {
                    if placeholder.spec.is_empty() {
                        format.push_str("{}");
                    } else {
                        let _ = write!(format, "{{:{}}}", placeholder.spec);
                    }
                    args.push(placeholder.to_expr(span));
                }
            }
        }
        if args.is_empty() {
            // Only text: no formatting, no allocation.
            let text: String = self
                .pieces
                .iter()
                .map(|piece| match piece {
                    Piece::Text(text) => text.as_str(),
                    Piece::Value(_) => "",
                })
                .collect();
            return LitStr::new(&text, span).into_token_stream();
        }
        let format = LitStr::new(&format, span);
        quote::quote_spanned! {span=>
            #format_key(::core::format_args!(#format, #(#args),*))
        }
    }
}

impl Placeholder {
    fn parse(source: &str) -> Result<Placeholder, String> {
        let (path, spec) = match source.split_once(':') {
            Some((path, spec)) => (path, spec),
            None => (source, ""),
        };
        if path.is_empty() {
            return Err(format!(
                "empty placeholder `{{{source}}}` in the key template; {PLACEHOLDER_HELP}"
            ));
        }
        if spec.contains('$') {
            return Err(format!(
                "the format spec of `{{{source}}}` refers to another argument (`$`); the key \
                 template only formats its placeholders: write the width or precision as a number"
            ));
        }
        check_spec(spec).map_err(|problem| {
            format!(
                "invalid format spec in `{{{source}}}` in the key template: {problem}; {SPEC_HELP}"
            )
        })?;
        let mut parts = path.split('.');
        let root = parts.next().unwrap_or_default();
        if !is_ident(root) {
            return Err(format!(
                "invalid placeholder `{{{source}}}` in the key template; {PLACEHOLDER_HELP}"
            ));
        }
        let mut members = Vec::new();
        for part in parts {
            if is_ident(part) && part != "self" {
                members.push(Member::Named(part.to_owned()));
            } else if let Some(index) = tuple_index(part) {
                members.push(Member::Index(index));
            } else {
                return Err(format!(
                    "invalid placeholder `{{{source}}}` in the key template; {PLACEHOLDER_HELP} \
                     (method calls and other expressions are not allowed: compute the value \
                     into a parameter)"
                ));
            }
        }
        Ok(Placeholder {
            root: root.to_owned(),
            members,
            spec: spec.to_owned(),
            source: source.to_owned(),
        })
    }

    fn to_expr(&self, span: Span) -> TokenStream {
        let root = match self.root.as_str() {
            "self" => quote::quote_spanned!(span=> self),
            name => ident(name, span).into_token_stream(),
        };
        let members = self.members.iter().map(|member| match member {
            Member::Named(name) => ident(name, span).into_token_stream(),
            Member::Index(index) => Index {
                index: *index,
                span,
            }
            .into_token_stream(),
        });
        quote!(#root #(. #members)*)
    }
}

const SPEC_HELP: &str = "a format spec is `[[fill]align][sign][#][0][width][.precision][type]`, \
     with a type among ``, `?`, `x?`, `X?`, `x`, `X`, `o`, `b`, `e`, `E` and `p`, like `{id:08}`, \
     `{id:>6}`, `{id:.3}` or `{id:?}`";

/// Checks a format spec (after the `:`) as `format_args!` parses it, so that a bad
/// one is reported here, on the whole template, with the spec as written: the
/// format string passed on is not the template's text, so an error of
/// `format_args!` inside it would point at the wrong character. A `$` was refused
/// before.
fn check_spec(spec: &str) -> Result<(), String> {
    let chars: Vec<char> = spec.chars().collect();
    let mut at = 0;
    let is_align = |c: &char| matches!(c, '<' | '^' | '>');
    if chars.get(1).is_some_and(is_align) {
        at = 2;
    } else if chars.first().is_some_and(is_align) {
        at = 1;
    }
    if matches!(chars.get(at), Some('+' | '-')) {
        at += 1;
    }
    if chars.get(at) == Some(&'#') {
        at += 1;
    }
    if chars.get(at) == Some(&'0') {
        at += 1;
    }
    while chars.get(at).is_some_and(char::is_ascii_digit) {
        at += 1;
    }
    if chars.get(at) == Some(&'.') {
        at += 1;
        if chars.get(at) == Some(&'*') {
            return Err(
                "`.*` takes the precision from another argument, and the key template only \
                 formats its placeholders: write the precision as a number"
                    .to_owned(),
            );
        }
        let digits = at;
        while chars.get(at).is_some_and(char::is_ascii_digit) {
            at += 1;
        }
        if at == digits {
            return Err("`.` is not followed by a precision".to_owned());
        }
    }
    let kind: String = chars[at..].iter().collect();
    match kind.as_str() {
        "" | "?" | "x?" | "X?" | "x" | "X" | "o" | "b" | "e" | "E" | "p" => Ok(()),
        _ => Err(format!("`{kind}` is not a format type")),
    }
}

/// An identifier, raw when it is a keyword (`r#type`).
fn ident(name: &str, span: Span) -> Ident {
    syn::parse_str::<Ident>(name)
        .map(|mut ident| {
            ident.set_span(span);
            ident
        })
        .unwrap_or_else(|_| Ident::new_raw(name, span))
}

fn is_ident(s: &str) -> bool {
    let s = s.strip_prefix("r#").unwrap_or(s);
    let mut chars = s.chars();
    match chars.next() {
        Some(c) if c == '_' || c.is_alphabetic() => {}
        _ => return false,
    }
    s != "_" && chars.all(|c| c == '_' || c.is_alphanumeric())
}

fn tuple_index(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || (s.len() > 1 && s.starts_with('0'))
    {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Template, String> {
        Template::parse(&LitStr::new(text, Span::call_site())).map_err(|e| e.to_string())
    }

    fn expr(text: &str) -> String {
        parse(text)
            .expect("a template")
            .to_expr(&quote!(fk))
            .to_string()
    }

    #[test]
    fn plain_text_is_a_literal() {
        assert_eq!(expr("report:daily"), "\"report:daily\"");
        assert_eq!(expr("a{{b}}"), "\"a{b}\"");
    }

    #[test]
    fn placeholders_become_positional_arguments() {
        assert_eq!(
            expr("order:{order.id}:{n:08}:{{x}}:{self.t}:{pair.1}"),
            quote!(fk(::core::format_args!(
                "order:{}:{:08}:{{x}}:{}:{}",
                order.id,
                n,
                self.t,
                pair.1
            )))
            .to_string()
        );
    }

    #[test]
    fn format_specs_that_format_args_takes_are_taken() {
        for spec in [
            "", "?", "#?", "x?", "X?", "#x", "08", "08.3", ">6", "*<6", "-^10", "<", "<<", "+",
            "+.3e", "#010b", "o", "E", "p", ".0", "0", "x>4X",
        ] {
            assert!(check_spec(spec).is_ok(), "{spec:?}: {:?}", check_spec(spec));
        }
    }

    #[test]
    fn roots_are_listed() {
        let template = parse("{a}-{b.c}-{self.d}").expect("a template");
        let roots: Vec<_> = template.placeholders().map(|p| p.root.as_str()).collect();
        assert_eq!(roots, ["a", "b", "self"]);
    }

    #[test]
    fn bad_templates_are_refused() {
        for (text, needle) in [
            ("", "empty"),
            ("a{", "unclosed"),
            ("a{b", "unclosed"),
            ("a{b{c}}", "unclosed"),
            ("a}b", "unmatched"),
            ("{}", "empty placeholder"),
            ("{:x}", "empty placeholder"),
            ("{a.b()}", "method calls"),
            ("{1a}", "invalid placeholder"),
            ("{a.01}", "invalid placeholder"),
            ("{a:>w$}", "`$`"),
            ("{a b}", "invalid placeholder"),
            ("{a:q}", "`q` is not a format type"),
            ("{a:08.}", "not followed by a precision"),
            ("{a:.*}", "`.*`"),
            ("{a:<5<}", "`<` is not a format type"),
            ("{a:?x}", "`?x` is not a format type"),
        ] {
            let err = parse(text)
                .err()
                .unwrap_or_else(|| panic!("{text:?} parsed"));
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }
}
