//! Names to answers, without I/O: what CoreDNS's `kubernetes` plugin (with `pods insecure`
//! and `fallthrough in-addr.arpa ip6.arpa`, as kubeadm and k3s configure it) answers for a
//! query, given a [`Snapshot`].
//!
//! Names in the cluster zone are parsed as the plugin parses them
//! (`[_port._proto.|endpoint.]service.namespace.svc.zone`, `ip.namespace.pod.zone`); a name
//! that cannot exist is NXDOMAIN, a name that exists without records of the asked type is
//! NODATA (NOERROR, no answer), both with the zone's SOA in the authority section and the
//! authoritative flag, as CoreDNS's `BackendError`. Reverse names of cluster IPs and endpoint
//! addresses get PTR answers; every other name, reverse names included, is forwarded
//! ([`Outcome::Forward`]).

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::rdata::{A, AAAA, CNAME, NS, PTR, SOA, SRV, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType};

use crate::records::{PortInfo, ServiceKind, Snapshot, canonical, parse_ip};

/// The TTL of every answer (CoreDNS's default for the plugin).
pub const DEFAULT_TTL: u32 = 5;
/// The DNS schema version `dns-version.<zone>` answers (the specification's).
pub const SCHEMA_VERSION: &str = "1.1.0";
/// The TTL of the schema version record (CoreDNS's).
const SCHEMA_TTL: u32 = 28800;
/// The longest chain of CNAMEs followed inside the cluster (CoreDNS's).
const MAX_CNAME_CHAIN: usize = 10;

/// The cluster zone and how it is answered.
#[derive(Clone, Debug)]
pub struct Zone {
    /// The cluster domain, lower case and fully qualified (`cluster.local.`).
    name: Name,
    /// The TTL of the records.
    ttl: u32,
    /// The name servers of the zone, for NS queries at the apex and `ns.dns.<zone>`: the
    /// `kube-dns` Service's name and cluster IP(s).
    nameservers: Vec<(Name, IpAddr)>,
}

/// A response, before it is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The response code.
    pub rcode: ResponseCode,
    /// Whether the answer is authoritative (always, for the cluster zone).
    pub authoritative: bool,
    /// The answer section.
    pub answers: Vec<Record>,
    /// The authority section (the SOA of NXDOMAIN and NODATA answers).
    pub authorities: Vec<Record>,
    /// The additional section (the addresses of SRV and NS targets).
    pub additionals: Vec<Record>,
    /// A name outside the cluster an ExternalName Service's CNAME leads to: the records of
    /// this type that the forwarder finds for it complete the answer, as CoreDNS looks them
    /// up through itself.
    pub chase: Option<(Name, RecordType)>,
}

impl Answer {
    fn new(rcode: ResponseCode) -> Answer {
        Answer {
            rcode,
            authoritative: true,
            answers: Vec::new(),
            authorities: Vec::new(),
            additionals: Vec::new(),
            chase: None,
        }
    }
}

/// What to do with a query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Answer it from the cluster's records.
    Answer(Answer),
    /// Send it to the upstream resolvers.
    Forward,
}

/// The name does not exist (CoreDNS's `errNoItems`, `errNsNotExposed` and
/// `errInvalidRequest`, all name errors).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct NameError;

/// What a record points at: an address, or a name (an ExternalName Service).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Host {
    Ip(IpAddr),
    Name(Name),
}

/// One thing a name resolves to, as CoreDNS's `msg.Service`: where it points, its port, and
/// its own name (`key`, the target of SRV records).
#[derive(Clone, Debug)]
struct Target {
    host: Host,
    port: i32,
    key: Name,
}

/// A parsed name under the cluster zone (CoreDNS's `recordRequest`).
#[derive(Debug, Default)]
struct Request<'a> {
    pod: bool,
    namespace: Option<&'a str>,
    service: Option<&'a str>,
    endpoint: Option<&'a str>,
    port: Option<&'a str>,
    protocol: Option<&'a str>,
}

/// `_name` without its underscore.
fn strip_underscore(label: &str) -> &str {
    label.strip_prefix('_').unwrap_or(label)
}

