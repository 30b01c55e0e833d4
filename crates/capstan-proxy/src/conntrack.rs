//! Stale UDP flows, cleared as upstream's proxy clears them (`conntrack.CleanStaleEntries`):
//! UDP has no connection to end, so after an endpoint goes away the kernel keeps sending a
//! client's datagrams to it along the existing conntrack entry until the entry times out. After
//! each sync every UDP entry is read (`conntrack -L`), and one addressed to a UDP Service port's
//! frontend (cluster IP or external IP and port, or its node port on any address) whose reply
//! comes from an address that is not one of that port's serving endpoints is deleted
//! (`conntrack -D`). Ports without serving endpoints are left alone, as upstream leaves them.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use crate::rules::Desired;

/// One UDP flow of the conntrack table, as far as the cleanup looks at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    /// The original destination address.
    pub orig_dst: Ipv4Addr,
    /// The original destination port.
    pub orig_dport: u16,
    /// The reply's source address: the endpoint the flow was DNATed to.
    pub reply_src: Ipv4Addr,
}

/// A deletion: flows to a frontend (`ip:port`, or a node port on any address) answered by
/// `endpoint`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stale {
    /// `--orig-dst ip --orig-port-dst port --reply-src endpoint`.
    Frontend {
        /// The Service IP.
        ip: Ipv4Addr,
        /// The Service port.
        port: u16,
        /// The address that is no longer a serving endpoint.
        endpoint: Ipv4Addr,
    },
    /// `--orig-port-dst port --reply-src endpoint`.
    NodePort {
        /// The node port.
        port: u16,
        /// The address that is no longer a serving endpoint.
        endpoint: Ipv4Addr,
    },
}

impl Stale {
    /// The `conntrack` arguments that delete these flows.
    pub fn args(&self) -> Vec<String> {
        let mut args: Vec<String> = ["-D", "-p", "udp", "-f", "ipv4"].map(String::from).to_vec();
        match self {
            Stale::Frontend { ip, port, endpoint } => args.extend([
                "--orig-dst".to_owned(),
                ip.to_string(),
                "--orig-port-dst".to_owned(),
                port.to_string(),
                "--reply-src".to_owned(),
                endpoint.to_string(),
            ]),
            Stale::NodePort { port, endpoint } => args.extend([
                "--orig-port-dst".to_owned(),
                port.to_string(),
                "--reply-src".to_owned(),
                endpoint.to_string(),
            ]),
        }
        args
    }
}

/// The UDP flows in `conntrack -L` output (`udp 17 29 src=… dst=… sport=… dport=… [flags]
/// src=… dst=… sport=… dport=… …`): the first `dst`/`dport` are the original direction's, the
/// second `src` the reply's. Lines that do not read so are skipped.
pub fn parse_flows(text: &str) -> Vec<Flow> {
    text.lines()
        .filter(|line| line.starts_with("udp"))
        .filter_map(|line| {
            let mut dst = Vec::new();
            let mut dport = Vec::new();
            let mut src = Vec::new();
            for word in line.split_whitespace() {
                match word.split_once('=') {
                    Some(("dst", v)) => dst.push(v),
                    Some(("dport", v)) => dport.push(v),
                    Some(("src", v)) => src.push(v),
                    _ => {}
                }
            }
            Some(Flow {
                orig_dst: dst.first()?.parse().ok()?,
                orig_dport: dport.first()?.parse().ok()?,
                reply_src: src.get(1)?.parse().ok()?,
            })
        })
        .collect()
}

/// The deletions `flows` call for under `desired`.
pub fn stale(flows: &[Flow], desired: &Desired) -> BTreeSet<Stale> {
    let mut frontends: BTreeMap<(Ipv4Addr, u16), &BTreeSet<Ipv4Addr>> = BTreeMap::new();
    let mut node_ports: BTreeMap<u16, &BTreeSet<Ipv4Addr>> = BTreeMap::new();
    for part in desired.services.values() {
        for udp in &part.udp {
            for ip in &udp.ips {
                frontends.insert((*ip, udp.port), &udp.serving);
            }
            if let Some(node_port) = udp.node_port {
                node_ports.insert(node_port, &udp.serving);
            }
        }
    }
    let mut out = BTreeSet::new();
    for flow in flows {
        if let Some(serving) = frontends.get(&(flow.orig_dst, flow.orig_dport))
            && !serving.contains(&flow.reply_src)
        {
            out.insert(Stale::Frontend {
                ip: flow.orig_dst,
                port: flow.orig_dport,
                endpoint: flow.reply_src,
            });
        }
        if let Some(serving) = node_ports.get(&flow.orig_dport)
            && !serving.contains(&flow.reply_src)
        {
            out.insert(Stale::NodePort {
                port: flow.orig_dport,
                endpoint: flow.reply_src,
            });
        }
    }
    out
}

/// Reads the UDP flows with `command` (e.g. `["conntrack"]`, or run in a network namespace)
/// and deletes the stale ones; how many deletions were asked for.
pub async fn clean(command: &[String], desired: &Desired) -> Result<usize, String> {
    if desired.services.values().all(|part| part.udp.is_empty()) {
        return Ok(0);
    }
    let Some((program, args)) = command.split_first() else {
        return Err("no conntrack command configured".to_owned());
    };
    let listed = tokio::process::Command::new(program)
        .args(args)
        .args(["-L", "-p", "udp", "-f", "ipv4"])
        .output()
        .await
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if !listed.status.success() {
        return Err(format!(
            "{program} -L: {}",
            String::from_utf8_lossy(&listed.stderr).trim()
        ));
    }
    let stale = stale(
        &parse_flows(&String::from_utf8_lossy(&listed.stdout)),
        desired,
    );
    for deletion in &stale {
        // conntrack exits 1 when nothing matched (the flow ended meanwhile): not an error.
        let output = tokio::process::Command::new(program)
            .args(args)
            .args(deletion.args())
            .output()
            .await
            .map_err(|e| format!("cannot run {program}: {e}"))?;
        if !output.status.success() && output.status.code() != Some(1) {
            return Err(format!(
                "{program} -D: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
    }
    Ok(stale.len())
}

#[cfg(test)]
mod tests;
