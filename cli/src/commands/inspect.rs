//! `distlock inspect NAME`: one lock's state.

use crate::commands::{print, print_json, Context};
use crate::error::{CliError, Exit};
use crate::format::LockView;

/// Prints the state of the lock `name`; exit 1 when it is not held.
pub(crate) async fn run(ctx: &Context, name: &[u8]) -> Result<Exit, CliError> {
    let client = ctx.target.lock_client().await?;
    let info = client.inspect(name).await?;
    let view = LockView::new(name, &info);
    if ctx.json {
        print_json(&view)?;
    } else {
        print(&view.human(&ctx.target.namespace))?;
    }
    Ok(if info.held { Exit::Ok } else { Exit::Nothing })
}
