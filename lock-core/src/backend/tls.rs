//! TLS (`rediss://`): the rustls crypto provider of distlock's connections.
//!
//! redis-rs builds each TLS connection's rustls configuration with
//! `rustls::ClientConfig::builder()`, which takes the process-level provider, and
//! offers no way to hand it another one. When no provider is installed, rustls picks
//! one from its crate features, and panics when those name two (distlock's `ring`
//! beside the `aws-lc-rs` that reqwest, sqlx or the AWS SDK turn on). So before it
//! dials a TLS connection, distlock makes sure a process-level provider exists:
//!
//! - one the application installed is used as it is (whichever it is);
//! - otherwise distlock installs `ring`, the provider it is built with, which is what
//!   rustls itself would do with distlock alone in the process.
//!
//! Nothing is installed for plain-text (`redis://`) deployments.

use rustls::crypto::CryptoProvider;

/// Makes sure rustls has a process-level crypto provider (see the module
/// documentation): the application's, or else `ring`.
pub(crate) fn ensure_provider() {
    if CryptoProvider::get_default().is_some() {
        return;
    }
    // Losing a race with another installer is fine: its provider is then the one used.
    if rustls::crypto::ring::default_provider()
        .install_default()
        .is_ok()
    {
        tracing::debug!(
            "distlock: no rustls crypto provider was installed; installed ring as the \
             process default for rediss:// connections"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_provider_is_there_afterwards() {
        ensure_provider();
        assert!(CryptoProvider::get_default().is_some());
        // A second call keeps the provider it finds.
        let before = CryptoProvider::get_default().map(std::sync::Arc::as_ptr);
        ensure_provider();
        assert_eq!(
            CryptoProvider::get_default().map(std::sync::Arc::as_ptr),
            before
        );
    }
}
