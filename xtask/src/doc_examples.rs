//! `cargo xtask doc-examples`: every public item of the published crates has an
//! example in its docs. rustdoc's own lint for it (`missing_doc_code_examples`) is
//! nightly only, so this reads the sources with `syn` instead.
//!
//! From each crate root it follows the `mod` declarations, and lists every `pub fn`
//! (`async` too), `pub struct`, `pub enum`, `pub trait`, `pub const` and `pub type`,
//! and every `pub fn` and `pub const` of an inherent `impl` block, whose doc comment
//! has no Rust code block (a fence with no language, or `rust`, `no_run`, `ignore`,
//! ...; a `text` block is no example). It leaves out what is not public API:
//! `pub(crate)` and other restricted items and modules, `#[cfg(test)]` items and
//! modules, `#[doc(hidden)]` items, impl blocks and modules (with everything in
//! them), trait impls (`impl X for Y`, documented by the trait), and the items of
//! traits. A plain `pub` in a private module counts: the workspace warns on
//! `unreachable_pub`, and CI denies warnings, so such an item is re-exported.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use syn::spanned::Spanned;
use syn::{Attribute, ImplItem, Item, Visibility};

use crate::command::{Failure, Result};

/// The crate roots whose public items need examples, relative to the workspace.
pub(crate) const ROOTS: [&str; 4] = [
    "lock-core/src/lib.rs",
    "src/lib.rs",
    "lock-macros/src/lib.rs",
    "testkit/src/lib.rs",
];

/// Items that need no example, as `file: item` (the form of the report), each with
/// why. Keep it short: an example is what a reader of docs.rs copies. An entry that
/// matches no item missing an example fails the check, so that it is removed.
pub(crate) const EXCEPTIONS: [(&str, &str); 0] = [];

/// A public item whose docs have no example.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Missing {
    /// The file, relative to the workspace.
    pub(crate) file: String,
    /// The line of the item.
    pub(crate) line: usize,
    /// `fn LockClient::lock`, `struct LockInfo`, ...
    pub(crate) item: String,
}

impl Missing {
    /// `file: item`, the form of [`EXCEPTIONS`].
    fn key(&self) -> String {
        format!("{}: {}", self.file, self.item)
    }
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.item)
    }
}

/// `cargo xtask doc-examples`.
pub(crate) fn check(workspace: &Path) -> Result<()> {
    let mut missing = Vec::new();
    for root in ROOTS {
        missing.extend(scan_crate(workspace, root)?);
    }
    let excepted: Vec<String> = EXCEPTIONS
        .iter()
        .map(|(item, _)| (*item).to_owned())
        .collect();
    let stale: Vec<&String> = excepted
        .iter()
        .filter(|key| !missing.iter().any(|item| item.key() == **key))
        .collect();
    missing.retain(|item| !excepted.contains(&item.key()));
    missing.sort();
    if missing.is_empty() && stale.is_empty() {
        println!(
            "xtask: every public item of {} has a doc example",
            ROOTS.join(", ")
        );
        return Ok(());
    }
    let mut message = String::new();
    if !missing.is_empty() {
        message.push_str(&format!(
            "{} public items have no example (a ``` block of Rust) in their docs:\n",
            missing.len()
        ));
        for item in &missing {
            message.push_str(&format!("  {item}\n"));
        }
    }
    for key in stale {
        message.push_str(&format!(
            "the exception `{key}` in xtask/src/doc_examples.rs matches no item missing an \
             example: remove it\n"
        ));
    }
    Err(Failure::Message(message.trim_end().to_owned()))
}

/// The items missing an example in the crate whose root is `root` (relative to
/// `workspace`).
pub(crate) fn scan_crate(workspace: &Path, root: &str) -> Result<Vec<Missing>> {
    let mut scan = Scan {
        workspace: workspace.to_owned(),
        missing: Vec::new(),
    };
    scan.file(&workspace.join(root), true)?;
    Ok(scan.missing)
}

struct Scan {
    workspace: PathBuf,
    missing: Vec<Missing>,
}

