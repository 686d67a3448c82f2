//! CreateAcls and DeleteAcls (Kafka's `AclControlManager.createAcls` / `deleteAcls`): the
//! bindings become [`Record::AccessControlEntry`] / [`Record::RemoveAccessControlEntry`]
//! records, replicated like every other metadata change and applied by every broker's
//! authorizer from its image. DescribeAcls is answered from an image
//! ([`crate::image::Acls::matching`]).

use std::collections::BTreeSet;

use super::{Batch, Controller, Output, EXCESSIVE_BATCH, MAX_RECORDS_PER_USER_OP};
use crate::acl::{self, AclBinding, AclFilter};
use crate::errors::{ApiError, ErrorCode};
use crate::records::{AccessControlEntryRecord, Record, RemoveAccessControlEntryRecord};
use crate::types::AclId;

impl Controller {
    /// CreateAcls: each binding checked ([`acl::validate_new`]); a new one gets a record, one
    /// that exists already succeeds without one (as Kafka). Answers each binding in order.
    pub fn create_acls(
        &mut self,
        bindings: &[AclBinding],
        now_ms: u64,
    ) -> Output<Vec<Result<(), ApiError>>> {
        self.advance(now_ms);
        let mut batch = Batch::new(&self.image);
        if bindings.len() > MAX_RECORDS_PER_USER_OP {
            let error = ApiError::new(
                ErrorCode::PolicyViolation,
                format!(
                    "{EXCESSIVE_BATCH} {} ACL bindings; at most {MAX_RECORDS_PER_USER_OP} in one request.",
                    bindings.len()
                ),
            );
            return batch.finish(bindings.iter().map(|_| Err(error.clone())).collect());
        }
        let results = bindings
            .iter()
            .map(|binding| {
                acl::validate_new(binding)?;
                if batch.scratch.acls().id_of(binding).is_none() {
                    let id = AclId::at(batch.next_offset());
                    batch.push(Record::AccessControlEntry(AccessControlEntryRecord {
                        id,
                        binding: binding.clone(),
                    }));
                }
                Ok(())
            })
            .collect();
        batch.finish(results)
    }

