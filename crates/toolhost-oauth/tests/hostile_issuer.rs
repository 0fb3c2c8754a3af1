//! The verifier against an authorization server that misbehaves, and a
//! caller who tries to make toolhost work against its own server: a flood
//! of made-up key ids, a key set of a megabyte, metadata naming another
//! issuer, a server that does not answer. The server is a few lines of
//! HTTP on a loopback port, so every answer is the attacker's choice.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::signature::{Ed25519KeyPair, KeyPair as _};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use toolhost_oauth::{IssuerSettings, Rejection, Settings, Verifier};

const RESOURCE: &str = "https://tools.example/mcp";

#[derive(Clone, Copy)]
enum Server {
    Honest,
    HugeKeys,
    OtherIssuer,
}

struct Fake {
    issuer: String,
    jwks_fetches: Arc<AtomicUsize>,
    key: Arc<Ed25519KeyPair>,
}

fn key() -> Ed25519KeyPair {
    let pkcs8 = Ed25519KeyPair::generate_pkcs8(&ring::rand::SystemRandom::new()).unwrap();
    Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap()
}

async fn fake(kind: Server) -> Fake {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let issuer = format!("http://{}", listener.local_addr().unwrap());
    let key = Arc::new(key());
    let fetches = Arc::new(AtomicUsize::new(0));
    let (iss, k, count) = (issuer.clone(), Arc::clone(&key), Arc::clone(&fetches));
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let (iss, k, count) = (iss.clone(), Arc::clone(&k), Arc::clone(&count));
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let n = conn.read(&mut buf).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                let path = head.split(' ').nth(1).unwrap_or("").to_owned();
                let body = if path.starts_with("/.well-known/") {
                    let named = match kind {
                        Server::OtherIssuer => "http://127.0.0.1:1".to_owned(),
                        _ => iss.clone(),
                    };
                    serde_json::json!({"issuer": named, "jwks_uri": format!("{iss}/jwks")})
                        .to_string()
                } else {
                    count.fetch_add(1, Ordering::SeqCst);
                    let x = URL_SAFE_NO_PAD.encode(k.public_key().as_ref());
                    let real =
                        serde_json::json!({"kty": "OKP", "crv": "Ed25519", "kid": "real", "x": x});
                    match kind {
                        Server::HugeKeys => {
                            let pad = "A".repeat(1024 * 1024);
                            serde_json::json!({"keys": [real], "pad": pad}).to_string()
                        }
                        _ => serde_json::json!({"keys": [real]}).to_string(),
                    }
                };
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(answer.as_bytes()).await;
            });
        }
    });
    Fake {
        issuer,
        jwks_fetches: fetches,
        key,
    }
}

fn token(key: &Ed25519KeyPair, issuer: &str, kid: &str) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let header = serde_json::json!({"alg": "EdDSA", "kid": kid, "typ": "at+jwt"});
    let claims = serde_json::json!({"iss": issuer, "aud": RESOURCE, "sub": "s", "exp": now + 300});
    let input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let sig = key.sign(input.as_bytes());
    format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref()))
}

fn verifier(issuer: &str) -> Verifier {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let settings = Settings::new(
        url::Url::parse(RESOURCE).unwrap(),
        vec![IssuerSettings {
            issuer: issuer.to_owned(),
            client: None,
            introspection: false,
        }],
    );
    Verifier::new(settings).unwrap()
}

#[tokio::test]
async fn a_flood_of_made_up_key_ids_costs_the_server_one_fetch() {
    let server = fake(Server::Honest).await;
    let v = verifier(&server.issuer);
    let good = token(&server.key, &server.issuer, "real");
    assert!(v.verify(&good).await.is_ok());
    let stranger = key();
    for i in 0..200 {
        let t = token(&stranger, &server.issuer, &format!("made-up-{i}"));
        assert_eq!(v.verify(&t).await.err(), Some(Rejection::UnknownKey));
    }
    // The first verification fetched the keys; the flood fetched them
    // again at most once (the refresh interval is 30 s by default).
    assert!(server.jwks_fetches.load(Ordering::SeqCst) <= 2);
    // A token of the real key still passes.
    assert!(v.verify(&good).await.is_ok());
}

#[tokio::test]
async fn a_key_set_of_a_megabyte_is_not_read() {
    let server = fake(Server::HugeKeys).await;
    let v = verifier(&server.issuer);
    let t = token(&server.key, &server.issuer, "real");
    assert_eq!(v.verify(&t).await.err(), Some(Rejection::Unavailable));
}

#[tokio::test]
async fn metadata_that_names_another_issuer_is_refused() {
    let server = fake(Server::OtherIssuer).await;
    let v = verifier(&server.issuer);
    let t = token(&server.key, &server.issuer, "real");
    assert_eq!(v.verify(&t).await.err(), Some(Rejection::Unavailable));
    assert_eq!(
        server.jwks_fetches.load(Ordering::SeqCst),
        0,
        "its keys were never asked for"
    );
}

#[tokio::test]
async fn a_server_that_is_down_fails_closed() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let issuer = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let v = verifier(&issuer);
    let t = token(&key(), &issuer, "real");
    assert_eq!(v.verify(&t).await.err(), Some(Rejection::Unavailable));
}
