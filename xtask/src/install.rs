//! Finding `redis-server`: `$REDIS_SERVER` or PATH, installed with apt-get when
//! missing and xtask runs as root, and checked to be 7.0 or newer. And the browser
//! of `distlock web`'s tests (`cli/tests/web.rs`): `$CHROMIUM` or `chromium` on
//! PATH, installed the same way when those tests will run.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

use distlock_testkit::{redis_server_binary, REDIS_SERVER_ENV};

use crate::command::{run, Failure, Result};

/// The oldest Redis the project supports (`#!lua flags=...` in scripts).
const MIN_REDIS: (u32, u32) = (7, 0);

/// Finds `redis-server` (installing it with apt-get when missing and root) and
/// checks it is recent enough.
pub(crate) fn ensure_redis() -> Result<PathBuf> {
    let path = match redis_server_binary() {
        Ok(path) => path,
        // REDIS_SERVER is set but wrong: installing would not help.
        Err(err) if env::var_os(REDIS_SERVER_ENV).is_some_and(|v| !v.is_empty()) => {
            return Err(err.into())
        }
        Err(err) if !is_root() => {
            return Err(Failure::Message(format!(
                "{err}\n(xtask installs redis-server itself only when it runs as root.)"
            )))
        }
        Err(err) => {
            install_with_apt(&err.to_string())?;
            redis_server_binary()
                .or_else(|err| {
                    let usual = PathBuf::from("/usr/bin/redis-server");
                    if usual.is_file() {
                        Ok(usual)
                    } else {
                        Err(err)
                    }
                })
                .map_err(|err| format!("apt-get installed redis-server, but: {err}"))?
        }
    };
    check_version(&path)?;
    println!("xtask: using {}", path.display());
    Ok(path)
}

fn is_root() -> bool {
    // SAFETY: `geteuid` cannot fail and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

fn install_with_apt(why: &str) -> Result<()> {
    let has_apt = env::var_os("PATH")
        .is_some_and(|path| env::split_paths(&path).any(|dir| dir.join("apt-get").is_file()));
    if !has_apt {
        return Err(Failure::Message(format!(
            "{why}\n(xtask runs as root but found no apt-get to install redis-server with; \
             install it with your system's package manager.)"
        )));
    }
    println!(
        "xtask: redis-server not found; installing it as root with apt-get \
         (a packaged service may start on port 6379; the tests never use it)"
    );
    for args in [&["update"][..], &["install", "-y", "redis-server"][..]] {
        let mut apt = Command::new("apt-get");
        apt.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        run(apt).map_err(|failure| match failure {
            Failure::Status(code) => Failure::Message(format!(
                "`apt-get {}` failed (exit status {code}); install redis-server 7.0+ \
                 yourself and set REDIS_SERVER if it is not on PATH",
                args.join(" ")
            )),
            other => other,
        })?;
    }
    Ok(())
}

/// Makes sure the browser tests of `distlock web` have their browser: `$CHROMIUM`,
/// else `chromium` on PATH; when neither is there and xtask runs as root, installs
/// Debian's `chromium` with apt-get, without its recommended packages, which a
/// headless run does not use (on Debian 12: 25 packages, 124 MB downloaded, about
/// 16 s with `apt-get update`; with them: 115 packages and 23 to 45 s). Not root:
/// says that the tests will skip.
pub(crate) fn ensure_chromium() -> Result<()> {
    let named = env::var_os("CHROMIUM").filter(|path| !path.is_empty());
    if named.is_some() || on_path("chromium") {
        return Ok(());
    }
    if !is_root() {
        println!(
            "xtask: chromium not found and not root: the browser tests of `distlock web` \
             (cli/tests/web.rs) will skip; install Debian's `chromium` to run them"
        );
        return Ok(());
    }
    println!(
        "xtask: chromium not found; installing it as root with apt-get (for cli/tests/web.rs)"
    );
    let started = std::time::Instant::now();
    apt_install("chromium")?;
    println!("xtask: chromium installed in {:.0?}", started.elapsed());
    Ok(())
}

/// Whether `program` is a file in a directory of PATH.
fn on_path(program: &str) -> bool {
    env::var_os("PATH")
        .is_some_and(|path| env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// `apt-get update`, then `apt-get install -y --no-install-recommends <package>`.
fn apt_install(package: &str) -> Result<()> {
    if !on_path("apt-get") {
        return Err(Failure::Message(format!(
            "xtask runs as root but found no apt-get to install {package} with; install it \
             with your system's package manager"
        )));
    }
    let install = ["install", "-y", "--no-install-recommends", package];
    for args in [&["update"][..], &install[..]] {
        let mut apt = Command::new("apt-get");
        apt.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        run(apt).map_err(|failure| match failure {
            Failure::Status(code) => Failure::Message(format!(
                "`apt-get {}` failed (exit status {code}); install {package} yourself",
                args.join(" ")
            )),
            other => other,
        })?;
    }
    Ok(())
}

/// Checks that `redis-server --version` reports 7.0 or newer.
fn check_version(path: &Path) -> Result<()> {
    let output = Command::new(path)
        .arg("--version")
        .output()
        .map_err(|err| format!("could not run `{} --version`: {err}", path.display()))?;
    let text = String::from_utf8_lossy(&output.stdout);
    let Some(version) = parse_version(&text) else {
        return Err(Failure::Message(format!(
            "could not read a version from `{} --version` (it printed {:?}); \
             set REDIS_SERVER to a redis-server 7.0+ binary",
            path.display(),
            text.trim()
        )));
    };
    if (version.0, version.1) < MIN_REDIS {
        return Err(Failure::Message(format!(
            "{} is Redis {}.{}.{}, but distlock needs {}.{} or newer (its scripts use \
             `#!lua flags=`). Debian 12 and Ubuntu 24.04 package 7.0; on older systems \
             install from the Redis apt repository (https://packages.redis.io), \
             `brew install redis`, or build it, then set REDIS_SERVER to the new binary.",
            path.display(),
            version.0,
            version.1,
            version.2,
            MIN_REDIS.0,
            MIN_REDIS.1
        )));
    }
    Ok(())
}

/// Parses `Redis server v=7.0.15 sha=...` (also Valkey's `v=` form).
pub(crate) fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let version = text
        .split_whitespace()
        .find_map(|word| word.strip_prefix("v="))?;
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    let major = parts.next()??;
    let minor = parts.next()??;
    let patch = parts.next().flatten().unwrap_or(0);
    Some((major, minor, patch))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_redis_and_valkey_versions() {
        assert_eq!(
            parse_version("Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64"),
            Some((7, 0, 15))
        );
        assert_eq!(
            parse_version("Valkey server v=8.1.1 sha=00000000:0 malloc=jemalloc-5.3.0"),
            Some((8, 1, 1))
        );
        assert_eq!(
            parse_version("Redis server v=6.0.16 sha=0"),
            Some((6, 0, 16))
        );
        assert_eq!(parse_version("redis-server: command not found"), None);
        assert_eq!(parse_version("v=x.y"), None);
    }
}
