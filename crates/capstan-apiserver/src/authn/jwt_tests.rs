//! Tests of the JWT authenticators: the configuration's validation with upstream's messages,
//! the flags' translation, token verification and claim mapping (ES256 and RS256 keys made
//! here), and fetching keys from an issuer over HTTP.

use std::sync::atomic::{AtomicUsize, Ordering};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair as _};
use serde_json::json;

use super::*;

const ISSUER: &str = "https://issuer.example";

/// An ES256 signing key and its JWK.
struct Signer {
    pair: EcdsaKeyPair,
    kid: String,
}

impl Signer {
    fn new(kid: &str) -> Signer {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(
            &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            pkcs8.as_ref(),
            &rng,
        )
        .unwrap();
        Signer {
            pair,
            kid: kid.into(),
        }
    }

    fn jwk(&self) -> Value {
        let point = self.pair.public_key().as_ref();
        json!({
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": self.kid,
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
        })
    }

    fn sign(&self, claims: &Value) -> String {
        let header = json!({"alg": "ES256", "typ": "JWT", "kid": self.kid});
        let input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let signature = self
            .pair
            .sign(&SystemRandom::new(), input.as_bytes())
            .unwrap();
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature.as_ref()))
    }
}

fn key_set(signers: &[&Signer]) -> JwkSet {
    serde_json::from_value(json!({"keys": signers.iter().map(|s| s.jwk()).collect::<Vec<_>>()}))
        .unwrap()
}

fn claims(extra: Value) -> Value {
    let mut claims = json!({
        "iss": ISSUER, "aud": "capstan", "sub": "alice",
        "exp": now_seconds() + 600, "iat": now_seconds(),
    });
    for (k, v) in extra.as_object().unwrap() {
        if v.is_null() {
            claims.as_object_mut().unwrap().remove(k);
        } else {
            claims[k] = v.clone();
        }
    }
    claims
}

fn config(yaml: &str) -> AuthenticationConfiguration {
    AuthenticationConfiguration::parse(yaml).unwrap()
}

