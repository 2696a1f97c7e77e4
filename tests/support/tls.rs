//! Certificates made at test time for the TLS tests (`tests/reliability_tls.rs`,
//! `tests/backend_sentinel_tls.rs`, `tests/backend_tls_provider.rs`,
//! `tests/backend_connect_errors.rs`), and a server that listens with TLS.

use std::path::{Path, PathBuf};

use distlock_testkit::RedisServer;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};

use super::servers::free_port;

/// A CA and a server certificate for 127.0.0.1 signed by it, as PEM files in a
/// directory of the test, removed on drop.
pub struct Pki {
    dir: PathBuf,
}

impl Pki {
    /// A fresh directory under the system's temp dir; `tag` names the test file.
    pub fn new(tag: &str) -> Pki {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir =
            std::env::temp_dir().join(format!("distlock-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        Pki { dir }
    }

    /// A file of the directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The contents of a file of the directory.
    pub fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).expect("read a PEM file")
    }

    /// Writes `<name>-ca.pem`, and with `server`, `server.pem` and `server.key`
    /// signed by it; returns the CA file.
    pub fn make_ca(&self, name: &str, server: bool) -> PathBuf {
        self.make(name, server, false)
    }

    /// As [`Pki::make_ca`], and with `client` also `client.pem` and `client.key`, a
    /// client certificate signed by the same CA.
    pub fn make(&self, name: &str, server: bool, client: bool) -> PathBuf {
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // Distinct names: another CA is unknown, not a namesake with another key.
        ca.distinguished_name
            .push(DnType::CommonName, format!("distlock test CA {name}"));
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca.self_signed(&ca_key).expect("self-signed CA");
        let ca_path = self.path(&format!("{name}-ca.pem"));
        std::fs::write(&ca_path, ca_cert.pem()).expect("write CA");
        if server {
            let key = KeyPair::generate().expect("server key");
            let params =
                CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                    .expect("server params");
            let cert = params
                .signed_by(&key, &ca_cert, &ca_key)
                .expect("server certificate");
            std::fs::write(self.path("server.pem"), cert.pem()).expect("write cert");
            std::fs::write(self.path("server.key"), key.serialize_pem()).expect("write key");
        }
        if client {
            let key = KeyPair::generate().expect("client key");
            let mut params = CertificateParams::new(Vec::<String>::new()).expect("client params");
            params
                .distinguished_name
                .push(DnType::CommonName, "distlock client");
            let cert = params
                .signed_by(&key, &ca_cert, &ca_key)
                .expect("client certificate");
            std::fs::write(self.path("client.pem"), cert.pem()).expect("write client cert");
            std::fs::write(self.path("client.key"), key.serialize_pem()).expect("write client key");
        }
        ca_path
    }
}

/// A redis-server that also listens with TLS on the returned port, with `pki`'s
/// `server.pem`, and with `client_certs` requires a client certificate signed by
/// the CA file `ca`.
pub fn tls_server(pki: &Pki, ca: &Path, client_certs: bool) -> (RedisServer, u16) {
    let auth_clients = if client_certs { "yes" } else { "no" };
    for _ in 0..5 {
        let port = free_port();
        let started = RedisServer::builder()
            .arg("--tls-port")
            .arg(port.to_string())
            .arg("--tls-cert-file")
            .arg(pki.path("server.pem"))
            .arg("--tls-key-file")
            .arg(pki.path("server.key"))
            .arg("--tls-ca-cert-file")
            .arg(ca)
            .args(["--tls-auth-clients", auth_clients])
            .start();
        match started {
            Ok(server) => return (server, port),
            Err(err) if err.to_string().contains("Address already in use") => continue,
            Err(err) => panic!("a TLS redis-server: {err}"),
        }
    }
    panic!("no free port for TLS");
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
