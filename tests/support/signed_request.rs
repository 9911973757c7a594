//! A signed webhook delivery as raw HTTP/1.1 bytes, for the hostile-client
//! tests and the intake load bench alike (both write to the socket
//! themselves, so that they control every byte and every pause).

use hmac::{Hmac, KeyInit, Mac};

/// `POST /webhook` of `body` as event `event` with delivery id `id`, signed
/// with `secret` the way GitHub signs (`X-Hub-Signature-256`).
pub fn signed_request(secret: &str, event: &str, id: &str, body: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body);
    let sig = hex::encode(mac.finalize().into_bytes());
    let mut req = format!(
        "POST /webhook HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-GitHub-Event: {event}\r\nX-GitHub-Delivery: {id}\r\nX-Hub-Signature-256: sha256={sig}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    req
}
