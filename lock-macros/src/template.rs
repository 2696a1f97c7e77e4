//! Key templates: `"order:{order.id}"` parsed at compile time.
//!
//! A template is literal text and placeholders. A placeholder is `{root.member…}`,
//! optionally followed by a format spec (`{id:08}`); `root` is a parameter of the
//! function or `self`, each member is a field name or a tuple index. `{{` and `}}` are
//! literal braces.
//!
//! A template of `keys` may hold one *collection* placeholder, `{sku in order.skus}`:
//! one key per element of the collection (anything `&collection` iterates over),
//! each element formatted where the placeholder stands (`sku` names it, for the
//! reader; a spec goes after it: `{sku:>4 in order.skus}`).

use std::fmt::Write as _;

use proc_macro2::{Span, TokenStream};
use quote::{quote, ToTokens};
use syn::{Ident, Index, LitStr};

/// A parsed key template.
pub(crate) struct Template {
    /// The template as written, for error spans.
    pub(crate) lit: LitStr,
    pieces: Vec<Piece>,
    /// The collection placeholder's index among `pieces`, if there is one.
    each: Option<usize>,
}

/// A part of a template.
enum Piece {
    /// Text used as is (braces already unescaped).
    Text(String),
    /// A value formatted into the key.
    Value(Placeholder),
    /// Each element of a collection: `{sku in order.skus}` (the spec of `sku:..`,
    /// the collection's path in `collection`).
    Each {
        element: Placeholder,
        collection: Placeholder,
    },
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
        if let Some(sign) = spel_sign(&text) {
            return Err(error(spel_message(&text, sign)));
        }
        let mut pieces = Vec::new();
        let mut each = None;
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
                    let inner = &text[inner_start..end];
                    match inner.split_once(" in ") {
                        Some((element, collection)) => {
                            if each.is_some() {
                                return Err(error(format!(
                                    "two collection placeholders in one key template (`{{{inner}}}` \
                                     is the second); a template takes one key per element of one \
                                     collection: give each collection a template of its own in \
                                     `keys = [..]`"
                                )));
                            }
                            let element = Placeholder::parse(element.trim()).map_err(error)?;
                            if !element.members.is_empty() {
                                return Err(error(format!(
                                    "`{{{inner}}}`: the element of a collection placeholder is a \
                                     name for each element, like `{{sku in order.skus}}`, not a \
                                     path"
                                )));
                            }
                            let collection =
                                Placeholder::parse(collection.trim()).map_err(error)?;
                            if !collection.spec.is_empty() {
                                return Err(error(format!(
                                    "`{{{inner}}}`: a format spec goes after the element's name, \
                                     like `{{sku:>4 in order.skus}}`"
                                )));
                            }
                            each = Some(pieces.len());
                            pieces.push(Piece::Each {
                                element,
                                collection,
                            });
                        }
                        None => {
                            let placeholder = Placeholder::parse(inner).map_err(|message| {
                                // `#{'order:' + #id}`: a SpEL template expression.
                                match spel_sign(inner).or_else(|| spel_sign(&text)) {
                                    Some(sign) => error(spel_message(&text, sign)),
                                    None => error(message),
                                }
                            })?;
                            pieces.push(Piece::Value(placeholder));
                        }
                    }
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
            each,
        })
    }

    /// Whether the template makes one key per element of a collection.
    pub(crate) fn is_collection(&self) -> bool {
        self.each.is_some()
    }

    /// The placeholders that name the function's values, in order (a collection
    /// placeholder's collection, not its element).
    pub(crate) fn placeholders(&self) -> impl Iterator<Item = &Placeholder> {
        self.pieces.iter().filter_map(|piece| match piece {
            Piece::Value(placeholder) => Some(placeholder),
            Piece::Each { collection, .. } => Some(collection),
            Piece::Text(_) => None,
        })
    }

    /// The template as written: the class of its locks for the lock-order checker.
    pub(crate) fn label(&self) -> LitStr {
        self.lit.clone()
    }

    /// An expression for the keys of a collection template: a `Vec<String>`, one key
    /// per element of `&collection`, each formatted through `format_key`.
    pub(crate) fn to_keys_expr(&self, format_key: &TokenStream) -> TokenStream {
        let span = Span::call_site().located_at(self.lit.span());
        let Some(Piece::Each { collection, .. }) = self.each.map(|index| &self.pieces[index])
        else {
            let key = self.to_expr(format_key);
            return quote!(::std::vec![::std::string::String::from(#key)]);
        };
        let item = ident("__distlock_element", Span::mixed_site());
        let (format, mut args) = self.format_string(span);
        let at = self.pieces[..self.each.unwrap_or(0)]
            .iter()
            .filter(|piece| !matches!(piece, Piece::Text(_)))
            .count();
        args.insert(at, item.to_token_stream());
        let collection = collection.to_expr(span);
        let format = LitStr::new(&format, span);
        quote::quote_spanned! {span=>
            // Method syntax, so that `&collection` auto-dereferences to whatever
            // iterates: a `Vec`, a slice behind a reference, a set.
            (&(#collection)).into_iter()
                .map(|#item| #format_key(::core::format_args!(#format, #(#args),*)))
                .collect::<::std::vec::Vec<::std::string::String>>()
        }
    }

    /// The format string of the template and the arguments of its placeholders (a
    /// collection placeholder takes its place in the string; its argument is the
    /// caller's).
    fn format_string(&self, span: Span) -> (String, Vec<TokenStream>) {
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
                    placeholder.push_format(&mut format);
                    args.push(placeholder.to_expr(span));
                }
                Piece::Each { element, .. } => element.push_format(&mut format),
            }
        }
        (format, args)
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
        let (format, args) = self.format_string(span);
        if args.is_empty() {
            // Only text: no formatting, no allocation.
            let text: String = self
                .pieces
                .iter()
                .map(|piece| match piece {
                    Piece::Text(text) => text.as_str(),
                    Piece::Value(_) | Piece::Each { .. } => "",
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
    /// `{}` or `{:<spec>}` for this placeholder.
    fn push_format(&self, format: &mut String) {
        if self.spec.is_empty() {
            format.push_str("{}");
        } else {
            let _ = write!(format, "{{:{}}}", self.spec);
        }
    }

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

/// The first sign, outside placeholders, that `text` is a SpEL expression (the key
/// language of Spring's and Redisson's lock annotations) rather than a template: a
/// quote (a SpEL string literal), `#` before a name (a SpEL variable, `#id`), or a
/// `+` beside a space (SpEL's concatenation). A `#` or `+` otherwise is text
/// (`"order#{id}"`, `"{a}+{b}"`).
fn spel_sign(text: &str) -> Option<&'static str> {
    let chars: Vec<char> = text.chars().collect();
    let mut depth = 0_usize;
    let mut at = 0;
    while let Some(&c) = chars.get(at) {
        let next = chars.get(at + 1).copied();
        match c {
            '{' if depth == 0 && next == Some('{') => at += 1,
            '}' if depth == 0 && next == Some('}') => at += 1,
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            _ if depth > 0 => {}
            '\'' | '"' => return Some("a quote"),
            '#' if next.is_some_and(|c| c == '_' || c.is_alphabetic()) => {
                return Some("`#` before a name")
            }
            '+' if next.is_some_and(char::is_whitespace)
                || at > 0 && chars[at - 1].is_whitespace() =>
            {
                return Some("a `+` beside a space")
            }
            _ => {}
        }
        at += 1;
    }
    None
}

/// The error for a SpEL-style key: what was seen, and the template to write.
fn spel_message(text: &str, sign: &str) -> String {
    let write = match spel_to_template(text) {
        Some(template) => format!("write `\"{template}\"`"),
        None => "write the key's text with placeholders, like `\"order:{id}\"`".to_owned(),
    };
    format!(
        "the key `{text}` looks like a SpEL expression, as Spring's and Redisson's lock \
         annotations take (it has {sign} outside `{{..}}` placeholders); a key template is \
         the key's own text, with `{{..}}` placeholders for parameters: {write}"
    )
}

/// The template that a simple SpEL key means, if it can be told: quoted strings are
/// text, `#path` is the placeholder `{path}`, `+` and the spaces outside quotes go;
/// `#{..}` around the whole (a SpEL template expression) is dropped.
fn spel_to_template(text: &str) -> Option<String> {
    let trimmed = text.trim();
    let body = trimmed
        .strip_prefix("#{")
        .and_then(|rest| rest.strip_suffix('}'))
        .unwrap_or(trimmed);
    let mut chars = body.chars().peekable();
    let mut template = String::new();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => loop {
                match chars.next()? {
                    end if end == c => break,
                    '{' => template.push_str("{{"),
                    '}' => template.push_str("}}"),
                    other => template.push(other),
                }
            },
            '#' if chars.peek().is_some_and(|&c| c == '_' || c.is_alphabetic()) => {
                let mut path = String::new();
                while let Some(&c) = chars.peek() {
                    if c == '_' || c == '.' || c.is_alphanumeric() {
                        path.push(c);
                        chars.next();
                    } else {
                        break;
                    }
                }
                template.push('{');
                template.push_str(path.trim_end_matches('.'));
                template.push('}');
            }
            '+' => {}
            c if c.is_whitespace() => {}
            // A method call, an index, an operator: not a simple key.
            '(' | ')' | '[' | ']' | '?' | '!' | '=' | '<' | '>' => return None,
            c => template.push(c),
        }
    }
    (!template.is_empty()).then_some(template)
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
    fn keys_with_a_plus_or_a_hash_that_are_not_spel_are_text() {
        for text in ["order#{id}", "c++:{id}", "{a}+{b}", "v#2:{id}", "{r#type}"] {
            assert!(parse(text).is_ok(), "{text:?}: {:?}", parse(text).err());
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
            ("'order:' + #id", "write `\"order:{id}\"`"),
            ("'order:' + #order.id", "write `\"order:{order.id}\"`"),
            ("#id", "write `\"{id}\"`"),
            ("order:#id", "write `\"order:{id}\"`"),
            ("#{'order:' + #id}", "write `\"order:{id}\"`"),
            ("'order:' + {id}", "write `\"order:{id}\"`"),
            ("order:{id} + x", "a `+` beside a space"),
            ("\"order\"", "a quote"),
            ("'order:' + #id.toString()", "like `\"order:{id}\"`"),
        ] {
            let err = parse(text)
                .err()
                .unwrap_or_else(|| panic!("{text:?} parsed"));
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }
}
