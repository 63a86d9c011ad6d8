//! DescribeUserScramCredentials (API 50) and AlterUserScramCredentials
//! (API 51), v0 as Kafka 3.9 serves them, over the controller's replicated
//! credential table (ADR 0028).
//!
//! An upsertion carries the salt, the iteration count and the salted
//! password (Kafka's admin client salts the password itself); the keys are
//! derived here, so the controller command holds StoredKey and ServerKey
//! and nothing a password can be read back from. The request is checked
//! as Kafka's `ScramControlManager` checks it, user by user; the users that
//! pass are changed by one controller command.
//!
//! Not authorized yet: any authenticated client may alter credentials
//! (Kafka asks for ALTER on the cluster; ACLs are a later slice).

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};

use super::sasl::credentials::{ScramCredential, ScramHash};
use super::wire_str;
use crate::controller::Command;
use crate::controller::scram::{
    MAX_ITERATIONS, MAX_SALT, MIN_ITERATIONS, ScramAlteration, ScramDeletion, ScramMechanism,
    ScramTable, ScramUpsertion,
};
use crate::controller::service::Controller;
use crate::error::code;

/// The versions served (Kafka 3.9 serves v0 of both).
pub const DESCRIBE_VERSIONS: (i16, i16) = (0, 0);
pub const ALTER_VERSIONS: (i16, i16) = (0, 0);

/// Why one user's part of a request is refused: an error code and message.
type Refusal = (ResponseError, String);

pub fn describe(
    table: &ScramTable,
    req: &DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    // Named users once each, in request order; a name given twice is
    // answered DUPLICATE_RESOURCE. No names (null or empty): every user.
    let mut named: Vec<(String, bool)> = Vec::new();
    match req.users.as_deref() {
        None | Some([]) => named.extend(table.users().map(|u| (u.to_string(), false))),
        Some(users) => {
            for u in users {
                match named
                    .iter_mut()
                    .find(|(n, _)| n.as_str() == u.name.as_str())
                {
                    Some((_, twice)) => *twice = true,
                    None => named.push((u.name.to_string(), false)),
                }
            }
        }
    }
    let mut resp = DescribeUserScramCredentialsResponse::default();
    for (user, twice) in named {
        let mut r = DescribeUserScramCredentialsResult::default().with_user(wire_str(&user));
        let infos = table.describe(&user);
        if twice {
            r.error_code = code(ResponseError::DuplicateResource);
            r.error_message = Some(wire_str(&format!(
                "Cannot describe SCRAM credentials for the same user twice in a single request: {user}"
            )));
        } else if infos.is_empty() {
            r.error_code = code(ResponseError::ResourceNotFound);
            r.error_message = Some(wire_str(&format!(
                "Attempt to describe a user credential that does not exist: {user}"
            )));
        } else {
            r.credential_infos = infos
                .into_iter()
                .map(|(m, iterations)| {
                    CredentialInfo::default()
                        .with_mechanism(m.wire_type())
                        .with_iterations(iterations as i32)
                })
                .collect();
        }
        resp.results.push(r);
    }
    resp
}