/// Parses the labels of a name below the zone (lower case, leftmost first). `Ok(None)` for
/// names that exist without records: the zone itself, `svc.<zone>` and `pod.<zone>`.
fn parse(labels: &[String]) -> Result<Option<Request<'_>>, NameError> {
    if labels.is_empty() || (labels.len() == 1 && (labels[0] == "svc" || labels[0] == "pod")) {
        return Ok(None);
    }
    let mut rest: Vec<&str> = labels.iter().map(String::as_str).collect();
    let mut request = Request::default();
    match rest.pop() {
        Some("svc") => {}
        Some("pod") => request.pod = true,
        _ => return Err(NameError),
    }
    request.namespace = rest.pop();
    request.service = rest.pop();
    match rest.as_slice() {
        [] => {}
        [endpoint] => request.endpoint = Some(endpoint),
        [port, protocol] => {
            request.port = Some(strip_underscore(port));
            request.protocol = Some(strip_underscore(protocol));
        }
        _ => return Err(NameError),
    }
    Ok(Some(request))
}

/// Whether a port matches the port name and protocol a query asks for (either may be
/// absent), case-insensitively as CoreDNS matches.
fn port_matches(request: &Request<'_>, port: &PortInfo) -> bool {
    request
        .port
        .is_none_or(|p| p.eq_ignore_ascii_case(&port.name))
        && request
            .protocol
            .is_none_or(|p| p.eq_ignore_ascii_case(&port.protocol))
}

/// Appends `labels` (leftmost first) to `base`; `None` when the result is not a valid name.
fn join(labels: &[&str], base: &Name) -> Option<Name> {
    let mut name = Name::from_labels(labels.iter().map(|l| l.as_bytes())).ok()?;
    name.set_fqdn(false);
    name.append_domain(base).ok()
}

impl Zone {
    /// The zone `domain` (e.g. `cluster.local`), answered with `ttl`, whose name servers are
    /// `nameservers`.
    pub fn new(domain: &str, ttl: u32, nameservers: Vec<(Name, IpAddr)>) -> Result<Zone, String> {
        let mut name = Name::from_ascii(domain)
            .map_err(|e| format!("invalid cluster domain {domain:?}: {e}"))?
            .to_lowercase();
        name.set_fqdn(true);
        if name.is_root() {
            return Err("the cluster domain cannot be the root".to_owned());
        }
        Ok(Zone {
            name,
            ttl,
            nameservers,
        })
    }

    /// The zone's name (`cluster.local.`).
    pub fn name(&self) -> &Name {
        &self.name
    }

    /// The `kube-dns` Service's name in `zone`, the name servers' name.
    pub fn kube_dns_name(&self) -> Option<Name> {
        join(&["kube-dns", "kube-system", "svc"], &self.name)
    }

    /// What to do with a query for `qname` (as the client wrote it) of type `qtype`.
    pub fn answer(&self, snapshot: &Snapshot, qname: &Name, qtype: RecordType) -> Outcome {
        let mut qname = qname.clone();
        qname.set_fqdn(true);
        let lower = qname.to_lowercase();
        if self.name.zone_of(&lower) {
            return Outcome::Answer(self.cluster(snapshot, &qname, &lower, qtype));
        }
        if qtype == RecordType::PTR
            && let Some(ip) = reverse_address(&lower)
        {
            let names = self.reverse(snapshot, ip);
            if !names.is_empty() {
                let mut answer = Answer::new(ResponseCode::NoError);
                answer.answers = names
                    .into_iter()
                    .map(|name| Record::from_rdata(qname.clone(), self.ttl, RData::PTR(PTR(name))))
                    .collect();
                return Outcome::Answer(answer);
            }
        }
        Outcome::Forward
    }

    /// The labels of `lower` below the zone, leftmost first.
    fn labels_below(&self, lower: &Name) -> Vec<String> {
        let below = usize::from(lower.num_labels()) - usize::from(self.name.num_labels());
        lower
            .iter()
            .take(below)
            .map(|label| String::from_utf8_lossy(label).into_owned())
            .collect()
    }

