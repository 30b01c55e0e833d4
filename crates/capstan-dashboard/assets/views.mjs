// The list pages: nodes, workloads, pods, events; each a live table (list + watch) or the
// API's refusal in its place.

import { html } from './html.mjs';
import { useWatchList, collectionPath, KINDS } from './api.mjs';
import { useMetrics, formatCPU, formatBytes, UsageGraphs } from './metrics.mjs';

/** An API error, shown in words: a refusal is "Forbidden", not an empty table. */
export function ErrorBox({ error }) {
  if (!error) return null;
  const status = error.status || {};
  const titles = {
    400: 'Bad request',
    401: 'Unauthorized',
    403: 'Forbidden',
    404: 'Not found',
    409: 'Conflict',
    422: 'Invalid',
  };
  const title = titles[error.code] || `Error ${error.code || ''}`.trim();
  const causes = (status.details && status.details.causes) || [];
  return html`<div class=${`error ${error.code === 403 ? 'forbidden' : ''}`} role="alert">
    <strong>${title}</strong>: <span class="message">${error.message}</span>
    ${causes.length > 0 &&
    html`<ul>${causes.map((c) => html`<li>${c.field ? `${c.field}: ` : ''}${c.message}</li>`)}</ul>`}
  </div>`;
}

/** How long ago `timestamp` was, as kubectl prints ages. */
export function age(timestamp) {
  if (!timestamp) return '';
  const seconds = Math.max(0, Math.floor((Date.now() - Date.parse(timestamp)) / 1000));
  if (seconds < 120) return `${seconds}s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 120) return `${minutes}m`;
  const hours = Math.floor(minutes / 60);
  if (hours < 48) return `${hours}h`;
  return `${Math.floor(hours / 24)}d`;
}

/** A pod's status as kubectl's printer reads it: init containers, waiting and terminated reasons. */
export function podStatus(pod) {
  const status = pod.status || {};
  let reason = status.reason || status.phase || 'Unknown';
  const containers = status.containerStatuses || [];
  const inits = status.initContainerStatuses || [];
  let restarts = 0;
  let initializing = false;
  const initCount = ((pod.spec && pod.spec.initContainers) || []).length;
  inits.forEach((c, i) => {
    restarts += c.restartCount || 0;
    const s = c.state || {};
    if (s.terminated && s.terminated.exitCode === 0) return;
    if (c.started && c.ready) return;
    initializing = true;
    if (s.terminated) {
      reason = `Init:${s.terminated.reason || `ExitCode:${s.terminated.exitCode}`}`;
    } else if (s.waiting && s.waiting.reason && s.waiting.reason !== 'PodInitializing') {
      reason = `Init:${s.waiting.reason}`;
    } else {
      reason = `Init:${i}/${initCount}`;
    }
  });
  let ready = 0;
  let running = false;
  if (!initializing) {
    for (const c of [...containers].reverse()) {
      restarts += c.restartCount || 0;
      const s = c.state || {};
      if (s.waiting && s.waiting.reason) reason = s.waiting.reason;
      else if (s.terminated) reason = s.terminated.reason || `ExitCode:${s.terminated.exitCode}`;
      else if (s.running) {
        running = true;
        if (c.ready) ready += 1;
      }
    }
    if (reason === 'Completed' && running) reason = 'Running';
  }
  if (pod.metadata.deletionTimestamp) reason = status.reason === 'NodeLost' ? 'Unknown' : 'Terminating';
  const total = ((pod.spec && pod.spec.containers) || []).length;
  return { reason, ready: `${ready}/${total}`, restarts };
}

export function detailHref(plural, namespace, name) {
  return `#/detail/${plural}/${encodeURIComponent(namespace || '-')}/${encodeURIComponent(name)}`;
}

const byName = (a, b) =>
  (a.metadata.namespace || '').localeCompare(b.metadata.namespace || '') ||
  a.metadata.name.localeCompare(b.metadata.name);

/**
 * A live table of `plural` in `ns`: `columns` are [heading, object → cell]; the name column
 * comes first and links to the object's page.
 */
