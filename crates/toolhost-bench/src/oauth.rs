//! What an access token from an authorization server costs a call, next to
//! a static token: toolhost's CPU per plain `tools/call` with a static
//! token, with a JWT whose verification is cached (every call after the
//! first), and with a JWT whose plugin is granted `[credentials]` (a token
//! exchanged once, then cached per caller and audience).
//!
//! The authorization server is in process: RFC 8414 metadata, a JWKS of
//! one Ed25519 key, and a token endpoint that answers RFC 8693 exchanges,
//! so what is measured is toolhost, not a server's speed. The series are
//! the policy table's (`telemetry::series`): calls one at a time, CPU read
//! from `/proc` around each series, the first row run again last for the
//! noise.

use anyhow::{Context as _, Result};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::signature::{Ed25519KeyPair, KeyPair as _};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// The resource the daemons are configured as; tokens are minted for it.
const RESOURCE: &str = "https://bench.invalid/mcp";
/// The audience the bench plugin is granted tokens for.
const AUDIENCE: &str = "https://api.bench.invalid";

/// An authorization server in process.
struct Issuer {
    issuer: String,
    key: Arc<Ed25519KeyPair>,
    exchanges: Arc<AtomicUsize>,
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn sign(key: &Ed25519KeyPair, claims: &serde_json::Value) -> String {
    let header = serde_json::json!({"alg": "EdDSA", "kid": "bench", "typ": "at+jwt"});
    let input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let sig = key.sign(input.as_bytes());
    format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref()))
}

impl Issuer {
    async fn start() -> Result<Self> {
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 =
            Ed25519KeyPair::generate_pkcs8(&rng).map_err(|_| anyhow::anyhow!("no Ed25519 key"))?;
        let key = Arc::new(
            Ed25519KeyPair::from_pkcs8(pkcs8.as_ref())
                .map_err(|_| anyhow::anyhow!("no Ed25519 key"))?,
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let issuer = format!("http://{}", listener.local_addr()?);
        let exchanges = Arc::new(AtomicUsize::new(0));
        let (k, iss, count) = (Arc::clone(&key), issuer.clone(), Arc::clone(&exchanges));
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let (k, iss, count) = (Arc::clone(&k), iss.clone(), Arc::clone(&count));
                tokio::spawn(async move {
                    let _ = answer(conn, &k, &iss, &count).await;
                });
            }
        });
        Ok(Self {
            issuer,
            key,
            exchanges,
        })
    }

    /// A caller's access token for toolhost's resource.
    fn token(&self, subject: &str) -> String {
        let now = now();
        sign(
            &self.key,
            &serde_json::json!({"iss": self.issuer, "aud": RESOURCE, "sub": subject,
                "client_id": "bench", "scope": "tools", "iat": now, "exp": now + 3600}),
        )
    }
}

/// One request to the in-process server: metadata, the JWKS, or an
/// exchange.
async fn answer(
    mut conn: tokio::net::TcpStream,
    key: &Ed25519KeyPair,
    issuer: &str,
    exchanges: &AtomicUsize,
) -> Result<()> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = conn.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&raw);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                })
                .unwrap_or(0);
            if body.len() >= length {
                break;
            }
        }
    }
    let text = String::from_utf8_lossy(&raw);
    let path = text.split(' ').nth(1).unwrap_or("");
    let body = if path.starts_with("/.well-known/") {
        serde_json::json!({"issuer": issuer, "jwks_uri": format!("{issuer}/jwks"),
            "token_endpoint": format!("{issuer}/token")})
    } else if path == "/jwks" {
        let x = URL_SAFE_NO_PAD.encode(key.public_key().as_ref());
        serde_json::json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "bench", "x": x}]})
    } else {
        exchanges.fetch_add(1, Ordering::Relaxed);
        let now = now();
        let token = sign(
            key,
            &serde_json::json!({"iss": issuer, "aud": AUDIENCE, "sub": "caller",
                "iat": now, "exp": now + 3600}),
        );
        serde_json::json!({"access_token": token, "token_type": "Bearer", "expires_in": 3600,
            "issued_token_type": "urn:ietf:params:oauth:token-type:access_token"})
    };
    let body = body.to_string();
    conn.write_all(
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .await?;
    Ok(())
}

/// Prints the table: `n` calls per row.
pub async fn report(n: usize) -> Result<()> {
    let issuer = Issuer::start().await.context("the in-process issuer")?;
    let secret = crate::systems::scratch("oauth-secret")?.join("secret");
    std::fs::write(&secret, "bench-secret\n")?;
    let oauth = format!(
        "[http.oauth]\nresource = \"{RESOURCE}\"\n\
         [[http.oauth.issuers]]\nissuer = \"{}\"\nclient_id = \"toolhost\"\nclient_secret_file = {:?}\n\
         [[http.oauth.bindings]]\nwhen = \"true\"\nsurface = \"chat\"\ntask_id = \"t\"\n",
        issuer.issuer,
        secret.display().to_string()
    );
    // The grant first: it belongs to `[plugin.bench]`, the config's last
    // table (see `telemetry::series_as`).
    let credentials = format!("[plugin.bench]\ngrant = [\"credentials\"]\n{oauth}");
    let token = issuer.token("caller");
    println!(
        "{n} plain stateless `tools/call`s of `kandev_bench_count` per row, one at a time (plugin protocol 2, toolhost's direct path).\n"
    );
    println!("| caller's token | p50 latency ms | toolhost CPU µs per call |\n|---|---|---|");
    let static_token = crate::systems::TOKEN.to_owned();
    let rows: [(&str, String, &str, bool); 4] = [
        (
            "static (`[[http.tokens]]`)",
            String::new(),
            &static_token,
            false,
        ),
        ("JWT, verification cached", oauth.clone(), &token, false),
        (
            "JWT, plugin granted `[credentials]` (exchange cached)",
            credentials,
            &token,
            true,
        ),
        ("static again (the noise)", oauth, &static_token, false),
    ];
    for (name, config, bearer, audiences) in rows {
        let (p50, cpu) =
            crate::telemetry::series_as(n, &config, bearer, audiences.then_some(AUDIENCE)).await?;
        println!("| {name} | {p50:.3} | {cpu:.0} |");
    }
    println!(
        "\nExchanges the issuer answered: {} (one per daemon that needed one; every later call used toolhost's cache). \
         The CPU of a series is read from /proc around it (a tick is 10 ms, so over {n} calls it is good to about {:.0} µs).",
        issuer.exchanges.load(Ordering::Relaxed),
        10_000.0 / n.max(1) as f64
    );
    Ok(())
}
