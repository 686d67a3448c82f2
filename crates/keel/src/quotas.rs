//! `keel quotas list | set`: the client quotas of a running cluster (KIP-546), as Kafka's
//! `kafka-configs.sh --entity-type users|clients|ips` shows and changes them. An entity is a
//! user and/or a client id, or an ip, each by name or as the default (`--default-user`, ...).
//! DescribeClientQuotas and AlterClientQuotas go to the broker named by `--bootstrap-server`,
//! which forwards changes to the controller and answers once it applied them.

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use keel_wire::kafka_protocol::messages::alter_client_quotas_request::{
    EntityData, EntryData, OpData,
};
use keel_wire::kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use keel_wire::kafka_protocol::messages::*;
use keel_wire::kafka_protocol::protocol::StrBytes;
use serde::Serialize;

use crate::admin::{call, check, connect, table, Bootstrap};

/// `keel quotas ...`
#[derive(Subcommand, Debug)]
pub enum QuotasCommand {
    /// The quotas of the entity named (of every entity when none is; with only some types
    /// named, of every entity that has them).
    List {
        #[command(flatten)]
        entity: Entity,
        #[arg(long)]
        json: bool,
    },
    /// Set or remove keys of one entity's quotas: producer_byte_rate, consumer_byte_rate
    /// (bytes a second).
    Set {
        #[command(flatten)]
        entity: Entity,
        /// `key=value` to set. Repeatable.
        #[arg(long = "add", value_name = "KEY=VALUE")]
        add: Vec<String>,
        /// A key to remove. Repeatable.
        #[arg(long = "delete", value_name = "KEY")]
        delete: Vec<String>,
    },
}

/// The entity a command names.
#[derive(Args, Debug, Default)]
pub struct Entity {
    /// A user (the principal's name, e.g. `alice` for `User:alice`).
    #[arg(long, conflicts_with = "default_user")]
    user: Option<String>,
    /// The default of every user.
    #[arg(long)]
    default_user: bool,
    /// A client id.
    #[arg(long, conflicts_with = "default_client_id")]
    client_id: Option<String>,
    /// The default of every client id.
    #[arg(long)]
    default_client_id: bool,
    /// A client address.
    #[arg(long, conflicts_with = "default_ip")]
    ip: Option<String>,
    /// The default of every address.
    #[arg(long)]
    default_ip: bool,
}

impl Entity {
    /// (type, name) for each type named; `Some(None)` is the default.
    fn parts(&self) -> Vec<(&'static str, Option<String>)> {
        let mut out = Vec::new();
        let mut add = |t: &'static str, name: &Option<String>, default: bool| {
            if let Some(n) = name {
                out.push((t, Some(n.clone())));
            } else if default {
                out.push((t, None));
            }
        };
        add(keel_controller::quota::USER, &self.user, self.default_user);
        add(
            keel_controller::quota::CLIENT_ID,
            &self.client_id,
            self.default_client_id,
        );
        add(keel_controller::quota::IP, &self.ip, self.default_ip);
        out
    }
}

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

/// One entity's quotas, as listed.
#[derive(Debug, Serialize)]
struct Listed {
    /// type → name (`null`: the default).
    entity: std::collections::BTreeMap<String, Option<String>>,
    quotas: std::collections::BTreeMap<String, f64>,
}

fn entity_text(entity: &std::collections::BTreeMap<String, Option<String>>) -> String {
    entity
        .iter()
        .map(|(t, n)| format!("{t}={}", n.as_deref().unwrap_or("<default>")))
        .collect::<Vec<_>>()
        .join(", ")
}

pub async fn quotas(bootstrap: Bootstrap, command: QuotasCommand) -> anyhow::Result<()> {
    let mut conn = connect(&bootstrap).await?;
    match command {
        QuotasCommand::List { entity, json } => {
            let components = entity
                .parts()
                .into_iter()
                .map(|(t, name)| {
                    ComponentData::default()
                        .with_entity_type(s(t))
                        .with_match_type(if name.is_some() { 0 } else { 1 })
                        .with_match(name.as_deref().map(s))
                })
                .collect();
            let request = DescribeClientQuotasRequest::default()
                .with_components(components)
                .with_strict(false);
            let response: DescribeClientQuotasResponse =
                call(&mut conn, ApiKey::DescribeClientQuotas, 0, 1, &request).await?;
            check(
                response.error_code,
                response.error_message.as_ref(),
                "DescribeClientQuotas",
            )?;
            let mut listed: Vec<Listed> = response
                .entries
                .unwrap_or_default()
                .into_iter()
                .map(|e| Listed {
                    entity: e
                        .entity
                        .iter()
                        .map(|d| {
                            (
                                d.entity_type.to_string(),
                                d.entity_name.as_ref().map(|n| n.to_string()),
                            )
                        })
                        .collect(),
                    quotas: e
                        .values
                        .iter()
                        .map(|v| (v.key.to_string(), v.value))
                        .collect(),
                })
                .collect();
            listed.sort_by(|a, b| a.entity.cmp(&b.entity));
            if json {
                println!("{}", serde_json::to_string_pretty(&listed)?);
                return Ok(());
            }
            if listed.is_empty() {
                println!("no client quotas");
                return Ok(());
            }
            let mut rows = vec![vec!["ENTITY".to_string(), "KEY".into(), "VALUE".into()]];
            for l in &listed {
                for (k, v) in &l.quotas {
                    rows.push(vec![entity_text(&l.entity), k.clone(), format!("{v}")]);
                }
            }
            print!("{}", table(&rows));
            Ok(())
        }
        QuotasCommand::Set {
            entity,
            add,
            delete,
        } => {
            let parts = entity.parts();
            if parts.is_empty() {
                bail!("name an entity: --user, --client-id, --ip or their --default-* forms");
            }
            if add.is_empty() && delete.is_empty() {
                bail!("nothing to change: give --add KEY=VALUE or --delete KEY");
            }
            let mut ops = Vec::new();
            for pair in &add {
                let (k, v) = pair
                    .split_once('=')
                    .with_context(|| format!("--add {pair}: not KEY=VALUE"))?;
                let value: f64 = v
                    .trim()
                    .parse()
                    .with_context(|| format!("--add {pair}: {v:?} is not a number"))?;
                ops.push(
                    OpData::default()
                        .with_key(s(k.trim()))
                        .with_value(value)
                        .with_remove(false),
                );
            }
            for k in &delete {
                ops.push(OpData::default().with_key(s(k.trim())).with_remove(true));
            }
            let request = AlterClientQuotasRequest::default()
                .with_entries(vec![EntryData::default()
                    .with_entity(
                        parts
                            .iter()
                            .map(|(t, n)| {
                                EntityData::default()
                                    .with_entity_type(s(t))
                                    .with_entity_name(n.as_deref().map(s))
                            })
                            .collect(),
                    )
                    .with_ops(ops)])
                .with_validate_only(false);
            let response: AlterClientQuotasResponse =
                call(&mut conn, ApiKey::AlterClientQuotas, 0, 1, &request).await?;
            let text: Vec<String> = parts
                .iter()
                .map(|(t, n)| format!("{t}={}", n.as_deref().unwrap_or("<default>")))
                .collect();
            let Some(entry) = response.entries.first() else {
                bail!("the broker answered no entry");
            };
            check(
                entry.error_code,
                entry.error_message.as_ref(),
                &format!("quotas of {}", text.join(", ")),
            )?;
            println!("updated the quotas of {}", text.join(", "));
            Ok(())
        }
    }
}
