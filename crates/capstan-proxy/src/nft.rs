//! The proxy's table in the kernel: [`Desired`] turned into nftables' JSON model (the
//! `nftables` crate), as one transaction per sync applied with `nft -j -f -`.
//!
//! A full sync replaces the whole table atomically (`add table; delete table; add table; ...`),
//! which is also how a restart after a crash reconciles whatever an earlier process left. An
//! incremental sync sends only the difference from what was last applied: new and changed
//! chains (a changed chain is flushed and refilled), map and set elements added or removed,
//! and chains and sets no longer wanted deleted last, once nothing refers to them. So a change
//! to one endpoint touches only its Service's chains and map entries.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::Ipv4Addr;
use std::sync::Arc;

use nftables::expr::{
    BinaryOperation, CT, Expression, Fib, FibFlag, FibResult, Meta, MetaKey, NamedExpression,
    NgMode, Numgen, Payload, PayloadField, Prefix, SetItem, Verdict,
};
use nftables::schema::{
    Chain, Element, FlushObject, Map, NfCmd, NfListObject, NfObject, Nftables, Set, SetFlag,
    SetType, SetTypeValue, Table,
};
use nftables::stmt::{self, JumpTarget, Match, NAT, NATFamily, NATFlag, Operator, Statement};
use nftables::types::{NfChainType, NfFamily, NfHook};

use crate::rules::{Desired, MASQUERADE_MARK, Protocol, Rule, ServiceKey, ServiceRules, Target};

/// An error applying a transaction.
#[derive(Debug, thiserror::Error)]
pub enum NftError {
    /// `nft` could not be run or refused the transaction.
    #[error("nft: {0}")]
    Nft(String),
}

/// The table the proxy owns (family `ip`).
#[derive(Debug, Clone)]
pub struct TableName(pub String);

type Obj = NfObject<'static>;

fn s(text: impl Into<String>) -> Expression<'static> {
    Expression::String(Cow::Owned(text.into()))
}

fn payload(protocol: &'static str, field: &'static str) -> Expression<'static> {
    Expression::Named(NamedExpression::Payload(Payload::PayloadField(
        PayloadField {
            protocol: Cow::Borrowed(protocol),
            field: Cow::Borrowed(field),
        },
    )))
}

fn meta(key: MetaKey) -> Expression<'static> {
    Expression::Named(NamedExpression::Meta(Meta { key }))
}

fn matches(
    left: Expression<'static>,
    op: Operator,
    right: Expression<'static>,
) -> Statement<'static> {
    Statement::Match(Match { left, right, op })
}

fn prefix((addr, len): (Ipv4Addr, u8)) -> Expression<'static> {
    Expression::Named(NamedExpression::Prefix(Prefix {
        addr: Box::new(s(addr.to_string())),
        len: u32::from(len),
    }))
}

fn goto(chain: &str) -> Statement<'static> {
    Statement::Goto(JumpTarget {
        target: Cow::Owned(chain.to_owned()),
    })
}

fn jump(chain: &str) -> Statement<'static> {
    Statement::Jump(JumpTarget {
        target: Cow::Owned(chain.to_owned()),
    })
}

fn fib_saddr_local() -> Statement<'static> {
    matches(
        Expression::Named(NamedExpression::Fib(Fib {
            result: FibResult::Type,
            flags: HashSet::from([FibFlag::Saddr]),
        })),
        Operator::EQ,
        s("local"),
    )
}

fn ct_new() -> Statement<'static> {
    matches(
        Expression::Named(NamedExpression::CT(CT {
            key: Cow::Borrowed("state"),
            family: None,
            dir: None,
        })),
        Operator::IN,
        s("new"),
    )
}

fn l4proto_dport() -> Vec<Expression<'static>> {
    vec![meta(MetaKey::L4proto), payload("th", "dport")]
}

fn verdict(target: &Target) -> Expression<'static> {
    match target {
        Target::Goto(chain) => Expression::Verdict(Verdict::Goto(JumpTarget {
            target: Cow::Owned(chain.clone()),
        })),
        Target::Drop => Expression::Verdict(Verdict::Drop),
        Target::Reject => Expression::Verdict(Verdict::Goto(JumpTarget {
            target: Cow::Borrowed(REJECT_CHAIN),
        })),
    }
}

