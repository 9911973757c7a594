//! `X-Hub-Signature-256` checks: HMAC-SHA256 of the raw body, compared in constant
//! time, against each configured secret (several allow rotation).

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// Whether `header` (`sha256=<hex>`) signs `body` with any of `secrets`.
pub fn verify(secrets: &[impl AsRef<[u8]>], body: &[u8], header: Option<&str>) -> bool {
    let Some(hex_sig) = header.and_then(|h| h.strip_prefix("sha256=")) else {
        return false;
    };
    let Ok(sig) = hex::decode(hex_sig.trim()) else {
        return false;
    };
    secrets.iter().any(|secret| {
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.as_ref()) else {
            return false;
        };
        mac.update(body);
        mac.verify_slice(&sig).is_ok() // constant-time comparison
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::sign;

    /// GitHub's documented test vector.
    #[test]
    fn githubs_test_vector() {
        let header = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        assert!(verify(
            &["It's a Secret to Everybody"],
            b"Hello, World!",
            Some(header)
        ));
        assert_eq!(
            sign(b"It's a Secret to Everybody", b"Hello, World!"),
            header
        );
    }

    #[test]
    fn wrong_missing_or_malformed_signatures_fail_and_rotation_works() {
        let good = sign(b"new", b"body");
        assert!(!verify(&["old"], b"body", Some(&good)));
        assert!(verify(&["old", "new"], b"body", Some(&good)));
        assert!(!verify(&["new"], b"body!", Some(&good)));
        assert!(!verify(&["new"], b"body", None));
        assert!(!verify(&["new"], b"body", Some("sha1=abc")));
        assert!(!verify(&["new"], b"body", Some("sha256=zz")));
        assert!(!verify(&["new"], b"body", Some(&good[..good.len() - 2])));
    }
}
