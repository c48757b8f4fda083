//! A headless Chromium driven through ChromeDriver (WebDriver), for the tests that need a real
//! browser: the console's, and those of pages of other origins acting on a listener.
//!
//! Without Chromium and ChromeDriver, [`browser`] says so loudly and gives `None` (the test
//! passes), unless `CI=true`, where it fails (`.ci/run` installs both).

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

/// Debian's Chromium.
pub const CHROMIUM: &str = "/usr/bin/chromium";
/// Debian's ChromeDriver.
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A headless Chromium session. When it is dropped — also when a test fails — ChromeDriver
/// and every Chromium process of its profile are killed, so no browser outlives its test.
pub struct Browser {
    /// The WebDriver session.
    pub client: Client,
    driver: Child,
    profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        let _ = Command::new("pkill")
            .arg("-f")
            .arg(self.profile.path())
            .status();
    }
}

/// A browser, or `None` (after saying why) where none is installed outside CI.
pub async fn browser() -> Option<Browser> {
    let missing: Vec<&str> = [CHROMIUM, CHROMEDRIVER]
        .into_iter()
        .filter(|p| !std::path::Path::new(p).exists())
        .collect();
    if !missing.is_empty() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "the browser tests need {missing:?}: apt-get install chromium chromium-driver"
        );
        eprintln!(
            "\n!!! SKIPPED: the browser tests need {missing:?} \
             (apt-get install chromium chromium-driver) !!!\n"
        );
        return None;
    }
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let driver = Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromedriver");
    let profile = tempfile::tempdir().expect("a browser profile");
    let caps = json!({
        "goog:chromeOptions": {
            "binary": CHROMIUM,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1300,1000",
                     format!("--user-data-dir={}", profile.path().display())],
        }
    });
    let caps = caps.as_object().expect("object").clone();
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let client = loop {
        let attempt = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps.clone())
            .connect(&url)
            .await;
        match attempt {
            Ok(c) => break c,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("could not start a browser session: {e}"),
        }
    };
    Some(Browser {
        client,
        driver,
        profile,
    })
}

impl Browser {
    /// The text of the first element matching `css` once `ready` accepts it (10 s at most).
    pub async fn text_when(&self, css: &str, ready: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut last = String::new();
        loop {
            if let Ok(e) = self.client.find(Locator::Css(css)).await
                && let Ok(t) = e.text().await
            {
                if ready(&t) {
                    return t;
                }
                last = t;
            }
            assert!(
                Instant::now() < deadline,
                "gave up waiting for {css}; last text: {last:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Clicks the first element matching `css` once there is one (10 s at most).
    pub async fn click(&self, css: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.client.find(Locator::Css(css)).await {
                // A live page may redraw the element between finding and clicking it (stale):
                // find it again.
                Ok(e) => match e.click().await {
                    Ok(_) => return,
                    Err(err) if Instant::now() >= deadline => panic!("click {css}: {err}"),
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                },
                Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("no {css} to click: {e}"),
            }
        }
    }

    /// How many elements match `css`.
    pub async fn count(&self, css: &str) -> usize {
        self.client
            .find_all(Locator::Css(css))
            .await
            .map_or(0, |v| v.len())
    }

    /// Saves a screenshot as `name` when `SLUICE_CONSOLE_SCREENSHOTS` names a folder.
    pub async fn screenshot(&self, name: &str) {
        let Ok(dir) = std::env::var("SLUICE_CONSOLE_SCREENSHOTS") else {
            return;
        };
        let png = self.client.screenshot().await.expect("screenshot");
        std::fs::write(std::path::Path::new(&dir).join(name), png).expect("write screenshot");
    }

    /// Ends the session.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}