/// The statements of one rule.
fn statements(rule: &Rule) -> Vec<Statement<'static>> {
    match rule {
        Rule::MasqueradeUnlessFrom {
            ip,
            protocol,
            port,
            local,
        } => vec![
            matches(payload("ip", "daddr"), Operator::EQ, s(ip.to_string())),
            matches(meta(MetaKey::L4proto), Operator::EQ, s(protocol.name())),
            matches(
                payload("th", "dport"),
                Operator::EQ,
                Expression::Number(u32::from(*port)),
            ),
            matches(payload("ip", "saddr"), Operator::NEQ, prefix(*local)),
            jump(MARK_FOR_MASQUERADE),
        ],
        Rule::Masquerade => vec![jump(MARK_FOR_MASQUERADE)],
        Rule::GotoFromRange { range, chain } => vec![
            matches(payload("ip", "saddr"), Operator::EQ, prefix(*range)),
            goto(chain),
        ],
        Rule::MasqueradeFromNode => vec![fib_saddr_local(), jump(MARK_FOR_MASQUERADE)],
        Rule::GotoFromNode(chain) => vec![fib_saddr_local(), goto(chain)],
        Rule::Affinity { set, chain } => vec![
            matches(payload("ip", "saddr"), Operator::EQ, s(format!("@{set}"))),
            goto(chain),
        ],
        Rule::RecordAffinity(set) => vec![Statement::Set(stmt::Set {
            op: stmt::SetOp::Update,
            elem: payload("ip", "saddr"),
            set: Cow::Owned(format!("@{set}")),
        })],
        Rule::Random(chains) => vec![Statement::VerdictMap(stmt::VerdictMap {
            key: Expression::Named(NamedExpression::Numgen(Numgen {
                mode: NgMode::Random,
                ng_mod: u32::try_from(chains.len()).unwrap_or(u32::MAX),
                offset: None,
            })),
            data: Expression::Named(NamedExpression::Set(
                chains
                    .iter()
                    .enumerate()
                    .map(|(i, chain)| {
                        SetItem::Mapping(
                            Expression::Number(u32::try_from(i).unwrap_or(u32::MAX)),
                            verdict(&Target::Goto(chain.clone())),
                        )
                    })
                    .collect(),
            )),
        })],
        Rule::Dnat { protocol, ip, port } => vec![
            matches(meta(MetaKey::L4proto), Operator::EQ, s(protocol.name())),
            Statement::DNAT(Some(NAT {
                addr: Some(s(ip.to_string())),
                family: Some(NATFamily::IP),
                port: Some(Expression::Number(u32::from(*port))),
                flags: None,
            })),
        ],
        Rule::DnatRandom {
            protocol,
            endpoints,
        } => vec![
            matches(meta(MetaKey::L4proto), Operator::EQ, s(protocol.name())),
            Statement::DNAT(Some(NAT {
                addr: Some(Expression::Named(NamedExpression::Map(Box::new(
                    nftables::expr::Map {
                        key: Expression::Named(NamedExpression::Numgen(Numgen {
                            mode: NgMode::Random,
                            ng_mod: u32::try_from(endpoints.len()).unwrap_or(u32::MAX),
                            offset: None,
                        })),
                        data: Expression::Named(NamedExpression::Set(
                            endpoints
                                .iter()
                                .enumerate()
                                .map(|(i, (ip, port))| {
                                    SetItem::Mapping(
                                        Expression::Number(u32::try_from(i).unwrap_or(u32::MAX)),
                                        concat(vec![
                                            s(ip.to_string()),
                                            Expression::Number(u32::from(*port)),
                                        ]),
                                    )
                                })
                                .collect(),
                        )),
                    },
                )))),
                family: Some(NATFamily::IP),
                port: None,
                flags: None,
            })),
        ],
        Rule::Goto(chain) => vec![goto(chain)],
        Rule::Drop => vec![Statement::Drop(None)],
    }
}

