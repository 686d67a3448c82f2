//! AlterClientQuotas (KIP-546) as Kafka's `ClientQuotaControlManager.alterClientQuotas`
//! decides it: each alteration's entity and every key and value are checked (Kafka's messages,
//! [`crate::quota`]); a valid alteration gives one [`Record::ClientQuota`] per key whose value
//! changes (setting the value a key has, or removing a key that is not set, writes nothing).
//! An alteration with any refused part changes nothing. DescribeClientQuotas is answered from
//! an image ([`crate::quota::matches`]).

use std::collections::BTreeSet;

use super::{Batch, Controller, Output, EXCESSIVE_BATCH, MAX_RECORDS_PER_USER_OP};
use crate::errors::{ApiError, ErrorCode};
use crate::quota::{self, QuotaEntity, QuotaValue};
use crate::records::{ClientQuotaRecord, Record};

/// One entity's changes: its (type, name) pairs as the request gave them, and each key's new
/// value (`None`: remove the key).
#[derive(Clone, Debug, PartialEq)]
pub struct QuotaAlteration {
    pub entity: Vec<(String, Option<String>)>,
    pub ops: Vec<(String, Option<f64>)>,
}

impl Controller {
    /// AlterClientQuotas: one answer per alteration, in order. With `validate_only` nothing is
    /// written.
    pub fn alter_client_quotas(
        &mut self,
        alterations: &[QuotaAlteration],
        validate_only: bool,
        now_ms: u64,
    ) -> Output<Vec<Result<(), ApiError>>> {
        self.advance(now_ms);
        let mut batch = Batch::new(&self.image);
        let ops: usize = alterations.iter().map(|a| a.ops.len()).sum();
        if ops > MAX_RECORDS_PER_USER_OP {
            let error = ApiError::new(
                ErrorCode::PolicyViolation,
                format!(
                    "{EXCESSIVE_BATCH} {ops} quota changes; at most {MAX_RECORDS_PER_USER_OP} in one request."
                ),
            );
            return batch.finish(alterations.iter().map(|_| Err(error.clone())).collect());
        }
        let mut seen: BTreeSet<QuotaEntity> = BTreeSet::new();
        let mut results = Vec::with_capacity(alterations.len());
        for alteration in alterations {
            let result = self.alter_one(alteration, &mut seen).map(|records| {
                if !validate_only {
                    for record in records {
                        batch.push(Record::ClientQuota(record));
                    }
                }
            });
            results.push(result);
        }
        batch.finish(results)
    }

