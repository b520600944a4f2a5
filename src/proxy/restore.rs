//! `dcp restore N` through the proxy: the agent of a proxied client (Claude Code, Codex) has
//! no dcp tool, but a shell, and the placeholders tell it to run `dcp restore N` there. The
//! command asks the proxy on loopback (`GET /dcp/restore?id=N`), which answers with the exact
//! text from the last request of the conversation that hides it, as it keeps it in memory
//! ([`super::conversation`]): nothing is run again, nothing is read from disk.
//!
//! The proxy stores no message text and logs none: the text goes from memory to the one who
//! asks. Only a holder of the key the proxy draws when it starts may ask: it writes its
//! address and the key to `proxy.json` in dcp's cache dir, readable by its user alone, and
//! removes it as it stops. A conversation is not named by the command: the handle is looked
//! up in the conversations the proxy holds, most recently active first, and the first that
//! hides it answers (two concurrent conversations that both hide the same number: the one
//! that made the latest request).

use std::path::{Path, PathBuf};

use hyper::http::request::Parts;
use hyper::{Response, StatusCode};
use serde_json::json;

use super::forward::Body;
use super::{Shared, ENGINE_TIMEOUT};
use crate::session::Message;

/// The path the proxy answers restores on.
pub const PATH: &str = "/dcp/restore";

/// The header that carries the key.
pub const KEY_HEADER: &str = "x-dcp-key";

/// Where a running proxy says how to reach it: `proxy.json` in dcp's cache dir.
pub fn access_file(cache_dir: &Path) -> PathBuf {
    cache_dir.join("proxy.json")
}

/// The key and address a proxy published, removed when dropped.
pub struct PublishedKey {
    pub key: String,
    file: Option<PathBuf>,
}

impl PublishedKey {
    /// Draws a key and writes it with the address `url` to `file`, readable by this user
    /// alone. A file that cannot be written leaves `dcp restore` unable to reach the proxy,
    /// which is said once on stderr; the proxy works on.
    pub fn publish(url: &str, file: PathBuf) -> PublishedKey {
        let key = random_key();
        let text = json!({"url": url, "key": key, "pid": std::process::id()}).to_string();
        match write_private(&file, &text) {
            Ok(()) => PublishedKey { key, file: Some(file) },
            Err(e) => {
                eprintln!("dcp proxy: cannot write {} ({e}): `dcp restore` will not reach this proxy", file.display());
                PublishedKey { key, file: None }
            }
        }
    }
}

impl Drop for PublishedKey {
    fn drop(&mut self) {
        if let Some(file) = &self.file {
            // Only this proxy's own file: another proxy started since may have replaced it.
            let ours = std::fs::read_to_string(file).is_ok_and(|t| t.contains(&self.key));
            if ours {
                let _ = std::fs::remove_file(file);
            }
        }
    }
}

