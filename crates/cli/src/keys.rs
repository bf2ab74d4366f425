//! `stepwise keys ...`: API keys. A key's secret is printed once, at creation; only its
//! hash is stored, and nothing here ever prints a stored secret.

use anyhow::{Context, bail};
use clap::Subcommand;
use serde_json::json;
use stepwise_core::apikey::{generate_api_key, hash_api_key};
use stepwise_core::parse_id;
use stepwise_store::{AccessRole, Store, Tenant};

use crate::table;

#[derive(Subcommand, Debug, Clone)]
pub enum KeysCommand {
    /// Creates an API key for a tenant's user; prints the key alone on the last line.
    Create {
        /// The tenant the key belongs to.
        #[arg(long, value_name = "TENANT")]
        tenant: String,
        /// The user the key acts as.
        #[arg(long, value_name = "USER")]
        user: String,
        /// What the key may do: `admin` (everything in its tenant), `user` (only that
        /// user's own sessions), `worker` (claims and the executions it holds a lease on).
        #[arg(long, value_name = "ROLE", default_value = "admin", value_parser = parse_role)]
        role: AccessRole,
        /// A label to tell keys apart.
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
    },
    /// Lists API keys (never their secrets).
    List {
        /// Print `{"items": [{id, name, tenant_id, user_id, role, created_at, revoked_at}]}`.
        #[arg(long)]
        json: bool,
    },
    /// Revokes an API key by its id; a running server stops accepting it.
    Revoke {
        /// The key's id (from `keys list`).
        id: String,
    },
    /// Starts a new key for the tokens `POST /v1/tokens` mints; tokens signed with the old
    /// one stay valid until they expire.
    RotateSigningKey,
}

fn parse_role(text: &str) -> Result<AccessRole, String> {
    AccessRole::parse(text)
        .ok_or_else(|| format!("`{text}` is not a role: use admin, user or worker"))
}

pub async fn run<S: Store>(store: &S, command: KeysCommand) -> anyhow::Result<()> {
    match command {
        KeysCommand::Create {
            tenant,
            user,
            role,
            name,
        } => {
            let tenant = Tenant::new(tenant).context("--tenant must not be empty")?;
            if user.trim().is_empty() {
                bail!("--user must not be empty");
            }
            let name = name.filter(|n| !n.trim().is_empty());
            let secret = generate_api_key()
                .map_err(|e| anyhow::anyhow!("cannot get random bytes from the OS: {e}"))?;
            let record = store
                .create_api_key(&tenant, &user, role, name, &hash_api_key(&secret))
                .await?;
            println!(
                "created {} API key {} for tenant `{}`, user `{}`",
                record.role, record.id, record.tenant_id, record.user_id
            );
            println!("it is shown only now; use it as `Authorization: Bearer <key>`:");
            println!("{secret}");
            Ok(())
        }
        KeysCommand::List { json } => {
            let keys = store.list_api_keys().await?;
            if json {
                let items: Vec<serde_json::Value> = keys
                    .iter()
                    .map(|k| {
                        json!({
                            "id": k.id,
                            "name": k.name,
                            "tenant_id": k.tenant_id,
                            "user_id": k.user_id,
                            "role": k.role,
                            "created_at": k.created_at,
                            "revoked_at": k.revoked_at,
                        })
                    })
                    .collect();
                println!(
                    "{}",
                    serde_json::to_string_pretty(&json!({ "items": items }))?
                );
                return Ok(());
            }
            if keys.is_empty() {
                println!(
                    "no API keys (create one with `stepwise keys create --tenant T --user U`)"
                );
                return Ok(());
            }
            let rows: Vec<Vec<String>> = keys
                .iter()
                .map(|k| {
                    vec![
                        k.id.to_string(),
                        table::or_dash(k.name.as_deref()),
                        k.tenant_id.clone(),
                        k.user_id.clone(),
                        k.role.to_string(),
                        k.created_at.to_string(),
                        table::or_dash(k.revoked_at),
                    ]
                })
                .collect();
            table::print(
                &["ID", "NAME", "TENANT", "USER", "ROLE", "CREATED", "REVOKED"],
                &rows,
            );
            Ok(())
        }
        KeysCommand::Revoke { id } => {
            let Some(key_id) = parse_id(&id) else {
                bail!("`{id}` is not a key id (see `stepwise keys list`)");
            };
            if !store.revoke_api_key(key_id).await? {
                bail!("no API key with id {key_id}");
            }
            println!("revoked API key {key_id}");
            Ok(())
        }
        KeysCommand::RotateSigningKey => {
            let secret = stepwise_core::apikey::generate_signing_secret()
                .map_err(|e| anyhow::anyhow!("cannot get random bytes from the OS: {e}"))?;
            let key = store.add_signing_key(&secret).await?;
            println!(
                "new token signing key {}: it signs tokens from now on; tokens signed before stay valid until they expire",
                key.id
            );
            Ok(())
        }
    }
}
