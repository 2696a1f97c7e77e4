//! Running distlock's scripts: as the functions of one Redis function library
//! (`FCALL`), or by `EVALSHA` where a server refuses functions.
//!
//! A script sent by `EVALSHA` runs its whole text on every call, which for
//! distlock's scripts means making the prelude's functions again each time (the
//! prelude, `lua/lock.lua`, and each script's own helpers: about 3 µs of a first
//! acquisition's 14 µs of server time). A function library is made once, when it is
//! loaded (`FUNCTION LOAD`), so a call runs only the script's `main`. So a client
//! loads the library at connect (on every master of a cluster) and calls its
//! functions with `FCALL`; a call that finds the library gone (a restart without
//! persistence, `FUNCTION FLUSH`, a failover to a server that never had it) loads it
//! and calls again, as `EVALSHA` does on `NOSCRIPT`.
//!
//! Where functions are refused (an ACL without `+fcall` or `+function|load`, or a
//! server without them), the client falls back to `EVALSHA` for good; where loading
//! the library fails otherwise (a server out of memory refuses `FUNCTION LOAD`, but
//! must still let locks go), that one call goes by `EVALSHA`. Both run the same
//! text: the library is the prelude once, then each script in a block of its own
//! (see `lua/lock.lua`, "Two ways to run").

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use redis::aio::ConnectionLike;
use redis::{Cmd, FromRedisValue, Pipeline, RedisError, RedisResult, Value};

use crate::layout::args::{Args, Flat};
use crate::layout::lua::{self, Source};

/// The function library: its text, its name, and whether this client calls its
/// functions (it stops at the first refusal of functions as such).
#[derive(Debug)]
pub(crate) struct Library {
    /// `#!lua name=distlock_<version>`, then the prelude and every script.
    text: String,
    /// `distlock_<version>`: the version is the first 16 hex digits of the SHA1 of
    /// the library's body, so that clients of different distlock versions on one
    /// server each find their own.
    name: String,
    /// `false` once a server refused functions as such: every call then goes by
    /// `EVALSHA`.
    on: AtomicBool,
}

/// One script of the library: what the client sends, as a function or as a script.
#[derive(Debug, Clone)]
pub(crate) struct Script {
    /// The same script for `EVALSHA`: its first line (flags), the prelude, its text.
    code: Arc<str>,
    /// The SHA1 of `code`, as `EVALSHA` names it.
    hash: Arc<str>,
    /// `distlock_<version>_<script>`.
    function: Arc<str>,
    library: Arc<Library>,
}

/// How one call goes to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Way {
    /// `FCALL` of the library's function.
    Function,
    /// `EVALSHA` of the script's text.
    Eval,
}

impl Library {
    /// The library of `prelude` and `scripts` (see `layout/lua.rs`), and one
    /// [`Script`] per source, in order.
    pub(crate) fn build<const N: usize>(prelude: &str, scripts: &[Source<'_>; N]) -> [Script; N] {
        let built = lua::build(prelude, scripts);
        let library = Arc::new(Library {
            text: built.library.text,
            name: built.library.name,
            on: AtomicBool::new(true),
        });
        built.scripts.map(|(code, function)| Script {
            hash: redis::Script::new(&code).get_hash().into(),
            code: code.into(),
            function: function.into(),
            library: library.clone(),
        })
    }

    /// `distlock_<version>`, as `FUNCTION LIST` names it.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// How calls go now: by the library's function, unless the server refused
    /// functions.
    fn way(&self) -> Way {
        if self.on.load(Ordering::Relaxed) {
            Way::Function
        } else {
            Way::Eval
        }
    }

    /// Loads the library on the server of `conn` (every master of a cluster),
    /// replacing one of the same name. `Ok(true)` when loaded; `Ok(false)` when the
    /// server refused functions as such (calls go by `EVALSHA` from now on);
    /// another failure (a server out of memory, say) as it is.
    ///
    /// # Cancel safety
    ///
    /// Safe to drop: the library is loaded or not, whole (`FUNCTION LOAD` is one
    /// command), and the next call that misses it loads it again.
    pub(crate) async fn load<C: ConnectionLike>(&self, conn: &mut C) -> RedisResult<bool> {
        let mut load = redis::cmd("FUNCTION");
        load.arg("LOAD").arg("REPLACE").arg(&self.text);
        match load.query_async::<Value>(conn).await {
            Ok(_) => Ok(true),
            Err(err) if refuses_functions(&err) => {
                self.turn_off(&err);
                Ok(false)
            }
            Err(err) => Err(err),
        }
    }

    fn turn_off(&self, why: &RedisError) {
        if self.on.swap(false, Ordering::Relaxed) {
            tracing::info!(
                error = %why,
                "distlock: this server refuses Redis functions; distlock's scripts run by \
                 EVALSHA instead (about 3 µs more server time per call; allow `+fcall \
                 +function|load` to use functions)"
            );
        }
    }
}

/// Whether `err` refuses functions as such: a user without `fcall` or
/// `function|load`, or a server that knows neither command. (A refused key is not:
/// that is the caller's error, whatever the way.)
fn refuses_functions(err: &RedisError) -> bool {
    let text = err.to_string().to_ascii_lowercase();
    (err.code() == Some("NOPERM") && (text.contains("'fcall'") || text.contains("'function")))
        || text.contains("unknown command 'fcall'")
        || text.contains("unknown command 'function'")
}

/// Whether `err` says the script is not on the server: `NOSCRIPT` for `EVALSHA`,
/// "Function not found" for `FCALL`.
pub(crate) fn is_missing(err: &RedisError) -> bool {
    err.code() == Some("NOSCRIPT") || err.to_string().contains("Function not found")
}

/// [`is_missing`] for a reply of a pipeline that keeps errors as values.
pub(crate) fn is_missing_reply(reply: &Value) -> bool {
    matches!(reply, Value::ServerError(err) if is_missing(&RedisError::from(err.clone())))
}

impl Script {
    /// A call of this script, with no keys or arguments yet.
    pub(crate) fn prepare_invoke(&self) -> Invocation<'_> {
        Invocation {
            script: self,
            call: Flat::new(),
        }
    }

