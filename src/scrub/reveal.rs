//! Secrets written so that a pattern does not see them, while a reader or a
//! program gets them back: split by characters nobody sees, spelled in HTML
//! entities (`&#115;k-ant…`), or base64-encoded. An agent told by a stranger
//! to publish its key would write it one of these ways; each form is turned
//! back into plain text and masked there.
//!
//! What is published stays as written unless it held a secret: only then
//! are the invisible characters dropped or the entities decoded — and only
//! the entities that stand for letters, digits, `-` and `_` (what keys are
//! made of), so decoding never turns `&lt;` into markup.

use super::{mask, MASK};
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use regex::Regex;
use std::borrow::Cow;
use std::sync::OnceLock;

/// `masked` (the text as [`mask`] left it) with the secrets hidden in it
/// masked too; borrowed from `text` when there were none.
pub(super) fn unhide(masked: Cow<'_, str>) -> Cow<'_, str> {
    let mut out = masked;
    if out.chars().any(crate::text::hidden) {
        let seen: String = out.chars().filter(|c| !crate::text::hidden(*c)).collect();
        if let Cow::Owned(m) = mask(&seen) {
            out = Cow::Owned(m);
        }
    }
    if out.contains("&#") {
        if let Some(decoded) = key_entities_decoded(&out) {
            if let Cow::Owned(m) = mask(&decoded) {
                out = Cow::Owned(m);
            }
        }
    }
    if let Some(m) = encoded_masked(&out) {
        out = Cow::Owned(m);
    }
    out
}

/// `text` with each numeric character reference (`&#115;`, `&#x73;`, with
/// or without its `;`) that stands for a letter, digit, `-` or `_` replaced
/// by that character; `None` when there is none.
fn key_entities_decoded(text: &str) -> Option<String> {
    static ENTITY: OnceLock<Regex> = OnceLock::new();
    let entity = ENTITY
        .get_or_init(|| Regex::new(r"&#(?:[xX]([0-9a-fA-F]{1,6})|([0-9]{1,7}));?").expect("valid"));
    let mut any = false;
    let out = entity.replace_all(text, |c: &regex::Captures<'_>| {
        let code = match (c.get(1), c.get(2)) {
            (Some(h), _) => u32::from_str_radix(h.as_str(), 16).ok(),
            (_, Some(d)) => d.as_str().parse().ok(),
            _ => None,
        };
        match code.and_then(char::from_u32) {
            Some(ch) if ch.is_ascii_alphanumeric() || ch == '-' || ch == '_' => {
                any = true;
                ch.to_string()
            }
            _ => c[0].to_string(),
        }
    });
    any.then(|| out.into_owned())
}

/// `text` with each base64 run (standard or URL-safe alphabet, padded or
/// not) whose decoded bytes hold a secret replaced by [`MASK`]; `None` when
/// there is none.
fn encoded_masked(text: &str) -> Option<String> {
    static RUN: OnceLock<Regex> = OnceLock::new();
    // A secret is at least 8 bytes, so its base64 at least 12 characters.
    let run = RUN.get_or_init(|| Regex::new(r"[A-Za-z0-9+/_\-]{12,}={0,2}").expect("valid"));
    let mut any = false;
    let out = run.replace_all(text, |c: &regex::Captures<'_>| {
        if decoded(&c[0]).is_some_and(|d| matches!(mask(&d), Cow::Owned(_))) {
            any = true;
            MASK.to_string()
        } else {
            c[0].to_string()
        }
    });
    any.then(|| out.into_owned())
}

