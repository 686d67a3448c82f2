//! `keel acls list | add | remove`: the ACLs of a running cluster, with the options and meaning
//! of Kafka's `kafka-acls.sh` — resources (`--topic`, `--group`, `--cluster`,
//! `--transactional-id`, `--delegation-token`, `--user-principal`) with
//! `--resource-pattern-type` (LITERAL by default; PREFIXED; ANY and MATCH as filters), entries
//! (`--allow-principal` / `--deny-principal`, `--allow-host` / `--deny-host`, `--operation`) and
//! the `--producer` / `--consumer` conveniences. DescribeAcls, CreateAcls and DeleteAcls go to
//! the broker named by `--bootstrap-server`, which forwards changes to the controller and
//! answers once it applied them.

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use keel_controller::acl::{
    AclBinding, AclOperation, AclPermission, PatternFilter, PatternType, ResourceType,
    CLUSTER_NAME, WILDCARD_HOST,
};
use keel_wire::kafka_protocol::messages::create_acls_request::AclCreation;
use keel_wire::kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use keel_wire::kafka_protocol::messages::describe_acls_response::DescribeAclsResource;
use keel_wire::kafka_protocol::messages::*;
use keel_wire::kafka_protocol::protocol::StrBytes;

use crate::admin::{call, check, connect, table, Bootstrap, Conn};

/// Kafka's wire code for ANY in a filter.
const ANY: i8 = keel_controller::acl::ANY_CODE;

/// `keel acls ...`
#[derive(Subcommand, Debug)]
pub enum AclsCommand {
    /// The ACLs of the resources named (every ACL of the cluster when none is), optionally
    /// only those of `--principal`.
    List {
        #[command(flatten)]
        resources: Resources,
        /// Only the ACLs of this principal (`User:alice`).
        #[arg(long)]
        principal: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Add ACLs: each principal, host and operation on each resource named.
    Add {
        #[command(flatten)]
        resources: Resources,
        #[command(flatten)]
        entries: Entries,
        #[arg(long)]
        json: bool,
    },
    /// Remove the ACLs matching the entries on each resource named (without principals,
    /// hosts or operations: every ACL of the resources).
    Remove {
        #[command(flatten)]
        resources: Resources,
        #[command(flatten)]
        entries: Entries,
        #[arg(long)]
        json: bool,
    },
}

/// The resources a command names.
#[derive(Args, Debug, Default)]
pub struct Resources {
    /// A topic (`*`: every topic). Repeatable.
    #[arg(long)]
    topic: Vec<String>,
    /// A consumer group (`*`: every group). Repeatable.
    #[arg(long)]
    group: Vec<String>,
    /// The cluster.
    #[arg(long)]
    cluster: bool,
    /// A transactional id (`*`: every one). Repeatable.
    #[arg(long)]
    transactional_id: Vec<String>,
    /// A delegation token id. Repeatable.
    #[arg(long)]
    delegation_token: Vec<String>,
    /// A user principal, as a resource (`User:bob`). Repeatable.
    #[arg(long)]
    user_principal: Vec<String>,
    /// LITERAL (the default) or PREFIXED; to list or remove, also ANY (any pattern, this exact
    /// name) or MATCH (every ACL that applies to the name).
    #[arg(long, default_value = "literal", value_name = "TYPE")]
    resource_pattern_type: String,
}

/// The entries a command adds or removes.
#[derive(Args, Debug, Default)]
pub struct Entries {
    /// A principal to allow (`User:alice`, `User:*`). Repeatable.
    #[arg(long)]
    allow_principal: Vec<String>,
    /// A principal to deny. Repeatable.
    #[arg(long)]
    deny_principal: Vec<String>,
    /// The hosts the allowed principals may connect from (default `*`: any). Repeatable.
    #[arg(long)]
    allow_host: Vec<String>,
    /// The hosts the denied principals are denied from (default `*`). Repeatable.
    #[arg(long)]
    deny_host: Vec<String>,
    /// An operation: Read, Write, Create, Delete, Alter, Describe, ClusterAction,
    /// DescribeConfigs, AlterConfigs, IdempotentWrite, CreateTokens, DescribeTokens, All.
    /// Repeatable.
    #[arg(long)]
    operation: Vec<String>,
    /// Kafka's producer set: WRITE, DESCRIBE and CREATE on the topics (and on the
    /// transactional ids, WRITE and DESCRIBE).
    #[arg(long)]
    producer: bool,
    /// Kafka's consumer set: READ and DESCRIBE on the topics, READ on the groups.
    #[arg(long)]
    consumer: bool,
    /// With `--producer`: IDEMPOTENT_WRITE on the cluster.
    #[arg(long)]
    idempotent: bool,
}

/// A resource pattern named on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Pattern {
    resource_type: ResourceType,
    name: String,
}

