use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::test_support::props;

/// A throwaway CA and certificates signed by it, written as PEM files.
struct Pki {
    ca_params: rcgen::CertificateParams,
    ca_key: rcgen::KeyPair,
    dir: tempfile::TempDir,
}

impl Pki {
    fn new() -> Pki {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "keel test CA");
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let ca = params.self_signed(&ca_key).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        Pki {
            ca_params: params,
            ca_key,
            dir,
        }
    }

    fn ca_file(&self) -> String {
        self.dir.path().join("ca.pem").display().to_string()
    }

    /// A certificate for `names` with common name `cn`, signed by the CA: (chain PEM, key PEM).
    fn issue(&self, cn: &str, names: &[&str]) -> (String, String) {
        let mut params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        // rcgen's default name holds a common name first; start from an empty one.
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "Keel");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        let key = rcgen::KeyPair::generate().unwrap();
        let issuer = rcgen::Issuer::from_params(&self.ca_params, &self.ca_key);
        let cert = params.signed_by(&key, &issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// Writes a keystore file (key then chain, as Kafka's PEM keystores hold them).
    fn keystore_file(&self, name: &str, cn: &str, names: &[&str]) -> String {
        let (chain, key) = self.issue(cn, names);
        let path = self.dir.path().join(name);
        std::fs::write(&path, format!("{key}{chain}")).unwrap();
        path.display().to_string()
    }
}

/// Runs a handshake between `server` and `client` over an in-memory pipe, sends a line both
/// ways; returns the server's view of the client's principal.
async fn handshake(
    server: &TlsServer,
    client: &TlsClient,
    host: &str,
) -> Result<Option<KafkaPrincipal>, String> {
    let (a, b) = tokio::io::duplex(64 * 1024);
    let server_side = async {
        let (mut stream, principal) = server.accept(a).await.map_err(|e| e.to_string())?;
        let mut buf = [0u8; 5];
        stream
            .read_exact(&mut buf)
            .await
            .map_err(|e| e.to_string())?;
        stream
            .write_all(b"pong!")
            .await
            .map_err(|e| e.to_string())?;
        stream.flush().await.map_err(|e| e.to_string())?;
        assert_eq!(&buf, b"ping!");
        Ok::<_, String>(principal)
    };
    let client_side = async {
        let mut stream = client.connect(host, b).await.map_err(|e| e.to_string())?;
        stream
            .write_all(b"ping!")
            .await
            .map_err(|e| e.to_string())?;
        stream.flush().await.map_err(|e| e.to_string())?;
        let mut buf = [0u8; 5];
        stream
            .read_exact(&mut buf)
            .await
            .map_err(|e| e.to_string())?;
        assert_eq!(&buf, b"pong!");
        Ok::<_, String>(())
    };
    let (server_result, client_result) = tokio::join!(server_side, client_side);
    client_result?;
    server_result
}

// Shows: a listener with a PEM keystore file serves TLS to a client that trusts its CA; the
// client's principal is None without a client certificate; a client that does not trust the
// CA, or asks for another host name, fails the handshake — unless host name checking is off.
#[tokio::test]
async fn server_tls_with_a_pem_keystore() {
    let pki = Pki::new();
    let keystore = pki.keystore_file("broker.pem", "broker-1", &["localhost", "127.0.0.1"]);
    let server = TlsServer::new(
        &props(&[
            ("listener.name.ssl.ssl.keystore.location", &keystore),
            ("ssl.keystore.type", "PEM"),
        ]),
        "SSL",
        false,
    )
    .unwrap();
    let client =
        TlsClient::new(&props(&[("ssl.truststore.location", &pki.ca_file())]), None).unwrap();
    assert_eq!(
        handshake(&server, &client, "localhost").await.unwrap(),
        None
    );
    assert_eq!(
        handshake(&server, &client, "127.0.0.1").await.unwrap(),
        None
    );
    let wrong_host = handshake(&server, &client, "elsewhere.example")
        .await
        .unwrap_err();
    assert!(wrong_host.contains("handshake"), "{wrong_host}");
    let lax = TlsClient::new(
        &props(&[
            ("ssl.truststore.location", &pki.ca_file()),
            ("ssl.endpoint.identification.algorithm", ""),
        ]),
        None,
    )
    .unwrap();
    assert_eq!(
        handshake(&server, &lax, "elsewhere.example").await.unwrap(),
        None
    );

    let other = Pki::new();
    let stranger = TlsClient::new(
        &props(&[("ssl.truststore.location", &other.ca_file())]),
        None,
    )
    .unwrap();
    assert!(handshake(&server, &stranger, "localhost").await.is_err());
}