const SERVICE_IPS: &str = "service-ips";
const SERVICE_NODEPORTS: &str = "service-nodeports";
const NO_ENDPOINT_SERVICES: &str = "no-endpoint-services";
const NO_ENDPOINT_NODEPORTS: &str = "no-endpoint-nodeports";
const CLUSTER_IPS: &str = "cluster-ips";
const NODEPORT_IPS: &str = "nodeport-ips";
const HAIRPIN: &str = "hairpin";
const MARK_FOR_MASQUERADE: &str = "mark-for-masquerade";
const MASQUERADING: &str = "masquerading";
const REJECT_CHAIN: &str = "reject-chain";
const SERVICES: &str = "services";
const SERVICE_ENDPOINTS_CHECK: &str = "service-endpoints-check";
const NODEPORT_ENDPOINTS_CHECK: &str = "nodeport-endpoints-check";
const CLUSTER_IPS_CHECK: &str = "cluster-ips-check";

/// Builds transactions for one table.
#[derive(Debug, Clone)]
pub struct Writer {
    table: String,
}

impl Writer {
    /// A writer for table `ip <table>`.
    pub fn new(table: &str) -> Writer {
        Writer {
            table: table.to_owned(),
        }
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    fn t(&self) -> Cow<'static, str> {
        Cow::Owned(self.table.clone())
    }