export function ResourceTable({ plural, ns, columns, title, sort, showNamespace, hideName }) {
  const { items, error } = useWatchList(collectionPath(plural, ns));
  const rows = items ? [...items].sort(sort || byName) : null;
  return html`<section class="resource" data-resource=${plural}>
    ${title && html`<h2>${title}</h2>`}
    <${ErrorBox} error=${error} />
    ${!error && rows === null && html`<p class="muted">Loading…</p>`}
    ${!error && rows && rows.length === 0 && html`<p class="muted empty">No ${title || plural} ${ns ? `in ${ns}` : ''}.</p>`}
    ${!error &&
    rows &&
    rows.length > 0 &&
    html`<table>
      <thead><tr>
        ${!hideName && html`<th>Name</th>`}${showNamespace && html`<th>Namespace</th>`}
        ${columns.map(([heading]) => html`<th>${heading}</th>`)}
      </tr></thead>
      <tbody>${rows.map(
        (o) => html`<tr key=${o.metadata.uid} data-name=${o.metadata.name}>
          ${!hideName && html`<td><a href=${detailHref(plural, o.metadata.namespace, o.metadata.name)}>${o.metadata.name}</a></td>`}
          ${showNamespace && html`<td>${o.metadata.namespace}</td>`}
          ${columns.map(([heading, cell]) => html`<td data-column=${heading}>${cell(o)}</td>`)}
        </tr>`,
      )}</tbody>
    </table>`}
  </section>`;
}

const creation = ['Age', (o) => age(o.metadata.creationTimestamp)];

function nodeStatus(node) {
  const ready = ((node.status && node.status.conditions) || []).find((c) => c.type === 'Ready');
  let text = ready && ready.status === 'True' ? 'Ready' : 'NotReady';
  if (node.spec && node.spec.unschedulable) text += ',SchedulingDisabled';
  return html`<span class=${`status ${text.startsWith('Ready') ? 'ok' : 'bad'}`}>${text}</span>`;
}

function nodeRoles(node) {
  const roles = Object.keys(node.metadata.labels || {})
    .filter((l) => l.startsWith('node-role.kubernetes.io/'))
    .map((l) => l.slice('node-role.kubernetes.io/'.length));
  return roles.join(',') || '<none>';
}

function usageCell(metrics, key, which) {
  if (metrics.state !== 'ok') return html`<span class="muted">–</span>`;
  const usage = metrics.latest.get(key);
  if (!usage) return html`<span class="muted">–</span>`;
  return which === 'cpu' ? formatCPU(usage.cpu) : formatBytes(usage.memory);
}

export function NodesPage() {
  const metrics = useMetrics(null);
  return html`<div>
    <${MetricsNote} metrics=${metrics} />
    <${ResourceTable}
      plural="nodes"
      title="Nodes"
      columns=${[
        ['Status', nodeStatus],
        ['Roles', nodeRoles],
        ['Version', (n) => (n.status && n.status.nodeInfo && n.status.nodeInfo.kubeletVersion) || ''],
        ['CPU', (n) => usageCell(metrics, `/${n.metadata.name}`, 'cpu')],
        ['Memory', (n) => usageCell(metrics, `/${n.metadata.name}`, 'memory')],
        creation,
      ]}
    />
    ${metrics.state === 'ok' &&
    html`<section><h2>Usage</h2>${[...metrics.latest.keys()].map(
      (key) => html`<div class="node-usage" key=${key}><h3>${key.slice(1)}</h3>
        <${UsageGraphs} metrics=${metrics} objectKey=${key} /></div>`,
    )}</section>`}
  </div>`;
}

/** The Metrics API's state, when it is not serving. */
export function MetricsNote({ metrics }) {
  if (metrics.state === 'unavailable') {
    return html`<p class="note metrics-unavailable">Metrics unavailable: the Metrics API (metrics.k8s.io/v1beta1) is not served by this cluster.</p>`;
  }
  if (metrics.state === 'error' && metrics.error.code === 403) {
    return html`<p class="note metrics-unavailable">Metrics unavailable: forbidden (${metrics.error.message}).</p>`;
  }
  return null;
}

const replicas = (o) => `${(o.status && o.status.readyReplicas) || 0}/${(o.spec && o.spec.replicas) ?? 1}`;
const statusNumber = (field) => (o) => (o.status && o.status[field]) || 0;

function jobStatus(job) {
  const conditions = (job.status && job.status.conditions) || [];
  const done = (type) => conditions.some((c) => c.type === type && c.status === 'True');
  if (done('Complete')) return html`<span class="status ok">Complete</span>`;
  if (done('Failed')) return html`<span class="status bad">Failed</span>`;
  if (job.spec && job.spec.suspend) return 'Suspended';
  return html`<span class="status progress">Running</span>`;
}

