// One object's page: its summary (and usage graphs), its YAML (viewed and edited, PUT back as
// YAML, the API's Status shown when it refuses), its containers' logs and its events.

import { html } from './html.mjs';
import { useEffect, useState } from './vendor/hooks.mjs';
import { KINDS, objectPath, collectionPath, request, readLines, useGet } from './api.mjs';
import { ErrorBox, age, podStatus } from './views.mjs';
import { useMetrics, UsageGraphs } from './metrics.mjs';

export function DetailPage({ plural, namespace, name }) {
  const [tab, setTab] = useState('summary');
  const [refresh, setRefresh] = useState(0);
  const ns = namespace === '-' ? '' : namespace;
  const kind = KINDS[plural];
  const path = kind ? objectPath(plural, ns, name) : null;
  const { value: object, error } = useGet(path, refresh);
  if (!kind) return html`<p class="error">Unknown resource ${plural}</p>`;
  const tabs = [['summary', 'Summary'], ['yaml', 'YAML']];
  if (plural === 'pods') tabs.push(['logs', 'Logs']);
  if (plural !== 'events') tabs.push(['events', 'Events']);
  return html`<div class="detail">
    <h2><span class="kind">${kind.kind}</span> ${name}${ns && html` <span class="muted">in ${ns}</span>`}</h2>
    <nav class="tabs">${tabs.map(
      ([id, label]) => html`<button type="button" class=${tab === id ? 'active' : ''}
        data-tab=${id} onClick=${() => setTab(id)}>${label}</button>`,
    )}</nav>
    <${ErrorBox} error=${error} />
    ${tab === 'summary' && object && html`<${Summary} plural=${plural} object=${object} />`}
    ${tab === 'yaml' && html`<${YamlEditor} path=${path} onSaved=${() => setRefresh((r) => r + 1)} />`}
    ${tab === 'logs' && object && html`<${Logs} path=${path} pod=${object} />`}
    ${tab === 'events' && object && html`<${ObjectEvents} object=${object} kind=${kind.kind} />`}
  </div>`;
}

function Summary({ plural, object }) {
  const meta = object.metadata;
  const labels = Object.entries(meta.labels || {});
  return html`<div class="summary">
    <dl>
      <dt>Created</dt><dd>${meta.creationTimestamp} (${age(meta.creationTimestamp)} ago)</dd>
      <dt>UID</dt><dd>${meta.uid}</dd>
      <dt>Labels</dt><dd>${labels.length
        ? labels.map(([k, v]) => html`<span class="label">${k}=${v}</span> `)
        : html`<span class="muted">none</span>`}</dd>
      ${(meta.ownerReferences || []).length > 0 &&
      html`<dt>Owners</dt><dd>${meta.ownerReferences.map((o) => `${o.kind}/${o.name}`).join(', ')}</dd>`}
      ${plural === 'pods' && html`<dt>Status</dt><dd class="pod-status">${podStatus(object).reason}</dd>
        <dt>Node</dt><dd>${(object.spec && object.spec.nodeName) || html`<span class="muted">not scheduled</span>`}</dd>
        <dt>Pod IP</dt><dd>${(object.status && object.status.podIP) || ''}</dd>`}
    </dl>
    ${plural === 'pods' && html`<${PodContainers} pod=${object} />`}
    ${plural === 'pods' && html`<${PodUsage} pod=${object} />`}
    ${plural === 'nodes' && html`<${NodeUsage} node=${object} />`}
  </div>`;
}

function PodContainers({ pod }) {
  const statuses = new Map(((pod.status && pod.status.containerStatuses) || []).map((c) => [c.name, c]));
  return html`<h3>Containers</h3><table><thead><tr>
      <th>Name</th><th>Image</th><th>State</th><th>Ready</th><th>Restarts</th></tr></thead>
    <tbody>${((pod.spec && pod.spec.containers) || []).map((c) => {
      const s = statuses.get(c.name) || {};
      const state = s.state ? Object.keys(s.state)[0] : 'waiting';
      const detail = s.state && s.state[state] && s.state[state].reason;
      return html`<tr key=${c.name}><td>${c.name}</td><td>${c.image}</td>
        <td>${state}${detail ? ` (${detail})` : ''}</td><td>${s.ready ? 'yes' : 'no'}</td>
        <td>${s.restartCount || 0}</td></tr>`;
    })}</tbody></table>`;
}

function PodUsage({ pod }) {
  const metrics = useMetrics(pod.metadata.namespace);
  return html`<h3>Resource usage</h3>
    <${UsageGraphs} metrics=${metrics} objectKey=${`${pod.metadata.namespace}/${pod.metadata.name}`} />`;
}

function NodeUsage({ node }) {
  const metrics = useMetrics(null);
  return html`<h3>Resource usage</h3>
    <${UsageGraphs} metrics=${metrics} objectKey=${`/${node.metadata.name}`} />`;
}

