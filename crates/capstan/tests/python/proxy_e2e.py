#!/usr/bin/env python3
"""End to end: what kubectl cannot show of the proxy subresources and of `pods/log` over
WebSocket, with raw HTTPS and the `websocket-client` library (a dependency of the official
Python client) against a running node.

Usage: proxy_e2e.py KUBECONFIG

Namespace `default` holds pod `web` (busybox `httpd -f -p 8080 -h /www`, with
`/www/cgi-bin/echo` answering "METHOD URI fwd=X-Forwarded-Uri", and an upgrade echo server on
port 8081) and pod `talker` (container `main`, which printed "container is alive"). Every check
prints one `ok:` line; a failure prints what was expected and exits with status 1. The last line
on success is `ALL CHECKS PASSED`.
"""

import atexit
import base64
import http.client
import os
import shutil
import socket
import ssl
import sys
import tempfile
import time

import websocket
import yaml


def check_eq(actual, expected, what):
    if actual != expected:
        print(f"FAILED: {what}\n  expected: {expected!r}\n  actual:   {actual!r}", flush=True)
        sys.exit(1)
    print(f"ok: {what}", flush=True)


class Cluster:
    def __init__(self, kubeconfig):
        with open(kubeconfig) as f:
            config = yaml.safe_load(f)
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        self.dir = tempfile.mkdtemp()
        atexit.register(shutil.rmtree, self.dir, True)
        self.files = {}
        for key, name in [("certificate-authority-data", "ca"), ("client-certificate-data", "cert"),
                          ("client-key-data", "key")]:
            data = cluster.get(key) or user.get(key)
            path = os.path.join(self.dir, name)
            with open(path, "wb") as f:
                f.write(base64.b64decode(data))
            self.files[name] = path
        server = cluster["server"].removeprefix("https://")
        self.host, port = server.rsplit(":", 1)
        self.port = int(port)
        self.context = ssl.create_default_context(cafile=self.files["ca"])
        self.context.load_cert_chain(self.files["cert"], self.files["key"])
        self.context.check_hostname = False

    def request(self, method, path, body=None, headers=None):
        conn = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=30)
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        data = response.read()
        conn.close()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data

    def websocket(self, path, subprotocols):
        return websocket.create_connection(
            f"wss://{self.host}:{self.port}{path}",
            subprotocols=subprotocols,
            sslopt={"certfile": self.files["cert"], "keyfile": self.files["key"],
                    "ca_certs": self.files["ca"], "check_hostname": False},
            timeout=30,
        )

    def raw_tls(self):
        sock = socket.create_connection((self.host, self.port), timeout=30)
        return self.context.wrap_socket(sock)


def read_log(ws):
    """Every data message until the server's close, and the close's status code."""
    messages = []
    while True:
        opcode, frame = ws.recv_data_frame(True)
        if opcode == websocket.ABNF.OPCODE_CLOSE:
            code = int.from_bytes(frame.data[:2], "big") if len(frame.data) >= 2 else None
            return messages, opcode, code
        messages.append((opcode, frame.data))


def main():
    cluster = Cluster(sys.argv[1])
    ns = "/api/v1/namespaces/default"

    # GET and HEAD of `.../proxy` without a slash are redirected, the query kept.
    for method in ["GET", "HEAD"]:
        status, headers, _ = cluster.request(method, f"{ns}/pods/web/proxy?a=1")
        check_eq((status, headers.get("location")), (301, f"{ns}/pods/web/proxy/?a=1"),
                 f"{method} of pods/proxy without a slash is redirected")

    # Every method reaches the pod with its path, query and body.
    for method in ["POST", "PUT", "PATCH", "DELETE", "OPTIONS", "GET"]:
        status, _, data = cluster.request(
            method, f"{ns}/pods/web/proxy/cgi-bin/echo/with/{method}?x=1", body=b"payload",
            headers={"Content-Type": "text/plain"})
        check_eq((status, data.decode()),
                 (200, f"{method} /cgi-bin/echo/with/{method}?x=1 "
                       f"fwd={ns}/pods/web/proxy/cgi-bin/echo/with/{method}"),
                 f"{method} through pods/proxy")
    status, headers, data = cluster.request("HEAD", f"{ns}/pods/web/proxy/")
    check_eq((status, data), (200, b""), "HEAD through pods/proxy")

    # pods/log over WebSocket, in each reader protocol, as the conformance spec reads it.
    path = f"{ns}/pods/talker/log?container=main"
    for protocols, text in [(["binary.k8s.io"], False), (["base64.binary.k8s.io"], True), (None, False)]:
        ws = cluster.websocket(path, protocols)
        check_eq(ws.getsubprotocol(), protocols[0] if protocols else None,
                 f"the log WebSocket speaks {protocols}")
        messages, _, code = read_log(ws)
        ws.close()
        check_eq(messages[0][1], b"", f"the first message is empty ({protocols})")
        want = websocket.ABNF.OPCODE_TEXT if text else websocket.ABNF.OPCODE_BINARY
        check_eq({opcode for opcode, _ in messages}, {want}, f"message types ({protocols})")
        log = b"".join(base64.b64decode(d) if text else d for _, d in messages)
        check_eq(log, b"container is alive\n", f"the log over WebSocket ({protocols})")
        check_eq(code, 1000, f"the stream ends with a normal close ({protocols})")
    try:
        cluster.websocket(path, ["v4.channel.k8s.io"])
        check_eq("connected", "refused", "a log WebSocket in a channel protocol")
    except websocket.WebSocketBadStatusException as e:
        check_eq(e.status_code, 403, "a log WebSocket in a channel protocol is refused")

    # An upgrade through pods/proxy reaches the pod's server and carries bytes both ways. The
    # pod's server is a shell loop around `nc -l`, which may be between two connections: a
    # failed attempt is retried.
    for attempt in range(5):
        conn = cluster.raw_tls()
        conn.sendall(
            f"GET {ns}/pods/web:8081/proxy/stream HTTP/1.1\r\nHost: {cluster.host}\r\n"
            f"Connection: Upgrade\r\nUpgrade: echo\r\n\r\n".encode())
        received = b""
        deadline = time.time() + 20
        while b"\r\n\r\n" not in received and time.time() < deadline:
            chunk = conn.recv(4096)
            if not chunk:
                break
            received += chunk
        head, _, rest = received.partition(b"\r\n\r\n")
        if head.startswith(b"HTTP/1.1 101 ") or attempt == 4:
            break
        print(f"attempt {attempt}: the upgrade was answered {received!r}", flush=True)
        conn.close()
        time.sleep(1)
    check_eq(head.split(b"\r\n")[0], b"HTTP/1.1 101 Switching Protocols",
             "an upgrade through pods/proxy is switched")
    conn.sendall(b"ping-through-the-proxy")
    while b"ping-through-the-proxy" not in rest and time.time() < deadline:
        chunk = conn.recv(4096)
        if not chunk:
            break
        rest += chunk
    check_eq(b"GET /stream HTTP/1.1" in rest, True, "the pod received the upgrade request")
    check_eq(b"ping-through-the-proxy" in rest, True, "bytes come back through the upgrade")
    conn.close()

    print("ALL CHECKS PASSED", flush=True)


if __name__ == "__main__":
    main()