    /// A query for a name in the cluster zone (CoreDNS's `ServeDNS`).
    fn cluster(
        &self,
        snapshot: &Snapshot,
        qname: &Name,
        lower: &Name,
        qtype: RecordType,
    ) -> Answer {
        let labels = self.labels_below(lower);
        let apex = labels.is_empty();
        let mut extra = Vec::new();
        let mut chase = None;
        let result: Result<Vec<Record>, NameError> =
            match qtype {
                RecordType::A | RecordType::AAAA => self
                    .addresses(snapshot, qname, &labels, qtype, &mut Vec::new())
                    .map(|(records, c)| {
                        chase = c;
                        records
                    }),
                RecordType::TXT => self.txt(snapshot, qname, &labels),
                RecordType::CNAME => self.targets(snapshot, &labels, qtype).map(|targets| {
                    match targets.first().map(|t| &t.host) {
                        Some(Host::Name(target)) => vec![Record::from_rdata(
                            qname.clone(),
                            self.ttl,
                            RData::CNAME(CNAME(target.clone())),
                        )],
                        _ => Vec::new(),
                    }
                }),
                RecordType::PTR | RecordType::MX => {
                    let lookup = if qtype == RecordType::PTR {
                        self.records(snapshot, &labels)
                    } else {
                        self.targets(snapshot, &labels, qtype)
                    };
                    lookup.map(|_| Vec::new())
                }
                RecordType::SRV => self
                    .targets(snapshot, &labels, qtype)
                    .map(|targets| self.srv(qname, targets, &mut extra)),
                RecordType::SOA => Ok(if apex {
                    vec![self.soa(snapshot)]
                } else {
                    Vec::new()
                }),
                RecordType::AXFR | RecordType::IXFR => {
                    let mut answer = Answer::new(ResponseCode::Refused);
                    answer.authoritative = false;
                    return answer;
                }
                RecordType::NS if apex => Ok(self.ns(qname, &mut extra)),
                _ => self
                    .addresses(snapshot, qname, &labels, RecordType::A, &mut Vec::new())
                    .map(|_| Vec::new()),
            };
        match result {
            Err(NameError) => {
                let rcode = if snapshot.synced {
                    ResponseCode::NXDomain
                } else {
                    ResponseCode::ServFail
                };
                let mut answer = Answer::new(rcode);
                answer.authorities.push(self.soa(snapshot));
                answer
            }
            Ok(records) if records.is_empty() => {
                let mut answer = Answer::new(ResponseCode::NoError);
                answer.authorities.push(self.soa(snapshot));
                answer
            }
            Ok(records) => {
                let mut answer = Answer::new(ResponseCode::NoError);
                answer.answers = records;
                answer.additionals = extra;
                answer.chase = chase;
                answer
            }
        }
    }

    /// The zone's SOA record, as CoreDNS writes it.
    fn soa(&self, snapshot: &Snapshot) -> Record {
        let mname = join(&["ns", "dns"], &self.name).unwrap_or_else(|| self.name.clone());
        let rname = join(&["hostmaster"], &self.name).unwrap_or_else(|| self.name.clone());
        Record::from_rdata(
            self.name.clone(),
            self.ttl.min(300),
            RData::SOA(SOA::new(
                mname,
                rname,
                snapshot.serial,
                7200,
                1800,
                86400,
                self.ttl,
            )),
        )
    }

    /// NS records of the zone, with the name servers' addresses as additional records.
    fn ns(&self, qname: &Name, extra: &mut Vec<Record>) -> Vec<Record> {
        let mut records = Vec::new();
        let mut seen = HashSet::new();
        for (name, ip) in &self.nameservers {
            extra.push(address_record(name.clone(), self.ttl, *ip));
            if seen.insert(name.clone()) {
                records.push(Record::from_rdata(
                    qname.clone(),
                    self.ttl,
                    RData::NS(NS(name.clone())),
                ));
            }
        }
        records
    }

    /// TXT: only `dns-version.<zone>` has one; other names that exist are NODATA.
    fn txt(
        &self,
        snapshot: &Snapshot,
        qname: &Name,
        labels: &[String],
    ) -> Result<Vec<Record>, NameError> {
        if labels.len() == 1 && labels[0] == "dns-version" {
            return Ok(vec![Record::from_rdata(
                qname.clone(),
                SCHEMA_TTL,
                RData::TXT(TXT::new(vec![SCHEMA_VERSION.to_owned()])),
            )]);
        }
        match self.records(snapshot, labels) {
            Ok(targets) if !targets.is_empty() => Ok(Vec::new()),
            _ => Err(NameError),
        }
    }