impl Resources {
    fn patterns(&self) -> Vec<Pattern> {
        let mut out = Vec::new();
        let mut add = |resource_type, names: &[String]| {
            out.extend(names.iter().map(|name| Pattern {
                resource_type,
                name: name.clone(),
            }))
        };
        add(ResourceType::Topic, &self.topic);
        add(ResourceType::Group, &self.group);
        add(ResourceType::TransactionalId, &self.transactional_id);
        add(ResourceType::DelegationToken, &self.delegation_token);
        add(ResourceType::User, &self.user_principal);
        if self.cluster {
            out.push(Pattern {
                resource_type: ResourceType::Cluster,
                name: CLUSTER_NAME.to_string(),
            });
        }
        out
    }

    fn pattern_filter(&self) -> anyhow::Result<PatternFilter> {
        match self.resource_pattern_type.to_ascii_lowercase().as_str() {
            "any" => Ok(PatternFilter::Any),
            "match" => Ok(PatternFilter::Match),
            other => PatternType::parse(other)
                .map(PatternFilter::Is)
                .with_context(|| {
                    format!("--resource-pattern-type {other}: not LITERAL, PREFIXED, ANY or MATCH")
                }),
        }
    }

    /// The pattern type of new bindings: LITERAL or PREFIXED only.
    fn pattern_type(&self) -> anyhow::Result<PatternType> {
        match self.pattern_filter()? {
            PatternFilter::Is(p) => Ok(p),
            _ => bail!(
                "--resource-pattern-type {}: ACLs are added with LITERAL or PREFIXED (ANY and \
                 MATCH are filters, for list and remove)",
                self.resource_pattern_type
            ),
        }
    }
}

fn parse_operation(text: &str) -> anyhow::Result<AclOperation> {
    AclOperation::parse(text).with_context(|| {
        let names: Vec<&str> = AclOperation::ALL.iter().map(|o| o.name()).collect();
        format!("--operation {text}: not one of {}", names.join(", "))
    })
}

/// One entry of an ACL: who, from where, what, ALLOW or DENY.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    principal: String,
    host: String,
    operation: AclOperation,
    permission: AclPermission,
}

impl Entries {
    /// The operations asked for each resource type (`--operation`, or the `--producer` /
    /// `--consumer` sets, which name their own).
    fn operations_for(&self, resource_type: ResourceType) -> anyhow::Result<Vec<AclOperation>> {
        let mut ops: Vec<AclOperation> = self
            .operation
            .iter()
            .map(|o| parse_operation(o))
            .collect::<anyhow::Result<_>>()?;
        use AclOperation as O;
        if self.producer {
            match resource_type {
                ResourceType::Topic => ops.extend([O::Write, O::Describe, O::Create]),
                ResourceType::TransactionalId => ops.extend([O::Write, O::Describe]),
                ResourceType::Cluster if self.idempotent => ops.push(O::IdempotentWrite),
                _ => {}
            }
        }
        if self.consumer {
            match resource_type {
                ResourceType::Topic => ops.extend([O::Read, O::Describe]),
                ResourceType::Group => ops.push(O::Read),
                _ => {}
            }
        }
        let mut unique = Vec::new();
        for op in ops {
            if !unique.contains(&op) {
                unique.push(op);
            }
        }
        Ok(unique)
    }

    /// Every (principal, host, permission) asked.
    fn who(&self) -> Vec<(String, String, AclPermission)> {
        let hosts = |h: &[String]| -> Vec<String> {
            if h.is_empty() {
                vec![WILDCARD_HOST.to_string()]
            } else {
                h.to_vec()
            }
        };
        let mut out = Vec::new();
        for (principals, hosts, permission) in [
            (
                &self.allow_principal,
                hosts(&self.allow_host),
                AclPermission::Allow,
            ),
            (
                &self.deny_principal,
                hosts(&self.deny_host),
                AclPermission::Deny,
            ),
        ] {
            for principal in principals {
                for host in &hosts {
                    out.push((principal.clone(), host.clone(), permission));
                }
            }
        }
        out
    }

