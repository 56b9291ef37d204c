//! Headless Chromium (Debian's `chromium` and `chromium-driver`) driven over WebDriver, for tests that use the
//! console as a person would: open a page, read what it shows through the DOM, take a screenshot.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::process::Stdio;

use base64::Engine;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// A browser session, with its chromedriver and the browsers it started (their process group, killed on drop: a
/// killed chromedriver alone leaves its Chromium running, orphaned, on a machine that runs the suite again and again).
pub struct Browser {
    driver: tokio::process::Child,
    addr: SocketAddr,
    session: String,
}

/// The browser binary and its driver, as Debian installs them (`scripts/test` installs them when missing).
pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

impl Browser {
    pub async fn start() -> Self {
        // A chromedriver that exits before it says its port (seen once under a full suite's load) is started again,
        // twice at most; its stderr is kept for the failure's message.
        let mut attempts = 0;
        let (mut driver, mut lines, port) = loop {
            attempts += 1;
            let mut driver = tokio::process::Command::new(CHROMEDRIVER)
                .arg("--port=0")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .process_group(0)
                .spawn()
                .expect("chromedriver (Debian's chromium-driver)");
            let mut lines = BufReader::new(driver.stdout.take().unwrap()).lines();
            let port = loop {
                let Some(line) = lines.next_line().await.unwrap() else { break None };
                if let Some(rest) = line.split("started successfully on port ").nth(1) {
                    break Some(rest.trim_end_matches('.').parse::<u16>().unwrap());
                }
            };
            match port {
                Some(port) => break (driver, lines, port),
                None if attempts < 3 => continue,
                None => {
                    let mut said = String::new();
                    let _ = tokio::io::AsyncReadExt::read_to_string(driver.stderr.as_mut().unwrap(), &mut said).await;
                    panic!("chromedriver exited without saying on which port, 3 times: {said}");
                }
            }
        };
        let stderr = driver.stderr.take();
        tokio::spawn(async move {
            if let Some(mut stderr) = stderr {
                let _ = tokio::io::copy(&mut stderr, &mut tokio::io::sink()).await;
            }
        });
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let caps = json!({"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
            "binary": CHROMIUM,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,900", "--disable-dev-shm-usage"]
        }}}});
        let v = call(addr, "POST", "/session", Some(&caps)).await;
        let session =
            v["value"]["sessionId"].as_str().unwrap_or_else(|| panic!("a WebDriver session: {v}")).to_string();
        Browser { driver, addr, session }
    }

    async fn command(&self, method: &str, what: &str, body: Option<&Value>) -> Value {
        call(self.addr, method, &format!("/session/{}/{what}", self.session), body).await["value"].clone()
    }

    /// Navigates to `url` (a new page load).
    pub async fn open(&self, url: &str) {
        self.command("POST", "url", Some(&json!({"url": url}))).await;
    }

    /// Runs `script` (a function body) in the page; its return value.
    pub async fn script(&self, script: &str) -> Value {
        self.command("POST", "execute/sync", Some(&json!({"script": script, "args": []}))).await
    }

    /// The text of the first element `selector` matches (`null` when none does).
    pub async fn text(&self, selector: &str) -> Value {
        let selector = serde_json::to_string(selector).unwrap();
        self.script(&format!("const e = document.querySelector({selector}); return e ? e.textContent : null;")).await
    }

    /// A PNG of the window.
    pub async fn screenshot(&self) -> Vec<u8> {
        let b64 = self.command("GET", "screenshot", None).await;
        base64::engine::general_purpose::STANDARD.decode(b64.as_str().unwrap()).unwrap()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(pid) = self.driver.id().and_then(|p| rustix::process::Pid::from_raw(p as i32)) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
        let _ = self.driver.start_kill();
    }
}

/// One WebDriver call over HTTP/1.1.
async fn call(addr: SocketAddr, method: &str, path: &str, body: Option<&Value>) -> Value {
    let body = body.map(Value::to_string).unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut stream = BufReader::new(stream);
    stream.get_mut().write_all(head.as_bytes()).await.unwrap();
    stream.get_mut().write_all(body.as_bytes()).await.unwrap();
    // chromedriver keeps the connection open: read the head, then exactly Content-Length bytes.
    let mut length = 0;
    loop {
        let mut line = String::new();
        stream.read_line(&mut line).await.unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap();
        }
    }
    let mut bytes = vec![0; length];
    stream.read_exact(&mut bytes).await.unwrap();
    let body = String::from_utf8_lossy(&bytes);
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("WebDriver {method} {path}: {e}: {body}"))
}
