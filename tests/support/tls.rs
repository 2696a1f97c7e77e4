//! Certificates made at test time for the TLS tests (`tests/reliability_tls.rs`,
//! `tests/backend_sentinel_tls.rs`).

use std::path::PathBuf;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};

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

    /// Writes `<name>-ca.pem`, and with `server`, `server.pem` and `server.key`
    /// signed by it; returns the CA file.
    pub fn make_ca(&self, name: &str, server: bool) -> PathBuf {
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
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
        ca_path
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