    /// The entries to add on a resource of `resource_type`.
    fn to_add(&self, resource_type: ResourceType) -> anyhow::Result<Vec<Entry>> {
        let operations = self.operations_for(resource_type)?;
        let mut out = Vec::new();
        for (principal, host, permission) in self.who() {
            for operation in &operations {
                out.push(Entry {
                    principal: principal.clone(),
                    host: host.clone(),
                    operation: *operation,
                    permission,
                });
            }
        }
        Ok(out)
    }
}

/// The commands' answer: bindings in a table or as JSON.
fn print(bindings: &[AclBinding], json: bool, empty: &str) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(bindings)?);
        return Ok(());
    }
    if bindings.is_empty() {
        println!("{empty}");
        return Ok(());
    }
    let mut rows = vec![[
        "RESOURCE_TYPE",
        "NAME",
        "PATTERN",
        "PRINCIPAL",
        "HOST",
        "OPERATION",
        "PERMISSION",
    ]
    .map(String::from)
    .to_vec()];
    for b in bindings {
        rows.push(vec![
            b.resource_type.to_string(),
            b.resource_name.clone(),
            b.pattern_type.to_string(),
            b.principal.clone(),
            b.host.clone(),
            b.operation.to_string(),
            b.permission.to_string(),
        ]);
    }
    print!("{}", table(&rows));
    Ok(())
}

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

/// The bindings of DescribeAcls' or DeleteAcls' answer (one Kafka does not know is skipped:
/// a newer broker's operation, say).
fn bindings_of(resources: &[DescribeAclsResource]) -> Vec<AclBinding> {
    resources
        .iter()
        .flat_map(|r| r.acls.iter().filter_map(move |a| binding(r, a)))
        .collect()
}

fn binding(
    r: &DescribeAclsResource,
    a: &describe_acls_response::AclDescription,
) -> Option<AclBinding> {
    Some(AclBinding {
        resource_type: ResourceType::from_code(r.resource_type)?,
        resource_name: r.resource_name.to_string(),
        pattern_type: PatternType::from_code(r.pattern_type)?,
        principal: a.principal.to_string(),
        host: a.host.to_string(),
        operation: AclOperation::from_code(a.operation)?,
        permission: AclPermission::from_code(a.permission_type)?,
    })
}

pub async fn acls(bootstrap: Bootstrap, command: AclsCommand) -> anyhow::Result<()> {
    let mut conn = connect(&bootstrap).await?;
    match command {
        AclsCommand::List {
            resources,
            principal,
            json,
        } => {
            let mut bindings = list(&mut conn, &resources, principal.as_deref()).await?;
            bindings.sort();
            bindings.dedup();
            print(&bindings, json, "no ACLs")
        }
        AclsCommand::Add {
            resources,
            entries,
            json,
        } => {
            let added = add(&mut conn, &resources, &entries).await?;
            if !json {
                println!("added {} ACLs:", added.len());
            }
            print(&added, json, "")
        }
        AclsCommand::Remove {
            resources,
            entries,
            json,
        } => {
            let mut removed = remove(&mut conn, &resources, &entries).await?;
            removed.sort();
            if !json {
                println!("removed {} ACLs:", removed.len());
            }
            print(&removed, json, "")
        }
    }
}

async fn list(
    conn: &mut Conn,
    resources: &Resources,
    principal: Option<&str>,
) -> anyhow::Result<Vec<AclBinding>> {
    let patterns = resources.patterns();
    let pattern = resources.pattern_filter()?;
    // No resource named: every ACL (of any pattern type, unless one was given).
    let filters: Vec<(i8, Option<String>, i8)> = if patterns.is_empty() {
        let pattern = if resources
            .resource_pattern_type
            .eq_ignore_ascii_case("literal")
        {
            ANY
        } else {
            pattern.code()
        };
        vec![(ANY, None, pattern)]
    } else {
        patterns
            .iter()
            .map(|p| (p.resource_type.code(), Some(p.name.clone()), pattern.code()))
            .collect()
    };
    let mut out = Vec::new();
    for (resource_type, name, pattern) in filters {
        let request = DescribeAclsRequest::default()
            .with_resource_type_filter(resource_type)
            .with_resource_name_filter(name.as_deref().map(s))
            .with_pattern_type_filter(pattern)
            .with_principal_filter(principal.map(s))
            .with_host_filter(None)
            .with_operation(ANY)
            .with_permission_type(ANY);
        let response: DescribeAclsResponse =
            call(conn, ApiKey::DescribeAcls, 1, 3, &request).await?;
        check(
            response.error_code,
            response.error_message.as_ref(),
            "DescribeAcls",
        )?;
        out.extend(bindings_of(&response.resources));
    }
    Ok(out)
}