// Shows: mutual TLS — with ssl.client.auth=required the client certificate's subject, mapped
// by ssl.principal.mapping.rules, is the principal, and a client without a certificate is
// refused; with `requested` it may connect anonymously.
#[tokio::test]
async fn mutual_tls_principals() {
    let pki = Pki::new();
    let keystore = pki.keystore_file("broker.pem", "broker-1", &["localhost"]);
    let client_keystore = pki.keystore_file("alice.pem", "alice", &[]);
    let server_props = |auth: &str| {
        props(&[
            ("ssl.keystore.location", &keystore),
            ("ssl.truststore.location", &pki.ca_file()),
            ("ssl.client.auth", auth),
            (
                "ssl.principal.mapping.rules",
                "RULE:^CN=(.*?),.*$/$1/L,DEFAULT",
            ),
        ])
    };
    let with_cert = TlsClient::new(
        &props(&[
            ("ssl.truststore.location", &pki.ca_file()),
            ("ssl.keystore.location", &client_keystore),
        ]),
        None,
    )
    .unwrap();
    let without_cert =
        TlsClient::new(&props(&[("ssl.truststore.location", &pki.ca_file())]), None).unwrap();

    let required = TlsServer::new(&server_props("required"), "SSL", false).unwrap();
    assert_eq!(
        handshake(&required, &with_cert, "localhost").await.unwrap(),
        Some(KafkaPrincipal::user("alice"))
    );
    assert!(handshake(&required, &without_cert, "localhost")
        .await
        .is_err());

    let requested = TlsServer::new(&server_props("requested"), "SSL", false).unwrap();
    assert_eq!(
        handshake(&requested, &without_cert, "localhost")
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        handshake(&requested, &with_cert, "localhost")
            .await
            .unwrap(),
        Some(KafkaPrincipal::user("alice"))
    );

    // A SASL_SSL listener ignores the unprefixed ssl.client.auth (KIP-684).
    let sasl = TlsServer::new(&server_props("required"), "SASL_SSL", true).unwrap();
    assert_eq!(sasl.client_auth(), ClientAuth::None);
    assert_eq!(
        handshake(&sasl, &without_cert, "localhost").await.unwrap(),
        None
    );
}

// Shows: inline PEM settings and an encrypted PKCS #8 key with ssl.key.password work; a wrong
// password, a missing one, a JKS type and a missing keystore are refused naming the key.
#[tokio::test]
async fn inline_stores_and_encrypted_keys() {
    let pki = Pki::new();
    let (chain, key) = pki.issue("broker", &["localhost"]);
    let ca = std::fs::read_to_string(pki.ca_file()).unwrap();
    let inline = TlsServer::new(
        &props(&[
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.certificate.chain", &chain),
            ("ssl.keystore.key", &key),
        ]),
        "SSL",
        false,
    )
    .unwrap();
    let client = TlsClient::new(
        &props(&[
            ("ssl.truststore.type", "PEM"),
            ("ssl.truststore.certificates", &ca),
        ]),
        None,
    )
    .unwrap();
    handshake(&inline, &client, "localhost").await.unwrap();

    let plain_der = pkcs8::der::pem::decode_vec(key.as_bytes()).unwrap().1;
    let info = pkcs8::PrivateKeyInfo::try_from(plain_der.as_slice()).unwrap();
    let encrypted = info.encrypt(rand::rngs::OsRng, b"s3cret").unwrap();
    let encrypted_pem = encrypted
        .to_pem("ENCRYPTED PRIVATE KEY", pkcs8::LineEnding::LF)
        .unwrap();
    let with_password = |password: Option<&str>| {
        let mut p = props(&[
            ("ssl.keystore.certificate.chain", &chain),
            ("ssl.keystore.key", &encrypted_pem),
        ]);
        if let Some(password) = password {
            p.insert("ssl.key.password".into(), password.into());
        }
        TlsServer::new(&p, "SSL", false)
    };
    handshake(
        &with_password(Some("s3cret")).unwrap(),
        &client,
        "localhost",
    )
    .await
    .unwrap();
    assert_eq!(
        with_password(Some("wrong")).unwrap_err().key,
        "ssl.key.password"
    );
    assert_eq!(with_password(None).unwrap_err().key, "ssl.key.password");

    let jks = TlsServer::new(
        &props(&[
            ("ssl.keystore.type", "JKS"),
            ("ssl.keystore.location", &pki.ca_file()),
        ]),
        "SSL",
        false,
    )
    .unwrap_err();
    assert_eq!(jks.key, "ssl.keystore.type");
    assert!(jks.reason.contains("PEM"), "{jks}");
    let missing = TlsServer::new(&BTreeMap::new(), "SSL", false).unwrap_err();
    assert!(missing.reason.contains("keystore"), "{missing}");
    let no_file = TlsServer::new(
        &props(&[("ssl.keystore.location", "/nonexistent.pem")]),
        "SSL",
        false,
    )
    .unwrap_err();
    assert!(no_file.reason.contains("/nonexistent.pem"), "{no_file}");
}

