//! `rediss://` in an application that links rustls with both crypto providers.
//!
//! This test binary's dev-dependency turns on rustls' `aws-lc-rs` feature beside
//! distlock's `ring`, as reqwest, sqlx or the AWS SDK do in a real application:
//! rustls can then no longer pick a process-level provider by itself. Each client
//! runs in a child process (this binary again, one `#[ignore]`d test), so that what
//! one test installs as the process default cannot help or hurt another. The
//! certificates are made at test time (rcgen); the child trusts the CA through
//! `SSL_CERT_FILE`.

use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use distlock::LockClient;
use distlock_testkit::RedisServer;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use rustls::crypto::CryptoProvider;

/// Set in a child process started by [`run_child`].
const CHILD: &str = "DISTLOCK_TLS_PROVIDER_CHILD";

/// Which provider is the process default: `ring`, `aws-lc-rs` or `none`.
fn process_provider() -> &'static str {
    match CryptoProvider::get_default() {
        None => "none",
        Some(provider) => {
            let shown = format!("{:?}", provider.key_provider);
            if shown.contains("AwsLcRs") {
                "aws-lc-rs"
            } else if shown.contains("Ring") {
                "ring"
            } else {
                "other"
            }
        }
    }
}

/// Run in a child process: installs the application's provider when
/// `DISTLOCK_APP_PROVIDER=aws-lc-rs`, connects to `DISTLOCK_URL`, takes and releases
/// a lock, and prints `TLS_OK provider=<default after connecting>` or `TLS_ERR ...`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a helper process, started by the other tests of this file"]
async fn provider_child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    println!("TLS_START provider={}", process_provider());
    if std::env::var("DISTLOCK_APP_PROVIDER").as_deref() == Ok("aws-lc-rs") {
        rustls::crypto::aws_lc_rs::default_provider()
            .install_default()
            .expect("the first provider of the process");
    }
    let url = std::env::var("DISTLOCK_URL").expect("DISTLOCK_URL");
    let result = async {
        let locks = LockClient::builder()
            .url(url)
            .connect_timeout(Duration::from_secs(3))
            .connect()
            .await?;
        let guard = locks.lock("tls-provider").await?;
        guard.unlock().await
    }
    .await;
    match result {
        Ok(()) => println!("TLS_OK provider={}", process_provider()),
        Err(err) => println!("TLS_ERR {}", err.to_string().replace('\n', " ")),
    }
}

/// Runs [`provider_child`] with `SSL_CERT_FILE=ca`; returns its `TLS_` lines, or
/// everything it printed when it printed none (a panic).
fn run_child(url: &str, ca: &Path, app_provider: Option<&str>) -> Vec<String> {
    let mut command = Command::new(std::env::current_exe().expect("test binary"));
    command
        .args([
            "--exact",
            "provider_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env("DISTLOCK_URL", url)
        .env("SSL_CERT_FILE", ca)
        .env("SSL_CERT_DIR", "")
        .env_remove("DISTLOCK_APP_PROVIDER");
    if let Some(provider) = app_provider {
        command.env("DISTLOCK_APP_PROVIDER", provider);
    }
    let output = command.output().expect("run the child");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<String> = stdout
        .lines()
        .filter_map(|line| line.find("TLS_").map(|at| line[at..].to_owned()))
        .collect();
    assert!(
        lines.iter().any(|line| !line.starts_with("TLS_START")),
        "the child gave no verdict; stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    lines
}

/// A CA and certificates signed by it, as PEM files in a directory removed on drop.
struct Certs {
    dir: PathBuf,
}

impl Certs {
    fn new(tag: &str) -> Certs {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!(
            "distlock-provider-{tag}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        Certs { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Writes `ca.pem`, `server.pem` and `server.key` (for 127.0.0.1).
    fn make(&self) {
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "distlock provider test CA");
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca.self_signed(&ca_key).expect("self-signed CA");
        std::fs::write(self.path("ca.pem"), ca_cert.pem()).expect("write CA");
        let key = KeyPair::generate().expect("server key");
        let cert = CertificateParams::new(vec!["127.0.0.1".to_owned()])
            .expect("server params")
            .signed_by(&key, &ca_cert, &ca_key)
            .expect("server certificate");
        std::fs::write(self.path("server.pem"), cert.pem()).expect("write cert");
        std::fs::write(self.path("server.key"), key.serialize_pem()).expect("write key");
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

/// A redis-server that also listens with TLS (no client certificates) on the
/// returned port.
fn tls_server(certs: &Certs) -> (RedisServer, u16) {
    for _ in 0..5 {
        let port = free_port();
        let started = RedisServer::builder()
            .arg("--tls-port")
            .arg(port.to_string())
            .arg("--tls-cert-file")
            .arg(certs.path("server.pem"))
            .arg("--tls-key-file")
            .arg(certs.path("server.key"))
            .arg("--tls-ca-cert-file")
            .arg(certs.path("ca.pem"))
            .args(["--tls-auth-clients", "no"])
            .start();
        match started {
            Ok(server) => return (server, port),
            Err(err) if err.to_string().contains("Address already in use") => continue,
            Err(err) => panic!("a TLS redis-server: {err}"),
        }
    }
    panic!("no free port for TLS");
}

#[test]
fn this_binary_links_both_providers_and_installs_none() {
    // Both are compiled in, which is what keeps rustls from choosing by itself.
    let ring = rustls::crypto::ring::default_provider();
    let aws = rustls::crypto::aws_lc_rs::default_provider();
    assert!(!ring.cipher_suites.is_empty() && !aws.cipher_suites.is_empty());
}

#[test]
fn rediss_connects_when_the_application_installed_no_provider() {
    let certs = Certs::new("none");
    certs.make();
    let (_server, port) = tls_server(&certs);
    let url = format!("rediss://127.0.0.1:{port}/");
    let lines = run_child(&url, &certs.path("ca.pem"), None);
    assert_eq!(
        lines,
        ["TLS_START provider=none", "TLS_OK provider=ring"],
        "no panic; distlock fell back on ring, the provider it is built with"
    );
}

#[test]
fn rediss_uses_the_provider_the_application_installed() {
    let certs = Certs::new("app");
    certs.make();
    let (_server, port) = tls_server(&certs);
    let url = format!("rediss://127.0.0.1:{port}/");
    let lines = run_child(&url, &certs.path("ca.pem"), Some("aws-lc-rs"));
    assert_eq!(
        lines,
        ["TLS_START provider=none", "TLS_OK provider=aws-lc-rs"],
        "the application's provider is kept, not replaced"
    );
}
