//! TLS (`rediss://`): the rustls crypto provider of distlock's connections, and the
//! certificates the user gives (`LockClientBuilder::tls_root_ca`,
//! `LockClientBuilder::tls_client_cert`).
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
//! Nothing is installed for plain-text (`redis://`) deployments. The certificates
//! are checked when the builder is validated, with an explicit `ring` provider (so
//! the check installs nothing), and handed to redis-rs as its `TlsCertificates`.
//!
//! All of it needs the `tls` feature (on by default in the facade crate). Without
//! it neither rustls nor ring is compiled, redis-rs is built without TLS, and every
//! TLS setting (`rediss://`, `tls_root_ca`, `tls_client_cert`, `sentinel_node_tls`)
//! is refused when the builder is validated, with an error naming the feature.

use std::fmt;
#[cfg(feature = "tls")]
use std::sync::Arc;

#[cfg(feature = "tls")]
use redis::{ClientTlsConfig, ConnectionAddr};
use redis::{ConnectionInfo, RedisResult};
#[cfg(feature = "tls")]
use rustls::crypto::CryptoProvider;
#[cfg(feature = "tls")]
use rustls::pki_types::pem::PemObject;
#[cfg(feature = "tls")]
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
#[cfg(feature = "tls")]
use rustls::{ClientConfig, RootCertStore};

use crate::error::LockError;

/// The certificates of TLS connections, as redis-rs takes them.
#[cfg(feature = "tls")]
pub(crate) use redis::TlsCertificates;

/// Without the `tls` feature there are no TLS connections, and so no certificates.
#[cfg(not(feature = "tls"))]
#[derive(Clone, Debug)]
pub(crate) enum TlsCertificates {}

/// What a TLS setting made without the `tls` feature is told.
pub(crate) fn needs_feature(what: &str) -> String {
    format!(
        "{what} needs distlock's `tls` feature, which this build leaves out; enable it \
         (`distlock = {{ .., features = [\"tls\"] }}`, on by default), or use a plain-text \
         `redis://` URL"
    )
}

/// Makes sure rustls has a process-level crypto provider (see the module
/// documentation): the application's, or else `ring`.
#[cfg(feature = "tls")]
pub(crate) fn ensure_provider() {
    // Losing a race with another installer is fine: its provider is then the one used.
    if CryptoProvider::get_default().is_none()
        && rustls::crypto::ring::default_provider()
            .install_default()
            .is_ok()
    {
        tracing::debug!(
            "distlock: no rustls crypto provider was installed; installed ring as the \
             process default for rediss:// connections"
        );
    }
}

/// The certificates of the builder's TLS settings, as the user gave them (PEM).
#[derive(Clone, Default)]
pub(crate) struct TlsSettings {
    /// `tls_root_ca`: the CA certificates trusted instead of the platform's roots.
    pub(crate) root_ca: Option<Vec<u8>>,
    /// `tls_client_cert`: the client's certificate chain and its private key.
    pub(crate) client_cert: Option<(Vec<u8>, Vec<u8>)>,
}

