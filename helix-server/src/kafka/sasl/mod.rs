//! SASL on `SASL_PLAINTEXT` and `SASL_SSL` listeners: the per-connection
//! state machine SaslHandshake (v1) and SaslAuthenticate (v0-v2) advance,
//! in request order, before any other request is served (ADR 0028).
//!
//! After a SaslHandshake v0 the client sends the mechanism's tokens as
//! bare length-prefixed frames, not SaslAuthenticate requests, and a failure
//! closes the connection without an answer ([`SaslSession::raw_token`]);
//! librdkafka before 2.x only uses SaslAuthenticate when SaslHandshake is
//! advertised from v0, so v0 is served too.
//!
//! Re-authentication (KIP-368, `connections_max_reauth_ms` > 0): a
//! successful SaslAuthenticate v1+ tells the client its session lifetime;
//! before it ends the client sends SaslHandshake again on the same
//! connection, and until that exchange completes only ApiVersions and the
//! SASL requests are served (requests read earlier were authorized already
//! and are answered in order). As on Kafka, a re-authentication must keep
//! the mechanism and the principal, may begin at most once a second, and a
//! connection whose session ended is closed at its next request other than
//! the SaslHandshake that re-authenticates it (the read loop's check,
//! [`SaslSession::expired`]).

pub mod credentials;
pub mod failures;
pub mod plain;
pub mod scram;

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};

use self::credentials::{Credentials, ScramHash};
use self::failures::FailedAuthentications;
use self::scram::AwaitingFinal;
use crate::error::code;
use crate::metrics::{Metrics, metrics};

/// The versions served (`api_versions` advertises them on SASL listeners only).
pub const HANDSHAKE_VERSIONS: (i16, i16) = (0, 1);
/// Most bytes of one SASL token (PLAIN and SCRAM messages are far smaller).
pub const MAX_TOKEN: usize = 64 * 1024;
pub const AUTHENTICATE_VERSIONS: (i16, i16) = (0, 2);

/// Re-authentications closer together than this are refused (Kafka's
/// `MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS`).
const MIN_REAUTH_INTERVAL: Duration = Duration::from_secs(1);

/// What a SASL listener offers: the enabled mechanisms and the users, how
/// long a session lasts, and which addresses failed too often.
#[derive(Debug)]
pub struct SaslServer {
    pub mechanisms: Vec<String>,
    pub credentials: Credentials,
    /// `connections_max_reauth_ms`; zero: sessions never expire.
    pub session_lifetime: Duration,
    /// Shared by every SASL listener of the node.
    pub failures: Mutex<FailedAuthentications>,
}

impl SaslServer {
    pub fn new(mechanisms: Vec<String>, credentials: Credentials) -> Self {
        SaslServer {
            mechanisms,
            credentials,
            session_lifetime: Duration::ZERO,
            failures: Mutex::new(FailedAuthentications::new(0)),
        }
    }

    fn failures(&self) -> std::sync::MutexGuard<'_, FailedAuthentications> {
        self.failures.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a failed authentication (the metric, and `peer`'s failures).
    pub fn failed(&self, peer: Option<IpAddr>) {
        Metrics::count(&metrics().counters.sasl_authentication_failures, 1);
        if let Some(ip) = peer {
            self.failures().record(ip, Instant::now());
        }
    }

    /// Whether `peer` failed too often lately to be served now.
    pub fn refuses(&self, peer: IpAddr) -> bool {
        self.failures().refuses(peer, Instant::now())
    }
}

/// A mechanism chosen by SaslHandshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mechanism {
    Plain,
    Scram(ScramHash),
}

/// Where a connection's authentication stands.
enum State {
    AwaitingHandshake,
    AwaitingAuthenticate(Mechanism),
    AwaitingScramFinal(Box<AwaitingFinal>),
    Authenticated,
}

/// Who authenticated, and with what: a re-authentication must match.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Authenticated {
    user: String,
    mechanism: Mechanism,
}