export function WorkloadsPage({ ns }) {
  const all = !ns;
  return html`<div>
    <${ResourceTable} plural="deployments" ns=${ns} title="Deployments" showNamespace=${all}
      columns=${[
        ['Ready', replicas],
        ['Up-to-date', statusNumber('updatedReplicas')],
        ['Available', statusNumber('availableReplicas')],
        creation,
      ]} />
    <${ResourceTable} plural="replicasets" ns=${ns} title="ReplicaSets" showNamespace=${all}
      columns=${[
        ['Desired', (o) => (o.spec && o.spec.replicas) ?? 1],
        ['Current', statusNumber('replicas')],
        ['Ready', statusNumber('readyReplicas')],
        creation,
      ]} />
    <${ResourceTable} plural="statefulsets" ns=${ns} title="StatefulSets" showNamespace=${all}
      columns=${[['Ready', replicas], creation]} />
    <${ResourceTable} plural="daemonsets" ns=${ns} title="DaemonSets" showNamespace=${all}
      columns=${[
        ['Desired', statusNumber('desiredNumberScheduled')],
        ['Current', statusNumber('currentNumberScheduled')],
        ['Ready', statusNumber('numberReady')],
        ['Up-to-date', statusNumber('updatedNumberScheduled')],
        ['Available', statusNumber('numberAvailable')],
        creation,
      ]} />
    <${ResourceTable} plural="jobs" ns=${ns} title="Jobs" showNamespace=${all}
      columns=${[
        ['Status', jobStatus],
        ['Completions', (j) => `${(j.status && j.status.succeeded) || 0}/${(j.spec && j.spec.completions) ?? 1}`],
        creation,
      ]} />
  </div>`;
}

function podStatusCell(pod) {
  const { reason } = podStatus(pod);
  const kind =
    reason === 'Running' || reason === 'Completed' || reason === 'Succeeded'
      ? 'ok'
      : /Err|BackOff|Failed|Unknown|OOM|Evicted/.test(reason)
        ? 'bad'
        : 'progress';
  return html`<span class=${`status ${kind}`}>${reason}</span>`;
}

export function PodsPage({ ns }) {
  const metrics = useMetrics(ns);
  return html`<div>
    <${MetricsNote} metrics=${metrics} />
    <${ResourceTable} plural="pods" ns=${ns} title="Pods" showNamespace=${!ns}
      columns=${[
        ['Ready', (p) => podStatus(p).ready],
        ['Status', podStatusCell],
        ['Restarts', (p) => podStatus(p).restarts],
        ['Node', (p) => (p.spec && p.spec.nodeName) || ''],
        ['CPU', (p) => usageCell(metrics, `${p.metadata.namespace}/${p.metadata.name}`, 'cpu')],
        ['Memory', (p) => usageCell(metrics, `${p.metadata.namespace}/${p.metadata.name}`, 'memory')],
        creation,
      ]} />
  </div>`;
}

const eventTime = (e) =>
  e.lastTimestamp || e.eventTime || (e.series && e.series.lastObservedTime) || e.firstTimestamp ||
  e.metadata.creationTimestamp;

/** The page of an event's object, when the dashboard shows its kind. */
function involved(event) {
  const o = event.involvedObject || {};
  const text = `${o.kind || ''}/${o.name || ''}`;
  const plural = Object.keys(KINDS).find((p) => KINDS[p].kind === o.kind);
  if (!plural || !o.name) return text;
  return html`<a href=${detailHref(plural, o.namespace, o.name)}>${text}</a>`;
}

export function EventsPage({ ns }) {
  return html`<${ResourceTable} plural="events" ns=${ns} title="Events" showNamespace=${!ns} hideName=${true}
    sort=${(a, b) => Date.parse(eventTime(b)) - Date.parse(eventTime(a))}
    columns=${[
      ['Last seen', (e) => age(eventTime(e))],
      ['Type', (e) => html`<span class=${`status ${e.type === 'Warning' ? 'bad' : 'ok'}`}>${e.type}</span>`],
      ['Reason', (e) => e.reason],
      ['Object', involved],
      ['Message', (e) => e.message],
    ]} />`;
}
