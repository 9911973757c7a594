//! A stand-in receiver of outgoing webhooks (notices), on a real socket.
#![allow(dead_code)]

/// One request a receiver took: its headers (names in lower case) and body.
pub type Received = (Vec<(String, String)>, Vec<u8>);

/// A stand-in receiver of notices: records each request and answers 200,
/// or (`answer: false`) takes the request and never answers.
pub struct Receiver {
    pub url: String,
    got: std::sync::Arc<std::sync::Mutex<Vec<Received>>>,
}

impl Receiver {
    pub fn start(answer: bool) -> Receiver {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = got.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for conn in listener.incoming().flatten() {
                let mut r = BufReader::new(conn);
                let mut headers = Vec::new();
                let mut line = String::new();
                let _ = r.read_line(&mut line);
                loop {
                    line.clear();
                    if r.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                        break;
                    }
                    if let Some((k, v)) = line.trim().split_once(':') {
                        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
                    }
                }
                let len: usize = headers
                    .iter()
                    .find(|(k, _)| k == "content-length")
                    .and_then(|(_, v)| v.parse().ok())
                    .unwrap_or(0);
                let mut body = vec![0; len];
                let _ = r.read_exact(&mut body);
                seen.lock().unwrap().push((headers, body));
                let mut conn = r.into_inner();
                if answer {
                    let _ = conn.write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                    );
                } else {
                    held.push(conn);
                }
            }
        });
        Receiver { url, got }
    }

    /// Each request received: its headers by name, and its body.
    pub fn notices(&self) -> Vec<(std::collections::HashMap<String, String>, Vec<u8>)> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .map(|(h, b)| (h.iter().cloned().collect(), b.clone()))
            .collect()
    }
}