// Shows: ssl.enabled.protocols and ssl.cipher.suites restrict what is negotiated — a client
// limited to TLSv1.2 cannot reach a TLSv1.3-only listener; IANA suite names are accepted, an
// unknown one is refused listing the supported names, as is TLSv1.1.
#[tokio::test]
async fn protocols_and_cipher_suites() {
    let pki = Pki::new();
    let keystore = pki.keystore_file("broker.pem", "broker", &["localhost"]);
    let tls13_only = TlsServer::new(
        &props(&[
            ("ssl.keystore.location", &keystore),
            ("ssl.enabled.protocols", "TLSv1.3"),
        ]),
        "SSL",
        false,
    )
    .unwrap();
    let tls12_client = TlsClient::new(
        &props(&[
            ("ssl.truststore.location", &pki.ca_file()),
            ("ssl.enabled.protocols", "TLSv1.2"),
        ]),
        None,
    )
    .unwrap();
    assert!(handshake(&tls13_only, &tls12_client, "localhost")
        .await
        .is_err());
    let suites = TlsServer::new(
        &props(&[
            ("ssl.keystore.location", &keystore),
            (
                "ssl.cipher.suites",
                "TLS_AES_256_GCM_SHA384, TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
            ),
        ]),
        "SSL",
        false,
    )
    .unwrap();
    handshake(&suites, &tls12_client, "localhost")
        .await
        .unwrap();
    let unknown = TlsServer::new(
        &props(&[
            ("ssl.keystore.location", &keystore),
            ("ssl.cipher.suites", "TLS_RSA_WITH_RC4_128_MD5"),
        ]),
        "SSL",
        false,
    )
    .unwrap_err();
    assert!(
        unknown.reason.contains("TLS_AES_128_GCM_SHA256"),
        "{unknown}"
    );
    let old = TlsServer::new(
        &props(&[
            ("ssl.keystore.location", &keystore),
            ("ssl.enabled.protocols", "TLSv1.1,TLSv1.2"),
        ]),
        "SSL",
        false,
    )
    .unwrap_err();
    assert_eq!(old.key, "ssl.enabled.protocols");
}

// Shows: a reload picks up a keystore file replaced on disk (certificate rotation without a
// restart); a reload that fails keeps the old certificates.
#[tokio::test]
async fn reload_rotates_certificates() {
    let old_ca = Pki::new();
    let new_ca = Pki::new();
    let path = old_ca.dir.path().join("rotating.pem");
    let write = |pki: &Pki| {
        let (chain, key) = pki.issue("broker", &["localhost"]);
        std::fs::write(&path, format!("{key}{chain}")).unwrap();
    };
    write(&old_ca);
    let server = TlsServer::new(
        &props(&[("ssl.keystore.location", &path.display().to_string())]),
        "SSL",
        false,
    )
    .unwrap();
    let trusts_old = TlsClient::new(
        &props(&[("ssl.truststore.location", &old_ca.ca_file())]),
        None,
    )
    .unwrap();
    let trusts_new = TlsClient::new(
        &props(&[("ssl.truststore.location", &new_ca.ca_file())]),
        None,
    )
    .unwrap();
    handshake(&server, &trusts_old, "localhost").await.unwrap();
    assert!(handshake(&server, &trusts_new, "localhost").await.is_err());
    write(&new_ca);
    server.reload().unwrap();
    handshake(&server, &trusts_new, "localhost").await.unwrap();
    std::fs::write(&path, "garbage").unwrap();
    assert!(server.reload().is_err());
    handshake(&server, &trusts_new, "localhost").await.unwrap();
    assert!(Path::new(&path).exists());
}

/// Uses up the running task's cooperative budget within one poll, as reading a large answer
/// does (every socket read takes a unit): the next socket operation in this poll returns
/// `Pending`, and the task is woken to be polled again with a new budget.
async fn spend_budget() {
    std::future::poll_fn(|cx| {
        for _ in 0..100_000 {
            let consumed = std::pin::pin!(tokio::task::coop::consume_budget()).poll(cx);
            if consumed.is_pending() {
                break;
            }
        }
        assert!(!tokio::task::coop::has_budget_remaining());
        std::task::Poll::Ready(())
    })
    .await
}

/// Answers every frame with itself; with `spend` set, spends the connection task's budget first.
#[derive(Clone)]
struct Echo {
    spend: bool,
}