impl Scan {
    /// The items of the file at `path`; `owns_dir`: its submodules are in its own
    /// folder (`lib.rs`, `mod.rs`, or a `#[path]` file), not in a folder named after it.
    fn file(&mut self, path: &Path, owns_dir: bool) -> Result<()> {
        let source = fs::read_to_string(path)
            .map_err(|err| Failure::Message(format!("{}: {err}", path.display())))?;
        let file = syn::parse_file(&source)
            .map_err(|err| Failure::Message(format!("{}: {err}", path.display())))?;
        let dir = match (path.parent(), owns_dir) {
            (Some(parent), true) => parent.to_owned(),
            (Some(parent), false) => parent.join(path.file_stem().unwrap_or_default()),
            (None, _) => PathBuf::new(),
        };
        let rel = path
            .strip_prefix(&self.workspace)
            .unwrap_or(path)
            .display()
            .to_string();
        self.items(&file.items, &rel, &dir)
    }

    fn items(&mut self, items: &[Item], file: &str, dir: &Path) -> Result<()> {
        for item in items {
            self.item(item, file, dir)?;
        }
        Ok(())
    }

    fn item(&mut self, item: &Item, file: &str, dir: &Path) -> Result<()> {
        let (attrs, vis, what) = match item {
            Item::Fn(f) => (&f.attrs, &f.vis, format!("fn {}", f.sig.ident)),
            Item::Struct(s) => (&s.attrs, &s.vis, format!("struct {}", s.ident)),
            Item::Enum(e) => (&e.attrs, &e.vis, format!("enum {}", e.ident)),
            Item::Trait(t) => (&t.attrs, &t.vis, format!("trait {}", t.ident)),
            Item::Const(c) => (&c.attrs, &c.vis, format!("const {}", c.ident)),
            Item::Type(t) => (&t.attrs, &t.vis, format!("type {}", t.ident)),
            Item::Impl(block) => {
                if block.trait_.is_some() || skipped(&block.attrs) {
                    return Ok(());
                }
                let ty = type_name(&block.self_ty);
                for member in &block.items {
                    let (attrs, vis, what) = match member {
                        ImplItem::Fn(f) => (&f.attrs, &f.vis, format!("fn {ty}::{}", f.sig.ident)),
                        ImplItem::Const(c) => {
                            (&c.attrs, &c.vis, format!("const {ty}::{}", c.ident))
                        }
                        _ => continue,
                    };
                    self.check(attrs, vis, what, member.span(), file);
                }
                return Ok(());
            }
            Item::Mod(module) => {
                if skipped(&module.attrs) || restricted(&module.vis) {
                    return Ok(());
                }
                let path_attr = path_attribute(&module.attrs);
                return match (&module.content, path_attr) {
                    (Some((_, items)), _) => {
                        let inner = dir.join(module.ident.to_string());
                        self.items(items, file, &inner)
                    }
                    (None, Some(path)) => self.file(&dir.join(path), true),
                    (None, None) => {
                        let name = module.ident.to_string();
                        let flat = dir.join(format!("{name}.rs"));
                        if flat.exists() {
                            self.file(&flat, false)
                        } else {
                            self.file(&dir.join(&name).join("mod.rs"), true)
                        }
                    }
                };
            }
            _ => return Ok(()),
        };
        self.check(attrs, vis, what, item.span(), file);
        Ok(())
    }

    fn check(
        &mut self,
        attrs: &[Attribute],
        vis: &Visibility,
        item: String,
        span: proc_macro2::Span,
        file: &str,
    ) {
        if !matches!(vis, Visibility::Public(_)) || skipped(attrs) {
            return;
        }
        if !has_example(&doc_text(attrs)) {
            self.missing.push(Missing {
                file: file.to_owned(),
                line: span.start().line,
                item: format!("pub {item}"),
            });
        }
    }
}

/// `pub(crate)`, `pub(super)`, `pub(in ..)`.
fn restricted(vis: &Visibility) -> bool {
    matches!(vis, Visibility::Restricted(_))
}

