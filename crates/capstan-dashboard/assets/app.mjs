// The dashboard's shell: logging in (a bearer token, or the browser's client certificate), the
// namespace picker, the navigation and the hash routes (#/pods, #/detail/pods/<ns>/<name>, ...).

import { render } from './vendor/preact.mjs';
import { useEffect, useState } from './vendor/hooks.mjs';
import { html } from './html.mjs';
import {
  loginMode, logInWithToken, logInWithCertificate, logOut, whoAmI, useWatchList, ApiError,
} from './api.mjs';
import { ErrorBox, NodesPage, WorkloadsPage, PodsPage, EventsPage } from './views.mjs';
import { DetailPage } from './detail.mjs';

const NAMESPACE_KEY = 'capstan-dashboard-namespace';
const PAGES = [
  ['workloads', 'Workloads'],
  ['pods', 'Pods'],
  ['nodes', 'Nodes'],
  ['events', 'Events'],
];

function currentRoute() {
  const parts = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  if (parts[0] === 'detail' && parts.length === 4) {
    return { page: 'detail', plural: parts[1], namespace: parts[2], name: parts[3] };
  }
  const page = PAGES.some(([id]) => id === parts[0]) ? parts[0] : 'pods';
  return { page };
}

function useRoute() {
  const [route, setRoute] = useState(currentRoute);
  useEffect(() => {
    const changed = () => setRoute(currentRoute());
    addEventListener('hashchange', changed);
    return () => removeEventListener('hashchange', changed);
  }, []);
  return route;
}

function Login({ onLoggedIn, error }) {
  const [token, setToken] = useState('');
  const submit = (e) => {
    e.preventDefault();
    if (!token.trim()) return;
    logInWithToken(token);
    onLoggedIn();
  };
  return html`<main class="login">
    <h1>Capstan dashboard</h1>
    <${ErrorBox} error=${error} />
    <form onSubmit=${submit}>
      <label for="token">Bearer token</label>
      <textarea id="token" name="token" rows="4" spellcheck="false" autocomplete="off"
        placeholder="A service account token, or a token of --token-auth-file"
        value=${token} onInput=${(e) => setToken(e.target.value)}></textarea>
      <button type="submit" data-action="login-token">Log in with token</button>
    </form>
    <p class="or">or</p>
    <button type="button" data-action="login-certificate"
      onClick=${() => { logInWithCertificate(); onLoggedIn(); }}>Use my client certificate</button>
    <p class="muted">A client certificate is the one of your kubeconfig, installed in this browser.
      The dashboard calls the API server with your own credentials: you see what RBAC grants you.</p>
  </main>`;
}

function NamespacePicker({ namespace, setNamespace }) {
  const { items, error } = useWatchList('/api/v1/namespaces');
  const [typed, setTyped] = useState(namespace);
  useEffect(() => setTyped(namespace), [namespace]);
  if (items && !error) {
    const names = items.map((n) => n.metadata.name).sort();
    if (namespace && !names.includes(namespace)) names.unshift(namespace);
    return html`<label class="namespace">Namespace
      <select name="namespace" value=${namespace} onChange=${(e) => setNamespace(e.target.value)}>
        <option value="">All namespaces</option>
        ${names.map((n) => html`<option value=${n}>${n}</option>`)}
      </select></label>`;
  }
  // Users who may not list namespaces name theirs.
  return html`<form class="namespace" onSubmit=${(e) => { e.preventDefault(); setNamespace(typed.trim()); }}>
    <label>Namespace <input name="namespace" value=${typed} placeholder="namespace"
      onInput=${(e) => setTyped(e.target.value)} /></label>
    <button type="submit" data-action="namespace">Go</button>
  </form>`;
}

function Shell({ user, onLogOut }) {
  const route = useRoute();
  const [namespace, setNamespaceState] = useState(
    () => sessionStorage.getItem(NAMESPACE_KEY) ?? 'default',
  );
  const setNamespace = (ns) => {
    sessionStorage.setItem(NAMESPACE_KEY, ns);
    setNamespaceState(ns);
  };
  // Ages are relative: draw again every few seconds.
  const [, setTick] = useState(0);
  useEffect(() => {
    const timer = setInterval(() => setTick((t) => t + 1), 5000);
    return () => clearInterval(timer);
  }, []);
  let page;
  switch (route.page) {
    case 'detail':
      page = html`<${DetailPage} key=${location.hash} ...${route} />`;
      break;
    case 'workloads':
      page = html`<${WorkloadsPage} ns=${namespace} />`;
      break;
    case 'nodes':
      page = html`<${NodesPage} />`;
      break;
    case 'events':
      page = html`<${EventsPage} ns=${namespace} />`;
      break;
    default:
      page = html`<${PodsPage} ns=${namespace} />`;
  }
  return html`<div class="shell">
    <header>
      <h1><a href="#/pods">Capstan</a></h1>
      <nav>${PAGES.map(
        ([id, label]) => html`<a href=${`#/${id}`} class=${route.page === id ? 'active' : ''}>${label}</a>`,
      )}</nav>
      <${NamespacePicker} namespace=${namespace} setNamespace=${setNamespace} />
      <span class="user" title=${(user.groups || []).join(', ')}>${user.username}</span>
      <button type="button" data-action="logout" onClick=${onLogOut}>Log out</button>
    </header>
    <main>${page}</main>
    <footer class="muted">${'Built with '}<a href=${new URL('vendor/LICENSE.preact', import.meta.url)}>Preact</a>${' and '}<a href=${new URL('vendor/LICENSE.htm', import.meta.url)}>htm</a>${' ('}<a href=${new URL('vendor/VERSIONS', import.meta.url)}>versions</a>).</footer>
  </div>`;
}

function App() {
  const [mode, setMode] = useState(loginMode);
  const [user, setUser] = useState(null);
  const [error, setError] = useState(null);
  useEffect(() => {
    if (!mode) return;
    setUser(null);
    whoAmI().then(setUser, (e) => {
      logOut();
      setMode(null);
      if (e.code === 403 || e.code === 401) {
        // A request without credentials is anonymous, which may not ask who it is.
        setError(
          new ApiError(401, {
            message:
              mode === 'certificate'
                ? 'no client certificate was accepted: install the kubeconfig\'s certificate in the browser, or log in with a token'
                : 'the token was not accepted',
          }),
        );
      } else {
        setError(e);
      }
    });
  }, [mode]);
  if (!mode) {
    return html`<${Login} error=${error} onLoggedIn=${() => { setError(null); setMode(loginMode()); }} />`;
  }
  if (!user) return html`<p class="loading">Logging in…</p>`;
  return html`<${Shell} user=${user} onLogOut=${() => { logOut(); setUser(null); setMode(null); }} />`;
}

const root = document.getElementById('app');
root.textContent = '';
render(html`<${App} />`, root);
