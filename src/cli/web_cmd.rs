//! `supervise web`: the web view of this machine's operation of a plan,
//! served on 127.0.0.1 only (no sign-in: whoever can reach the loopback
//! can already read the plan's state directory). The page follows the
//! operation live while `supervise run` works in another terminal: the
//! state is read again whenever its log grows.

use crate::place::local::supervisor;
use crate::place::views::Views;
use crate::report::web::Origin;
use crate::server::web::{self, Access, Web};
use crate::store::Follower;
use anyhow::{Context, Result};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct WebArgs {
    /// The plan; default: EXECUTION_PLAN.md here or in a parent directory.
    #[arg(long)]
    pub plan: Option<PathBuf>,
    /// The port on 127.0.0.1 (0: any free one, printed).
    #[arg(long, default_value_t = 8321)]
    pub port: u16,
}

/// How often the operation's log is looked at for growth.
const LOOK_EVERY: Duration = Duration::from_millis(100);

pub fn run(args: &WebArgs) -> Result<i32> {
    let plan = match super::run_cmd::load(args.plan.as_deref())? {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let log = supervisor::state_dir(&plan).join("events.jsonl");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let (listener, addr) = super::loopback(args.port).await?;
        let views = Views::new();
        tokio::spawn(follow(log.clone(), views.clone()));
        // One write: whoever reads the address may stop reading after it.
        let later = if log.exists() {
            ""
        } else {
            "\nNo operation has started for this plan yet; the page shows it once `supervise run` starts one."
        };
        println!(
            "The web view of {} is at http://{addr}/ (Ctrl-C stops it).{later}",
            plan.path.display()
        );
        let app = web::router(Web::new(views, Access::Local));
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
            .context("serving the web view")?;
        Ok(0)
    })
}

/// Applies what the operation's log gains, as it gains it.
async fn follow(log: PathBuf, views: std::sync::Arc<Views>) {
    let mut follower = Follower::default();
    loop {
        let (back, looked) = tokio::task::spawn_blocking({
            let log = log.clone();
            move || {
                let looked = follower.look(&log);
                (follower, looked)
            }
        })
        .await
        .expect("reading the log does not panic");
        follower = back;
        match looked {
            Ok(true) => {
                if let Some(st) = &follower.state {
                    views.publish(&std::sync::Arc::new(st.clone()), &Origin::local());
                }
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "cannot read the operation's log; trying again"),
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}