/// The text a base64 run decodes to (invalid UTF-8 replaced), trying the
/// alphabet its characters say and, for a run whose length is not a whole
/// number of groups, its longest whole prefix.
fn decoded(run: &str) -> Option<String> {
    const LENIENT: GeneralPurposeConfig = GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true);
    const STANDARD: GeneralPurpose = GeneralPurpose::new(&base64::alphabet::STANDARD, LENIENT);
    const URL_SAFE: GeneralPurpose = GeneralPurpose::new(&base64::alphabet::URL_SAFE, LENIENT);
    let engine = if run.contains(['-', '_']) {
        &URL_SAFE
    } else {
        &STANDARD
    };
    let body = run.trim_end_matches('=');
    let bytes = engine
        .decode(body)
        .or_else(|_| engine.decode(&body[..body.len() - body.len() % 4]))
        .ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::super::{register, scrub};
    use base64::Engine;
    use proptest::prelude::*;

    /// Whether `text` still gives `secret` back to a reader or a program:
    /// as written, without its invisible characters, with its entities
    /// decoded, or in a base64 run decoded.
    fn gives_back(text: &str, secret: &str) -> bool {
        let seen: String = text.chars().filter(|c| !crate::text::hidden(*c)).collect();
        let decoded = super::key_entities_decoded(&seen).unwrap_or(seen.clone());
        let b64 = regex::Regex::new(r"[A-Za-z0-9+/_\-]{12,}={0,2}").unwrap();
        [text, &seen, &decoded].iter().any(|t| t.contains(secret))
            || b64
                .find_iter(text)
                .any(|m| super::decoded(m.as_str()).is_some_and(|d| d.contains(secret)))
    }

    #[test]
    fn the_variants_found_from_outside_are_masked() {
        let gh = "ghp_16C7e42F292c6912E7710c838347Ae178B4a";
        let ant = "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz012345";
        let pgp =
            "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBF\n-----END PGP PRIVATE KEY BLOCK-----";
        let zero_width = format!("{}\u{200B}{}", &ant[..10], &ant[10..]);
        let entities = format!("&#115;&#x6B;{}", &ant[2..]);
        let b64 = base64::engine::general_purpose::STANDARD.encode(format!("key={ant}"));
        for (text, secret) in [
            (format!("x{gh} glued"), gh),
            (format!("export T=xghp_{}", &gh[4..]), &gh[4..]),
            (format!("key: {pgp} end"), "lQOYBF"),
            (format!("say {zero_width} now"), &ant[10..]),
            (format!("say {entities} now"), &ant[2..]),
            (format!("cfg: {b64}"), ant),
        ] {
            let out = scrub(&text);
            assert!(!gives_back(&out, secret), "{text:?} → {out:?}");
            assert!(out.contains("***"), "{out}");
        }
        // What holds no secret is left as written, entities and all.
        for plain in [
            "a &lt;b&gt; &#60;!-- x --&#62; tab\u{200B}le",
            "branch task-implement-the-rate-limiter-now",
            "commit 9fceb02d0ae598e95dc970b74767f19372d61af8 in src/place/hosted/handoff.rs",
        ] {
            assert_eq!(scrub(plain), plain);
        }
    }

    #[test]
    fn entities_that_stand_for_markup_stay_entities() {
        let ant = "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz012345";
        let text = format!("&lt;!-- &#115;{} --&gt;", &ant[1..]);
        assert_eq!(scrub(&text), "&lt;!-- *** --&gt;");
    }

    /// One way of writing `secret` that hides it from a plain pattern.
    fn obfuscate(secret: &str, how: u8, at: usize) -> String {
        let at = at % secret.len();
        match how % 4 {
            0 => format!("{}\u{200B}{}", &secret[..at], &secret[at..]),
            1 => secret
                .chars()
                .enumerate()
                .map(|(i, c)| {
                    if i % 3 == at % 3 {
                        format!("&#{};", c as u32)
                    } else {
                        c.to_string()
                    }
                })
                .collect(),
            2 => base64::engine::general_purpose::STANDARD
                .encode(format!("{}{secret}", &secret[..at])),
            _ => base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret),
        }
    }

    proptest! {
        /// A planted secret, known by value or by its shape, never comes
        /// back out of the scrubber in any of the forms it undoes.
        #[test]
        fn an_obfuscated_secret_never_survives(
            before in "[ a-z.:=\n]{0,12}",
            after in "[ a-z.:=\n]{0,12}",
            value in "[A-Za-z0-9]{12,24}",
            how in 0u8..4,
            at in 0usize..64,
            shaped in any::<bool>(),
        ) {
            let secret = if shaped { format!("ghp_{value}{value}") } else { register(&value); value };
            let text = format!("{before} {} {after}", obfuscate(&secret, how, at));
            let out = scrub(&text);
            prop_assert!(!gives_back(&out, &secret), "{:?} → {:?}", text, out);
        }
    }
}