    /// A and AAAA records (CoreDNS's `A` and `AAAA`), following CNAMEs to names inside the
    /// cluster and leaving one to a name outside to the forwarder.
    #[allow(clippy::type_complexity)]
    fn addresses(
        &self,
        snapshot: &Snapshot,
        qname: &Name,
        labels: &[String],
        qtype: RecordType,
        chain: &mut Vec<(Name, Name)>,
    ) -> Result<(Vec<Record>, Option<(Name, RecordType)>), NameError> {
        let targets = self.targets(snapshot, labels, qtype)?;
        let mut records = Vec::new();
        let mut chase = None;
        let mut seen = HashSet::new();
        for target in targets {
            match target.host {
                Host::Name(to) => {
                    let to_lower = to.to_lowercase();
                    if to_lower == qname.to_lowercase() || chain.len() > MAX_CNAME_CHAIN {
                        continue;
                    }
                    let link = (qname.to_lowercase(), to_lower.clone());
                    if chain.contains(&link) {
                        continue;
                    }
                    let cname = Record::from_rdata(
                        qname.clone(),
                        self.ttl,
                        RData::CNAME(CNAME(to.clone())),
                    );
                    if self.name.zone_of(&to_lower) {
                        chain.push(link);
                        let below = self.labels_below(&to_lower);
                        let next = self.addresses(snapshot, &to, &below, qtype, chain);
                        chain.pop();
                        if let Ok((next, next_chase)) = next
                            && !next.is_empty()
                        {
                            records.push(cname);
                            records.extend(next);
                            chase = chase.or(next_chase);
                        }
                        continue;
                    }
                    records.push(cname);
                    chase = chase.or(Some((to, qtype)));
                }
                Host::Ip(ip) => {
                    let wanted = match ip {
                        IpAddr::V4(_) => qtype == RecordType::A,
                        IpAddr::V6(_) => qtype == RecordType::AAAA,
                    };
                    if wanted && seen.insert(ip) {
                        records.push(address_record(qname.clone(), self.ttl, ip));
                    }
                }
            }
        }
        Ok((records, chase))
    }

    /// SRV records (CoreDNS's `SRV`): one per target and port, weights shared equally, the
    /// targets' addresses as additional records.
    fn srv(&self, qname: &Name, targets: Vec<Target>, extra: &mut Vec<Record>) -> Vec<Record> {
        let total = 100.0 * targets.len() as f64;
        let mut records = Vec::new();
        let mut seen_srv = HashSet::new();
        let mut seen_address = HashSet::new();
        for target in targets {
            if target.port == -1 {
                continue;
            }
            let Host::Ip(ip) = target.host else { continue };
            let weight = ((100.0 / total) * 100.0).floor().max(1.0) as u16;
            let port = target.port as u16;
            if seen_srv.insert((target.key.clone(), port)) {
                records.push(Record::from_rdata(
                    qname.clone(),
                    self.ttl,
                    RData::SRV(SRV::new(0, weight, port, target.key.clone())),
                ));
            }
            if seen_address.insert((target.key.clone(), ip)) {
                extra.push(address_record(target.key.clone(), self.ttl, ip));
            }
        }
        records
    }

    /// What a name resolves to for a query of `qtype` (CoreDNS's `Services`): the zone's name
    /// servers for `ns.dns.<zone>`, else [`Zone::records`], without ExternalName Services for
    /// SRV queries.
    fn targets(
        &self,
        snapshot: &Snapshot,
        labels: &[String],
        qtype: RecordType,
    ) -> Result<Vec<Target>, NameError> {
        if labels.len() == 2 && labels[0] == "ns" && labels[1] == "dns" {
            let key = join(&["ns", "dns"], &self.name).unwrap_or_else(|| self.name.clone());
            return Ok(self
                .nameservers
                .iter()
                .filter(|(_, ip)| match ip {
                    IpAddr::V4(_) => qtype == RecordType::A,
                    IpAddr::V6(_) => qtype == RecordType::AAAA,
                })
                .map(|(_, ip)| Target {
                    host: Host::Ip(*ip),
                    port: 0,
                    key: key.clone(),
                })
                .collect());
        }
        let mut targets = self.records(snapshot, labels)?;
        if qtype == RecordType::SRV {
            targets.retain(|t| matches!(t.host, Host::Ip(_)));
        }
        Ok(targets)
    }

