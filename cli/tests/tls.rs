//! `--tls-ca`, `--tls-cert` and `--tls-key`: the command against a server that asks
//! for a client certificate (mutual TLS), with certificates made at test time.

mod support;

use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;

use distlock_testkit::RedisServer;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use support::{code, command, stderr, stdout};

/// A CA, a server certificate for 127.0.0.1 and a client certificate signed by it,
/// as PEM files in a directory removed on drop.
struct Certs {
    dir: PathBuf,
}

impl Certs {
    fn new() -> Certs {
        let dir = std::env::temp_dir().join(format!("distlock-cli-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "distlock cli test CA");
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca.self_signed(&ca_key).expect("self-signed CA");
        let write = |name: &str, text: String| std::fs::write(dir.join(name), text).expect(name);
        write("ca.pem", ca_cert.pem());
        for (name, sans) in [
            ("server", vec!["127.0.0.1".to_owned()]),
            ("client", Vec::new()),
        ] {
            let key = KeyPair::generate().expect("key");
            let mut params = CertificateParams::new(sans).expect("params");
            params
                .distinguished_name
                .push(DnType::CommonName, format!("distlock {name}"));
            let cert = params
                .signed_by(&key, &ca_cert, &ca_key)
                .expect("certificate");
            write(&format!("{name}.pem"), cert.pem());
            write(&format!("{name}.key"), key.serialize_pem());
        }
        Certs { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).to_string_lossy().into_owned()
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A server that also listens with TLS on the returned port, and wants a client
/// certificate signed by the CA there.
fn mutual_tls_server(certs: &Certs) -> (RedisServer, u16) {
    for _ in 0..5 {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let started = RedisServer::builder()
            .arg("--tls-port")
            .arg(port.to_string())
            .arg("--tls-cert-file")
            .arg(certs.path("server.pem"))
            .arg("--tls-key-file")
            .arg(certs.path("server.key"))
            .arg("--tls-ca-cert-file")
            .arg(certs.path("ca.pem"))
            .args(["--tls-auth-clients", "yes"])
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
fn a_server_that_wants_a_client_certificate_is_reached_with_one() {
    let certs = Certs::new();
    let (_server, port) = mutual_tls_server(&certs);
    let url = format!("rediss://127.0.0.1:{port}");
    let ca = certs.path("ca.pem");

    // The CA alone: the server refuses the handshake, a connect error (exit 3).
    let refused = command(&["--url", &url, "--tls-ca", &ca, "ping"])
        .output()
        .expect("runs");
    assert_eq!(code(&refused), Some(3), "{}", stderr(&refused));

    let (cert, key) = (certs.path("client.pem"), certs.path("client.key"));
    let ping = command(&[
        "--url",
        &url,
        "--tls-ca",
        &ca,
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
    ])
    .arg("ping")
    .output()
    .expect("runs");
    assert_eq!(code(&ping), Some(0), "{}{}", stdout(&ping), stderr(&ping));
    let inspect = command(&[
        "--url",
        &url,
        "--tls-ca",
        &ca,
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
    ])
    .args(["inspect", "nothing:here"])
    .output()
    .expect("runs");
    assert_eq!(
        code(&inspect),
        Some(1),
        "free: exit 1; {}",
        stderr(&inspect)
    );

    // A certificate without its key is bad usage, before anything is dialled.
    let half = command(&["--url", &url, "--tls-cert", &cert, "ping"])
        .output()
        .expect("runs");
    assert_eq!(code(&half), Some(2), "{}", stderr(&half));
}