/// One connection's SASL exchange.
pub struct SaslSession {
    server: Arc<SaslServer>,
    state: State,
    /// SaslHandshake v0 chose the mechanism: tokens come as bare frames.
    raw_tokens: bool,
    /// The mechanism of the exchange under way.
    mechanism: Option<Mechanism>,
    /// The last completed authentication.
    authenticated_as: Option<Authenticated>,
    /// A re-authentication is under way (KIP-368).
    reauthenticating: bool,
    /// When the last re-authentication began.
    last_reauth_start: Option<Instant>,
    /// When the authenticated session ends (`connections_max_reauth_ms`).
    expires_at: Option<Instant>,
}

/// What the connection does with a SASL request's answer.
pub enum Step<T> {
    /// Answer and go on.
    Answer(T),
    /// Answer after the failed-authentication delay, then close.
    Fail(T),
}

impl SaslSession {
    pub fn new(server: Arc<SaslServer>) -> Self {
        SaslSession {
            server,
            state: State::AwaitingHandshake,
            raw_tokens: false,
            mechanism: None,
            authenticated_as: None,
            reauthenticating: false,
            last_reauth_start: None,
            expires_at: None,
        }
    }

    /// The session ended at `now` without a re-authentication: the
    /// connection must close rather than serve another request.
    pub fn expired(&self, now: Instant) -> bool {
        self.authenticated() && self.expires_at.is_some_and(|t| now > t)
    }

    /// A SaslHandshake on an authenticated connection begins a
    /// re-authentication if sessions expire and the last one began at
    /// least a second ago (as Kafka's `maybeBeginServerReauthentication`).
    fn begin_reauthentication(&mut self, now: Instant) -> Result<(), String> {
        if self.expires_at.is_none() {
            return Err("SaslHandshake after authentication (connections_max_reauth_ms is 0: no re-authentication)".into());
        }
        if self
            .last_reauth_start
            .is_some_and(|t| now.duration_since(t) < MIN_REAUTH_INTERVAL)
        {
            return Err("re-authentication within a second of the last one".into());
        }
        self.last_reauth_start = Some(now);
        self.reauthenticating = true;
        self.state = State::AwaitingHandshake;
        Ok(())
    }

    /// The next frame is a bare SASL token (after SaslHandshake v0).
    pub fn expects_raw_token(&self) -> bool {
        self.raw_tokens && !self.authenticated()
    }

    pub fn authenticated(&self) -> bool {
        matches!(self.state, State::Authenticated)
    }

    /// SaslHandshake: picks the mechanism. Err: not expected now (close).
    pub fn handshake(
        &mut self,
        req: &SaslHandshakeRequest,
        version: i16,
        now: Instant,
    ) -> Result<Step<SaslHandshakeResponse>, String> {
        if matches!(self.state, State::Authenticated) {
            self.begin_reauthentication(now)?;
        }
        if !matches!(self.state, State::AwaitingHandshake) {
            return Err("SaslHandshake after the mechanism was chosen".into());
        }
        let mut resp = SaslHandshakeResponse::default();
        resp.mechanisms = self
            .server
            .mechanisms
            .iter()
            .map(|m| super::wire_str(m))
            .collect();
        let name = req.mechanism.as_str();
        let previous = self.authenticated_as.as_ref().map(|a| a.mechanism);
        let mechanism = if !self.server.mechanisms.iter().any(|m| m == name) {
            None
        } else if name == "PLAIN" {
            Some(Mechanism::Plain)
        } else {
            ScramHash::of_mechanism(name).map(Mechanism::Scram)
        };
        // A re-authentication keeps the mechanism (Kafka answers another
        // with SASL_AUTHENTICATION_FAILED after the handshake; here the
        // handshake itself fails, and the connection closes either way).
        let mechanism = mechanism.filter(|m| !self.reauthenticating || previous == Some(*m));
        match mechanism {
            Some(m) => {
                self.mechanism = Some(m);
                self.state = State::AwaitingAuthenticate(m);
                self.raw_tokens = version == 0;
                Ok(Step::Answer(resp))
            }
            None => {
                resp.error_code = code(ResponseError::UnsupportedSaslMechanism);
                Ok(Step::Fail(resp))
            }
        }
    }

