//! `keel dev --secure`: a local cluster that speaks SASL_SSL everywhere — clients, replication,
//! brokers to controllers, Raft — with a throwaway CA, one certificate for 127.0.0.1/localhost
//! and an admin user, made once under `<data dir>/secure/` and reused on later starts. It
//! prints the client settings (Kafka's client properties, and librdkafka's) that work as they
//! are, and writes them next to the certificates.
//!
//! The admin user's SCRAM credential is written at format time, as `keel format --add-scram
//! 'SCRAM-SHA-512=[name=admin,password=...]'` writes it, into every dev controller's bootstrap
//! metadata: the nodes authenticate to each other as admin from their first start, before any
//! metadata record is committed.
//!
//! ACLs are on (Kafka's `StandardAuthorizer`) with admin the only super user: every other
//! user the operator adds (`kafka-configs --alter --add-config 'SCRAM-SHA-512=[...]'
//! --entity-type users`) may do only what ACLs grant it (`keel acls add`, `kafka-acls.sh`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use keel_controller::records::Record;
use keel_controller::scram::ScramMechanism;
use keel_log::storage::OsStorage;
use keel_node::clock::SystemClock;
use keel_node::controller_server::bootstrap;
use keel_node::security::sasl::scram::credential_of_password;

/// The SASL mechanism of the secure dev cluster, for clients and for its own nodes.
pub const MECHANISM: &str = "SCRAM-SHA-512";
/// The user clients and the nodes authenticate as.
pub const ADMIN_USER: &str = "admin";

/// The files of a secure dev cluster.
#[derive(Debug, Clone)]
pub struct SecureDev {
    /// `<data dir>/secure`.
    pub dir: PathBuf,
    /// The CA certificate (a PEM truststore).
    pub ca: PathBuf,
    /// Key and certificate chain of every node (a PEM keystore).
    pub keystore: PathBuf,
    /// The admin user's password.
    pub password: String,
}

/// The login module of the mechanism's JAAS lines.
const SCRAM_LOGIN_MODULE: &str = "org.apache.kafka.common.security.scram.ScramLoginModule";

impl SecureDev {
    /// Loads the secure files under `data_dir`, making them on first use (a fresh CA, a
    /// certificate it signs for 127.0.0.1 and localhost, a random admin password).
    pub fn prepare(data_dir: &Path) -> anyhow::Result<SecureDev> {
        let dir = data_dir.join("secure");
        let dev = SecureDev {
            ca: dir.join("ca.crt"),
            keystore: dir.join("node.pem"),
            password: String::new(),
            dir,
        };
        let password_file = dev.dir.join("admin.password");
        if dev.ca.exists() && dev.keystore.exists() && password_file.exists() {
            let password = std::fs::read_to_string(&password_file)
                .with_context(|| format!("cannot read {}", password_file.display()))?
                .trim()
                .to_string();
            return Ok(SecureDev { password, ..dev });
        }
        std::fs::create_dir_all(&dev.dir)
            .with_context(|| format!("cannot create {}", dev.dir.display()))?;
        let (ca_pem, keystore_pem) = make_certificates()?;
        let password = random_password();
        write_private(&dev.ca, &ca_pem)?;
        write_private(&dev.keystore, &keystore_pem)?;
        write_private(&password_file, &format!("{password}\n"))?;
        let dev = SecureDev { password, ..dev };
        write_private(&dev.dir.join("client.properties"), &dev.client_properties())?;
        write_private(
            &dev.dir.join("librdkafka.properties"),
            &dev.librdkafka_properties(),
        )?;
        Ok(dev)
    }

    /// The admin user's credential record, made as `keel format --add-scram` makes one (Kafka's
    /// 4096 iterations, a random salt): what every dev controller is formatted with.
    pub fn admin_credential(&self) -> anyhow::Result<Record> {
        let argument = format!("{MECHANISM}=[name={ADMIN_USER},password={}]", self.password);
        bootstrap::parse_add_scram(&argument, &SystemClock).map_err(anyhow::Error::msg)
    }