    fn table_object(&self) -> NfListObject<'static> {
        NfListObject::Table(Table {
            family: NfFamily::IP,
            name: self.t(),
            handle: None,
        })
    }

    fn chain(&self, name: &str) -> Chain<'static> {
        Chain {
            family: NfFamily::IP,
            table: self.t(),
            name: Cow::Owned(name.to_owned()),
            ..Chain::default()
        }
    }

    fn base_chain(&self, name: &str, kind: NfChainType, hook: NfHook, prio: i32) -> Obj {
        add(NfListObject::Chain(Chain {
            _type: Some(kind),
            hook: Some(hook),
            prio: Some(prio),
            ..self.chain(name)
        }))
    }

    fn rule(&self, chain: &str, expr: Vec<Statement<'static>>) -> Obj {
        add(NfListObject::Rule(nftables::schema::Rule {
            family: NfFamily::IP,
            table: self.t(),
            chain: Cow::Owned(chain.to_owned()),
            expr: Cow::Owned(expr),
            ..nftables::schema::Rule::default()
        }))
    }

    fn map(&self, name: &str, key: Vec<SetType>) -> Obj {
        let set_type = if key.len() == 1 {
            SetTypeValue::Single(key[0])
        } else {
            SetTypeValue::Concatenated(Cow::Owned(key))
        };
        add(NfListObject::Map(Box::new(Map {
            family: NfFamily::IP,
            table: self.t(),
            name: Cow::Owned(name.to_owned()),
            set_type,
            map: SetTypeValue::Single(SetType::Mark),
            ..Map::default()
        })))
    }

    fn set(&self, name: &str, timeout: Option<u32>) -> NfListObject<'static> {
        self.typed_set(name, SetTypeValue::Single(SetType::Ipv4Addr), timeout)
    }

    fn typed_set(
        &self,
        name: &str,
        set_type: SetTypeValue<'static>,
        timeout: Option<u32>,
    ) -> NfListObject<'static> {
        NfListObject::Set(Box::new(Set {
            family: NfFamily::IP,
            table: self.t(),
            name: Cow::Owned(name.to_owned()),
            set_type,
            flags: timeout.map(|_| HashSet::from([SetFlag::Timeout])),
            timeout,
            ..Set::default()
        }))
    }

    fn element(&self, set: &str, elem: Vec<Expression<'static>>) -> NfListObject<'static> {
        NfListObject::Element(Element {
            family: NfFamily::IP,
            table: self.t(),
            name: Cow::Owned(set.to_owned()),
            elem: Cow::Owned(elem),
        })
    }

    /// A rule of `chain` that looks up `ip daddr . l4proto . th dport` in verdict map `map`.
    fn ip_dispatch(&self, chain: &str, map: &str) -> Obj {
        let key = [payload("ip", "daddr")]
            .into_iter()
            .chain(l4proto_dport())
            .collect();
        self.rule(
            chain,
            vec![Statement::VerdictMap(stmt::VerdictMap {
                key: concat(key),
                data: s(format!("@{map}")),
            })],
        )
    }

    /// A rule of `chain` that, for traffic to a node address, looks up `l4proto . th dport` in
    /// verdict map `map`.
    fn nodeport_dispatch(&self, chain: &str, map: &str) -> Obj {
        self.rule(
            chain,
            vec![
                matches(
                    payload("ip", "daddr"),
                    Operator::EQ,
                    s(format!("@{NODEPORT_IPS}")),
                ),
                Statement::VerdictMap(stmt::VerdictMap {
                    key: concat(l4proto_dport()),
                    data: s(format!("@{map}")),
                }),
            ],
        )
    }

    /// The fixed part of the table: hook chains, dispatch maps and sets, as upstream's.
    fn base(&self) -> Vec<Obj> {
        let ip_proto_port = vec![SetType::Ipv4Addr, SetType::InetProto, SetType::InetService];
        let proto_port = vec![SetType::InetProto, SetType::InetService];
        let mut objects = vec![
            self.map(SERVICE_IPS, ip_proto_port.clone()),
            self.map(SERVICE_NODEPORTS, proto_port.clone()),
            self.map(NO_ENDPOINT_SERVICES, ip_proto_port),
            self.map(NO_ENDPOINT_NODEPORTS, proto_port),
            add(self.set(CLUSTER_IPS, None)),
            add(self.set(NODEPORT_IPS, None)),
            add(self.typed_set(
                HAIRPIN,
                SetTypeValue::Concatenated(Cow::Owned(vec![SetType::Ipv4Addr, SetType::Ipv4Addr])),
                None,
            )),
        ];
        for chain in [
            MARK_FOR_MASQUERADE,
            MASQUERADING,
            REJECT_CHAIN,
            SERVICES,
            SERVICE_ENDPOINTS_CHECK,
            NODEPORT_ENDPOINTS_CHECK,
            CLUSTER_IPS_CHECK,
        ] {
            objects.push(add(NfListObject::Chain(self.chain(chain))));
        }
        let mark = || meta(MetaKey::Mark);
        let bit = || Expression::Number(MASQUERADE_MARK);
        objects.extend([
            self.rule(
                MARK_FOR_MASQUERADE,
                vec![Statement::Mangle(stmt::Mangle {
                    key: mark(),
                    value: Expression::BinaryOperation(Box::new(BinaryOperation::OR(vec![
                        mark(),
                        bit(),
                    ]))),
                })],
            ),
            self.rule(
                MASQUERADING,
                vec![
                    matches(
                        Expression::BinaryOperation(Box::new(BinaryOperation::AND(mark(), bit()))),
                        Operator::EQ,
                        Expression::Number(0),
                    ),
                    Statement::Return(None),
                ],
            ),
            self.rule(
                MASQUERADING,
                vec![Statement::Mangle(stmt::Mangle {
                    key: mark(),
                    value: Expression::BinaryOperation(Box::new(BinaryOperation::XOR(
                        mark(),
                        bit(),
                    ))),
                })],
            ),
            self.rule(
                MASQUERADING,
                vec![Statement::Masquerade(Some(NAT {
                    addr: None,
                    family: None,
                    port: None,
                    flags: Some(HashSet::from([NATFlag::FullyRandom])),
                }))],
            ),
            self.rule(REJECT_CHAIN, vec![Statement::Reject(None)]),
            self.ip_dispatch(SERVICES, SERVICE_IPS),
            self.nodeport_dispatch(SERVICES, SERVICE_NODEPORTS),
            self.ip_dispatch(SERVICE_ENDPOINTS_CHECK, NO_ENDPOINT_SERVICES),
            self.nodeport_dispatch(NODEPORT_ENDPOINTS_CHECK, NO_ENDPOINT_NODEPORTS),
            // A cluster IP on a port its Service does not serve: refused, as upstream.
            self.rule(
                CLUSTER_IPS_CHECK,
                vec![
                    matches(
                        payload("ip", "daddr"),
                        Operator::EQ,
                        s(format!("@{CLUSTER_IPS}")),
                    ),
                    Statement::Reject(None),
                ],
            ),
        ]);
        // Hook chains: filters run before DNAT (-110), so they still see the Service's address.
        let filter = NfChainType::Filter;
        let nat = NfChainType::NAT;
        objects.extend([
            self.base_chain("filter-input", filter, NfHook::Input, -110),
            self.rule(
                "filter-input",
                vec![ct_new(), jump(NODEPORT_ENDPOINTS_CHECK)],
            ),
            self.rule(
                "filter-input",
                vec![ct_new(), jump(SERVICE_ENDPOINTS_CHECK)],
            ),
            self.base_chain("filter-forward", filter, NfHook::Forward, -110),
            self.rule(
                "filter-forward",
                vec![ct_new(), jump(SERVICE_ENDPOINTS_CHECK)],
            ),
            self.rule("filter-forward", vec![ct_new(), jump(CLUSTER_IPS_CHECK)]),
            self.base_chain("filter-output", filter, NfHook::Output, -110),
            self.rule(
                "filter-output",
                vec![ct_new(), jump(SERVICE_ENDPOINTS_CHECK)],
            ),
            self.base_chain("filter-output-post-dnat", filter, NfHook::Output, -90),
            self.rule(
                "filter-output-post-dnat",
                vec![ct_new(), jump(CLUSTER_IPS_CHECK)],
            ),
            self.base_chain("nat-prerouting", nat, NfHook::Prerouting, -100),
            self.rule("nat-prerouting", vec![jump(SERVICES)]),
            self.base_chain("nat-output", nat, NfHook::Output, -100),
            self.rule("nat-output", vec![jump(SERVICES)]),
            self.base_chain("nat-postrouting", nat, NfHook::Postrouting, 100),
            // Hairpin: an endpoint that reached itself through a Service (its source is its
            // new destination) is masqueraded, so that its replies come back through the NAT.
            self.rule(
                "nat-postrouting",
                vec![
                    matches(
                        Expression::Named(NamedExpression::CT(CT {
                            key: Cow::Borrowed("status"),
                            family: None,
                            dir: None,
                        })),
                        Operator::IN,
                        s("dnat"),
                    ),
                    matches(
                        concat(vec![payload("ip", "saddr"), payload("ip", "daddr")]),
                        Operator::EQ,
                        s(format!("@{HAIRPIN}")),
                    ),
                    jump(MARK_FOR_MASQUERADE),
                ],
            ),
            self.rule("nat-postrouting", vec![jump(MASQUERADING)]),
        ]);
        objects
    }

    /// The transaction that takes the table from `applied` (what the last successful sync put
    /// there; `None` for unknown, which replaces the whole table) to `desired`. Only Services
    /// whose part is not the very same as before are compared chain by chain.
    pub fn transaction(&self, applied: Option<&Desired>, desired: &Desired) -> Vec<Obj> {
        let mut objects = Vec::new();
        let empty = Desired::default();
        let old = match applied {
            Some(old) => old,
            None => {
                objects.push(add(self.table_object()));
                objects.push(delete(self.table_object()));
                objects.push(add(self.table_object()));
                objects.extend(self.base());
                &empty
            }
        };
        let nothing = ServiceRules::default();
        // Services gone, then Services new or different.
        let changed: Vec<&ServiceKey> = old
            .services
            .keys()
            .filter(|key| !desired.services.contains_key(*key))
            .chain(
                desired
                    .services
                    .iter()
                    .filter(|(key, after)| {
                        old.services
                            .get(*key)
                            .is_none_or(|before| !Arc::ptr_eq(before, after) && before != *after)
                    })
                    .map(|(key, _)| key),
            )
            .collect();
        let parts: Vec<(&ServiceRules, &ServiceRules)> = changed
            .iter()
            .map(|key| {
                (
                    old.services.get(*key).map_or(&nothing, |p| &**p),
                    desired.services.get(*key).map_or(&nothing, |p| &**p),
                )
            })
            .collect();
        // New affinity sets, before the rules that use them.
        for (before, after) in &parts {
            for (set, timeout) in &after.affinity_sets {
                if before.affinity_sets.get(set) != Some(timeout) {
                    if before.affinity_sets.contains_key(set) {
                        objects.push(delete(self.set(set, None)));
                    }
                    objects.push(add(self.set(set, Some(*timeout))));
                }
            }
        }
        // New chains first (they may refer to each other), then their rules.
        let changed_chains: Vec<(&String, &Vec<Rule>)> = parts
            .iter()
            .flat_map(|(before, after)| {
                after
                    .chains
                    .iter()
                    .filter(|(name, rules)| before.chains.get(*name) != Some(*rules))
                    .map(|(name, rules)| (name, rules, before.chains.contains_key(name)))
            })
            .map(|(name, rules, existed)| {
                objects.push(if existed {
                    flush_chain(self.chain(name))
                } else {
                    add(NfListObject::Chain(self.chain(name)))
                });
                (name, rules)
            })
            .collect();
        for (name, rules) in changed_chains {
            for rule in rules {
                objects.push(self.rule(name, statements(rule)));
            }
        }
        // Map and set elements.
        self.diff_elements(
            &mut objects,
            SERVICE_IPS,
            &old.service_ips,
            &desired.service_ips,
            |(ip, protocol, port)| ip_proto_port(*ip, *protocol, *port),
        );
        self.diff_elements(
            &mut objects,
            NO_ENDPOINT_SERVICES,
            &old.no_endpoint_services,
            &desired.no_endpoint_services,
            |(ip, protocol, port)| ip_proto_port(*ip, *protocol, *port),
        );
        self.diff_elements(
            &mut objects,
            SERVICE_NODEPORTS,
            &old.service_nodeports,
            &desired.service_nodeports,
            |(protocol, port)| proto_port(*protocol, *port),
        );
        self.diff_elements(
            &mut objects,
            NO_ENDPOINT_NODEPORTS,
            &old.no_endpoint_nodeports,
            &desired.no_endpoint_nodeports,
            |(protocol, port)| proto_port(*protocol, *port),
        );
        let address = |ip: &Ipv4Addr| s(ip.to_string());
        let pair = |ip: &Ipv4Addr| concat(vec![s(ip.to_string()), s(ip.to_string())]);
        self.diff_set(
            &mut objects,
            CLUSTER_IPS,
            &old.cluster_ips,
            &desired.cluster_ips,
            address,
        );
        self.diff_set(
            &mut objects,
            NODEPORT_IPS,
            &old.nodeport_ips,
            &desired.nodeport_ips,
            address,
        );
        self.diff_set(&mut objects, HAIRPIN, &old.hairpin, &desired.hairpin, pair);
        // Chains and sets nothing refers to any more.
        let gone: Vec<&String> = parts
            .iter()
            .flat_map(|(before, after)| {
                before
                    .chains
                    .keys()
                    .filter(|name| !after.chains.contains_key(*name))
            })
            .collect();
        for name in &gone {
            objects.push(flush_chain(self.chain(name)));
        }
        for name in &gone {
            objects.push(delete(NfListObject::Chain(self.chain(name))));
        }
        for (before, after) in &parts {
            for set in before.affinity_sets.keys() {
                if !after.affinity_sets.contains_key(set) {
                    objects.push(delete(self.set(set, None)));
                }
            }
        }
        objects
    }

    fn diff_elements<K: Ord>(
        &self,
        objects: &mut Vec<Obj>,
        map: &str,
        old: &BTreeMap<K, Target>,
        new: &BTreeMap<K, Target>,
        key: impl Fn(&K) -> Expression<'static>,
    ) {
        let removed: Vec<Expression<'static>> = old
            .iter()
            .filter(|(k, v)| new.get(*k) != Some(*v))
            .map(|(k, _)| key(k))
            .collect();
        if !removed.is_empty() {
            objects.push(delete(self.element(map, removed)));
        }
        let added: Vec<Expression<'static>> = new
            .iter()
            .filter(|(k, v)| old.get(*k) != Some(*v))
            .map(|(k, v)| Expression::List(vec![key(k), verdict(v)]))
            .collect();
        if !added.is_empty() {
            objects.push(add(self.element(map, added)));
        }
    }

    fn diff_set(
        &self,
        objects: &mut Vec<Obj>,
        set: &str,
        old: &BTreeSet<Ipv4Addr>,
        new: &BTreeSet<Ipv4Addr>,
        element: impl Fn(&Ipv4Addr) -> Expression<'static>,
    ) {
        let removed: Vec<Expression<'static>> = old.difference(new).map(&element).collect();
        if !removed.is_empty() {
            objects.push(delete(self.element(set, removed)));
        }
        let added: Vec<Expression<'static>> = new.difference(old).map(&element).collect();
        if !added.is_empty() {
            objects.push(add(self.element(set, added)));
        }
    }

    /// The transaction that removes the table (after a clean stop), if it exists.
    pub fn removal(&self) -> Vec<Obj> {
        vec![add(self.table_object()), delete(self.table_object())]
    }
}

