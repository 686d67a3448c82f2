use std::collections::BTreeMap;
use std::path::Path;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

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

fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
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
