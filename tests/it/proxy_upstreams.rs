//! `dcp proxy`'s upstreams: each API's own from dcp.jsonc, and an https upstream (a local
//! TLS fake with a certificate a private CA signed, trusted through `proxy.upstreamCa` or
//! `SSL_CERT_FILE`, as real upstreams are https).

use std::io::{BufReader, Write};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::proxy::{as_chat, post_bytes, proxied_outputs, read_request, reads, ProxyProcess, Recorder, OK};

/// A proxy with the dirs under `dir`, `config` as its dcp.jsonc and `args` as its upstreams.
fn proxy_with(dir: &std::path::Path, config: &str, args: &[&str]) -> ProxyProcess {
    std::fs::create_dir_all(dir.join("config/opencode")).unwrap();
    std::fs::write(dir.join("config/opencode/dcp.jsonc"), config).unwrap();
    let env = [
        ("HOME", dir.join("home")),
        ("XDG_CONFIG_HOME", dir.join("config")),
        ("XDG_DATA_HOME", dir.join("data")),
        ("SSL_CERT_FILE", dir.join("no-such-file")),
    ];
    let stderr = Stdio::from(std::fs::File::create(dir.join("stderr")).unwrap());
    ProxyProcess::spawn(args, env, stderr)
}

#[test]
fn each_api_goes_to_its_own_upstream_from_dcp_jsonc() {
    let (anthropic, chat, default) = (Recorder::start(), Recorder::start(), Recorder::start());
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        r#"{{"proxy": {{"upstream": "http://127.0.0.1:{}", "upstreams": {{"anthropic": "http://127.0.0.1:{}/", "chat": "http://127.0.0.1:{}"}}}}}}"#,
        default.port, anthropic.port, chat.port
    );
    let proxy = proxy_with(dir.path(), &config, &[]);
    let body = as_chat(&reads(2)).to_string();
    assert!(post_bytes(proxy.port, "/v1/chat/completions", body.as_bytes()).starts_with("HTTP/1.1 200"));
    assert!(post_bytes(proxy.port, "/v1/messages", br#"{"messages": []}"#).starts_with("HTTP/1.1 200"));
    assert!(post_bytes(proxy.port, "/v1/responses", br#"{"input": []}"#).starts_with("HTTP/1.1 200"));
    assert_eq!(chat.last_bytes(), body.as_bytes());
    assert_eq!(anthropic.last_bytes(), br#"{"messages": []}"#);
    assert_eq!(default.last_bytes(), br#"{"input": []}"#, "an API without its own upstream goes to the default");
    assert!(proxy.stop());
}

/// Runs `dcp proxy` with `config` and no `--upstream`, expecting it to refuse to start;
/// returns its stderr.
fn refused(config: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("config/opencode")).unwrap();
    std::fs::write(dir.path().join("config/opencode/dcp.jsonc"), config).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dcp"))
        .args(["proxy", "--listen", "127.0.0.1:0"])
        .env("HOME", dir.path().join("home"))
        .env("XDG_CONFIG_HOME", dir.path().join("config"))
        .env("XDG_DATA_HOME", dir.path().join("data"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn an_upstream_that_is_not_http_or_https_is_refused_naming_its_config_key() {
    let err = refused(r#"{"proxy": {"upstreams": {"chat": "ftp://example"}}}"#);
    assert!(err.contains(r#"proxy.upstreams.chat "ftp://example" must start with http:// or https://"#), "{err}");
    let err = refused("{}");
    assert!(err.contains("no upstream: give --upstream URL"), "{err}");
    let err = refused(r#"{"proxy": {"upstream": "http://127.0.0.1:1", "upstreamCa": "/no/such/ca.pem"}}"#);
    assert!(err.contains("proxy.upstreamCa /no/such/ca.pem: not a PEM certificate file"), "{err}");
}

/// A private CA and a certificate it signed for `name`, as the upstream serves it.
struct Issued {
    ca_pem: String,
    chain: Vec<rustls::pki_types::CertificateDer<'static>>,
    key: rustls::pki_types::PrivateKeyDer<'static>,
}

fn issued(name: &str) -> Issued {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, "dcp test private CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec![name.to_string()]).unwrap().signed_by(&key, &ca, &ca_key).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    Issued { ca_pem: ca.pem(), chain: vec![leaf.der().clone()], key }
}

/// A fake upstream speaking TLS with `issued`'s certificate; keeps the bodies it receives and
/// answers `{}`.
struct TlsRecorder {
    port: u16,
    bodies: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl TlsRecorder {
    fn start(issued: Issued) -> TlsRecorder {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(issued.chain, issued.key)
            .unwrap();
        let config = Arc::new(config);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&bodies);
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (config, kept) = (Arc::clone(&config), Arc::clone(&kept));
                std::thread::spawn(move || {
                    let Ok(tls) = rustls::ServerConnection::new(config) else { return };
                    let mut stream = BufReader::new(rustls::StreamOwned::new(tls, conn));
                    let Ok(body) = read_request(&mut stream) else { return };
                    kept.lock().unwrap().push(body);
                    let _ = stream.get_mut().write_all(OK);
                    let _ = stream.get_mut().flush();
                });
            }
        });
        TlsRecorder { port, bodies }
    }
}

/// A proxy in front of `url` in its own dirs, with `config` and `SSL_CERT_FILE` set to
/// `cert_file`; sends it a conversation and returns the answer.
fn through_tls(url: &str, config: &str, cert_file: &std::path::Path) -> String {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("config/opencode")).unwrap();
    std::fs::write(dir.path().join("config/opencode/dcp.jsonc"), config).unwrap();
    let env = [
        ("HOME", dir.path().join("home")),
        ("XDG_CONFIG_HOME", dir.path().join("config")),
        ("XDG_DATA_HOME", dir.path().join("data")),
        ("SSL_CERT_FILE", cert_file.to_path_buf()),
    ];
    let stderr = Stdio::from(std::fs::File::create(dir.path().join("stderr")).unwrap());
    let proxy = ProxyProcess::spawn(&["--upstream", url], env, stderr);
    let answer = post_bytes(proxy.port, "/v1/chat/completions", as_chat(&reads(9)).to_string().as_bytes());
    assert!(proxy.stop());
    answer
}

#[test]
fn an_https_upstream_signed_by_a_private_ca_is_reached_through_upstream_ca_or_ssl_cert_file_and_refused_without() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    let certified = issued("127.0.0.1");
    std::fs::write(&ca, &certified.ca_pem).unwrap();
    let upstream = TlsRecorder::start(certified);
    let url = format!("https://127.0.0.1:{}", upstream.port);
    let none = dir.path().join("no-such-file");
    let named = format!(r#"{{"proxy": {{"upstreamCa": {}}}}}"#, Value::from(ca.to_str().unwrap()));
    for (config, cert_file) in [(named.as_str(), none.as_path()), ("{}", ca.as_path())] {
        let answer = through_tls(&url, config, cert_file);
        assert!(answer.starts_with("HTTP/1.1 200"), "{config} {}: {answer}", cert_file.display());
        let got = upstream.bodies.lock().unwrap().last().cloned().expect("the upstream got the request");
        let outputs = proxied_outputs(&serde_json::from_slice(&got).unwrap());
        assert_eq!(outputs.len(), 9, "the whole conversation reached the upstream over TLS");
    }
    let answer = through_tls(&url, "{}", &none);
    assert!(answer.starts_with("HTTP/1.1 502"), "a certificate no root vouches for is not trusted: {answer}");
    let words = format!("the upstream {url} could not be reached: its certificate is not trusted (UnknownIssuer)");
    assert!(answer.contains(&words) && answer.contains("proxy.upstreamCa or SSL_CERT_FILE"), "{answer}");
    assert_eq!(upstream.bodies.lock().unwrap().len(), 2, "nothing reached the upstream without the CA");

    let other = issued("api.example");
    std::fs::write(&ca, &other.ca_pem).unwrap();
    let misnamed = TlsRecorder::start(other);
    let url = format!("https://127.0.0.1:{}", misnamed.port);
    let answer = through_tls(&url, &named, &none);
    assert!(answer.contains("its certificate is not trusted (NotValidForName"), "a wrong name: {answer}");
}