impl crate::connection::RequestHandler for Echo {
    async fn handle(
        &self,
        frame: bytes::Bytes,
        _session: &mut crate::connection::Session,
    ) -> crate::connection::Reply {
        if self.spend {
            spend_budget().await;
        }
        let mut answer = (frame.len() as u32).to_be_bytes().to_vec();
        answer.extend_from_slice(&frame);
        crate::connection::Reply::Send(answer.into())
    }
}

/// A TLS listener on 127.0.0.1 serving `handler` through the broker's connection loop; returns
/// its port.
async fn tls_listener(
    pki: &Pki,
    handler: Echo,
    shutdown: &tokio_util::sync::CancellationToken,
) -> u16 {
    let keystore = pki.keystore_file("broker.pem", "broker-1", &["localhost"]);
    let server = TlsServer::new(
        &props(&[
            ("ssl.keystore.location", &keystore),
            ("ssl.keystore.type", "PEM"),
        ]),
        "SSL",
        false,
    )
    .unwrap();
    let security = crate::security::ListenerSecurity {
        name: "SSL".to_string(),
        protocol: crate::security::SecurityProtocol::Ssl,
        tls: Some(Arc::new(server)),
        sasl: None,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(crate::connection::serve(
        listener,
        handler,
        1024 * 1024,
        Arc::new(security),
        shutdown.clone(),
    ));
    port
}

/// A client connection over TLS to `port`.
async fn tls_connection(pki: &Pki, port: u16) -> crate::client::Connection<BoxStream> {
    let client =
        TlsClient::new(&props(&[("ssl.truststore.location", &pki.ca_file())]), None).unwrap();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let stream = client.connect("localhost", tcp).await.unwrap();
    crate::client::Connection::new(stream, "test")
}

/// One request frame (size prefix, then 4 bytes of correlation id and `body`) through `call_raw`,
/// within 5 s; checks the echo.
async fn echo_call(connection: &mut crate::client::Connection<BoxStream>, spend_first: bool) {
    let call = async {
        if spend_first {
            spend_budget().await;
        }
        connection
            .call_raw(|id| {
                let mut frame = 8u32.to_be_bytes().to_vec();
                frame.extend_from_slice(&id.to_be_bytes());
                frame.extend_from_slice(b"ping");
                frame.into()
            })
            .await
            .unwrap()
    };
    let (id, answer) = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .expect("the request or its answer stayed in rustls's buffer: not flushed");
    assert_eq!(&answer[..4], &id.to_be_bytes());
    assert_eq!(&answer[4..], b"ping");
}

// Shows (issue 21): over TLS every request and every answer is flushed. tokio-rustls answers a
// write `Ready(n)` once rustls holds the bytes even when the socket write under it was `Pending`
// — as it is when the task's cooperative budget is spent (by reading a large Fetch answer) — and
// unflushed bytes then stay in rustls while both ends wait for each other: `keel bench
// --consumers 2` stalled over SASL_SSL with a Fetch request left in the client's rustls. The
// request here is written with the client task's budget spent, then the answer with the server
// connection task's budget spent; neither may stall.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_and_answers_are_flushed_when_the_budget_is_spent() {
    let pki = Pki::new();
    let shutdown = tokio_util::sync::CancellationToken::new();
    // The client's request.
    let port = tls_listener(&pki, Echo { spend: false }, &shutdown).await;
    let mut connection = tls_connection(&pki, port).await;
    echo_call(&mut connection, false).await;
    for _ in 0..3 {
        echo_call(&mut connection, true).await;
    }
    // The server's answer.
    let port = tls_listener(&pki, Echo { spend: true }, &shutdown).await;
    let mut connection = tls_connection(&pki, port).await;
    for _ in 0..3 {
        echo_call(&mut connection, false).await;
    }
    shutdown.cancel();
}

#[test]
fn tls_records_are_told_from_kafka_frames() {
    // A ClientHello, and the alert a TLS server answers a plaintext Kafka request with.
    assert_eq!(
        record_type(&[0x16, 0x03, 0x01, 0x02, 0x00]),
        Some(HANDSHAKE_RECORD)
    );
    assert_eq!(record_type(&[0x15, 0x03, 0x03, 0x00, 0x02]), Some(0x15));
    // Kafka frames start with their size: small ones with zeros.
    assert_eq!(record_type(&[0x00, 0x00, 0x01, 0x2c]), None);
    // Too short to tell, an unknown content type or version.
    assert_eq!(record_type(&[0x16, 0x03]), None);
    assert_eq!(record_type(&[0x18, 0x03, 0x03]), None);
    assert_eq!(record_type(&[0x16, 0x03, 0x05]), None);
    assert_eq!(record_type(&[0x16, 0x02, 0x00]), None);
}