/// `#[cfg(test)]` (also inside `all(..)`/`any(..)`) or `#[doc(hidden)]`.
fn skipped(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|attr| {
        let Ok(list) = attr.meta.require_list() else {
            return false;
        };
        let tokens = list.tokens.to_string();
        let words: Vec<&str> = tokens
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|word| !word.is_empty())
            .collect();
        (attr.path().is_ident("cfg") && words.contains(&"test") && !words.contains(&"not"))
            || (attr.path().is_ident("doc") && words.first() == Some(&"hidden"))
    })
}

/// The value of `#[path = ".."]`.
fn path_attribute(attrs: &[Attribute]) -> Option<String> {
    attrs.iter().find_map(|attr| {
        let value = &attr.meta.require_name_value().ok()?.value;
        if !attr.path().is_ident("path") {
            return None;
        }
        match value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(path),
                ..
            }) => Some(path.value()),
            _ => None,
        }
    })
}

/// The name of an impl block's type: `LockClient` for `impl LockClient`,
/// `Foo` for `impl<T> Foo<T>`.
fn type_name(ty: &syn::Type) -> String {
    match ty {
        syn::Type::Path(path) => path
            .path
            .segments
            .last()
            .map_or_else(String::new, |segment| segment.ident.to_string()),
        syn::Type::Reference(reference) => type_name(&reference.elem),
        syn::Type::Paren(paren) => type_name(&paren.elem),
        syn::Type::Group(group) => type_name(&group.elem),
        _ => "_".to_owned(),
    }
}

/// The doc comment: every `#[doc = ".."]` (`///` lines), one line each.
fn doc_text(attrs: &[Attribute]) -> String {
    let mut text = String::new();
    for attr in attrs.iter().filter(|attr| attr.path().is_ident("doc")) {
        if let Ok(syn::MetaNameValue {
            value:
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(line),
                    ..
                }),
            ..
        }) = attr.meta.require_name_value()
        {
            text.push_str(&line.value());
            text.push('\n');
        }
    }
    text
}

/// Whether `doc` has a code block that rustdoc treats as Rust.
pub(crate) fn has_example(doc: &str) -> bool {
    let mut fence: Option<&str> = None;
    for line in doc.lines() {
        let line = line.trim();
        match fence {
            None => {
                if let Some(info) = line.strip_prefix("```") {
                    if is_rust(info) {
                        return true;
                    }
                    fence = Some("```");
                }
            }
            Some(open) => {
                if line.starts_with(open) {
                    fence = None;
                }
            }
        }
    }
    false
}

