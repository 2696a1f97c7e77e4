//! The Lua side of the wire: the scripts of `lua/`, and distlock's function library
//! made of them, as text. Running them is `library.rs`'s; decoding their replies,
//! `scripts.rs`'s.

use super::FunctionLibrary;

pub(crate) const PRELUDE: &str = include_str!("../../lua/lock.lua");
pub(crate) const ACQUIRE: &str = include_str!("../../lua/acquire.lua");
pub(crate) const ACQUIRE_ALL: &str = include_str!("../../lua/acquire_all.lua");
pub(crate) const RELEASE: &str = include_str!("../../lua/release.lua");
pub(crate) const RENEW: &str = include_str!("../../lua/renew.lua");
pub(crate) const FORCE_RELEASE: &str = include_str!("../../lua/force_release.lua");
pub(crate) const INSPECT: &str = include_str!("../../lua/inspect.lua");
pub(crate) const WITHDRAW: &str = include_str!("../../lua/withdraw.lua");
pub(crate) const ORDER_EDGE: &str = include_str!("../../lua/order_edge.lua");

/// The scripts of the library, in the order of `Scripts`' fields: each after
/// `lock.lua` (the layout, and how every script reads a lock). `acquire.lua` comes
/// twice: for a new hold (refused on a full server) and, `allow-oom`, for a
/// re-entry (which creates nothing).
pub(crate) const SOURCES: [Source<'static>; 8] = [
    source("acquire", &[], ACQUIRE),
    source("reenter", &["allow-oom"], ACQUIRE),
    source("acquire_all", &[], ACQUIRE_ALL),
    source("release", &["allow-oom"], RELEASE),
    source("renew", &["allow-oom"], RENEW),
    source("force_release", &["allow-oom"], FORCE_RELEASE),
    source("inspect", &["no-writes"], INSPECT),
    source("withdraw", &["allow-oom"], WITHDRAW),
];

/// A script of the library, as [`build`] takes it: its name, its flags (as
/// `#!lua flags=` and `redis.register_function` name them), its text (ending with
/// `return main()`).
pub(crate) struct Source<'a> {
    pub(crate) name: &'a str,
    pub(crate) flags: &'a [&'a str],
    pub(crate) text: &'a str,
}

/// The [`Source`] named `name`, with `flags`, of `text`.
const fn source(
    name: &'static str,
    flags: &'static [&'static str],
    text: &'static str,
) -> Source<'static> {
    Source { name, flags, text }
}

/// A function library as [`build`] makes it: its name and text, and for each
/// source (in order) the script `EVALSHA` sends and the function `FCALL` names.
pub(crate) struct Built<const N: usize> {
    /// Named `distlock_<version>`, where the version is the first 16 hex digits of
    /// the SHA1 of the library's body, so that clients of different distlock
    /// versions on one server each find their own; its text is
    /// `#!lua name=distlock_<version>`, then the prelude and every script.
    pub(crate) library: FunctionLibrary,
    /// Per source: its first line (flags), the prelude and its text; and
    /// `distlock_<version>_<script>`.
    pub(crate) scripts: [(String, String); N],
}

/// The function library of `prelude` and `scripts`.
pub(crate) fn build<const N: usize>(prelude: &str, scripts: &[Source<'_>; N]) -> Built<N> {
    // The functions are named after the library's version, which is known once
    // the body is: the body names them `NAME_<script>` until then.
    let mut body = String::from("local KEYS, ARGV\n");
    body.push_str(prelude);
    for source in scripts {
        let main = source.text.trim_end();
        let main = main.strip_suffix("return main()").unwrap_or(main);
        let flags: Vec<String> = source
            .flags
            .iter()
            .map(|flag| format!("'{flag}'"))
            .collect();
        // Every call starts the same way: its keys and arguments where the
        // scripts read them (KEYS, ARGV), and the clock not read yet.
        body.push_str(&format!(
            "do\n{main}\nredis.register_function{{ function_name = 'NAME_{}', \
             callback = function(keys, args) KEYS, ARGV, clock = keys, args, nil \
             return main() end, flags = {{ {} }} }}\nend\n",
            source.name,
            flags.join(", ")
        ));
    }
    // The version: the first 16 hex digits of the SHA1 of the body.
    let name = format!("distlock_{:.16}", redis::Script::new(&body).get_hash());
    let body = body.replace(
        "function_name = 'NAME_",
        &format!("function_name = '{name}_"),
    );
    let scripts = scripts.each_ref().map(|source| {
        let first = if source.flags.is_empty() {
            "#!lua".to_owned()
        } else {
            format!("#!lua flags={}", source.flags.join(","))
        };
        (
            format!("{first}\n{prelude}{}", source.text),
            format!("{name}_{}", source.name),
        )
    });
    Built {
        library: FunctionLibrary {
            text: format!("#!lua name={name}\n{body}"),
            name,
        },
        scripts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scripts are embedded from `lock-core/lua/`, links to the repository's
    /// `lua/` (so that the package carries them): in a checkout, every embedded text
    /// is the bytes of its file in `lua/` (a link replaced by a copy would drift). In
    /// a packaged crate there is no `../lua`, and `cargo xtask package` checks the
    /// packaged copies instead.
    #[test]
    fn the_embedded_scripts_are_the_repository_s() {
        let repository = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../lua");
        if !repository.is_dir() {
            return;
        }
        let embedded = [
            ("lock.lua", PRELUDE),
            ("acquire.lua", ACQUIRE),
            ("acquire_all.lua", ACQUIRE_ALL),
            ("release.lua", RELEASE),
            ("renew.lua", RENEW),
            ("force_release.lua", FORCE_RELEASE),
            ("inspect.lua", INSPECT),
            ("withdraw.lua", WITHDRAW),
            ("order_edge.lua", ORDER_EDGE),
        ];
        let files = std::fs::read_dir(&repository)
            .expect("lua/")
            .filter(|entry| {
                entry
                    .as_ref()
                    .is_ok_and(|entry| entry.path().extension().is_some_and(|e| e == "lua"))
            })
            .count();
        assert_eq!(files, embedded.len(), "every script of lua/ is embedded");
        for (file, text) in embedded {
            let source = std::fs::read_to_string(repository.join(file)).expect("a script");
            assert_eq!(text, source, "lock-core/lua/{file} is not lua/{file}");
        }
    }
}