async fn add(
    conn: &mut Conn,
    resources: &Resources,
    entries: &Entries,
) -> anyhow::Result<Vec<AclBinding>> {
    let patterns = resources.patterns();
    if patterns.is_empty() {
        bail!("name a resource: --topic, --group, --cluster, --transactional-id, --delegation-token or --user-principal");
    }
    if entries.allow_principal.is_empty() && entries.deny_principal.is_empty() {
        bail!("name a principal: --allow-principal or --deny-principal");
    }
    let pattern_type = resources.pattern_type()?;
    let mut bindings = Vec::new();
    for p in &patterns {
        for e in entries.to_add(p.resource_type)? {
            bindings.push(AclBinding {
                resource_type: p.resource_type,
                resource_name: p.name.clone(),
                pattern_type,
                principal: e.principal,
                host: e.host,
                operation: e.operation,
                permission: e.permission,
            });
        }
    }
    if bindings.is_empty() {
        bail!("no operation for these resources: give --operation (or --producer / --consumer for topics, groups and transactional ids)");
    }
    let request = CreateAclsRequest::default().with_creations(
        bindings
            .iter()
            .map(|b| {
                AclCreation::default()
                    .with_resource_type(b.resource_type.code())
                    .with_resource_name(s(&b.resource_name))
                    .with_resource_pattern_type(b.pattern_type.code())
                    .with_principal(s(&b.principal))
                    .with_host(s(&b.host))
                    .with_operation(b.operation.code())
                    .with_permission_type(b.permission.code())
            })
            .collect(),
    );
    let response: CreateAclsResponse = call(conn, ApiKey::CreateAcls, 1, 3, &request).await?;
    if response.results.len() != bindings.len() {
        bail!(
            "the broker answered {} results for {} ACLs",
            response.results.len(),
            bindings.len()
        );
    }
    let mut failures = Vec::new();
    for (b, r) in bindings.iter().zip(&response.results) {
        if let Err(e) = check(r.error_code, r.error_message.as_ref(), &b.to_string()) {
            failures.push(format!("{e:#}"));
        }
    }
    if !failures.is_empty() {
        bail!("{}", failures.join("; "));
    }
    Ok(bindings)
}