    /// A bare token after SaslHandshake v0: the reply token, and the user
    /// once authenticated. Err: failed (the connection closes unanswered).
    pub fn raw_token(
        &mut self,
        token: &[u8],
        now: Instant,
    ) -> Result<(Bytes, Option<String>), String> {
        let outcome = self.exchange(token, now);
        if let Err(why) = &outcome {
            tracing::info!(reason = %why, "SASL authentication failed");
        }
        outcome
    }

    /// One step of the chosen mechanism: the reply, and the user when the
    /// exchange is complete.
    fn exchange(&mut self, token: &[u8], now: Instant) -> Result<(Bytes, Option<String>), String> {
        let state = std::mem::replace(&mut self.state, State::AwaitingHandshake);
        let outcome = match state {
            State::AwaitingAuthenticate(Mechanism::Plain) => {
                match plain::authenticate(&self.server.credentials, token) {
                    Some(user) => Ok((Bytes::new(), Some(user))),
                    None => Err("invalid user name or password".into()),
                }
            }
            State::AwaitingAuthenticate(Mechanism::Scram(hash)) => {
                match scram::client_first(hash, &self.server.credentials, token) {
                    Ok((awaiting, reply)) => {
                        self.state = State::AwaitingScramFinal(Box::new(awaiting));
                        Ok((Bytes::from(reply), None))
                    }
                    Err(e) => Err(e.to_string()),
                }
            }
            State::AwaitingScramFinal(awaiting) => match awaiting.client_final(token) {
                Ok((user, reply)) => Ok((Bytes::from(reply), Some(user))),
                Err(e) => Err(e.to_string()),
            },
            State::AwaitingHandshake | State::Authenticated => {
                Err("a SASL token before SaslHandshake or after authentication".into())
            }
        };
        let Ok((reply, Some(user))) = outcome else {
            return outcome;
        };
        let Some(mechanism) = self.mechanism else {
            return Err("an exchange completed without a mechanism".into());
        };
        let now_as = Authenticated { user, mechanism };
        if self.reauthenticating {
            if let Some(before) = self.authenticated_as.as_ref().filter(|b| **b != now_as) {
                return Err(format!(
                    "cannot change principals during re-authentication from User:{} to User:{}",
                    before.user, now_as.user
                ));
            }
            self.reauthenticating = false;
            Metrics::count(&metrics().counters.sasl_reauthentications, 1);
        }
        let lifetime = self.server.session_lifetime;
        self.expires_at = (!lifetime.is_zero()).then(|| now + lifetime);
        self.state = State::Authenticated;
        let user = now_as.user.clone();
        self.authenticated_as = Some(now_as);
        Ok((reply, Some(user)))
    }