    /// Refuses a controller directory formatted without this admin password (by a `keel dev`
    /// without `--secure`, or before `secure/` was made again): its nodes could never
    /// authenticate to each other, so the cluster would never be ready.
    pub fn check_formatted(&self, controller_dir: &Path) -> anyhow::Result<()> {
        let mechanism = ScramMechanism::from_name(MECHANISM).expect("a SCRAM mechanism");
        let records = bootstrap::read(&OsStorage::new(), controller_dir)?;
        let knows_password = records.iter().any(|record| match record {
            Record::UserScramCredential(c) if c.name == ADMIN_USER && c.mechanism == mechanism => {
                let expected = credential_of_password(
                    mechanism,
                    &self.password,
                    &c.credential.salt,
                    c.credential.iterations,
                );
                expected.stored_key == c.credential.stored_key
            }
            _ => false,
        });
        if !knows_password {
            anyhow::bail!(
                "{} was formatted without the admin credential of {} (by a keel dev without \
                 --secure, or before that directory was made again): its nodes could not \
                 authenticate to each other; remove the data directory or pass another --data-dir",
                controller_dir.display(),
                self.dir.display()
            );
        }
        Ok(())
    }

    /// The JAAS line of the admin user (the nodes' own identity, and the clients').
    pub fn jaas(&self) -> String {
        format!(
            "{SCRAM_LOGIN_MODULE} required username=\"{ADMIN_USER}\" password=\"{}\";",
            self.password
        )
    }

    /// Settings every dev node gets: its listeners SASL_SSL (the broker listener is named
    /// `SASL_SSL`, the controllers' `CONTROLLER`), TLS with the dev keystore and CA, SCRAM
    /// with the admin user's credentials for its own connections, and the authorizer with
    /// admin as its super user.
    pub fn node_props(&self) -> BTreeMap<String, String> {
        use keel_node::security::authorizer::{
            AUTHORIZER_CLASS_NAME, STANDARD_AUTHORIZER, SUPER_USERS,
        };
        let jaas = self.jaas();
        let mechanism = MECHANISM.to_ascii_lowercase();
        [
            (AUTHORIZER_CLASS_NAME.into(), STANDARD_AUTHORIZER.into()),
            (SUPER_USERS.into(), format!("User:{ADMIN_USER}")),
            (
                "listener.security.protocol.map".to_string(),
                "SASL_SSL:SASL_SSL,CONTROLLER:SASL_SSL".to_string(),
            ),
            ("ssl.keystore.type".into(), "PEM".into()),
            (
                "ssl.keystore.location".into(),
                self.keystore.display().to_string(),
            ),
            ("ssl.truststore.type".into(), "PEM".into()),
            (
                "ssl.truststore.location".into(),
                self.ca.display().to_string(),
            ),
            ("sasl.enabled.mechanisms".into(), MECHANISM.into()),
            (
                "sasl.mechanism.inter.broker.protocol".into(),
                MECHANISM.into(),
            ),
            (
                "sasl.mechanism.controller.protocol".into(),
                MECHANISM.into(),
            ),
            (
                format!("listener.name.sasl_ssl.{mechanism}.sasl.jaas.config"),
                jaas.clone(),
            ),
            (
                format!("listener.name.controller.{mechanism}.sasl.jaas.config"),
                jaas,
            ),
        ]
        .into_iter()
        .collect()
    }

    /// Kafka's client properties (the Java client, Kafka's tools' `--command-config`, the
    /// `keel` commands).
    pub fn client_properties(&self) -> String {
        format!(
            "security.protocol=SASL_SSL\nsasl.mechanism={MECHANISM}\nsasl.jaas.config={}\n\
             ssl.truststore.type=PEM\nssl.truststore.location={}\n",
            self.jaas(),
            self.ca.display()
        )
    }

    /// The same for librdkafka (confluent-kafka, kcat, ...).
    pub fn librdkafka_properties(&self) -> String {
        format!(
            "security.protocol=SASL_SSL\nsasl.mechanisms={MECHANISM}\nsasl.username={ADMIN_USER}\n\
             sasl.password={}\nssl.ca.location={}\n",
            self.password,
            self.ca.display()
        )
    }
}