fn concat(items: Vec<Expression<'static>>) -> Expression<'static> {
    Expression::Named(NamedExpression::Concat(items))
}

fn ip_proto_port(ip: Ipv4Addr, protocol: Protocol, port: u16) -> Expression<'static> {
    concat(vec![
        s(ip.to_string()),
        s(protocol.name()),
        Expression::Number(u32::from(port)),
    ])
}

fn proto_port(protocol: Protocol, port: u16) -> Expression<'static> {
    concat(vec![
        s(protocol.name()),
        Expression::Number(u32::from(port)),
    ])
}

fn add(object: NfListObject<'static>) -> Obj {
    NfObject::CmdObject(NfCmd::Add(object))
}

fn delete(object: NfListObject<'static>) -> Obj {
    NfObject::CmdObject(NfCmd::Delete(object))
}

fn flush_chain(chain: Chain<'static>) -> Obj {
    NfObject::CmdObject(NfCmd::Flush(FlushObject::Chain(chain)))
}

/// The JSON `nft -j -f -` reads for `objects`, with each verdict map's value type set to
/// `verdict` (which the `nftables` crate's set types lack).
pub fn to_json(objects: Vec<Obj>) -> Result<String, NftError> {
    let mut value = serde_json::to_value(Nftables {
        objects: Cow::Owned(objects),
    })
    .map_err(|e| NftError::Nft(format!("cannot encode the transaction: {e}")))?;
    if let Some(items) = value.get_mut("nftables").and_then(|v| v.as_array_mut()) {
        for item in items {
            if let Some(map) = item.pointer_mut("/add/map") {
                map["map"] = serde_json::Value::String("verdict".to_owned());
            }
        }
    }
    serde_json::to_string(&value)
        .map_err(|e| NftError::Nft(format!("cannot encode the transaction: {e}")))
}

/// Applies `objects` as one transaction: `command` (e.g. `["nft"]`, or `nft` run in a network
/// namespace) with `-j -f -` and the JSON on its standard input. nft's own message is the
/// error when it refuses.
pub async fn apply(command: &[String], objects: Vec<Obj>) -> Result<(), NftError> {
    use tokio::io::AsyncWriteExt as _;
    if objects.is_empty() {
        return Ok(());
    }
    let payload = to_json(objects)?;
    let Some((program, args)) = command.split_first() else {
        return Err(NftError::Nft("no nft command configured".to_owned()));
    };
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .args(["-j", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| NftError::Nft(format!("cannot run {program}: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(payload.as_bytes())
            .await
            .map_err(|e| NftError::Nft(format!("cannot write to {program}: {e}")))?;
    }
    let output = child
        .wait_with_output()
        .await
        .map_err(|e| NftError::Nft(format!("cannot run {program}: {e}")))?;
    if output.status.success() {
        Ok(())
    } else {
        let message = String::from_utf8_lossy(&output.stderr).trim().to_owned();
        Err(NftError::Nft(if message.is_empty() {
            format!("{program} failed ({})", output.status)
        } else {
            message
        }))
    }
}

#[cfg(test)]
mod tests;