    /// SaslAuthenticate: one step of the chosen mechanism. On success with
    /// the exchange complete, the authenticated user is returned too.
    /// Err: not expected now (close).
    pub fn authenticate(
        &mut self,
        req: &SaslAuthenticateRequest,
        version: i16,
        now: Instant,
    ) -> Result<(Step<SaslAuthenticateResponse>, Option<String>), String> {
        if self.raw_tokens || matches!(self.state, State::AwaitingHandshake | State::Authenticated)
        {
            return Err("SaslAuthenticate before SaslHandshake v1 or after authentication".into());
        }
        let outcome = self.exchange(&req.auth_bytes, now);
        let mut resp = SaslAuthenticateResponse::default();
        match outcome {
            Ok((bytes, user)) => {
                resp.auth_bytes = bytes;
                // KIP-368: the lifetime goes with the exchange's last answer
                // (v1+; a v0 client cannot learn it, and is closed when its
                // session ends, as on Kafka).
                if user.is_some() && version >= 1 {
                    resp.session_lifetime_ms =
                        i64::try_from(self.server.session_lifetime.as_millis()).unwrap_or(i64::MAX);
                }
                Ok((Step::Answer(resp), user))
            }
            Err(why) => {
                // The reason is logged by the caller, never sent: the
                // client learns only that authentication failed.
                tracing::info!(reason = %why, "SASL authentication failed");
                resp.error_code = code(ResponseError::SaslAuthenticationFailed);
                resp.error_message = Some(super::wire_str(
                    "Authentication failed: invalid credentials",
                ));
                Ok((Step::Fail(resp), None))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::credentials::{ScramCredential, random_salt};
    use super::*;

    fn server(lifetime: Duration) -> Arc<SaslServer> {
        let mut credentials = Credentials::default();
        for user in ["alice", "bob"] {
            credentials.insert(
                user,
                ScramCredential::derive(ScramHash::Sha512, "pw", random_salt(), 4096),
            );
        }
        let mut server = SaslServer::new(vec!["PLAIN".into(), "SCRAM-SHA-512".into()], credentials);
        server.session_lifetime = lifetime;
        Arc::new(server)
    }

    fn session() -> SaslSession {
        SaslSession::new(server(Duration::ZERO))
    }

    fn handshake(s: &mut SaslSession, mechanism: &str, version: i16) -> bool {
        handshake_at(s, mechanism, version, Instant::now())
    }

    fn handshake_at(s: &mut SaslSession, mechanism: &str, version: i16, now: Instant) -> bool {
        let req = SaslHandshakeRequest::default().with_mechanism(super::super::wire_str(mechanism));
        matches!(s.handshake(&req, version, now), Ok(Step::Answer(_)))
    }

    fn authenticate(s: &mut SaslSession, bytes: &'static [u8]) -> Option<bool> {
        authenticate_at(s, bytes, Instant::now()).map(|(ok, _)| ok)
    }

    /// Whether it succeeded, and the lifetime answered.
    fn authenticate_at(
        s: &mut SaslSession,
        bytes: &'static [u8],
        now: Instant,
    ) -> Option<(bool, i64)> {
        let req = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from_static(bytes));
        match s.authenticate(&req, 1, now).ok()? {
            (Step::Answer(r), _) => Some((true, r.session_lifetime_ms)),
            (Step::Fail(r), _) => {
                assert_eq!(r.error_code, 58);
                Some((false, r.session_lifetime_ms))
            }
        }
    }

    #[test]
    fn sessions_never_expire_and_never_reauthenticate_by_default() {
        let mut s = session();
        let t0 = Instant::now();
        assert!(handshake_at(&mut s, "PLAIN", 1, t0));
        assert_eq!(authenticate_at(&mut s, b"\0alice\0pw", t0), Some((true, 0)));
        assert!(!s.expired(t0 + Duration::from_secs(86_400)));
        let req = SaslHandshakeRequest::default().with_mechanism(super::super::wire_str("PLAIN"));
        assert!(s.handshake(&req, 1, t0 + Duration::from_secs(5)).is_err());
    }

    #[test]
    fn a_session_lifetime_is_answered_expires_and_is_renewed_by_reauthentication() {
        let mut s = SaslSession::new(server(Duration::from_secs(2)));
        let t0 = Instant::now();
        assert!(handshake_at(&mut s, "PLAIN", 1, t0));
        assert_eq!(
            authenticate_at(&mut s, b"\0alice\0pw", t0),
            Some((true, 2000))
        );
        assert!(!s.expired(t0 + Duration::from_secs(2)));
        assert!(s.expired(t0 + Duration::from_millis(2001)));
        let t1 = t0 + Duration::from_millis(1800);
        assert!(
            handshake_at(&mut s, "PLAIN", 1, t1),
            "re-authentication begins"
        );
        assert!(!s.authenticated(), "only SASL requests until it completes");
        assert_eq!(
            authenticate_at(&mut s, b"\0alice\0pw", t1),
            Some((true, 2000))
        );
        assert!(s.authenticated());
        assert!(
            !s.expired(t0 + Duration::from_millis(3000)),
            "renewed from t1"
        );
        assert!(s.expired(t1 + Duration::from_millis(2001)));
    }

    #[test]
    fn a_reauthentication_must_keep_the_principal_and_the_mechanism() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        let mut s = SaslSession::new(server(Duration::from_secs(2)));
        assert!(handshake_at(&mut s, "PLAIN", 1, t0));
        assert_eq!(
            authenticate_at(&mut s, b"\0alice\0pw", t0),
            Some((true, 2000))
        );
        assert!(handshake_at(&mut s, "PLAIN", 1, t1));
        assert_eq!(
            authenticate_at(&mut s, b"\0bob\0pw", t1),
            Some((false, 0)),
            "another user"
        );
        assert!(!s.authenticated());

        let mut s = SaslSession::new(server(Duration::from_secs(2)));
        assert!(handshake_at(&mut s, "PLAIN", 1, t0));
        assert_eq!(
            authenticate_at(&mut s, b"\0alice\0pw", t0),
            Some((true, 2000))
        );
        assert!(
            !handshake_at(&mut s, "SCRAM-SHA-512", 1, t1),
            "another mechanism"
        );
    }

    #[test]
    fn reauthentications_are_at_least_a_second_apart() {
        let t0 = Instant::now();
        let mut s = SaslSession::new(server(Duration::from_secs(10)));
        assert!(handshake_at(&mut s, "PLAIN", 1, t0));
        assert_eq!(
            authenticate_at(&mut s, b"\0alice\0pw", t0),
            Some((true, 10_000))
        );
        assert!(handshake_at(&mut s, "PLAIN", 1, t0));
        assert_eq!(
            authenticate_at(&mut s, b"\0alice\0pw", t0),
            Some((true, 10_000))
        );
        let req = SaslHandshakeRequest::default().with_mechanism(super::super::wire_str("PLAIN"));
        assert!(
            s.handshake(&req, 1, t0 + Duration::from_millis(999))
                .is_err()
        );
        assert!(handshake_at(
            &mut s,
            "PLAIN",
            1,
            t0 + Duration::from_secs(1)
        ));
    }

    #[test]
    fn plain_over_sasl_authenticate_authenticates_once() {
        let mut s = session();
        assert!(!s.authenticated());
        assert!(handshake(&mut s, "PLAIN", 1));
        assert_eq!(authenticate(&mut s, b"\0alice\0pw"), Some(true));
        assert!(s.authenticated());
        assert_eq!(authenticate(&mut s, b"\0alice\0pw"), None, "not twice");
    }

    #[test]
    fn a_wrong_password_or_a_disabled_mechanism_fails() {
        let mut s = session();
        assert!(handshake(&mut s, "PLAIN", 1));
        assert_eq!(authenticate(&mut s, b"\0alice\0nope"), Some(false));
        assert!(!s.authenticated());
        let mut s = session();
        assert!(!handshake(&mut s, "SCRAM-SHA-256", 1));
        assert!(!handshake(&mut s, "GSSAPI", 1));
    }

    #[test]
    fn handshake_v0_takes_bare_tokens_and_refuses_sasl_authenticate() {
        let mut s = session();
        assert!(handshake(&mut s, "PLAIN", 0));
        assert!(s.expects_raw_token());
        assert_eq!(authenticate(&mut s, b"\0alice\0pw"), None);
        assert!(s.raw_token(b"\0alice\0pw", Instant::now()).is_ok());
        assert!(s.authenticated() && !s.expects_raw_token());
    }
}
