// The API server's REST API, called from the browser on the same origin with the user's own
// credentials: a bearer token kept in sessionStorage, or else the browser's TLS client
// certificate (the API server asks for one and authenticates requests without a token by it).

import { useEffect, useState } from './vendor/hooks.mjs';

const TOKEN_KEY = 'capstan-dashboard-token';
const MODE_KEY = 'capstan-dashboard-login';

/** How the user logged in: 'token', 'certificate', or null. */
export function loginMode() {
  return sessionStorage.getItem(MODE_KEY);
}

export function logInWithToken(token) {
  sessionStorage.setItem(TOKEN_KEY, token.trim());
  sessionStorage.setItem(MODE_KEY, 'token');
}

export function logInWithCertificate() {
  sessionStorage.removeItem(TOKEN_KEY);
  sessionStorage.setItem(MODE_KEY, 'certificate');
}

export function logOut() {
  sessionStorage.removeItem(TOKEN_KEY);
  sessionStorage.removeItem(MODE_KEY);
}

/** An answer other than 2xx, with the API's Status when it sent one. */
export class ApiError extends Error {
  constructor(code, status, text) {
    const message = (status && status.message) || text || `HTTP ${code}`;
    super(message);
    this.code = code;
    this.status = status || null;
    this.reason = (status && status.reason) || '';
  }
}

async function errorOf(response) {
  const text = await response.text().catch(() => '');
  let status = null;
  try {
    const parsed = JSON.parse(text);
    if (parsed && parsed.kind === 'Status') status = parsed;
  } catch (_) {
    // not a Status: the text is the message
  }
  return new ApiError(response.status, status, text.trim());
}

/** fetch() with the user's credentials; throws ApiError unless the answer is 2xx. */
export async function request(path, { method = 'GET', body, contentType, accept, signal } = {}) {
  const headers = { Accept: accept || 'application/json' };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers['Content-Type'] = contentType || 'application/json';
  const response = await fetch(path, {
    method,
    headers,
    body,
    signal,
    cache: 'no-store',
    credentials: 'same-origin',
  });
  if (!response.ok) throw await errorOf(response);
  return response;
}

export async function getJSON(path, options) {
  return (await request(path, options)).json();
}

/** Who the API server says the user is (a SelfSubjectReview). */
export async function whoAmI() {
  const review = await getJSON('/apis/authentication.k8s.io/v1/selfsubjectreviews', {
    method: 'POST',
    body: JSON.stringify({
      apiVersion: 'authentication.k8s.io/v1',
      kind: 'SelfSubjectReview',
    }),
  });
  return (review.status && review.status.userInfo) || {};
}

/** The resources the dashboard shows, by plural. */
export const KINDS = {
  nodes: { kind: 'Node', base: '/api/v1', namespaced: false },
  namespaces: { kind: 'Namespace', base: '/api/v1', namespaced: false },
  pods: { kind: 'Pod', base: '/api/v1', namespaced: true },
  events: { kind: 'Event', base: '/api/v1', namespaced: true },
  deployments: { kind: 'Deployment', base: '/apis/apps/v1', namespaced: true },
  replicasets: { kind: 'ReplicaSet', base: '/apis/apps/v1', namespaced: true },
  statefulsets: { kind: 'StatefulSet', base: '/apis/apps/v1', namespaced: true },
  daemonsets: { kind: 'DaemonSet', base: '/apis/apps/v1', namespaced: true },
  jobs: { kind: 'Job', base: '/apis/batch/v1', namespaced: true },
};

/** The collection path of `plural` in namespace `ns` (all namespaces when empty). */
export function collectionPath(plural, ns) {
  const k = KINDS[plural];
  return k.namespaced && ns
    ? `${k.base}/namespaces/${encodeURIComponent(ns)}/${plural}`
    : `${k.base}/${plural}`;
}

export function objectPath(plural, ns, name) {
  const k = KINDS[plural];
  const where = k.namespaced ? `/namespaces/${encodeURIComponent(ns)}` : '';
  return `${k.base}${where}/${plural}/${encodeURIComponent(name)}`;
}

/** Reads newline-delimited JSON from a streamed answer, calling `onValue` for each value. */
export async function readLines(response, onLine) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffered = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffered += decoder.decode(value, { stream: true });
    let newline;
    while ((newline = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, newline);
      buffered = buffered.slice(newline + 1);
      if (line.trim()) onLine(line);
    }
  }
  if (buffered.trim()) onLine(buffered);
}

const keyOf = (o) => `${o.metadata.namespace || ''}/${o.metadata.name}`;

const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve();
    });
  });

/**
 * Keeps the objects of a collection current: a list, then a watch from its resourceVersion
 * (streamed newline-delimited JSON), again from the last version seen when the watch ends, and
 * a new list when the version has expired (410). A refusal (403) or another error is reported
 * and retried after a pause; the page shows it in place of the objects.
 */
export function useWatchList(path) {
  const [state, setState] = useState({ items: null, error: null });
  useEffect(() => {
    if (!path) return undefined;
    const abort = new AbortController();
    const { signal } = abort;
    const objects = new Map();
    let pending = false;
    const publish = () => {
      if (pending) return;
      pending = true;
      queueMicrotask(() => {
        pending = false;
        if (!signal.aborted) setState({ items: [...objects.values()], error: null });
      });
    };
    setState({ items: null, error: null });
    (async () => {
      while (!signal.aborted) {
        let version;
        try {
          const list = await getJSON(path, { signal });
          objects.clear();
          for (const item of list.items || []) objects.set(keyOf(item), item);
          version = list.metadata.resourceVersion;
          publish();
        } catch (error) {
          if (signal.aborted) return;
          setState({ items: null, error });
          await sleep(error.code === 403 || error.code === 401 ? 10000 : 3000, signal);
          continue;
        }
        let expired = false;
        while (!signal.aborted && !expired) {
          try {
            const separator = path.includes('?') ? '&' : '?';
            const response = await request(
              `${path}${separator}watch=1&allowWatchBookmarks=true&resourceVersion=${encodeURIComponent(version)}`,
              { signal },
            );
            await readLines(response, (line) => {
              const event = JSON.parse(line);
              const object = event.object || {};
              if (event.type === 'ERROR') {
                if (object.code === 410) expired = true;
                return;
              }
              if (object.metadata && object.metadata.resourceVersion) {
                version = object.metadata.resourceVersion;
              }
              if (event.type === 'ADDED' || event.type === 'MODIFIED') {
                objects.set(keyOf(object), object);
                publish();
              } else if (event.type === 'DELETED') {
                objects.delete(keyOf(object));
                publish();
              }
            });
          } catch (error) {
            if (signal.aborted) return;
            if (error.code === 410) {
              expired = true;
            } else {
              // The connection dropped or the watch was refused: list again after a pause.
              await sleep(1000, signal);
              expired = true;
            }
          }
        }
      }
    })();
    return () => abort.abort();
  }, [path]);
  return state;
}

/** A one-shot GET of JSON, again whenever `path` or `refresh` changes. */
export function useGet(path, refresh) {
  const [state, setState] = useState({ value: null, error: null });
  useEffect(() => {
    if (!path) return undefined;
    const abort = new AbortController();
    setState({ value: null, error: null });
    getJSON(path, { signal: abort.signal }).then(
      (value) => setState({ value, error: null }),
      (error) => {
        if (!abort.signal.aborted) setState({ value: null, error });
      },
    );
    return () => abort.abort();
  }, [path, refresh]);
  return state;
}