    /// What a name resolves to (CoreDNS's `Records`, `findServices` and `findPods`).
    fn records(&self, snapshot: &Snapshot, labels: &[String]) -> Result<Vec<Target>, NameError> {
        let Some(request) = parse(labels)? else {
            return Ok(Vec::new());
        };
        let namespace = request.namespace.ok_or(NameError)?;
        if !snapshot.namespaces.contains(namespace) {
            return Err(NameError);
        }
        let Some(name) = request.service else {
            return Ok(Vec::new());
        };
        if request.pod {
            return self.pod(namespace, name);
        }
        let service = snapshot.service(namespace, name).ok_or(NameError)?;
        let key = join(&[name, namespace, "svc"], &self.name).ok_or(NameError)?;
        let mut targets = Vec::new();
        let mut found = false;
        match &service.kind {
            ServiceKind::ExternalName(external) => {
                if request.endpoint.is_some()
                    || request.port.is_some()
                    || request.protocol.is_some()
                {
                    return Err(NameError);
                }
                if parse_ip(external).is_some() {
                    return Err(NameError);
                }
                let mut to = Name::from_ascii(external).map_err(|_| NameError)?;
                to.set_fqdn(true);
                targets.push(Target {
                    host: Host::Name(to),
                    port: 0,
                    key,
                });
                found = true;
            }
            kind if *kind == ServiceKind::Headless || request.endpoint.is_some() => {
                let endpoints = snapshot.endpoints_of(namespace, name);
                for (ports, addresses) in endpoints.iter().flat_map(|e| e.slices.iter()) {
                    for address in addresses {
                        if request
                            .endpoint
                            .is_some_and(|e| !e.eq_ignore_ascii_case(&address.hostname))
                        {
                            continue;
                        }
                        for port in ports {
                            if !port_matches(&request, port) {
                                continue;
                            }
                            let Some(key) = join(&[address.hostname.as_str()], &key) else {
                                continue;
                            };
                            found = true;
                            targets.push(Target {
                                host: Host::Ip(address.ip),
                                port: port.port,
                                key,
                            });
                        }
                    }
                }
            }
            ServiceKind::ClusterIp(ips) => {
                for port in &service.ports {
                    if !port_matches(&request, port) {
                        continue;
                    }
                    found = true;
                    for ip in ips {
                        targets.push(Target {
                            host: Host::Ip(*ip),
                            port: port.port,
                            key: key.clone(),
                        });
                    }
                }
            }
            ServiceKind::Headless => {}
        }
        if found { Ok(targets) } else { Err(NameError) }
    }

    /// `a-b-c-d.<namespace>.pod.<zone>`: the address the name spells (`pods insecure`: no
    /// check that a pod has it).
    fn pod(&self, namespace: &str, name: &str) -> Result<Vec<Target>, NameError> {
        let text = if name.matches('-').count() == 3 && !name.contains("--") {
            name.replace('-', ".")
        } else {
            name.replace('-', ":")
        };
        let ip = parse_ip(&text).ok_or(NameError)?;
        let key = join(&[name, namespace, "pod"], &self.name).ok_or(NameError)?;
        Ok(vec![Target {
            host: Host::Ip(ip),
            port: 0,
            key,
        }])
    }

    /// The names an address has: the Service whose cluster IP it is, else every endpoint
    /// that has it.
    fn reverse(&self, snapshot: &Snapshot, ip: IpAddr) -> Vec<Name> {
        if let Some((namespace, name)) = snapshot.service_ips.get(&ip) {
            return join(&[name, namespace, "svc"], &self.name)
                .into_iter()
                .collect();
        }
        let mut names = Vec::new();
        for (namespace, service, hostname) in snapshot.endpoint_ips.get(&ip).into_iter().flatten() {
            if let Some(name) = join(&[hostname, service, namespace, "svc"], &self.name)
                && !names.contains(&name)
            {
                names.push(name);
            }
        }
        names
    }
}

/// An A or AAAA record for `ip`.
fn address_record(name: Name, ttl: u32, ip: IpAddr) -> Record {
    match ip {
        IpAddr::V4(v4) => Record::from_rdata(name, ttl, RData::A(A(v4))),
        IpAddr::V6(v6) => Record::from_rdata(name, ttl, RData::AAAA(AAAA(v6))),
    }
}

/// The address a full reverse name (`4.3.2.1.in-addr.arpa.`, 32 nibbles `.ip6.arpa.`) stands
/// for; `None` for any other name.
pub fn reverse_address(lower: &Name) -> Option<IpAddr> {
    let labels: Vec<String> = lower
        .iter()
        .map(|l| String::from_utf8_lossy(l).into_owned())
        .collect();
    match labels.as_slice() {
        [d, c, b, a, inaddr, arpa] if inaddr == "in-addr" && arpa == "arpa" => {
            let ip: Ipv4Addr = format!("{a}.{b}.{c}.{d}").parse().ok()?;
            Some(IpAddr::V4(ip))
        }
        [nibbles @ .., ip6, arpa] if ip6 == "ip6" && arpa == "arpa" && nibbles.len() == 32 => {
            let mut value: u128 = 0;
            for nibble in nibbles.iter().rev() {
                let [digit] = nibble.as_bytes() else {
                    return None;
                };
                value = (value << 4) | u128::from(char::from(*digit).to_digit(16)?);
            }
            Some(canonical(IpAddr::V6(Ipv6Addr::from(value))))
        }
        _ => None,
    }
}