    fn alter_one(
        &self,
        alteration: &QuotaAlteration,
        seen: &mut BTreeSet<QuotaEntity>,
    ) -> Result<Vec<ClientQuotaRecord>, ApiError> {
        let invalid = |m: String| ApiError::new(ErrorCode::InvalidRequest, m);
        let entity = quota::validate_entity(&alteration.entity)?;
        if !seen.insert(entity.clone()) {
            return Err(invalid(format!("Ignoring duplicate entity {entity}")));
        }
        let mut keys = BTreeSet::new();
        for (key, _) in &alteration.ops {
            if !keys.insert(key.as_str()) {
                return Err(invalid(format!(
                    "Duplicate quota key {key} not updating quota for this entity {entity}"
                )));
            }
        }
        let current = self.image.client_quotas().get(&entity);
        let mut records = Vec::new();
        for (key, value) in &alteration.ops {
            let now = current.and_then(|k| k.get(key));
            match value {
                None => {
                    if now.is_some() {
                        records.push(ClientQuotaRecord {
                            entity: entity.clone(),
                            key: key.clone(),
                            value: QuotaValue(0.0),
                            remove: true,
                        });
                    }
                }
                Some(v) => {
                    quota::validate_value(&entity, key, *v)?;
                    if now != Some(&QuotaValue(*v)) {
                        records.push(ClientQuotaRecord {
                            entity: entity.clone(),
                            key: key.clone(),
                            value: QuotaValue(*v),
                            remove: false,
                        });
                    }
                }
            }
        }
        Ok(records)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::ClusterImage;
    use crate::types::MetadataOffset;
    use crate::ControllerConfig;

    fn apply<R>(controller: &mut Controller, out: Output<R>) -> R {
        for record in &out.records {
            let offset = controller.next_offset();
            controller.replay(offset, record).expect("replays");
        }
        out.response
    }

    fn alteration(entity: &[(&str, Option<&str>)], ops: &[(&str, Option<f64>)]) -> QuotaAlteration {
        QuotaAlteration {
            entity: entity
                .iter()
                .map(|(t, n)| (t.to_string(), n.map(str::to_string)))
                .collect(),
            ops: ops.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        }
    }

    // Shows: valid alterations become one record per changed key (an unchanged value and the
    // removal of a key that is not set write nothing); a refused part refuses its whole
    // alteration; duplicates are Kafka's INVALID_REQUEST; validate_only writes nothing; the
    // quotas survive a snapshot and a removal takes an entity without keys away.
    #[test]
    fn alterations_become_records_and_survive_a_snapshot() {
        let mut c = Controller::new(ControllerConfig::new("c"));
        let alice = [(quota::USER, Some("alice"))];
        let defaults = [(quota::USER, None), (quota::CLIENT_ID, None)];
        let out = c.alter_client_quotas(
            &[
                alteration(
                    &alice,
                    &[
                        (quota::PRODUCER_BYTE_RATE, Some(1048576.0)),
                        (quota::CONSUMER_BYTE_RATE, None),
                    ],
                ),
                alteration(&defaults, &[(quota::CONSUMER_BYTE_RATE, Some(2e6))]),
                alteration(
                    &[(quota::USER, Some("bob"))],
                    &[(quota::PRODUCER_BYTE_RATE, Some(1.5))],
                ),
                alteration(&alice, &[(quota::CONSUMER_BYTE_RATE, Some(1.0))]),
                alteration(
                    &[(quota::USER, Some("carol"))],
                    &[
                        (quota::PRODUCER_BYTE_RATE, Some(1.0)),
                        (quota::PRODUCER_BYTE_RATE, Some(2.0)),
                    ],
                ),
                alteration(
                    &[(quota::USER, Some("dave"))],
                    &[(quota::REQUEST_PERCENTAGE, Some(50.0))],
                ),
            ],
            false,
            1,
        );
        assert_eq!(out.records.len(), 3, "{:?}", out.records);
        let results = apply(&mut c, out);
        assert!(
            results[0].is_ok() && results[1].is_ok() && results[5].is_ok(),
            "{results:?}"
        );
        let message = |i: usize| results[i].as_ref().unwrap_err().message.clone();
        assert_eq!(
            message(2),
            "producer_byte_rate cannot be a fractional value."
        );
        assert_eq!(message(3), "Ignoring duplicate entity user=alice");
        assert!(
            message(4).starts_with("Duplicate quota key producer_byte_rate"),
            "{}",
            message(4)
        );

        let again = c.alter_client_quotas(
            &[alteration(
                &alice,
                &[(quota::PRODUCER_BYTE_RATE, Some(1048576.0))],
            )],
            false,
            2,
        );
        assert!(again.records.is_empty() && again.response[0].is_ok());
        let dry = c.alter_client_quotas(
            &[alteration(
                &alice,
                &[(quota::PRODUCER_BYTE_RATE, Some(5.0))],
            )],
            true,
            3,
        );
        assert!(dry.records.is_empty() && dry.response[0].is_ok());

        let mut restored = ClusterImage::new();
        for (i, record) in c.image().to_snapshot().iter().enumerate() {
            restored.replay(MetadataOffset(i as i64), record).unwrap();
        }
        assert_eq!(**restored.client_quotas(), **c.image().client_quotas());
        assert_eq!(
            quota::resolve(
                c.image().client_quotas(),
                quota::PRODUCER_BYTE_RATE,
                "alice",
                "any"
            ),
            Some((1048576.0, ("alice".to_string(), String::new())))
        );

        let removed = c.alter_client_quotas(
            &[alteration(&alice, &[(quota::PRODUCER_BYTE_RATE, None)])],
            false,
            4,
        );
        apply(&mut c, removed);
        assert_eq!(
            c.image().client_quotas().len(),
            2,
            "alice's entity is gone, the defaults' and dave's stay"
        );
    }
}