    /// A call of this script with the keys and arguments of `request` (see
    /// `layout/args.rs`).
    pub(crate) fn invoke(&self, request: &impl Args) -> Invocation<'_> {
        let mut invocation = self.prepare_invoke();
        invocation.push(request);
        invocation
    }

    /// Sends the pipeline that `pipe` builds around a call of this script (for the
    /// way calls go now); when the server lacks the script (the call failed so, or
    /// `missing` finds so in the replies of a pipeline that keeps errors), puts it
    /// there and sends the pipeline again, once.
    ///
    /// # Cancel safety
    ///
    /// As [`Script::load_async`]: a dropped call may have run once.
    pub(crate) async fn query_pipe<T: FromRedisValue, C: ConnectionLike>(
        &self,
        conn: &mut C,
        pipe: impl Fn(Way) -> Pipeline,
        missing: impl Fn(&T) -> bool,
    ) -> RedisResult<T> {
        let way = self.library.way();
        let first: RedisResult<T> = pipe(way).query_async(conn).await;
        let lacks = match &first {
            Err(err) => is_missing(err),
            Ok(replies) => missing(replies),
        };
        if !lacks {
            return first;
        }
        let way = self.load_async(conn, way).await?;
        pipe(way).query_async(conn).await
    }

    /// Puts the script on the server of `conn` after a call found it missing (see
    /// [`is_missing`]), for a call that went `way`: the way the call should go again.
    /// The library, for a function call, and when that cannot be loaded, the script
    /// for `EVALSHA`.
    ///
    /// # Cancel safety
    ///
    /// Safe to drop: what was loaded stays loaded, and a call that misses a script
    /// loads it again.
    pub(crate) async fn load_async<C: ConnectionLike>(
        &self,
        conn: &mut C,
        way: Way,
    ) -> RedisResult<Way> {
        if way == Way::Function {
            match self.library.load(conn).await {
                Ok(true) => return Ok(Way::Function),
                Ok(false) => {}
                Err(err) => {
                    tracing::debug!(error = %err, "distlock: could not load the function library; this call goes by EVALSHA");
                }
            }
        }
        let mut load = redis::cmd("SCRIPT");
        load.arg("LOAD").arg(self.code());
        load.query_async::<Value>(conn).await?;
        Ok(Way::Eval)
    }

    /// The library this script is part of.
    pub(crate) fn library(&self) -> &Library {
        &self.library
    }

    /// The script's text for `EVALSHA` (its first line, the prelude, its own text).
    pub(crate) fn code(&self) -> &str {
        &self.code
    }

    /// The SHA1 of [`code`](Self::code).
    pub(crate) fn hash(&self) -> &str {
        &self.hash
    }
}

/// A call of a [`Script`]: its keys and arguments.
#[derive(Debug, Clone)]
pub(crate) struct Invocation<'a> {
    script: &'a Script,
    call: Flat,
}

impl Invocation<'_> {
    /// Adds the keys and arguments of `request` after those already there.
    pub(crate) fn push(&mut self, request: &impl Args) -> &mut Self {
        request.push_to(&mut self.call);
        self
    }

    /// The command of this call, going `way`.
    pub(crate) fn cmd(&self, way: Way) -> Cmd {
        let (command, script) = match way {
            Way::Function => ("FCALL", &self.script.function),
            Way::Eval => ("EVALSHA", &self.script.hash),
        };
        let (keys, args) = (self.call.keys(), self.call.args());
        let mut cmd = Cmd::with_capacity(
            3 + keys.len() + args.len(),
            command.len() + script.len() + 4 + self.call.len(),
        );
        cmd.arg(command).arg(&**script).arg(keys.len());
        for item in keys.chain(args) {
            cmd.arg(item);
        }
        cmd
    }

    /// Adds this call to `pipe`, going `way`.
    pub(crate) fn add_to(&self, pipe: &mut Pipeline, way: Way) {
        pipe.add_command(self.cmd(way));
    }

    /// Runs the call on `conn`; a script missing from the server is put there and
    /// the call made again, once.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the call applied or not, as any request.
    pub(crate) async fn invoke_async<T, C>(&self, conn: &mut C) -> RedisResult<T>
    where
        T: FromRedisValue,
        C: ConnectionLike,
    {
        let mut way = self.script.library.way();
        let mut loaded = false;
        loop {
            match self.cmd(way).query_async(conn).await {
                Err(err) if way == Way::Function && refuses_functions(&err) => {
                    self.script.library.turn_off(&err);
                    way = Way::Eval;
                }
                Err(err) if is_missing(&err) && !loaded => {
                    tracing::debug!(error = %err, "distlock: a script was missing on the server; loading it");
                    loaded = true;
                    way = self.script.load_async(conn, way).await?;
                }
                other => return other,
            }
        }
    }
}