/// Checks the request against `table` user by user: the accepted
/// alteration, and every refused user with why.
fn check(
    table: &ScramTable,
    req: AlterUserScramCredentialsRequest,
) -> (ScramAlteration, BTreeMap<String, Refusal>) {
    let mut refused: BTreeMap<String, Refusal> = BTreeMap::new();
    let mut deletions: BTreeMap<String, ScramDeletion> = BTreeMap::new();
    let mut upsertions: BTreeMap<String, ScramUpsertion> = BTreeMap::new();
    let twice = || {
        (
            ResponseError::DuplicateResource,
            "A user credential cannot be altered twice in the same request".to_string(),
        )
    };
    for d in req.deletions {
        let user = d.name.to_string();
        if refused.contains_key(&user) {
            continue;
        }
        if deletions.remove(&user).is_some() {
            refused.insert(user, twice());
            continue;
        }
        let checked = user_and_mechanism(&user, d.mechanism).and_then(|mechanism| {
            if table.get(&user, mechanism).is_none() {
                return Err((
                    ResponseError::ResourceNotFound,
                    "Attempt to delete a user credential that does not exist".into(),
                ));
            }
            Ok(mechanism)
        });
        match checked {
            Ok(mechanism) => {
                deletions.insert(user.clone(), ScramDeletion { user, mechanism });
            }
            Err(e) => {
                refused.insert(user, e);
            }
        }
    }
    for u in req.upsertions {
        let user = u.name.to_string();
        if refused.contains_key(&user) {
            continue;
        }
        if deletions.remove(&user).is_some() || upsertions.remove(&user).is_some() {
            refused.insert(user, twice());
            continue;
        }
        let checked = user_and_mechanism(&user, u.mechanism).and_then(|mechanism| {
            let unacceptable = |why: &str| Err((ResponseError::UnacceptableCredential, why.into()));
            if u.iterations < MIN_ITERATIONS as i32 {
                return unacceptable("Too few iterations");
            }
            if u.iterations > MAX_ITERATIONS as i32 {
                return unacceptable("Too many iterations");
            }
            if u.salt.is_empty() || u.salt.len() > MAX_SALT {
                return unacceptable("The salt must be 1 to 1024 bytes");
            }
            if u.salted_password.is_empty() {
                return unacceptable("The salted password is empty");
            }
            let hash = ScramHash::of_stored(mechanism);
            let credential = ScramCredential::of_salted_password(
                hash,
                &u.salted_password,
                u.salt.to_vec(),
                u.iterations as u32,
            );
            Ok(ScramUpsertion {
                user: user.clone(),
                mechanism,
                credential: credential.into_stored(),
            })
        });
        match checked {
            Ok(upsertion) => {
                upsertions.insert(user, upsertion);
            }
            Err(e) => {
                refused.insert(user, e);
            }
        }
    }
    let alteration = ScramAlteration {
        deletions: deletions.into_values().collect(),
        upsertions: upsertions.into_values().collect(),
    };
    (alteration, refused)
}

fn user_and_mechanism(user: &str, mechanism: i8) -> Result<ScramMechanism, Refusal> {
    if user.is_empty() {
        return Err((
            ResponseError::UnacceptableCredential,
            "Username must not be empty".into(),
        ));
    }
    ScramMechanism::of_type(mechanism).ok_or((
        ResponseError::UnsupportedSaslMechanism,
        "Unknown SCRAM mechanism".into(),
    ))
}

