#!/usr/bin/env python3
"""End to end: the official Python `kubernetes` client's streaming calls against a running node.

Usage: streams_e2e.py KUBECONFIG POD

POD (namespace `default`) runs busybox `httpd -f -p 8080`. The client speaks the WebSocket
channel protocols (`v4.channel.k8s.io`) for exec and port-forward, which the API server
translates into SPDY towards the kubelet. Every check prints one `ok:` line; a failure prints
what was expected and exits with status 1. The last line on success is `ALL CHECKS PASSED`.
"""

import sys
import time

from kubernetes import client, config
from kubernetes.stream import portforward, stream


def check_eq(actual, expected, what):
    if actual != expected:
        print(f"FAILED: {what}\n  expected: {expected!r}\n  actual:   {actual!r}", flush=True)
        sys.exit(1)
    print(f"ok: {what}", flush=True)


def main():
    config.load_kube_config(config_file=sys.argv[1])
    pod = sys.argv[2]
    api = client.CoreV1Api()

    out = stream(api.connect_get_namespaced_pod_exec, pod, "default",
                 command=["sh", "-c", "echo hello; echo oops >&2"],
                 stdout=True, stderr=False, stdin=False, tty=False)
    check_eq(out, "hello\n", "exec returns the command's output")

    resp = stream(api.connect_get_namespaced_pod_exec, pod, "default",
                  command=["sh", "-c", "echo out; echo err >&2; exit 3"],
                  stdout=True, stderr=True, stdin=False, tty=False,
                  _preload_content=False)
    resp.run_forever(timeout=20)
    check_eq(resp.read_stdout(), "out\n", "exec separates stdout")
    check_eq(resp.read_stderr(), "err\n", "exec separates stderr")
    check_eq(resp.returncode, 3, "exec reports the exit code from the v4 status")

    resp = stream(api.connect_get_namespaced_pod_exec, pod, "default",
                  command=["head", "-n", "1"],
                  stdout=True, stderr=True, stdin=True, tty=False,
                  _preload_content=False)
    resp.write_stdin("typed line\n")
    deadline = time.time() + 20
    got = ""
    while resp.is_open() and time.time() < deadline:
        resp.update(timeout=1)
        got += resp.read_stdout() or ""
    check_eq(got, "typed line\n", "exec passes stdin")
    resp.close()

    forward = portforward(api.connect_get_namespaced_pod_portforward, pod, "default",
                          ports="8080")
    sock = forward.socket(8080)
    sock.settimeout(20)
    sock.sendall(b"GET / HTTP/1.0\r\nHost: pod\r\n\r\n")
    answer = b""
    while True:
        chunk = sock.recv(4096)
        if not chunk:
            break
        answer += chunk
    sock.close()
    check_eq(answer.split(b"\r\n")[0].split(b" ")[1:3], [b"404", b"Not"],
             "port-forward reaches the pod's port")
    check_eq(forward.error(8080), None, "port-forward reports no error")
    forward.close()
    print("ALL CHECKS PASSED", flush=True)


if __name__ == "__main__":
    main()
