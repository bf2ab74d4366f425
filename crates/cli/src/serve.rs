#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    #[arg(long, env = "STEPWISE_LISTEN", default_value = "127.0.0.1:7777")]
    pub listen: String,
}

pub async fn run<S: stepwise_store::Store>(store: S, args: ServeArgs) -> anyhow::Result<()> {
    let _ = (store, args);
    anyhow::bail!("the server is not built yet")
}