pub async fn alter(
    controller: &Controller,
    req: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    let (alteration, refused) = check(&controller.view().view.scram, req);
    let changed: BTreeSet<String> = alteration
        .deletions
        .iter()
        .map(|d| d.user.clone())
        .chain(alteration.upsertions.iter().map(|u| u.user.clone()))
        .collect();
    let outcome = if changed.is_empty() {
        Ok(())
    } else {
        controller
            .submit(Command::AlterScramCredentials(alteration))
            .await
            .map(|_| ())
    };
    let mut resp = AlterUserScramCredentialsResponse::default();
    for user in changed {
        let mut r = AlterUserScramCredentialsResult::default().with_user(wire_str(&user));
        if let Err(e) = &outcome {
            r.error_code = e.kafka_code();
            r.error_message = Some(wire_str(&e.message()));
        } else {
            tracing::info!(%user, "SCRAM credentials altered");
        }
        resp.results.push(r);
    }
    for (user, (error, message)) in refused {
        resp.results.push(
            AlterUserScramCredentialsResult::default()
                .with_user(wire_str(&user))
                .with_error_code(code(error))
                .with_error_message(Some(wire_str(&message))),
        );
    }
    resp
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use kafka_protocol::messages::alter_user_scram_credentials_request::{
        ScramCredentialDeletion, ScramCredentialUpsertion,
    };
    use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;

    use super::*;

    fn upsertion(user: &str, mechanism: i8, iterations: i32) -> ScramCredentialUpsertion {
        ScramCredentialUpsertion::default()
            .with_name(wire_str(user))
            .with_mechanism(mechanism)
            .with_iterations(iterations)
            .with_salt(Bytes::from_static(b"salt-salt-salt"))
            .with_salted_password(Bytes::from(vec![7u8; 32]))
    }

    fn deletion(user: &str, mechanism: i8) -> ScramCredentialDeletion {
        ScramCredentialDeletion::default()
            .with_name(wire_str(user))
            .with_mechanism(mechanism)
    }

    fn codes(refused: &BTreeMap<String, Refusal>) -> Vec<(&str, i16)> {
        refused
            .iter()
            .map(|(u, (e, _))| (u.as_str(), code(*e)))
            .collect()
    }

    #[test]
    fn each_user_is_checked_as_kafka_checks_it() {
        let mut table = ScramTable::default();
        let req = AlterUserScramCredentialsRequest::default()
            .with_upsertions(vec![
                upsertion("alice", 1, 8192),
                upsertion("few", 1, 4095),
                upsertion("many", 2, 16385),
                upsertion("odd", 3, 8192),
                upsertion("", 1, 8192),
                upsertion("twice", 1, 8192),
                upsertion("twice", 2, 8192),
            ])
            .with_deletions(vec![deletion("missing", 1), deletion("bob", 0)]);
        let (alteration, refused) = check(&table, req);
        assert_eq!(
            codes(&refused),
            vec![
                ("", 93),
                ("bob", 33),
                ("few", 93),
                ("many", 93),
                ("missing", 91),
                ("odd", 33),
                ("twice", 92),
            ]
        );
        assert_eq!(alteration.upsertions.len(), 1);
        let alice = &alteration.upsertions[0];
        // The keys are RFC 5802's from the salted password, which is gone.
        let expect = ScramCredential::of_salted_password(
            ScramHash::Sha256,
            &[7u8; 32],
            b"salt-salt-salt".to_vec(),
            8192,
        );
        assert_eq!(alice.credential, expect.into_stored());
        table.validate(&alteration).expect("valid");
        table.apply(alteration);

        let (alteration, refused) = check(
            &table,
            AlterUserScramCredentialsRequest::default()
                .with_deletions(vec![deletion("alice", 1), deletion("alice", 1)]),
        );
        assert_eq!(codes(&refused), vec![("alice", 92)]);
        assert!(alteration.deletions.is_empty());
        let (alteration, refused) = check(
            &table,
            AlterUserScramCredentialsRequest::default().with_deletions(vec![deletion("alice", 1)]),
        );
        assert!(refused.is_empty());
        assert_eq!(alteration.deletions.len(), 1);
    }

    #[test]
    fn describe_answers_every_user_or_the_named_ones() {
        let mut table = ScramTable::default();
        let (alteration, _) = check(
            &table,
            AlterUserScramCredentialsRequest::default()
                .with_upsertions(vec![upsertion("alice", 1, 8192), upsertion("bob", 2, 4096)]),
        );
        table.apply(alteration);
        let all = describe(&table, &DescribeUserScramCredentialsRequest::default());
        let users: Vec<String> = all.results.iter().map(|r| r.user.to_string()).collect();
        assert_eq!(users, ["alice", "bob"]);
        assert_eq!(all.results[0].credential_infos[0].mechanism, 1);
        assert_eq!(all.results[0].credential_infos[0].iterations, 8192);
        let name = |n: &str| UserName::default().with_name(wire_str(n));
        let some = describe(
            &table,
            &DescribeUserScramCredentialsRequest::default().with_users(Some(vec![
                name("bob"),
                name("carol"),
                name("alice"),
                name("alice"),
            ])),
        );
        let answers: Vec<(String, i16)> = some
            .results
            .iter()
            .map(|r| (r.user.to_string(), r.error_code))
            .collect();
        assert_eq!(
            answers,
            [
                ("bob".to_string(), 0),
                ("carol".to_string(), 91),
                ("alice".to_string(), 92)
            ]
        );
    }
}
