//! Test helpers shared by the modules' tests.

/// A network namespace of its own, removed when dropped, so the kernel's real nftables can
/// be exercised without touching the host's rules.
pub struct Netns(pub String);

impl Netns {
    pub fn new(tag: &str) -> Netns {
        let name = format!("capstan-nft-{tag}-{}", std::process::id());
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &name])
            .output();
        let status = std::process::Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .unwrap();
        assert!(status.success(), "ip netns add {name}");
        Netns(name)
    }

    pub fn nft(&self) -> Vec<String> {
        self.command("nft")
    }

    /// `program` run in the namespace.
    pub fn command(&self, program: &str) -> Vec<String> {
        ["ip", "netns", "exec", &self.0, program]
            .map(String::from)
            .to_vec()
    }

    /// `nft -j list table ip <table>` in the namespace, or `None` when there is no such table.
    pub fn list(&self, table: &str) -> Option<serde_json::Value> {
        let output = std::process::Command::new("ip")
            .args([
                "netns", "exec", &self.0, "nft", "-j", "list", "table", "ip", table,
            ])
            .output()
            .unwrap();
        output
            .status
            .success()
            .then(|| serde_json::from_slice(&output.stdout).unwrap())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.0])
            .output();
    }
}
