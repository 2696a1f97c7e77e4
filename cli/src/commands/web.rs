//! `distlock web`: serves the live page of the namespace's locks (see
//! `crate::web`) until Ctrl-C.
//!
//! It prints the page's address on stdout once it listens (with `--bind
//! 127.0.0.1:0`, the port the system chose), then serves every browser tab from
//! one reader. The address is loopback unless `--bind` says otherwise: the page
//! shows lock names and holders' hosts, and force-unlock is behind the admin
//! token only.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::commands::{print, Context};
use crate::error::{CliError, Exit};
use crate::web::live::{run_reader, run_subscriber, Pacing, Shared};
use crate::web::routes::{router, App};

/// What `web` was asked for.
#[derive(Debug)]
pub(crate) struct WebArgs {
    /// Where to listen.
    pub(crate) bind: SocketAddr,
    /// The admin token (force-unlock is off without it).
    pub(crate) admin_token: Option<String>,
    /// The longest time between two reads.
    pub(crate) refresh: Duration,
    /// The most commands per second the reader sends, on average.
    pub(crate) max_commands: u32,
    /// The timeline's window.
    pub(crate) window: Duration,
}

/// Serves the page until Ctrl-C (exit 0); exit 4 when the address cannot be
/// listened on.
///
/// # Cancel safety
///
/// Dropping the future stops the server and the reader.
pub(crate) async fn run(ctx: Context, args: WebArgs) -> Result<Exit, CliError> {
    // Refused as every other command refuses it, before anything listens.
    distlock::validate_namespace(&ctx.target.namespace)?;
    let listener = tokio::net::TcpListener::bind(args.bind)
        .await
        .map_err(|err| {
            CliError::new(
                Exit::Failed,
                format!("cannot listen on {}: {err}", args.bind),
            )
        })?;
    let address = listener.local_addr().map_err(|err| {
        CliError::new(
            Exit::Failed,
            format!("cannot read the listening address: {err}"),
        )
    })?;
    let namespace = ctx.target.namespace.clone();
    let servers = ctx.target.describe();
    let token = args
        .admin_token
        .filter(|token| !token.is_empty())
        .map(Arc::<str>::from);
    let shared = Shared::new(ctx.target);
    let pacing = Pacing {
        refresh: args.refresh,
        budget: args.max_commands,
        min_gap: Duration::from_millis(200),
    };
    let reader = tokio::spawn(run_reader(shared.clone(), pacing, args.window));
    let subscriber = tokio::spawn(run_subscriber(shared.clone()));
    let (stop, stopped) = watch::channel(false);
    let app = App {
        shared,
        token: token.clone(),
        stop: stopped,
    };
    print(&format!(
        "distlock web: the locks of namespace `{namespace}` on {servers} at http://{address}/ \
         (force-unlock {}); Ctrl-C stops it\n",
        if token.is_some() {
            "on, with the admin token"
        } else {
            "off: no admin token"
        }
    ))?;
    let served = axum::serve(
        listener,
        router(app).into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async move {
        let _ = tokio::signal::ctrl_c().await;
        let _ = stop.send(true);
    })
    .await;
    reader.abort();
    subscriber.abort();
    served
        .map(|()| Exit::Ok)
        .map_err(|err| CliError::new(Exit::Failed, format!("the page's server failed: {err}")))
}