/// 128 random bits as hex, from the system's randomness.
fn random_key() -> String {
    let mut bytes = [0u8; 16];
    let drawn = std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes));
    if drawn.is_err() {
        use std::hash::{BuildHasher, Hasher};
        for (i, chunk) in bytes.chunks_mut(8).enumerate() {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_usize(i);
            chunk.copy_from_slice(&h.finish().to_le_bytes());
        }
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `text` to `file` through a temp file, mode 0600 where there are modes.
fn write_private(file: &Path, text: &str) -> std::io::Result<()> {
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = file.with_extension(format!("tmp-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    std::io::Write::write_all(&mut options.open(&tmp)?, text.as_bytes())?;
    std::fs::rename(&tmp, file)
}

/// Whether a request is a restore's, which the proxy answers itself.
pub fn is_restore(parts: &Parts) -> bool {
    parts.method == hyper::Method::GET && parts.uri.path() == PATH
}

/// Answers `GET /dcp/restore?id=N`: the exact text, or why not (the key missing or wrong: 403;
/// nothing by that handle: 404).
pub async fn answer(shared: &Shared, parts: &Parts) -> Response<Body> {
    let key = parts.headers.get(KEY_HEADER).and_then(|v| v.to_str().ok());
    if shared.restore_key.is_empty() || key != Some(shared.restore_key.as_str()) {
        return text(StatusCode::FORBIDDEN, "dcp proxy: not the key this proxy published".to_string());
    }
    let raw = parts.uri.query().and_then(|q| query_id(q)).unwrap_or_default();
    match restored(shared, raw).await {
        Ok(found) => text(StatusCode::OK, found),
        Err(why) => text(StatusCode::NOT_FOUND, why),
    }
}

/// The text handle `raw` names, from the conversation that hides it.
async fn restored(shared: &Shared, raw: String) -> Result<String, String> {
    let sids = shared.conversations.sids();
    let asked = raw.clone();
    let found = shared.engine.call(move |server| server.restore_target(&sids, &asked), ENGINE_TIMEOUT).await;
    let (sid, target) = found.map_err(|e| e.to_string())??;
    let slot = shared.conversations.slot(&sid);
    let held = slot.lock().await;
    let messages: Vec<Message> = held
        .as_ref()
        .map(|c| c.builder().messages().iter().filter_map(|m| serde_json::from_value(m.clone()).ok()).collect())
        .unwrap_or_default();
    crate::sidecar::restore::text(&target, &messages, &[])
        .ok_or_else(|| crate::texts::restore::unreadable(raw.trim(), "the proxy no longer holds its conversation"))
}

/// The `id` of a query string, percent-decoded.
fn query_id(query: &str) -> Option<String> {
    let value = query.split('&').find_map(|kv| kv.strip_prefix("id="))?;
    let mut out = Vec::new();
    let bytes = value.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

fn text(status: StatusCode, body: String) -> Response<Body> {
    let mut response = Response::new(super::forward::boxed_bytes(bytes::Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

/// `dcp restore N`: asks the running proxy, named by `proxy.json` in `cache_dir`, for the text
/// handle `handle` names. The text, or why there is none.
pub fn fetch(cache_dir: &Path, handle: &str) -> Result<Vec<u8>, String> {
    let file = access_file(cache_dir);
    let published = std::fs::read_to_string(&file).map_err(|e| {
        format!(
            "no dcp proxy to ask ({}: {e}); `dcp restore` answers through a running `dcp proxy` (in OpenCode with the plugin, the agent's restore tool does it)",
            file.display()
        )
    })?;
    let access: serde_json::Value = serde_json::from_str(&published)
        .map_err(|e| format!("{} is not what dcp proxy writes: {e}", file.display()))?;
    let (url, key) = (access["url"].as_str().unwrap_or(""), access["key"].as_str().unwrap_or(""));
    let address = url
        .strip_prefix("http://")
        .filter(|a| !a.contains('/'))
        .ok_or_else(|| format!("{}: no proxy address in it", file.display()))?;
    let query: String = handle
        .bytes()
        .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect();
    let request = format!(
        "GET {PATH}?id={query} HTTP/1.1\r\nHost: {address}\r\n{KEY_HEADER}: {key}\r\nConnection: close\r\n\r\n"
    );
    let unreachable = |e: std::io::Error| format!("the dcp proxy at {url} does not answer ({e}); is it still running?");
    let mut stream = std::net::TcpStream::connect(address).map_err(unreachable)?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(30))).map_err(unreachable)?;
    std::io::Write::write_all(&mut stream, request.as_bytes()).map_err(unreachable)?;
    let mut response = Vec::new();
    std::io::Read::read_to_end(&mut stream, &mut response).map_err(unreachable)?;
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("the dcp proxy at {url} answered no HTTP"))?;
    let (head, body) = (String::from_utf8_lossy(&response[..split]).into_owned(), response[split + 4..].to_vec());
    match head.split_whitespace().nth(1) {
        Some("200") => Ok(body),
        _ => Err(String::from_utf8_lossy(&body).into_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_s_id_is_percent_decoded() {
        assert_eq!(query_id("id=12").as_deref(), Some("12"));
        assert_eq!(query_id("x=1&id=b%33").as_deref(), Some("b3"));
        assert_eq!(query_id("x=1"), None);
    }

    #[test]
    fn the_published_file_is_this_user_s_alone_and_goes_with_the_proxy() {
        let dir = tempfile::tempdir().unwrap();
        let file = access_file(dir.path());
        let access = PublishedKey::publish("http://127.0.0.1:9", file.clone());
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.contains(&access.key) && access.key.len() == 32, "{text}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
        }
        drop(access);
        assert!(!file.exists());
    }
}