async fn remove(
    conn: &mut Conn,
    resources: &Resources,
    entries: &Entries,
) -> anyhow::Result<Vec<AclBinding>> {
    let patterns = resources.patterns();
    if patterns.is_empty() {
        bail!("name a resource: --topic, --group, --cluster, --transactional-id, --delegation-token or --user-principal");
    }
    let pattern = resources.pattern_filter()?;
    let mut filters = Vec::new();
    for p in &patterns {
        let operations = entries.operations_for(p.resource_type)?;
        let operations: Vec<i8> = if operations.is_empty() {
            vec![ANY]
        } else {
            operations.iter().map(|o| o.code()).collect()
        };
        let who: Vec<(Option<String>, Option<String>, i8)> = if entries.who().is_empty() {
            vec![(None, None, ANY)]
        } else {
            let explicit_hosts = !entries.allow_host.is_empty() || !entries.deny_host.is_empty();
            entries
                .who()
                .into_iter()
                .map(|(principal, host, permission)| {
                    (
                        Some(principal),
                        explicit_hosts.then_some(host),
                        permission.code(),
                    )
                })
                .collect()
        };
        for (principal, host, permission) in &who {
            for operation in &operations {
                filters.push(
                    DeleteAclsFilter::default()
                        .with_resource_type_filter(p.resource_type.code())
                        .with_resource_name_filter(Some(s(&p.name)))
                        .with_pattern_type_filter(pattern.code())
                        .with_principal_filter(principal.as_deref().map(s))
                        .with_host_filter(host.as_deref().map(s))
                        .with_operation(*operation)
                        .with_permission_type(*permission),
                );
            }
        }
    }
    let request = DeleteAclsRequest::default().with_filters(filters);
    let response: DeleteAclsResponse = call(conn, ApiKey::DeleteAcls, 1, 3, &request).await?;
    let mut removed = Vec::new();
    let mut failures = Vec::new();
    for r in &response.filter_results {
        if let Err(e) = check(r.error_code, r.error_message.as_ref(), "DeleteAcls") {
            failures.push(format!("{e:#}"));
            continue;
        }
        for m in &r.matching_acls {
            if m.error_code != 0 {
                failures.push(crate::admin::error_text(
                    m.error_code,
                    m.error_message.as_ref(),
                ));
                continue;
            }
            let resource = DescribeAclsResource::default()
                .with_resource_type(m.resource_type)
                .with_resource_name(m.resource_name.clone())
                .with_pattern_type(m.pattern_type)
                .with_acls(vec![describe_acls_response::AclDescription::default()
                    .with_principal(m.principal.clone())
                    .with_host(m.host.clone())
                    .with_operation(m.operation)
                    .with_permission_type(m.permission_type)]);
            removed.extend(bindings_of(&[resource]));
        }
    }
    if !failures.is_empty() {
        bail!("{}", failures.join("; "));
    }
    removed.dedup();
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(f: impl FnOnce(&mut Entries)) -> Entries {
        let mut e = Entries::default();
        f(&mut e);
        e
    }

    // Shows: kafka-acls.sh's conveniences expand as Kafka's AclCommand expands them —
    // --producer is WRITE, DESCRIBE, CREATE on topics (WRITE, DESCRIBE on transactional ids,
    // IDEMPOTENT_WRITE on the cluster with --idempotent), --consumer READ, DESCRIBE on topics
    // and READ on groups; operations parse in any case with or without underscores; each
    // principal gets every host of its side.
    #[test]
    fn entries_expand_like_kafka_acls() {
        use AclOperation as O;
        let producer = entries(|e| {
            e.producer = true;
            e.idempotent = true;
        });
        assert_eq!(
            producer.operations_for(ResourceType::Topic).unwrap(),
            [O::Write, O::Describe, O::Create]
        );
        assert_eq!(
            producer
                .operations_for(ResourceType::TransactionalId)
                .unwrap(),
            [O::Write, O::Describe]
        );
        assert_eq!(
            producer.operations_for(ResourceType::Cluster).unwrap(),
            [O::IdempotentWrite]
        );
        let consumer = entries(|e| e.consumer = true);
        assert_eq!(
            consumer.operations_for(ResourceType::Topic).unwrap(),
            [O::Read, O::Describe]
        );
        assert_eq!(
            consumer.operations_for(ResourceType::Group).unwrap(),
            [O::Read]
        );
        let named = entries(|e| {
            e.operation = vec![
                "describe-configs".into(),
                "IdempotentWrite".into(),
                "READ".into(),
            ];
            e.allow_principal = vec!["User:a".into()];
            e.deny_principal = vec!["User:b".into()];
            e.deny_host = vec!["10.0.0.1".into(), "10.0.0.2".into()];
        });
        assert_eq!(
            named.operations_for(ResourceType::Topic).unwrap(),
            [O::DescribeConfigs, O::IdempotentWrite, O::Read]
        );
        assert_eq!(
            named.who(),
            [
                ("User:a".to_string(), "*".to_string(), AclPermission::Allow),
                (
                    "User:b".to_string(),
                    "10.0.0.1".to_string(),
                    AclPermission::Deny
                ),
                (
                    "User:b".to_string(),
                    "10.0.0.2".to_string(),
                    AclPermission::Deny
                ),
            ]
        );
        assert_eq!(named.to_add(ResourceType::Topic).unwrap().len(), 9);
        let bad = entries(|e| e.operation = vec!["fly".into()]);
        let err = bad.operations_for(ResourceType::Topic).unwrap_err();
        assert!(err.to_string().contains("--operation fly"), "{err}");
    }

    // Shows: the pattern type is LITERAL by default, PREFIXED when asked, and ANY / MATCH only
    // as filters (adding with them is refused naming the option).
    #[test]
    fn pattern_types_follow_kafka_acls() {
        let mut r = Resources {
            topic: vec!["t".into()],
            cluster: true,
            resource_pattern_type: "literal".into(),
            ..Default::default()
        };
        assert_eq!(r.pattern_type().unwrap(), PatternType::Literal);
        assert_eq!(
            r.patterns(),
            [
                Pattern {
                    resource_type: ResourceType::Topic,
                    name: "t".into()
                },
                Pattern {
                    resource_type: ResourceType::Cluster,
                    name: "kafka-cluster".into()
                }
            ]
        );
        r.resource_pattern_type = "Prefixed".into();
        assert_eq!(r.pattern_type().unwrap(), PatternType::Prefixed);
        r.resource_pattern_type = "match".into();
        assert_eq!(r.pattern_filter().unwrap(), PatternFilter::Match);
        assert!(r.pattern_type().is_err());
        r.resource_pattern_type = "bogus".into();
        assert!(r
            .pattern_filter()
            .unwrap_err()
            .to_string()
            .contains("--resource-pattern-type bogus"));
    }
}
