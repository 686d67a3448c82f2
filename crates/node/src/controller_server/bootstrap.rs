//! Bootstrap metadata: records `keel format` leaves in a controller's metadata directory for the
//! first active controller of a new cluster to write (Kafka's `bootstrap.checkpoint`, which
//! `kafka-storage format --add-scram` fills with `UserScramCredentialRecord`s). Today they are
//! SCRAM credentials, so the nodes of a cluster whose own connections use SCRAM can
//! authenticate from the start.
//!
//! `bootstrap.json` (JSON: a version and the records) sits next to `meta.properties`; the
//! controller reads it at start and, while its metadata log has never held a record, commits
//! its records first thing when it becomes active
//! (`keel_controller::Controller::bootstrap`). Until then its SCRAM credentials are also what
//! the controller's own listener authenticates with (the controllers of a new quorum must
//! authenticate each other before any of them can commit: Kafka cannot, KAFKA-15513).
//!
//! [`parse_add_scram`] reads Kafka's `--add-scram` argument (`ScramParser`):
//! `SCRAM-SHA-256=[name=alice,password=alice-secret]`, or with `iterations=`, `salt=`
//! (base64) and `saltedpassword=` (base64, with `salt`) instead of `password`; values may be
//! quoted.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine;
use keel_controller::records::{Record, UserScramCredentialRecord};
use keel_controller::scram::{self, ScramCredentialData, ScramMechanism};
use keel_log::storage::Storage;
use serde::{Deserialize, Serialize};

use crate::clock::Clock;
use crate::security::sasl::scram::{credential_of_password, random_salt};

/// The file's name in the metadata log directory.
pub const BOOTSTRAP_FILE: &str = "bootstrap.json";
/// The file's format version.
const BOOTSTRAP_VERSION: u32 = 1;
/// The most records a bootstrap file may hold (the controller writes them as one batch).
pub const BOOTSTRAP_RECORDS_MAX: usize = 1_000;

#[derive(Debug, Serialize, Deserialize)]
struct BootstrapFile {
    version: u32,
    records: Vec<Record>,
}

/// Why the bootstrap records cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a bootstrap file Keel can read: {reason}")]
    Invalid { path: PathBuf, reason: String },
}

