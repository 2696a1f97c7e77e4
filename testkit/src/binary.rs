//! Finding the `redis-server` binary.

use std::env;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::error::TestkitError;

/// The environment variable that names the `redis-server` binary to use.
///
/// # Examples
///
/// ```no_run
/// use std::process::Command;
/// use distlock_testkit::{redis_server_binary, REDIS_SERVER_ENV};
///
/// // Hand the binary the testkit uses on to a child test process.
/// let mut child = Command::new("target/debug/my-test-helper");
/// child.env(REDIS_SERVER_ENV, redis_server_binary()?);
/// # Ok::<(), distlock_testkit::TestkitError>(())
/// ```
pub const REDIS_SERVER_ENV: &str = "REDIS_SERVER";

/// Finds the `redis-server` binary the testkit runs.
///
/// Looks at the `REDIS_SERVER` environment variable first (a path, or a bare name
/// searched on `PATH`), then for `redis-server` on `PATH`.
///
/// # Errors
///
/// [`TestkitError::MissingBinary`] when `REDIS_SERVER` is set but names no
/// executable file, or when it is unset and `PATH` holds no `redis-server`. The
/// message says how to install one.
///
/// # Examples
///
/// ```no_run
/// let path = distlock_testkit::redis_server_binary()?;
/// println!("using {}", path.display());
/// # Ok::<(), distlock_testkit::TestkitError>(())
/// ```
pub fn redis_server_binary() -> Result<PathBuf, TestkitError> {
    match env::var_os(REDIS_SERVER_ENV) {
        Some(value) if !value.is_empty() => {
            resolve(&value).ok_or_else(|| TestkitError::MissingBinary {
                detail: format!(
                    "{REDIS_SERVER_ENV}={} does not name an executable file \
                     (fix or unset the variable)",
                    Path::new(&value).display()
                ),
            })
        }
        _ => find_on_path(OsStr::new("redis-server")).ok_or_else(|| TestkitError::MissingBinary {
            detail: format!(
                "redis-server was not found: {REDIS_SERVER_ENV} is not set and no \
                     `redis-server` is on PATH"
            ),
        }),
    }
}

/// A path with a separator is taken as is; a bare name is searched on `PATH`.
fn resolve(value: &OsStr) -> Option<PathBuf> {
    let path = Path::new(value);
    if path.components().count() > 1 {
        is_executable(path).then(|| path.to_path_buf())
    } else {
        find_on_path(value)
    }
}

fn find_on_path(name: &OsStr) -> Option<PathBuf> {
    let path = env::var_os("PATH")?;
    env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .map(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}
