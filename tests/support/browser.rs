//! A real browser for the tests of what people look at: Debian's headless
//! Chromium driven over WebDriver (`chromedriver`), with screenshots saved
//! in `target/screenshots/` and axe-core (npm) injected to report
//! accessibility violations.
#![allow(dead_code)] // each test binary uses what it needs

use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Browser {
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

fn found(names: &[&str]) -> Option<PathBuf> {
    names.iter().map(PathBuf::from).find(|p| p.exists())
}

/// Where screenshots go: `target/screenshots/`.
pub fn screenshots() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl Browser {
    pub async fn open() -> Browser {
        let chromium = found(&["/usr/bin/chromium", "/usr/bin/chromium-browser"]).expect(
            "no Chromium: install Debian's `chromium` and `chromium-driver` (.ci/run does)",
        );
        let chromedriver = found(&["/usr/bin/chromedriver"])
            .expect("no chromedriver: install Debian's `chromium-driver` (.ci/run does)");
        let port = crate::support::free_port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting chromedriver");
        crate::support::wait_listening(port).await;
        let profile = tempfile::tempdir().unwrap();
        let caps = json!({
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                    "--disable-gpu", "--window-size=1280,1000",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            }
        });
        let serde_json::Value::Object(caps) = caps else {
            unreachable!()
        };
        let mut tries = 0;
        let client = loop {
            match ClientBuilder::new(HttpConnector::new())
                .capabilities(caps.clone())
                .connect(&format!("http://127.0.0.1:{port}"))
                .await
            {
                Ok(c) => break c,
                Err(e) if tries < 20 => {
                    tries += 1;
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Err(e) => panic!("no WebDriver session with Chromium: {e}"),
            }
        };
        Browser {
            client,
            driver,
            _profile: profile,
        }
    }

    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.unwrap();
    }

    /// The first element matching `css`, waiting up to `secs` for it.
    pub async fn wait_for(&self, what: &str, css: &str, secs: u64) -> Element {
        let start = Instant::now();
        loop {
            if let Ok(e) = self.client.find(Locator::Css(css)).await {
                return e;
            }
            if start.elapsed() > Duration::from_secs(secs) {
                let text = self.text().await;
                self.shot(&format!("timeout-{}", what.replace(' ', "-")))
                    .await;
                panic!("timed out waiting for {what} ({css}); the page says:\n{text}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Clicks the first element matching `css` as it is now (a page that
    /// updates itself replaces its elements, so none is held across).
    pub async fn click(&self, what: &str, css: &str, secs: u64) {
        self.wait_for(what, css, secs).await;
        let clicked = self
            .client
            .execute(
                "const e = document.querySelector(arguments[0]); if (!e) return false; e.click(); return true;",
                vec![serde_json::Value::String(css.to_string())],
            )
            .await
            .unwrap();
        assert_eq!(clicked, true, "{what} ({css}) went away before the click");
    }

    /// The text of the first element matching `css`, waiting for one; read
    /// by a script, since a page that updates itself replaces its elements.
    pub async fn text_of(&self, what: &str, css: &str, secs: u64) -> String {
        self.wait_for(what, css, secs).await;
        self.client
            .execute(
                "const e = document.querySelector(arguments[0]); return e ? e.innerText : '';",
                vec![serde_json::Value::String(css.to_string())],
            )
            .await
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    }

    /// An attribute of the first element matching `css`, as [`Browser::text_of`].
    pub async fn attr_of(&self, what: &str, css: &str, name: &str, secs: u64) -> String {
        self.wait_for(what, css, secs).await;
        self.client
            .execute(
                "const e = document.querySelector(arguments[0]); return e ? (e.getAttribute(arguments[1]) || '') : '';",
                vec![
                    serde_json::Value::String(css.to_string()),
                    serde_json::Value::String(name.to_string()),
                ],
            )
            .await
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    }

    /// Whether anything matches `css` now.
    pub async fn has(&self, css: &str) -> bool {
        self.client.find(Locator::Css(css)).await.is_ok()
    }

    /// What the page shows, as text.
    pub async fn text(&self) -> String {
        self.client
            .execute(
                "return document.body ? document.body.innerText : ''",
                vec![],
            )
            .await
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    }

    /// The page's markup.
    pub async fn source(&self) -> String {
        self.client.source().await.unwrap_or_default()
    }

    pub async fn shot(&self, name: &str) -> PathBuf {
        let path = screenshots().join(format!("{name}.png"));
        if let Ok(png) = self.client.screenshot().await {
            let _ = std::fs::write(&path, png);
        }
        path
    }

    /// axe-core's serious and critical violations on the page, as
    /// `id: help (n nodes)` lines.
    pub async fn accessibility_violations(&self) -> Vec<String> {
        let axe = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("target/npm/node_modules/axe-core/axe.min.js");
        let script = std::fs::read_to_string(&axe).unwrap_or_else(|_| {
            panic!(
                "{} is missing: scripts/test installs axe-core (npm) into target/npm",
                axe.display()
            )
        });
        self.client.execute(&script, vec![]).await.unwrap();
        let found = self
            .client
            .execute_async(
                "const done = arguments[arguments.length - 1];\
                 axe.run(document, { resultTypes: ['violations'] }).then(r => done(r.violations.map(v => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.length })))).catch(e => done([{ id: 'axe-error', impact: 'critical', help: String(e), nodes: 0 }]));",
                vec![],
            )
            .await
            .unwrap();
        found
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|v| matches!(v["impact"].as_str(), Some("serious" | "critical")))
            .map(|v| format!("{}: {} ({} nodes)", v["id"], v["help"], v["nodes"]))
            .collect()
    }

    pub async fn close(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
