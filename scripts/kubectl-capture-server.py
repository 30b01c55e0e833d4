#!/usr/bin/env python3
"""A loopback-only stand-in for an API server, used to capture the request bodies stock kubectl
sends (crates/capstan-api/src/protobuf/testdata/kubectl/*.pb.b64).

It answers discovery with minimal JSON, records every POST/PUT body as DIR/NN-path.bin (and its
Content-Type and Accept as .ct), and answers with a Status. Usage:

    cd DIR && openssl req -x509 -newkey rsa:2048 -nodes -keyout key.pem -out cert.pem -days 1 \
        -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1
    python3 scripts/kubectl-capture-server.py PORT DIR &
    # kubeconfig: server https://127.0.0.1:PORT, insecure-skip-tls-verify: true, any token
    kubectl create configmap settings --from-literal=a.conf=x=1 --from-file=blob=bin.dat
    base64 -w 76 DIR/00-*.bin > .../testdata/kubectl/configmap.pb.b64
    kubectl create configmap ... --dry-run=client -o json   # the matching .json

The fixtures were captured with kubectl v1.32.4 using the commands listed in the test
(`kubectl_protobuf_bodies_decode_to_the_json_kubectl_would_send`). `kubectl drain` sends its
Eviction as JSON, so it has no protobuf fixture. Binds 127.0.0.1 only.
"""
import json, ssl, sys, os, itertools
from http.server import HTTPServer, BaseHTTPRequestHandler

counter = itertools.count()
RES = {
    "/api/v1": [("configmaps", "ConfigMap", True), ("secrets", "Secret", True), ("namespaces", "Namespace", False),
                ("services", "Service", True), ("pods", "Pod", True), ("pods/eviction", "Eviction", True),
                ("serviceaccounts", "ServiceAccount", True), ("resourcequotas", "ResourceQuota", True),
                ("nodes", "Node", False)],
    "/apis/apps/v1": [("deployments", "Deployment", True)],
    "/apis/batch/v1": [("jobs", "Job", True), ("cronjobs", "CronJob", True)],
    "/apis/policy/v1": [("poddisruptionbudgets", "PodDisruptionBudget", True)],
    "/apis/scheduling.k8s.io/v1": [("priorityclasses", "PriorityClass", False)],
    "/apis/authorization.k8s.io/v1": [("selfsubjectaccessreviews", "SelfSubjectAccessReview", False)],
}
NODE = {"kind": "Node", "apiVersion": "v1", "metadata": {"name": "node1", "uid": "n1", "resourceVersion": "1"}, "spec": {}}
POD = {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "web-0", "namespace": "default", "uid": "p1", "resourceVersion": "1",
       "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "r1", "controller": True}]},
       "spec": {"nodeName": "node1", "containers": [{"name": "c", "image": "nginx"}]}, "status": {"phase": "Running"}}
GROUPS = [p.split("/")[2:] for p in RES if p.startswith("/apis/")]

class H(BaseHTTPRequestHandler):
    def reply(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        path = self.path.split("?")[0]
        if path == "/api":
            return self.reply(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
        if path == "/apis":
            return self.reply(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v}],
                 "preferredVersion": {"groupVersion": f"{g}/{v}", "version": v}} for g, v in GROUPS]})
        if path in RES:
            gv = path[len("/api/"):] if path.startswith("/api/") else path[len("/apis/"):]
            return self.reply(200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": [
                dict({"name": n, "singularName": "", "namespaced": ns, "kind": k,
                 "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]},
                 **({"group": "policy", "version": "v1"} if k == "Eviction" else {})) for n, k, ns in RES[path]]})
        if path == "/api/v1/nodes/node1":
            return self.reply(200, NODE)
        if path == "/api/v1/pods":
            return self.reply(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": [POD]})
        if path == "/version":
            return self.reply(200, {"major": "1", "minor": "33", "gitVersion": "v1.33.0"})
        return self.reply(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404, "reason": "NotFound", "message": "not found"})

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n)
        i = next(counter)
        name = self.path.split("?")[0].strip("/").replace("/", "_")
        with open(os.path.join(sys.argv[2], f"{i:02d}-{name}.bin"), "wb") as f:
            f.write(body)
        with open(os.path.join(sys.argv[2], f"{i:02d}-{name}.ct"), "w") as f:
            f.write(self.headers.get("Content-Type", "") + "\n" + self.headers.get("Accept", "") + "\n")
        if "selfsubjectaccessreviews" in self.path:
            return self.reply(201, {"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
                                    "metadata": {}, "spec": {}, "status": {"allowed": True}})
        return self.reply(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})

    do_PUT = do_POST
    def do_PATCH(self):
        n = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(n)
        return self.reply(200, NODE)
    def log_message(self, *a):
        pass

srv = HTTPServer(("127.0.0.1", int(sys.argv[1])), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(os.path.join(sys.argv[2], "cert.pem"), os.path.join(sys.argv[2], "key.pem"))
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