fn compiled(yaml: &str) -> JwtAuthenticator {
    let mut compiled = compile(
        &config(yaml),
        &["https://kubernetes.default.svc"],
        &all_algorithms(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let authenticator = compiled.authenticators.pop().unwrap();
    Arc::into_inner(authenticator).unwrap()
}

fn refused(yaml: &str) -> String {
    match compile(
        &config(yaml),
        &["https://kubernetes.default.svc"],
        &all_algorithms(),
    ) {
        Ok(_) => panic!("accepted:\n{yaml}"),
        Err(error) => error,
    }
}

const HEAD: &str =
    "apiVersion: apiserver.config.k8s.io/v1beta1\nkind: AuthenticationConfiguration\n";

fn with_mappings(mappings: &str) -> String {
    format!(
        "{HEAD}jwt:\n- issuer:\n    url: {ISSUER}\n    audiences: [capstan]\n  claimMappings:\n{mappings}"
    )
}

#[test]
fn the_file_decodes_strictly_and_names_its_version() {
    let parsed = config(&with_mappings(
        "    username:\n      claim: sub\n      prefix: 'oidc:'\n    groups:\n      expression: claims.roles\n    uid:\n      claim: sub\n    extra:\n    - key: example.com/tenant\n      valueExpression: claims.tenant\n",
    ));
    let jwt = &parsed.jwt[0];
    assert_eq!(jwt.issuer.url, ISSUER);
    assert_eq!(jwt.claim_mappings.username.prefix.as_deref(), Some("oidc:"));
    assert_eq!(jwt.claim_mappings.groups.expression, "claims.roles");
    assert_eq!(jwt.claim_mappings.extra[0].key, "example.com/tenant");
    let wrong = AuthenticationConfiguration::parse(
        "apiVersion: apiserver.config.k8s.io/v9\nkind: AuthenticationConfiguration\n",
    )
    .unwrap_err();
    assert!(wrong.contains("v9"), "{wrong}");
    let unknown = AuthenticationConfiguration::parse(&format!("{HEAD}jwtt: []\n")).unwrap_err();
    assert!(unknown.contains("jwtt"), "{unknown}");
    assert_eq!(
        AuthenticationConfiguration::parse("  \n").unwrap_err(),
        "empty config data"
    );
}

#[test]
fn invalid_configurations_are_refused_with_upstreams_field_errors() {
    let error = refused(&format!(
        "{HEAD}jwt:\n- issuer:\n    url: http://issuer.example?x=1\n    audiences: []\n  claimMappings:\n    username:\n      claim: sub\n"
    ));
    assert!(
        error.starts_with("invalid authentication configuration: "),
        "{error}"
    );
    for part in [
        "jwt[0].issuer.url: Invalid value: \"http://issuer.example?x=1\": URL scheme must be https",
        "jwt[0].issuer.url: Invalid value: \"http://issuer.example?x=1\": URL must not contain a query",
        "jwt[0].issuer.audiences: Required value: at least one jwt[0].issuer.audiences is required",
        "jwt[0].claimMappings.username.prefix: Required value: prefix is required when claim is set. It can be set to an empty string to disable prefixing",
    ] {
        assert!(error.contains(part), "missing {part:?} in {error}");
    }
    let error = refused(&with_mappings(
        "    username:\n      claim: sub\n      expression: claims.sub\n",
    ));
    assert!(
        error.contains("jwt[0].claimMappings.username: Invalid value: \"\": claim and expression can't both be set"),
        "{error}"
    );
    let error = refused(&with_mappings(
        "    username:\n      expression: claims.email\n",
    ));
    assert!(
        error.contains("claims.email_verified must be used in claimMappings.username.expression"),
        "{error}"
    );
    // Reading email_verified anywhere satisfies the rule.
    compiled(&with_mappings(
        "    username:\n      expression: claims.email\n    extra:\n    - key: example.com/verified\n      valueExpression: 'has(claims.email_verified) ? \"yes\" : \"no\"'\n",
    ));
    let error = refused(&with_mappings(
        "    username:\n      claim: sub\n      prefix: ''\n    extra:\n    - key: kubernetes.io/x\n      valueExpression: claims.sub\n    - key: Example.com/x\n      valueExpression: claims.sub\n",
    ));
    assert!(
        error
            .contains("k8s.io, kubernetes.io and their subdomains are reserved for Kubernetes use"),
        "{error}"
    );
    assert!(error.contains("must be lowercase"), "{error}");
    let error = refused(&with_mappings(
        "    username:\n      expression: 'claims.sub +'\n",
    ));
    assert!(
        error.contains("jwt[0].claimMappings.username.expression: Invalid value: \"claims.sub +\": compilation failed"),
        "{error}"
    );
    let error = refused(&format!(
        "{HEAD}jwt:\n- issuer:\n    url: https://kubernetes.default.svc\n    audiences: [a, b]\n  claimMappings:\n    username:\n      claim: sub\n      prefix: ''\n"
    ));
    assert!(
        error.contains(
            "URL must not overlap with disallowed issuers: [https://kubernetes.default.svc]"
        ),
        "{error}"
    );
    assert!(
        error.contains("audienceMatchPolicy must be MatchAny for multiple audiences"),
        "{error}"
    );
    let error = refused(&format!(
        "{HEAD}anonymous:\n  enabled: false\n  conditions:\n  - path: /livez\n"
    ));
    assert!(
        error.contains("anonymous.conditions: Invalid value:")
            && error.contains("enabled should be set to true when conditions are defined"),
        "{error}"
    );
    let error = refused(&format!(
        "{HEAD}jwt:\n- issuer:\n    url: {ISSUER}\n    audiences: [x]\n  claimMappings:\n    username:\n      claim: sub\n      prefix: ''\n- issuer:\n    url: {ISSUER}\n    audiences: [y]\n  claimMappings:\n    username:\n      claim: sub\n      prefix: ''\n"
    ));
    assert!(
        error.contains(&format!("jwt[1].issuer.url: Duplicate value: \"{ISSUER}\"")),
        "{error}"
    );
}

#[test]
fn flags_become_upstreams_configuration() {
    let flags = OidcFlags {
        issuer_url: ISSUER.into(),
        client_id: "capstan".into(),
        groups_claim: "groups".into(),
        ..OidcFlags::default()
    };
    let config = flags.to_config().unwrap();
    assert_eq!(config.issuer.audiences, ["capstan"]);
    let username = &config.claim_mappings.username;
    assert_eq!(username.claim, "sub");
    assert_eq!(username.prefix.as_deref(), Some("https://issuer.example#"));
    assert_eq!(config.claim_mappings.groups.prefix.as_deref(), Some(""));
    let email = OidcFlags {
        username_claim: "email".into(),
        ..flags.clone()
    };
    assert_eq!(
        email
            .to_config()
            .unwrap()
            .claim_mappings
            .username
            .prefix
            .as_deref(),
        Some("")
    );
    let none = OidcFlags {
        username_prefix: "-".into(),
        ..flags.clone()
    };
    assert_eq!(
        none.to_config()
            .unwrap()
            .claim_mappings
            .username
            .prefix
            .as_deref(),
        Some("")
    );
    let half = OidcFlags {
        client_id: String::new(),
        ..flags
    };
    assert_eq!(
        half.to_config().unwrap_err(),
        "oidc-issuer-url and oidc-client-id must be specified together when any oidc-* flags are set"
    );
    assert_eq!(signing_algorithms(&[]).unwrap(), [Algorithm::RS256]);
    assert_eq!(
        signing_algorithms(&["HS256".into()]).unwrap_err(),
        "oidc: unsupported signing alg: \"HS256\""
    );
}

#[tokio::test]
async fn tokens_are_verified_and_mapped_as_upstream_maps_them() {
    let signer = Signer::new("k1");
    let authenticator = compiled(&with_mappings(
        "    username:\n      claim: sub\n      prefix: 'oidc:'\n    groups:\n      claim: groups\n      prefix: 'g:'\n    uid:\n      claim: sub\n    extra:\n    - key: example.com/tenant\n      valueExpression: \"has(claims.tenant) ? claims.tenant : ''\"\n",
    ))
    .with_keys(key_set(&[&signer]));
    let token = signer.sign(&claims(json!({"groups": ["dev", "ops"], "tenant": "t1"})));
    let user = authenticator.authenticate(&token).await.unwrap().unwrap();
    assert_eq!(user.name, "oidc:alice");
    assert_eq!(user.uid, "alice");
    assert_eq!(user.groups, ["g:dev", "g:ops", "system:authenticated"]);
    assert_eq!(user.extra["example.com/tenant"], ["t1"]);
    // A single string is one group; an empty extra value is no extra.
    let token = signer.sign(&claims(json!({"groups": "admins"})));
    let user = authenticator.authenticate(&token).await.unwrap().unwrap();
    assert_eq!(user.groups, ["g:admins", "system:authenticated"]);
    assert!(user.extra.is_empty());

    // Another issuer's token is not this authenticator's to judge.
    let other = signer.sign(&claims(json!({"iss": "https://elsewhere.example"})));
    assert_eq!(authenticator.authenticate(&other).await.unwrap(), None);
    assert_eq!(authenticator.authenticate("not-a-jwt").await.unwrap(), None);

    let refusal = async |claims: Value| {
        authenticator
            .authenticate(&signer.sign(&claims))
            .await
            .unwrap_err()
    };
    let error = refusal(claims(json!({"aud": ["someone-else"]}))).await;
    assert_eq!(
        error,
        "oidc: verify token: oidc: expected audience in [\"capstan\"] got [\"someone-else\"]"
    );
    let error = refusal(claims(json!({"exp": now_seconds() - 5}))).await;
    assert!(error.contains("oidc: token is expired"), "{error}");
    let error = refusal(claims(json!({"exp": null}))).await;
    assert!(error.contains("oidc: token is expired"), "{error}");
    let error = refusal(claims(json!({"nbf": now_seconds() + 3600}))).await;
    assert!(
        error.contains("before the nbf (not before) time"),
        "{error}"
    );
    // Within the five minutes of skew, a future nbf is fine.
    let fine = signer.sign(&claims(json!({"nbf": now_seconds() + 60})));
    assert!(authenticator.authenticate(&fine).await.unwrap().is_some());
    let error = refusal(claims(json!({"sub": null}))).await;
    assert_eq!(
        error,
        "oidc: parse username claims \"sub\": claim not present"
    );
    let error = refusal(claims(json!({"groups": [1]}))).await;
    assert!(
        error.starts_with("oidc: parse groups claim \"groups\""),
        "{error}"
    );

    // A signature by a key the issuer does not publish fails, even with the same key id.
    let impostor = Signer::new("k1");
    let forged = impostor.sign(&claims(json!({})));
    let error = authenticator.authenticate(&forged).await.unwrap_err();
    assert!(error.starts_with("oidc: verify token: "), "{error}");
    // A tampered payload fails.
    let good = signer.sign(&claims(json!({})));
    let mut parts: Vec<&str> = good.split('.').collect();
    let tampered_payload = URL_SAFE_NO_PAD.encode(claims(json!({"sub": "root"})).to_string());
    parts[1] = &tampered_payload;
    assert!(authenticator.authenticate(&parts.join(".")).await.is_err());
}

#[tokio::test]
async fn email_usernames_need_a_verified_email() {
    let signer = Signer::new("k");
    let authenticator = compiled(&with_mappings(
        "    username:\n      claim: email\n      prefix: ''\n",
    ))
    .with_keys(key_set(&[&signer]));
    let sign = |extra: Value| signer.sign(&claims(extra));
    let user = authenticator
        .authenticate(&sign(
            json!({"email": "a@example.com", "email_verified": true}),
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(user.name, "a@example.com");
    // Absent email_verified is accepted, as upstream does.
    assert!(
        authenticator
            .authenticate(&sign(json!({"email": "a@example.com"})))
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(
        authenticator
            .authenticate(&sign(
                json!({"email": "a@example.com", "email_verified": false})
            ))
            .await
            .unwrap_err(),
        "oidc: email not verified"
    );
}

#[tokio::test]
async fn validation_rules_and_expressions_decide_as_upstream() {
    let signer = Signer::new("k");
    let yaml = format!(
        "{HEAD}jwt:\n- issuer:\n    url: {ISSUER}\n    audiences: [capstan, other]\n    audienceMatchPolicy: MatchAny\n  claimValidationRules:\n  - claim: hd\n    requiredValue: example.com\n  - expression: 'claims.exp - claims.iat <= 86400'\n    message: tokens live a day at most\n  claimMappings:\n    username:\n      expression: '\"user:\" + claims.sub'\n    groups:\n      expression: 'claims.roles'\n    uid:\n      expression: 'claims.sub + \"-id\"'\n  userValidationRules:\n  - expression: \"!user.username.startsWith('user:system')\"\n    message: no system users\n"
    );
    let authenticator = compiled(&yaml).with_keys(key_set(&[&signer]));
    let sign = |extra: Value| signer.sign(&claims(extra));
    let user = authenticator
        .authenticate(&sign(
            json!({"aud": "other", "hd": "example.com", "roles": ["a", ""]}),
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(user.name, "user:alice");
    assert_eq!(user.uid, "alice-id");
    assert_eq!(user.groups, ["a", "system:authenticated"]);
    let error = authenticator
        .authenticate(&sign(json!({"hd": "evil.com", "roles": []})))
        .await
        .unwrap_err();
    assert_eq!(
        error,
        "oidc: required claim hd value does not match. Got = evil.com, want = example.com"
    );
    let error = authenticator
        .authenticate(&sign(json!({"roles": []})))
        .await
        .unwrap_err();
    assert_eq!(error, "oidc: required claim hd not present in ID token");
    let error = authenticator
        .authenticate(&sign(
            json!({"hd": "example.com", "roles": [], "exp": now_seconds() + 200000}),
        ))
        .await
        .unwrap_err();
    assert_eq!(
        error,
        "oidc: error evaluating claim validation expression: validation expression 'claims.exp - claims.iat <= 86400' failed: tokens live a day at most"
    );
    let error = authenticator
        .authenticate(&sign(
            json!({"hd": "example.com", "roles": [], "sub": "system-x"}),
        ))
        .await
        .unwrap_err();
    assert_eq!(
        error,
        "oidc: error evaluating user info validation rule: validation expression '!user.username.startsWith('user:system')' failed: no system users"
    );
    let error = authenticator
        .authenticate(&sign(json!({"hd": "example.com", "roles": [1]})))
        .await
        .unwrap_err();
    assert!(
        error.starts_with("oidc: error evaluating group claim expression"),
        "{error}"
    );
}

#[tokio::test]
async fn algorithms_outside_the_allowed_set_are_refused() {
    let signer = Signer::new("k");
    let mut compiled = compile(
        &config(&with_mappings(
            "    username:\n      claim: sub\n      prefix: ''\n",
        )),
        &[],
        &signing_algorithms(&["RS256".into()]).unwrap(),
    )
    .unwrap();
    let authenticator = Arc::into_inner(compiled.authenticators.pop().unwrap())
        .unwrap()
        .with_keys(key_set(&[&signer]));
    let error = authenticator
        .authenticate(&signer.sign(&claims(json!({}))))
        .await
        .unwrap_err();
    assert!(
        error.contains("id token signed with unsupported algorithm"),
        "{error}"
    );
}

#[tokio::test]
async fn rs256_tokens_verify_with_the_issuers_rsa_key() {
    let dir = tempfile::tempdir().unwrap();
    let der = dir.path().join("key.der");
    let made = std::process::Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-outform",
            "DER",
            "-out",
        ])
        .arg(&der)
        .status()
        .expect("openssl (scripts/install-deps installs it)");
    assert!(made.success());
    // openssl writes an RSA key in DER as a bare RSAPrivateKey.
    let pair = signature::RsaKeyPair::from_der(&std::fs::read(&der).unwrap()).unwrap();
    let public = signature::RsaPublicKeyComponents::<Vec<u8>>::from(pair.public());
    let jwk = json!({
        "kty": "RSA", "kid": "r1", "alg": "RS256",
        "n": URL_SAFE_NO_PAD.encode(&public.n),
        "e": URL_SAFE_NO_PAD.encode(&public.e),
    });
    let keys: JwkSet = serde_json::from_value(json!({"keys": [jwk]})).unwrap();
    let authenticator = compiled(&with_mappings(
        "    username:\n      claim: sub\n      prefix: ''\n",
    ))
    .with_keys(keys);
    let input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(json!({"alg": "RS256", "kid": "r1"}).to_string()),
        URL_SAFE_NO_PAD.encode(claims(json!({"sub": "rsa-user"})).to_string())
    );
    let mut signature_bytes = vec![0; pair.public().modulus_len()];
    pair.sign(
        &signature::RSA_PKCS1_SHA256,
        &SystemRandom::new(),
        input.as_bytes(),
        &mut signature_bytes,
    )
    .unwrap();
    let token = format!("{input}.{}", URL_SAFE_NO_PAD.encode(&signature_bytes));
    let user = authenticator.authenticate(&token).await.unwrap().unwrap();
    assert_eq!(user.name, "rsa-user");
}

/// Serves a discovery document and key set over plain HTTP on loopback, counting the key
/// set fetches; the keys served are the ones in `keys` at the time of each request.
async fn issuer_server(keys: Arc<std::sync::Mutex<Value>>, fetches: Arc<AtomicUsize>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let jwks_uri = format!("{base}/keys");
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let (keys, fetches, jwks_uri) = (keys.clone(), fetches.clone(), jwks_uri.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    move |request: hyper::Request<hyper::body::Incoming>| {
                        let body = if request.uri().path() == "/keys" {
                            fetches.fetch_add(1, Ordering::SeqCst);
                            keys.lock().unwrap().to_string()
                        } else {
                            json!({"issuer": ISSUER, "jwks_uri": jwks_uri}).to_string()
                        };
                        async move {
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(
                                http_body_util::Full::new(Bytes::from(body)),
                            ))
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
    format!("{base}/.well-known/openid-configuration")
}

#[tokio::test]
async fn keys_are_fetched_on_first_use_and_again_for_a_new_key_id_at_most_every_floor() {
    let first = Signer::new("one");
    let second = Signer::new("two");
    let keys = Arc::new(std::sync::Mutex::new(json!({"keys": [first.jwk()]})));
    let fetches = Arc::new(AtomicUsize::new(0));
    let discovery = issuer_server(keys.clone(), fetches.clone()).await;
    let mut authenticator = compiled(&with_mappings(
        "    username:\n      claim: sub\n      prefix: ''\n",
    ));
    authenticator.discovery = discovery;
    let ok = authenticator
        .authenticate(&first.sign(&claims(json!({}))))
        .await
        .unwrap();
    assert_eq!(ok.unwrap().name, "alice");
    assert_eq!(fetches.load(Ordering::SeqCst), 1);
    // Known keys are not fetched again.
    authenticator
        .authenticate(&first.sign(&claims(json!({}))))
        .await
        .unwrap();
    assert_eq!(fetches.load(Ordering::SeqCst), 1);
    // The issuer rotates; a token with the new key id within the floor is refused without a
    // fetch, and accepted after it.
    *keys.lock().unwrap() = json!({"keys": [first.jwk(), second.jwk()]});
    assert!(
        authenticator
            .authenticate(&second.sign(&claims(json!({}))))
            .await
            .is_err()
    );
    assert_eq!(fetches.load(Ordering::SeqCst), 1);
    *authenticator.fetching.lock().await = Some(Instant::now() - REFETCH_FLOOR);
    let user = authenticator
        .authenticate(&second.sign(&claims(json!({}))))
        .await
        .unwrap();
    assert!(user.is_some());
    assert_eq!(fetches.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_issuer_ca_is_taken_and_a_malformed_one_refused() {
    let key = rcgen::KeyPair::generate().unwrap();
    let ca = rcgen::CertificateParams::new(vec!["issuer.example".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap()
        .pem()
        .replace('\n', "\n      ");
    let with_ca = |pem: &str| {
        format!(
            "{HEAD}jwt:\n- issuer:\n    url: {ISSUER}\n    audiences: [capstan]\n    certificateAuthority: |\n      {pem}\n  claimMappings:\n    username:\n      claim: sub\n      prefix: ''\n"
        )
    };
    compiled(&with_ca(&ca));
    let error = refused(&with_ca("not a certificate"));
    assert!(
        error.contains("jwt[0].issuer.certificateAuthority: Invalid value: \"<omitted>\""),
        "{error}"
    );
}

#[test]
fn selections_of_claims_are_found_outside_string_literals() {
    assert!(selects("claims.email", "claims", "email"));
    assert!(selects("claims.?email.orValue('')", "claims", "email"));
    assert!(selects("claims[\"email\"]", "claims", "email"));
    assert!(selects("x + claims . email", "claims", "email"));
    assert!(!selects("claims.email_verified", "claims", "email"));
    assert!(!selects("myclaims.email", "claims", "email"));
    assert!(!selects("'claims.email'", "claims", "email"));
    assert!(selects("claims.email_verified", "claims", "email_verified"));
}