/// Writes a file only its owner can read (it holds keys and passwords).
fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", path.display()))
}

/// A CA and a node certificate it signs (for 127.0.0.1, ::1 and localhost): (CA PEM, keystore
/// PEM with the node's key then its certificate).
fn make_certificates() -> anyhow::Result<(String, String)> {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    ca_params.distinguished_name = rcgen::DistinguishedName::new();
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "keel dev CA (throwaway)");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key = rcgen::KeyPair::generate()?;
    let ca = ca_params.self_signed(&ca_key)?;
    let mut node_params = rcgen::CertificateParams::new(vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ])?;
    node_params.distinguished_name = rcgen::DistinguishedName::new();
    node_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "keel dev node");
    node_params.extended_key_usages = vec![
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let node_key = rcgen::KeyPair::generate()?;
    let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
    let node = node_params.signed_by(&node_key, &issuer)?;
    Ok((
        ca.pem(),
        format!("{}{}", node_key.serialize_pem(), node.pem()),
    ))
}

/// 24 random characters from the OS (about 140 bits).
fn random_password() -> String {
    uuid::Uuid::new_v4()
        .simple()
        .to_string()
        .chars()
        .chain(uuid::Uuid::new_v4().simple().to_string().chars())
        .take(24)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shows: the files are made once and reused (same password, same CA), private to the user;
    // the client settings name the CA and the admin user.
    #[test]
    fn secure_files_are_made_once() {
        let dir = tempfile::tempdir().unwrap();
        let first = SecureDev::prepare(dir.path()).unwrap();
        let again = SecureDev::prepare(dir.path()).unwrap();
        assert_eq!(first.password, again.password);
        assert_eq!(first.password.len(), 24);
        assert_eq!(
            std::fs::read(&first.ca).unwrap(),
            std::fs::read(&again.ca).unwrap()
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&first.keystore)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "{mode:o}");
        let client = first.client_properties();
        assert!(client.contains(&first.ca.display().to_string()));
        assert!(client.contains("sasl.mechanism=SCRAM-SHA-512"));
        let props = first.node_props();
        assert_eq!(props["sasl.mechanism.inter.broker.protocol"], MECHANISM);
        assert_eq!(props["super.users"], "User:admin");
        assert!(props["authorizer.class.name"].ends_with(".StandardAuthorizer"));
    }

    // Shows: the admin credential a dev controller is formatted with verifies the admin
    // password and no other (StoredKey from the password, the salt and 4096 iterations), and a
    // controller directory formatted without it — or for another password — is refused by name.
    #[test]
    fn admin_credential_bootstrapped_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let dev = SecureDev::prepare(dir.path()).unwrap();
        let Record::UserScramCredential(c) = dev.admin_credential().unwrap() else {
            panic!("not a credential record");
        };
        assert_eq!(
            (c.name.as_str(), c.mechanism),
            (ADMIN_USER, ScramMechanism::Sha512)
        );
        assert_eq!(c.credential.iterations, 4096);
        let again = credential_of_password(
            ScramMechanism::Sha512,
            &dev.password,
            &c.credential.salt,
            4096,
        );
        assert_eq!(again.stored_key, c.credential.stored_key);
        let other = credential_of_password(
            ScramMechanism::Sha512,
            "not-the-password",
            &c.credential.salt,
            4096,
        );
        assert_ne!(other.stored_key, c.credential.stored_key);

        let controller = dir.path().join("controller-100");
        std::fs::create_dir_all(&controller).unwrap();
        let refused = dev.check_formatted(&controller).unwrap_err().to_string();
        assert!(
            refused.contains("without the admin credential"),
            "{refused}"
        );
        let storage = OsStorage::new();
        let stranger = SecureDev {
            password: "another-password".into(),
            ..dev.clone()
        };
        bootstrap::write(
            &storage,
            &controller,
            &[stranger.admin_credential().unwrap()],
        )
        .unwrap();
        assert!(dev.check_formatted(&controller).is_err());
        bootstrap::write(&storage, &controller, &[dev.admin_credential().unwrap()]).unwrap();
        dev.check_formatted(&controller).unwrap();
    }
}