    /// DeleteAcls: every binding each filter matches is removed; each filter is answered with
    /// the bindings it matched (a binding two filters match is removed once and listed by
    /// both, as Kafka). A filter that would take the request past Kafka's bound of records
    /// per operation fails as a whole and removes nothing.
    pub fn delete_acls(
        &mut self,
        filters: &[AclFilter],
        now_ms: u64,
    ) -> Output<Vec<Result<Vec<AclBinding>, ApiError>>> {
        self.advance(now_ms);
        let mut batch = Batch::new(&self.image);
        let mut removed: BTreeSet<AclId> = BTreeSet::new();
        let mut results = Vec::with_capacity(filters.len());
        for filter in filters {
            let matched: Vec<(AclId, AclBinding)> = self
                .image
                .acls()
                .matching(filter)
                .map(|(id, b)| (id, b.clone()))
                .collect();
            let new: Vec<AclId> = matched
                .iter()
                .map(|(id, _)| *id)
                .filter(|id| !removed.contains(id))
                .collect();
            if removed.len() + new.len() > MAX_RECORDS_PER_USER_OP {
                results.push(Err(ApiError::new(
                    ErrorCode::PolicyViolation,
                    format!(
                        "{EXCESSIVE_BATCH} Cannot remove more than {MAX_RECORDS_PER_USER_OP} acls in a single delete operation."
                    ),
                )));
                continue;
            }
            for id in new {
                removed.insert(id);
                batch.push(Record::RemoveAccessControlEntry(
                    RemoveAccessControlEntryRecord { id },
                ));
            }
            results.push(Ok(matched.into_iter().map(|(_, b)| b).collect()));
        }
        batch.finish(results)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::{AclOperation, AclPermission, PatternFilter, PatternType, ResourceType};
    use crate::image::ClusterImage;
    use crate::types::MetadataOffset;
    use crate::ControllerConfig;

    fn binding(name: &str, pattern_type: PatternType, principal: &str) -> AclBinding {
        AclBinding {
            resource_type: ResourceType::Topic,
            resource_name: name.into(),
            pattern_type,
            principal: principal.into(),
            host: "*".into(),
            operation: AclOperation::Read,
            permission: AclPermission::Allow,
        }
    }

    fn apply<R>(controller: &mut Controller, out: Output<R>) -> R {
        for record in &out.records {
            let offset = controller.next_offset();
            controller.replay(offset, record).expect("replays");
        }
        out.response
    }

    #[test]
    fn created_bindings_are_in_the_image_once_and_survive_a_snapshot() {
        let mut c = Controller::new(ControllerConfig::new("c"));
        let a = binding("t", PatternType::Literal, "User:a");
        let b = binding("t-", PatternType::Prefixed, "User:*");
        let bad = AclBinding {
            resource_name: String::new(),
            ..a.clone()
        };
        let out = c.create_acls(&[a.clone(), b.clone(), bad, a.clone()], 1);
        assert_eq!(
            out.records.len(),
            2,
            "the repeated binding gets no second record"
        );
        let results = apply(&mut c, out);
        assert!(results[0].is_ok() && results[1].is_ok() && results[3].is_ok());
        assert_eq!(
            results[2].as_ref().unwrap_err().code,
            ErrorCode::InvalidRequest
        );
        assert_eq!(c.image().acls().len(), 2);
        let again = c.create_acls(std::slice::from_ref(&a), 2);
        assert!(again.records.is_empty() && again.response[0].is_ok());

        let mut restored = ClusterImage::new();
        for (i, record) in c.image().to_snapshot().iter().enumerate() {
            restored.replay(MetadataOffset(i as i64), record).unwrap();
        }
        assert_eq!(**restored.acls(), **c.image().acls());
    }

    #[test]
    fn delete_removes_what_each_filter_matches_once() {
        let mut c = Controller::new(ControllerConfig::new("c"));
        let a = binding("t", PatternType::Literal, "User:a");
        let b = binding("t", PatternType::Literal, "User:b");
        let p = binding("t", PatternType::Prefixed, "User:a");
        let created = c.create_acls(&[a.clone(), b.clone(), p.clone()], 1);
        apply(&mut c, created);
        let by_principal = AclFilter {
            principal: Some("User:a".into()),
            ..AclFilter::any()
        };
        let literal_t = AclFilter {
            resource_type: Some(ResourceType::Topic),
            resource_name: Some("t".into()),
            pattern: PatternFilter::Is(PatternType::Literal),
            ..AclFilter::any()
        };
        let out = c.delete_acls(&[by_principal, literal_t], 2);
        assert_eq!(
            out.records.len(),
            3,
            "`a` is matched twice and removed once"
        );
        let results = apply(&mut c, out);
        assert_eq!(results[0].as_ref().unwrap(), &[a.clone(), p]);
        assert_eq!(results[1].as_ref().unwrap(), &[a, b]);
        assert!(c.image().acls().is_empty());
        let none = c.delete_acls(&[AclFilter::any()], 3);
        assert!(none.records.is_empty());
        assert_eq!(
            none.response[0].as_ref().unwrap(),
            &Vec::<AclBinding>::new()
        );
    }

    #[test]
    fn a_replayed_duplicate_or_unknown_removal_is_refused() {
        let mut image = ClusterImage::new();
        let a = binding("t", PatternType::Literal, "User:a");
        let put = |id| {
            Record::AccessControlEntry(AccessControlEntryRecord {
                id,
                binding: a.clone(),
            })
        };
        image
            .replay(MetadataOffset(0), &put(AclId::at(MetadataOffset(0))))
            .unwrap();
        assert!(image
            .replay(MetadataOffset(1), &put(AclId::at(MetadataOffset(1))))
            .is_err());
        let gone = Record::RemoveAccessControlEntry(RemoveAccessControlEntryRecord {
            id: AclId::at(MetadataOffset(7)),
        });
        assert!(image.replay(MetadataOffset(2), &gone).is_err());
        let invalid = Record::AccessControlEntry(AccessControlEntryRecord {
            id: AclId::at(MetadataOffset(3)),
            binding: AclBinding {
                principal: "nobody".into(),
                ..a.clone()
            },
        });
        assert!(image.replay(MetadataOffset(3), &invalid).is_err());
    }
}