/// Whether a fence's info string makes a Rust code block, as rustdoc reads it.
fn is_rust(info: &str) -> bool {
    info.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|word| !word.is_empty())
        .all(|word| {
            matches!(
                word,
                "rust"
                    | "no_run"
                    | "ignore"
                    | "should_panic"
                    | "compile_fail"
                    | "test_harness"
                    | "standalone_crate"
            ) || word.starts_with("edition")
                || word.starts_with("ignore-")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn missing_in(source: &str) -> Vec<String> {
        let dir = std::env::temp_dir().join(format!(
            "xtask-doc-examples-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        fs::create_dir_all(&dir).expect("a temporary folder");
        fs::write(dir.join("lib.rs"), source).expect("write lib.rs");
        let found = scan_crate(&dir, "lib.rs").unwrap_or_else(|err| match err {
            Failure::Message(message) => panic!("{message}"),
            Failure::Status(code) => panic!("status {code}"),
        });
        fs::remove_dir_all(&dir).expect("remove the temporary folder");
        found.into_iter().map(|item| item.item).collect()
    }

    #[test]
    fn code_blocks_of_rust_are_examples_and_text_is_not() {
        assert!(has_example("Docs.\n\n```\nlet x = 1;\n```\n"));
        assert!(has_example("```no_run\nconnect();\n```"));
        assert!(has_example("```rust,ignore\nx\n```"));
        assert!(has_example("  ```edition2021\nx\n  ```"));
        assert!(!has_example("Docs with no example."));
        assert!(!has_example("```text\nnot rust\n```"));
        assert!(!has_example("```sh\ncargo run\n```"));
        // The closing fence of a text block opens nothing.
        assert!(!has_example("```text\na\n```\nmore words\n"));
        assert!(has_example("```text\na\n```\n\n```\nlet x = 1;\n```\n"));
    }

    #[test]
    fn only_public_api_items_count() {
        let found = missing_in(
            r#"
            /// ```
            /// documented();
            /// ```
            pub fn documented() {}
            /// No example.
            pub fn bare() {}
            pub async fn bare_async() {}
            /// ```text
            /// no Rust here
            /// ```
            pub struct TextOnly;
            pub enum E { A }
            pub trait T { fn method(&self); }
            pub const C: u8 = 1;
            pub type Alias = u8;
            pub(crate) fn internal() {}
            fn private() {}
            #[doc(hidden)]
            pub fn hidden() {}
            pub struct S;
            /// ```
            /// S::new();
            /// ```
            impl S {
                pub fn method(&self) {}
                pub const ASSOCIATED: u8 = 2;
                pub(crate) fn internal(&self) {}
                fn private(&self) {}
                /// ```
                /// S.documented();
                /// ```
                pub fn documented(&self) {}
            }
            impl Clone for S { fn clone(&self) -> Self { S } }
            #[doc(hidden)]
            impl S { pub fn in_hidden_impl(&self) {} }
            #[cfg(test)]
            mod tests { pub fn in_tests() {} }
            #[doc(hidden)]
            pub mod hidden_module { pub fn in_hidden_module() {} }
            pub(crate) mod crate_module { pub fn in_crate_module() {} }
            mod private_module { pub fn reexported() {} }
            #[cfg(test)]
            pub fn test_only() {}
            "#,
        );
        assert_eq!(
            found,
            [
                "pub fn bare",
                "pub fn bare_async",
                "pub struct TextOnly",
                "pub enum E",
                "pub trait T",
                "pub const C",
                "pub type Alias",
                "pub struct S",
                "pub fn S::method",
                "pub const S::ASSOCIATED",
                "pub fn reexported",
            ]
        );
    }

    #[test]
    fn modules_in_files_are_followed() {
        let dir = std::env::temp_dir().join(format!("xtask-doc-modules-{}", std::process::id()));
        fs::create_dir_all(dir.join("nested")).expect("folders");
        fs::write(
            dir.join("lib.rs"),
            "mod flat;\nmod nested;\n#[doc(hidden)]\n#[path = \"other.rs\"]\npub mod hidden;\n",
        )
        .expect("lib.rs");
        fs::write(dir.join("flat.rs"), "pub fn in_flat() {}\nmod child;\n").expect("flat.rs");
        fs::create_dir_all(dir.join("flat")).expect("flat/");
        fs::write(dir.join("flat/child.rs"), "pub fn in_child() {}\n").expect("child.rs");
        fs::write(dir.join("nested/mod.rs"), "pub struct InNested;\n").expect("mod.rs");
        fs::write(dir.join("other.rs"), "pub fn in_hidden_file() {}\n").expect("other.rs");
        let found = scan_crate(&dir, "lib.rs").unwrap_or_else(|_| panic!("scan"));
        fs::remove_dir_all(&dir).expect("clean up");
        let found: Vec<String> = found
            .iter()
            .map(|item| format!("{}: {}", item.file, item.item))
            .collect();
        assert_eq!(
            found,
            [
                "flat.rs: pub fn in_flat",
                "flat/child.rs: pub fn in_child",
                "nested/mod.rs: pub struct InNested",
            ]
        );
    }

    #[test]
    fn the_exceptions_name_files_of_the_scanned_crates() {
        for (item, why) in EXCEPTIONS {
            assert!(!why.is_empty(), "{item}: say why");
            assert!(
                ROOTS.iter().any(|root| {
                    let dir = root.trim_end_matches("lib.rs");
                    item.starts_with(dir)
                }),
                "{item}"
            );
        }
    }
}
