//! `echo-operator`: runs the example operator with the kubeconfig kube-rs finds (`KUBECONFIG`,
//! `~/.kube/config`, or the in-cluster service account), keeping its ledger in the namespace
//! given as the first argument (default `default`). `echo-operator --crd` prints the Echo CRD
//! as JSON, for `kubectl apply -f -`.

use kube::CustomResourceExt;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arg = std::env::args().nth(1);
    if arg.as_deref() == Some("--crd") {
        println!(
            "{}",
            serde_json::to_string_pretty(&echo_operator::Echo::crd())?
        );
        return Ok(());
    }
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let client = kube::Client::try_default().await?;
    echo_operator::run(client, arg.as_deref().unwrap_or("default")).await;
    Ok(())
}
