//! `fake-github --webhook-url URL --secret S [--app-id N] [--public-key FILE]`:
//! the fake alone, for trying the service by hand. Prints its address.

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let config = fake_github::Config {
        webhook_url: arg("--webhook-url"),
        webhook_secret: arg("--secret").unwrap_or_default(),
        app_id: arg("--app-id").and_then(|s| s.parse().ok()).unwrap_or(1),
        app_public_key_pem: arg("--public-key").and_then(|p| std::fs::read_to_string(p).ok()),
        installation_id: arg("--installation")
            .and_then(|s| s.parse().ok())
            .unwrap_or(1),
        data_dir: arg("--data-dir").map(Into::into),
    };
    let fake = fake_github::start(config).await;
    println!("fake GitHub on {}", fake.url());
    tokio::signal::ctrl_c().await.ok();
}