/** The object as YAML (as the API server writes it), editable and PUT back as YAML. */
function YamlEditor({ path, onSaved }) {
  const [text, setText] = useState(null);
  const [loadError, setLoadError] = useState(null);
  const [editing, setEditing] = useState(false);
  const [saving, setSaving] = useState(false);
  const [saveError, setSaveError] = useState(null);
  const [notice, setNotice] = useState('');
  const [reload, setReload] = useState(0);
  const [draft, setDraft] = useState('');
  useEffect(() => {
    const abort = new AbortController();
    setLoadError(null);
    request(path, { accept: 'application/yaml', signal: abort.signal })
      .then((r) => r.text())
      .then(setText, (e) => {
        if (!abort.signal.aborted) setLoadError(e);
      });
    return () => abort.abort();
  }, [path, reload]);
  const save = async () => {
    setSaving(true);
    setSaveError(null);
    setNotice('');
    try {
      await request(path, {
        method: 'PUT',
        body: draft,
        contentType: 'application/yaml',
      });
      setEditing(false);
      setNotice('Saved.');
      setReload((r) => r + 1);
      onSaved();
    } catch (e) {
      setSaveError(e);
    } finally {
      setSaving(false);
    }
  };
  if (loadError) return html`<${ErrorBox} error=${loadError} />`;
  if (text === null) return html`<p class="muted">Loading…</p>`;
  return html`<div class="yaml">
    <div class="toolbar">
      ${!editing && html`<button type="button" data-action="edit" onClick=${() => { setDraft(text); setEditing(true); setNotice(''); }}>Edit</button>`}
      ${editing && html`<button type="button" data-action="save" disabled=${saving} onClick=${save}>Save</button>
        <button type="button" data-action="cancel" onClick=${() => { setEditing(false); setSaveError(null); setReload((r) => r + 1); }}>Cancel</button>`}
      ${notice && html`<span class="notice">${notice}</span>`}
    </div>
    <${ErrorBox} error=${saveError} />
    <textarea class="yaml-text" spellcheck="false" readOnly=${!editing}
      onInput=${(e) => setDraft(e.target.value)}
      aria-label="YAML" value=${editing ? draft : text} rows=${Math.min(40, text.split('\n').length + 1)}></textarea>
  </div>`;
}

/** A container's log: the last lines, optionally followed as they come. */
function Logs({ path, pod }) {
  const containers = [
    ...((pod.spec && pod.spec.initContainers) || []),
    ...((pod.spec && pod.spec.containers) || []),
  ].map((c) => c.name);
  const [container, setContainer] = useState(((pod.spec && pod.spec.containers) || [{}])[0].name);
  const [follow, setFollow] = useState(false);
  const [text, setText] = useState('');
  const [error, setError] = useState(null);
  useEffect(() => {
    const abort = new AbortController();
    setText('');
    setError(null);
    const query = `container=${encodeURIComponent(container)}&tailLines=1000${follow ? '&follow=true' : ''}`;
    (async () => {
      try {
        const response = await request(`${path}/log?${query}`, { accept: '*/*', signal: abort.signal });
        if (!follow) {
          setText(await response.text());
          return;
        }
        let lines = [];
        await readLines(response, (line) => {
          lines.push(line);
          if (lines.length > 5000) lines = lines.slice(-5000);
          setText(lines.join('\n'));
        });
      } catch (e) {
        if (!abort.signal.aborted) setError(e);
      }
    })();
    return () => abort.abort();
  }, [path, container, follow]);
  return html`<div class="logs">
    <div class="toolbar">
      <label>Container <select value=${container} onChange=${(e) => setContainer(e.target.value)}>
        ${containers.map((c) => html`<option value=${c}>${c}</option>`)}</select></label>
      <label><input type="checkbox" checked=${follow} onChange=${(e) => setFollow(e.target.checked)} /> Follow</label>
    </div>
    <${ErrorBox} error=${error} />
    ${!error && html`<pre class="log-text">${text || html`<span class="muted">(no output)</span>`}</pre>`}
  </div>`;
}

/** Events about the object (a field selector on involvedObject). */
function ObjectEvents({ object, kind }) {
  const ns = object.metadata.namespace || 'default';
  const selector = `involvedObject.name=${object.metadata.name},involvedObject.kind=${kind}`;
  const { value, error } = useGet(`${collectionPath('events', ns)}?fieldSelector=${encodeURIComponent(selector)}`);
  if (error) return html`<${ErrorBox} error=${error} />`;
  if (!value) return html`<p class="muted">Loading…</p>`;
  const events = value.items || [];
  if (!events.length) return html`<p class="muted">No events.</p>`;
  return html`<table><thead><tr><th>Last seen</th><th>Type</th><th>Reason</th><th>Message</th></tr></thead>
    <tbody>${events.map((e) => html`<tr key=${e.metadata.uid}><td>${age(e.lastTimestamp || e.eventTime || e.metadata.creationTimestamp)}</td>
      <td>${e.type}</td><td>${e.reason}</td><td>${e.message}</td></tr>`)}</tbody></table>`;
}
