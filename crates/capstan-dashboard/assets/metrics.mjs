// Resource usage from the Metrics API (metrics.k8s.io/v1beta1 NodeMetrics and PodMetrics):
// polled while a page shows it, kept as a short history per object, drawn as small graphs.

import { html } from './html.mjs';
import { useEffect, useState } from './vendor/hooks.mjs';
import { getJSON } from './api.mjs';

const GROUP = '/apis/metrics.k8s.io/v1beta1';
const POLL_MS = 10000;
const HISTORY = 60;

const SUFFIX = {
  n: 1e-9, u: 1e-6, m: 1e-3, '': 1, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18,
  Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60,
};

/** A resource.Quantity ("250m", "1Gi", "1.5e3") as a number. */
export function parseQuantity(text) {
  if (text === undefined || text === null) return 0;
  const match = /^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$/.exec(String(text).trim());
  if (!match) return 0;
  const scale = SUFFIX[match[2]];
  return scale === undefined ? 0 : parseFloat(match[1]) * scale;
}

export function formatCPU(cores) {
  if (cores >= 1) return `${cores.toFixed(2)} cores`;
  return `${Math.round(cores * 1000)}m`;
}

export function formatBytes(bytes) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value.toFixed(unit === 0 ? 0 : 1)} ${units[unit]}`;
}

// Histories survive page changes: key → [{t, cpu, memory}].
const histories = new Map();

function record(key, cpu, memory, t) {
  const history = histories.get(key) || [];
  if (!history.length || history[history.length - 1].t !== t) history.push({ t, cpu, memory });
  while (history.length > HISTORY) history.shift();
  histories.set(key, history);
}

function usageOf(containers) {
  let cpu = 0;
  let memory = 0;
  for (const c of containers || []) {
    cpu += parseQuantity(c.usage && c.usage.cpu);
    memory += parseQuantity(c.usage && c.usage.memory);
  }
  return { cpu, memory };
}

/**
 * Polls node metrics (`ns` null) or the pod metrics of namespace `ns` ('' for all):
 * { state: 'loading' | 'ok' | 'unavailable' | 'error', error, latest: Map key → usage }.
 * A group the API server does not serve (404, 503) is 'unavailable'.
 */
export function useMetrics(ns) {
  const [state, setState] = useState({ state: 'loading', error: null, latest: new Map() });
  useEffect(() => {
    const abort = new AbortController();
    const path =
      ns === null ? `${GROUP}/nodes` : ns ? `${GROUP}/namespaces/${encodeURIComponent(ns)}/pods` : `${GROUP}/pods`;
    let timer;
    const poll = async () => {
      try {
        const list = await getJSON(path, { signal: abort.signal });
        const latest = new Map();
        for (const item of list.items || []) {
          const key = `${item.metadata.namespace || ''}/${item.metadata.name}`;
          const usage = item.usage
            ? { cpu: parseQuantity(item.usage.cpu), memory: parseQuantity(item.usage.memory) }
            : usageOf(item.containers);
          usage.containers = item.containers || [];
          latest.set(key, usage);
          record(key, usage.cpu, usage.memory, item.timestamp || Date.now());
        }
        setState({ state: 'ok', error: null, latest });
      } catch (error) {
        if (abort.signal.aborted) return;
        const unavailable = error.code === 404 || error.code === 503;
        setState({ state: unavailable ? 'unavailable' : 'error', error, latest: new Map() });
        if (unavailable) return;
      }
      timer = setTimeout(poll, POLL_MS);
    };
    poll();
    return () => {
      abort.abort();
      clearTimeout(timer);
    };
  }, [ns]);
  return state;
}

export function history(key) {
  return histories.get(key) || [];
}

/** A small line graph of `values` (numbers), as SVG. */
export function Sparkline({ values, label }) {
  const width = 160;
  const height = 36;
  if (values.length < 2) {
    return html`<span class="spark-empty" title=${label}>collecting…</span>`;
  }
  const max = Math.max(...values) || 1;
  const step = width / (values.length - 1);
  const points = values
    .map((v, i) => `${(i * step).toFixed(1)},${(height - 2 - (v / max) * (height - 4)).toFixed(1)}`)
    .join(' ');
  return html`<svg class="spark" viewBox="0 0 ${width} ${height}" width=${width} height=${height}
      role="img" aria-label=${label}><polyline points=${points} /></svg>`;
}

/** CPU and memory graphs of one object's history, with its latest figures. */
export function UsageGraphs({ metrics, objectKey }) {
  if (metrics.state === 'loading') return html`<p class="muted">Loading metrics…</p>`;
  if (metrics.state === 'unavailable') {
    return html`<p class="muted metrics-unavailable">Metrics unavailable: the Metrics API (metrics.k8s.io) is not served.</p>`;
  }
  if (metrics.state === 'error') {
    return html`<p class="muted metrics-unavailable">Metrics unavailable: ${metrics.error.message}</p>`;
  }
  const latest = metrics.latest.get(objectKey);
  if (!latest) return html`<p class="muted">No metrics for this object yet.</p>`;
  const past = history(objectKey);
  return html`<div class="usage">
    <div><h4>CPU ${formatCPU(latest.cpu)}</h4>
      <${Sparkline} values=${past.map((p) => p.cpu)} label="CPU usage" /></div>
    <div><h4>Memory ${formatBytes(latest.memory)}</h4>
      <${Sparkline} values=${past.map((p) => p.memory)} label="Memory usage" /></div>
  </div>`;
}