/// Writes `records` as the bootstrap metadata of the controller whose metadata log directory
/// is `dir` (atomically). Refused once the controller has started there (its Raft log exists):
/// bootstrap records only seed a new cluster.
pub fn write(storage: &dyn Storage, dir: &Path, records: &[Record]) -> Result<(), BootstrapError> {
    let path = dir.join(BOOTSTRAP_FILE);
    let raft = dir.join(crate::raft::log_store::RAFT_LOG_DIR);
    let started = storage.exists(&raft).map_err(|source| BootstrapError::Io {
        path: raft.clone(),
        source,
    })?;
    if started {
        return Err(BootstrapError::Invalid {
            path,
            reason: format!(
                "a controller has already run in {} (it holds {}): bootstrap records seed a new \
                 cluster only; add credentials to a running one with kafka-configs \
                 (AlterUserScramCredentials)",
                dir.display(),
                crate::raft::log_store::RAFT_LOG_DIR
            ),
        });
    }
    if records.len() > BOOTSTRAP_RECORDS_MAX {
        return Err(BootstrapError::Invalid {
            path,
            reason: format!("at most {BOOTSTRAP_RECORDS_MAX} bootstrap records"),
        });
    }
    let file = BootstrapFile {
        version: BOOTSTRAP_VERSION,
        records: records.to_vec(),
    };
    let bytes = serde_json::to_vec_pretty(&file).map_err(|e| BootstrapError::Invalid {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    keel_log::storage::write_file_atomically(storage, &path, &bytes)
        .map_err(|source| BootstrapError::Io { path, source })
}

/// The bootstrap records in metadata log directory `dir` (none without a file).
pub fn read(storage: &dyn Storage, dir: &Path) -> Result<Vec<Record>, BootstrapError> {
    let path = dir.join(BOOTSTRAP_FILE);
    let bytes = keel_log::storage::read_file_if_exists(storage, &path).map_err(|source| {
        BootstrapError::Io {
            path: path.clone(),
            source,
        }
    })?;
    let Some(bytes) = bytes else {
        return Ok(Vec::new());
    };
    let invalid = |reason: String| BootstrapError::Invalid {
        path: path.clone(),
        reason,
    };
    let file: BootstrapFile = serde_json::from_slice(&bytes).map_err(|e| invalid(e.to_string()))?;
    if file.version != BOOTSTRAP_VERSION {
        return Err(invalid(format!(
            "version {} (this Keel reads {BOOTSTRAP_VERSION})",
            file.version
        )));
    }
    if file.records.len() > BOOTSTRAP_RECORDS_MAX {
        return Err(invalid(format!(
            "more than {BOOTSTRAP_RECORDS_MAX} records"
        )));
    }
    // Replayed once now, so a bad file stops the start instead of the first activation.
    let mut trial = keel_controller::ClusterImage::new();
    for record in &file.records {
        trial
            .replay(trial.next_offset(), record)
            .map_err(|e| invalid(e.to_string()))?;
    }
    Ok(file.records)
}

/// The SCRAM credentials among bootstrap records, by user and mechanism.
pub fn scram_users(records: &[Record]) -> keel_controller::image::ScramUsers {
    let mut image = keel_controller::ClusterImage::new();
    for record in records {
        if let Record::UserScramCredential(_) = record {
            // `read` checked that every record replays.
            let _ = image.replay(image.next_offset(), record);
        }
    }
    image.scram_users().clone()
}

/// One `--add-scram` argument as Kafka's `ScramParser` reads it, into a credential record (a
/// random salt as Kafka's tools make one when none is given; 4096 iterations by default).
/// Errors name what is wrong without echoing a password or salted password.
pub fn parse_add_scram(argument: &str, clock: &dyn Clock) -> Result<Record, String> {
    let argument = argument.trim();
    let (name, config) = argument.split_once('=').ok_or(
        "Failed to find equals sign in SCRAM argument (expected MECHANISM=[name=...,password=...])",
    )?;
    let mechanism = ScramMechanism::from_name(name)
        .ok_or_else(|| format!("The add-scram mechanism {name} is not supported."))?;
    let config = config
        .strip_prefix('[')
        .ok_or("Expected configuration string to start with [")?
        .strip_suffix(']')
        .ok_or("Expected configuration string to end with ]")?;
    let mut components: BTreeMap<String, String> = BTreeMap::new();
    for component in config.split(',') {
        // Kafka echoes the component; it may be the tail of a password with a ',' in it.
        let (key, value) = component
            .split_once('=')
            .ok_or("No equals sign found in SCRAM component (values cannot hold ',')")?;
        let value = match value.len() >= 2 && value.starts_with('"') && value.ends_with('"') {
            true => &value[1..value.len() - 1],
            false => value,
        };
        if components
            .insert(key.to_string(), value.to_string())
            .is_some()
        {
            return Err(format!("'{key}' is given twice"));
        }
    }
    let user = components
        .remove("name")
        .ok_or("You must supply 'name' to add-scram")?;
    scram::check_user_name(&user).map_err(|e| e.message)?;
    let b64 = base64::engine::general_purpose::STANDARD;
    let salt = match components.remove("salt") {
        Some(s) => Some(
            b64.decode(&s)
                .map_err(|_| format!("Failed to decode given salt: {s}"))?,
        ),
        None => None,
    };
    let iterations = match components.remove("iterations") {
        Some(i) => i
            .parse::<i32>()
            .map_err(|_| format!("Failed to parse iterations count: {i}"))?,
        None => scram::DEFAULT_ITERATIONS,
    };
    if iterations < scram::MIN_ITERATIONS {
        return Err(format!(
            "The 'iterations' value must be >= {} for add-scram using {mechanism}",
            scram::MIN_ITERATIONS
        ));
    }
    if iterations > scram::MAX_ITERATIONS {
        return Err(format!(
            "The 'iterations' value must be <= {} for add-scram using {mechanism}",
            scram::MAX_ITERATIONS
        ));
    }
    let password = components.remove("password");
    let salted_password = components.remove("saltedpassword");
    if !components.is_empty() {
        let unknown: Vec<&str> = components.keys().map(String::as_str).collect();
        return Err(format!(
            "Unknown SCRAM configurations: {}",
            unknown.join(", ")
        ));
    }
    let credential = match (password, salted_password) {
        (Some(password), None) => {
            if password.is_empty() {
                return Err("'password' must not be empty".into());
            }
            let salt = salt.unwrap_or_else(|| random_salt(clock));
            scram::check_salt(&salt).map_err(|e| e.message)?;
            credential_of_password(mechanism, &password, &salt, iterations)
        }
        (None, Some(salted)) => {
            let salt = salt.ok_or("You must supply 'salt' with 'saltedpassword' to add-scram")?;
            scram::check_salt(&salt).map_err(|e| e.message)?;
            let salted = b64.decode(&salted).map_err(|_| {
                "Failed to decode given saltedpassword (base64 expected)".to_string()
            })?;
            scram::check_salted_password(mechanism, &salted).map_err(|e| e.message)?;
            ScramCredentialData::from_salted_password(mechanism, &salt, &salted, iterations)
        }
        (None, None) => {
            return Err("You must supply one of 'password' or 'saltedpassword' to add-scram".into())
        }
        (Some(_), Some(_)) => {
            return Err("Supply only one of 'password' and 'saltedpassword' to add-scram".into())
        }
    };
    Ok(Record::UserScramCredential(UserScramCredentialRecord {
        name: user,
        mechanism,
        credential,
    }))
}

/// Every `--add-scram` argument, refusing the same user and mechanism twice.
pub fn parse_add_scrams(arguments: &[String], clock: &dyn Clock) -> Result<Vec<Record>, String> {
    let mut seen = std::collections::BTreeSet::new();
    let mut records = Vec::new();
    for argument in arguments {
        let record = parse_add_scram(argument, clock).map_err(|e| format!("--add-scram: {e}"))?;
        if let Record::UserScramCredential(r) = &record {
            if !seen.insert((r.name.clone(), r.mechanism)) {
                return Err(format!(
                    "--add-scram: user {:?} has two {} credentials",
                    r.name, r.mechanism
                ));
            }
        }
        records.push(record);
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use keel_log::storage::MemStorage;

    use super::*;
    use crate::clock::SystemClock;

    fn credential(record: &Record) -> (&str, ScramMechanism, &ScramCredentialData) {
        match record {
            Record::UserScramCredential(r) => (&r.name, r.mechanism, &r.credential),
            other => panic!("{other:?}"),
        }
    }

    // Shows: Kafka's --add-scram forms — a password (random Kafka-style salt, 4096 iterations),
    // iterations and a given salt, quoted values, a salted password with its salt — make the
    // credential the password would; Kafka's error messages for the malformed ones, and no
    // password echoed.
    #[test]
    fn add_scram_arguments() {
        let clock = SystemClock;
        let r =
            parse_add_scram("SCRAM-SHA-256=[name=admin,password=admin-secret]", &clock).unwrap();
        let (name, m, c) = credential(&r);
        assert_eq!(
            (name, m, c.iterations),
            ("admin", ScramMechanism::Sha256, 4096)
        );
        assert!(c.salt.iter().all(|b| b.is_ascii_alphanumeric()));
        let expected = credential_of_password(m, "admin-secret", &c.salt, 4096);
        assert_eq!(c, &expected);

        let r = parse_add_scram(
            "SCRAM-SHA-512=[name=\"alice\",iterations=8192,salt=\"c2FsdA==\",password=\"a,b\"]",
            &clock,
        );
        // A password with a comma cannot be written in Kafka's syntax either (split on ','),
        // and the error does not show the password's tail.
        let err = r.unwrap_err();
        assert!(
            err.contains("No equals sign") && !err.contains("b\""),
            "{err}"
        );
        let r = parse_add_scram(
            "SCRAM-SHA-512=[name=\"alice\",iterations=8192,salt=\"c2FsdA==\",password=\"pw\"]",
            &clock,
        )
        .unwrap();
        let (name, m, c) = credential(&r);
        assert_eq!(
            (name, c.iterations, c.salt.as_slice()),
            ("alice", 8192, &b"salt"[..])
        );
        assert_eq!(c, &credential_of_password(m, "pw", b"salt", 8192));

        let salted = crate::security::sasl::scram::salted_password(
            ScramMechanism::Sha256,
            b"pw",
            b"salt",
            4096,
        );
        let b64 = base64::engine::general_purpose::STANDARD.encode(&salted);
        let r = parse_add_scram(
            &format!("SCRAM-SHA-256=[name=bob,salt=c2FsdA==,saltedpassword={b64}]"),
            &clock,
        )
        .unwrap();
        assert_eq!(
            credential(&r).2,
            &credential_of_password(ScramMechanism::Sha256, "pw", b"salt", 4096)
        );

        for (bad, message) in [
            ("SCRAM-SHA-256", "Failed to find equals sign"),
            (
                "SCRAM-SHA-1=[name=a,password=b]",
                "The add-scram mechanism SCRAM-SHA-1 is not supported.",
            ),
            (
                "SCRAM-SHA-256=name=a,password=b]",
                "Expected configuration string to start with [",
            ),
            (
                "SCRAM-SHA-256=[name=a,password=b",
                "Expected configuration string to end with ]",
            ),
            (
                "SCRAM-SHA-256=[password=b]",
                "You must supply 'name' to add-scram",
            ),
            (
                "SCRAM-SHA-256=[name=,password=b]",
                "Username must not be empty",
            ),
            (
                "SCRAM-SHA-256=[name=a]",
                "You must supply one of 'password' or 'saltedpassword'",
            ),
            (
                "SCRAM-SHA-256=[name=a,saltedpassword=AAAA]",
                "You must supply 'salt' with 'saltedpassword'",
            ),
            (
                "SCRAM-SHA-256=[name=a,salt=c2FsdA==,saltedpassword=AAAA]",
                "Salted password must be 32 bytes",
            ),
            (
                "SCRAM-SHA-256=[name=a,password=b,iterations=4095]",
                "must be >= 4096",
            ),
            (
                "SCRAM-SHA-256=[name=a,password=b,iterations=16385]",
                "must be <= 16384",
            ),
            (
                "SCRAM-SHA-256=[name=a,password=b,iterations=x]",
                "Failed to parse iterations count: x",
            ),
            (
                "SCRAM-SHA-256=[name=a,password=b,salt=!!]",
                "Failed to decode given salt",
            ),
            (
                "SCRAM-SHA-256=[name=a,password=b,color=red]",
                "Unknown SCRAM configurations: color",
            ),
            (
                "SCRAM-SHA-256=[name=a,passwordsecret]",
                "No equals sign found in SCRAM component",
            ),
        ] {
            let err = parse_add_scram(bad, &clock).unwrap_err();
            assert!(err.contains(message), "{bad}: {err}");
            assert!(!err.contains("passwordsecret"), "{err}");
        }
        let twice = [
            "SCRAM-SHA-256=[name=a,password=b]".to_string(),
            "SCRAM-SHA-256=[name=a,password=c]".to_string(),
        ];
        assert!(parse_add_scrams(&twice, &clock)
            .unwrap_err()
            .contains("two SCRAM-SHA-256"));
        let both = [
            "SCRAM-SHA-256=[name=a,password=b]".to_string(),
            "SCRAM-SHA-512=[name=a,password=b]".to_string(),
        ];
        assert_eq!(parse_add_scrams(&both, &clock).unwrap().len(), 2);
    }

    // Shows: the bootstrap file round-trips, a missing one is no records, a damaged one is an
    // error naming the file, and writing is refused once a controller has run in the directory.
    #[test]
    fn bootstrap_file() {
        let storage = Arc::new(MemStorage::new());
        let dir = Path::new("/meta");
        storage.create_dir_all(dir).unwrap();
        assert!(read(storage.as_ref(), dir).unwrap().is_empty());
        let records = parse_add_scrams(
            &["SCRAM-SHA-512=[name=admin,password=pw]".to_string()],
            &SystemClock,
        )
        .unwrap();
        write(storage.as_ref(), dir, &records).unwrap();
        assert_eq!(read(storage.as_ref(), dir).unwrap(), records);
        assert_eq!(scram_users(&records)["admin"].len(), 1);
        keel_log::storage::write_file_atomically(storage.as_ref(), &dir.join(BOOTSTRAP_FILE), b"{")
            .unwrap();
        let err = read(storage.as_ref(), dir).unwrap_err().to_string();
        assert!(err.contains(BOOTSTRAP_FILE), "{err}");
        storage
            .create_dir_all(&dir.join(crate::raft::log_store::RAFT_LOG_DIR))
            .unwrap();
        let err = write(storage.as_ref(), dir, &records)
            .unwrap_err()
            .to_string();
        assert!(err.contains("already run"), "{err}");
    }
}