impl TlsSettings {
    /// The first builder method whose setting is set, if any.
    pub(crate) fn first_set_option(&self) -> Option<&'static str> {
        if self.root_ca.is_some() {
            Some("tls_root_ca")
        } else if self.client_cert.is_some() {
            Some("tls_client_cert")
        } else {
            None
        }
    }

    /// Checks the PEM (every certificate parses, there is at least one, the key fits
    /// the certificate) and returns the certificates for redis-rs; `None` when
    /// neither setting is set.
    /// Without the `tls` feature: `None`, or the error naming the feature when a
    /// TLS setting was made.
    pub(crate) fn certificates(&self) -> Result<Option<TlsCertificates>, LockError> {
        let Some(option) = self.first_set_option() else {
            return Ok(None);
        };
        #[cfg(not(feature = "tls"))]
        return Err(LockError::invalid_option(
            option,
            needs_feature(&format!("`{option}`")),
        ));
        #[cfg(feature = "tls")]
        self.checked(option)
    }

    /// [`certificates`](Self::certificates) with the `tls` feature, once `option`
    /// is known to be set.
    #[cfg(feature = "tls")]
    fn checked(&self, option: &'static str) -> Result<Option<TlsCertificates>, LockError> {
        let roots = match &self.root_ca {
            Some(pem) => root_store(pem)?,
            None => RootCertStore::empty(),
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|err| {
                LockError::invalid_option(
                    option,
                    format!("rustls refused its default protocol versions ({err})"),
                )
            })?
            .with_root_certificates(roots);
        if let Some((cert_pem, key_pem)) = &self.client_cert {
            let chain = cert_chain(cert_pem)?;
            let not_a_key = refused(
                "tls_client_cert",
                "pass the client's private key as PEM (`-----BEGIN PRIVATE KEY-----`, or an RSA \
                 or EC key)",
            );
            let key = PrivateKeyDer::from_pem_slice(key_pem)
                .map_err(|err| not_a_key(format!("the key is not a PEM private key ({err})")))?;
            let not_its_key = refused(
                "tls_client_cert",
                "pass the private key that belongs to the client certificate",
            );
            config.with_client_auth_cert(chain, key).map_err(|err| {
                not_its_key(format!("the key does not fit the certificate ({err})"))
            })?;
        }
        Ok(Some(TlsCertificates {
            client_tls: self
                .client_cert
                .as_ref()
                .map(|(cert, key)| ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: self.root_ca.clone(),
        }))
    }
}

/// The error of the TLS setting `option`, refused for a reason (the closure's
/// argument), with `hint` at what to pass.
#[cfg(feature = "tls")]
fn refused(option: &'static str, hint: &'static str) -> impl Fn(String) -> LockError {
    move |why| LockError::invalid_option(option, format!("{why}; {hint}"))
}

/// The CA certificates of `tls_root_ca`, at least one, each a trust anchor.
#[cfg(feature = "tls")]
fn root_store(pem: &[u8]) -> Result<RootCertStore, LockError> {
    let refused = refused(
        "tls_root_ca",
        "pass the certificate of the CA that signed the server's certificate, as PEM (the \
         contents of a file that starts with `-----BEGIN CERTIFICATE-----`)",
    );
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|err| refused(format!("a certificate does not parse ({err})")))?;
        roots
            .add(cert)
            .map_err(|err| refused(format!("a certificate is not a usable CA ({err})")))?;
    }
    if roots.is_empty() {
        return Err(refused("no PEM certificate was found".to_owned()));
    }
    Ok(roots)
}

/// The client certificate chain of `tls_client_cert`, at least one certificate.
#[cfg(feature = "tls")]
fn cert_chain(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, LockError> {
    let refused = refused(
        "tls_client_cert",
        "pass the client certificate (and any intermediates after it) as PEM \
         (`-----BEGIN CERTIFICATE-----`)",
    );
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| refused(format!("a certificate does not parse ({err})")))?;
    if chain.is_empty() {
        return Err(refused("no PEM certificate was found".to_owned()));
    }
    Ok(chain)
}

/// `info` with the certificates, when it is a TLS connection and there are any.
pub(crate) fn with_certificates(
    info: ConnectionInfo,
    certs: Option<&TlsCertificates>,
) -> RedisResult<ConnectionInfo> {
    match certs {
        #[cfg(feature = "tls")]
        Some(certs) if matches!(info.addr(), ConnectionAddr::TcpTls { .. }) => {
            Ok(redis::Client::build_with_tls(info, certs.clone())?
                .get_connection_info()
                .clone())
        }
        #[cfg(not(feature = "tls"))]
        Some(certs) => match *certs {},
        _ => Ok(info),
    }
}

impl fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A CA certificate is public; a private key is never printed.
        f.debug_struct("TlsSettings")
            .field("root_ca", &self.root_ca.as_ref().map(|_| "<set>"))
            .field("client_cert", &self.client_cert.as_ref().map(|_| "<set>"))
            .finish()
    }
}

#[cfg(all(test, feature = "tls"))]
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
