#!/usr/bin/env python3
"""Checks rendered fencing-proxy manifests (the output of `kubectl kustomize`) for the rules the
deployment depends on. Used by deploy/validate.

  check_manifests.py --sidecar native|plain [--readme README.md] [--self-test] RENDERED.yaml

Prints the check groups and every problem found; exits 1 if there is any. --self-test also
breaks the manifests in a number of known ways and fails unless the checks catch every one.
"""

import argparse
import copy
import json
import posixpath
import re
import sys

import yaml

PROXY = "fencing-proxy"
PROXY_UID = 65532
LOOPBACK = {"127.0.0.1", "localhost", "[::1]"}
WILDCARD = {"0.0.0.0", "[::]"}
# The keys of the Secret cert-manager writes for a Certificate, and which route-file key reads
# which of them.
CERT_MANAGER_KEYS = {"tls.crt", "tls.key", "ca.crt"}
TLS_FILES = {"cert_file": "tls.crt", "key_file": "tls.key", "client_ca_file": "ca.crt"}


class Checker:
    def __init__(self):
        self.problems = []
        self.checked = []

    def expect(self, condition, message):
        if not condition:
            self.problems.append(message)
        return condition

    def group(self, name):
        self.checked.append(name)


def split_address(address):
    host, _, port = address.rpartition(":")
    return host, int(port)


def duration_seconds(text):
    match = re.fullmatch(r"(\d+)(ms|s|m|h)", str(text))
    if not match:
        raise ValueError("bad duration %r" % text)
    value, unit = int(match.group(1)), match.group(2)
    return value * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]


def effective_security(pod_spec, container):
    merged = dict(pod_spec.get("securityContext") or {})
    for key in ("fsGroup", "fsGroupChangePolicy", "supplementalGroups", "sysctls"):
        merged.pop(key, None)
    merged.update(container.get("securityContext") or {})
    return merged


def all_containers(pod_spec):
    return [("initContainers", c) for c in pod_spec.get("initContainers") or []] + \
           [("containers", c) for c in pod_spec.get("containers") or []]


def resolve_port(container, port):
    """A probe or monitor port (number or name) as a number, or None."""
    if isinstance(port, int):
        return port
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return p.get("containerPort")
    return None


def selects(selector, labels):
    """Whether a label selector (matchLabels only; an empty one selects every pod) selects labels."""
    selector = selector or {}
    if selector.get("matchExpressions"):
        return False
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def metric_names(text):
    names = set()
    for name in re.findall(r"\bfencing_proxy_[a-z0-9_]+", text):
        names.add(re.sub(r"_(bucket|sum|count)$", "", name))
    return names


def readme_metrics(path):
    names = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            match = re.match(r"^\|\s*`([a-z_]+)`\s*\|\s*(counter|gauge|histogram)\s*\|", line)
            if match:
                names.add("fencing_proxy_" + match.group(1))
    return names


def check(objects, sidecar, readme, c):
    c.group("objects")
    for i, obj in enumerate(objects):
        where = "document %d" % (i + 1)
        if not c.expect(isinstance(obj, dict), "%s is not a mapping" % where):
            continue
        for key in ("apiVersion", "kind"):
            c.expect(isinstance(obj.get(key), str) and obj.get(key), "%s has no %s" % (where, key))
        c.expect(isinstance((obj.get("metadata") or {}).get("name"), str), "%s (%s) has no metadata.name" % (where, obj.get("kind")))
    objects = [o for o in objects if isinstance(o, dict)]
    by_kind = {}
    for obj in objects:
        by_kind.setdefault(obj.get("kind"), []).append(obj)

    c.group("no subPath anywhere")
    for obj in objects:
        text = json.dumps(obj)
        c.expect('"subPath"' not in text and '"subPathExpr"' not in text,
                 "%s/%s uses subPath" % (obj["kind"], obj["metadata"]["name"]))

    deployments = [d for d in by_kind.get("Deployment", [])
                   if any(ct.get("name") == PROXY for _, ct in all_containers(d["spec"]["template"]["spec"]))]
    if not c.expect(len(deployments) == 1, "expected one Deployment with a %s container, found %d" % (PROXY, len(deployments))):
        return
    deployment = deployments[0]
    name = deployment["metadata"]["name"]
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    pod_labels = spec["template"]["metadata"].get("labels") or {}

    c.expect(not pod.get("hostNetwork"), "Deployment %s: hostNetwork would put the app's 127.0.0.1 on the node" % name)

    c.group("sidecar (%s)" % sidecar)
    init = [ct for ct in pod.get("initContainers") or [] if ct.get("name") == PROXY]
    main = [ct for ct in pod.get("containers") or [] if ct.get("name") == PROXY]
    if sidecar == "native":
        c.expect(len(init) == 1 and not main, "%s must be an init container" % PROXY)
        proxy = init[0] if init else main[0]
        c.expect(proxy.get("restartPolicy") == "Always", "native sidecar needs restartPolicy: Always")
        c.expect((pod.get("initContainers") or [])[0].get("name") == PROXY,
                 "%s must be the first init container (it gates what follows)" % PROXY)
    else:
        c.expect(len(main) == 1 and not init, "%s must be a plain container" % PROXY)
        proxy = main[0] if main else init[0]
        c.expect("restartPolicy" not in proxy, "a plain container has no restartPolicy")
    apps = [ct for ct in pod.get("containers") or [] if ct.get("name") != PROXY]
    c.expect(apps, "no app container beside the proxy")

    c.group("route file from the ConfigMap")
    args = proxy.get("args") or []
    config_path = args[args.index("--config") + 1] if "--config" in args[:-1] else None
    if not c.expect(config_path, "%s: args must contain --config FILE" % PROXY):
        return
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    config_dir, config_file = posixpath.split(config_path)
    mounts = {m["mountPath"]: m for m in proxy.get("volumeMounts") or []}
    config_mount = mounts.get(config_dir)
    if not c.expect(config_mount, "%s: no volume mounted at %s (the route file's directory)" % (PROXY, config_dir)):
        return
    c.expect(config_mount.get("readOnly") is True, "%s: the route file mount must be readOnly" % PROXY)
    config_volume = volumes.get(config_mount["name"], {})
    cm_name = (config_volume.get("configMap") or {}).get("name")
    if not c.expect(cm_name, "%s: %s must be a ConfigMap volume mounted as a directory" % (PROXY, config_dir)):
        return
    cms = [o for o in by_kind.get("ConfigMap", []) if o["metadata"]["name"] == cm_name]
    if not c.expect(cms and config_file in (cms[0].get("data") or {}),
                    "ConfigMap %s with key %s not found" % (cm_name, config_file)):
        return
    routes = yaml.safe_load(cms[0]["data"][config_file])
    listen_host, listen_port = split_address(routes.get("listen", "0.0.0.0:8080"))
    admin_host, admin_port = split_address(routes.get("admin_listen", "127.0.0.1:9901"))
    backend = re.fullmatch(r"http://(\[[^\]]+\]|[^:/]+)(?::(\d+))?/?", routes["backend"])
    c.expect(listen_host in WILDCARD, "listen must be on the pod IP (0.0.0.0), got %s" % listen_host)
    c.expect(admin_host in WILDCARD,
             "admin_listen must be on the pod IP (0.0.0.0): kubelet probes and Prometheus connect there, got %s" % admin_host)
    if c.expect(backend, "backend %r is not http://host:port" % routes.get("backend")):
        c.expect(backend.group(1) in LOOPBACK, "backend must be on loopback (the app binds 127.0.0.1 only), got %s" % backend.group(1))
    backend_port = int(backend.group(2) or 80) if backend else None

    # With a fence store the fences live in etcd and every replica shares them; with a state
    # file there must be exactly one pod per file.
    store = (routes.get("fence_store") or {}).get("etcd") if isinstance(routes.get("fence_store"), dict) else None
    if routes.get("fence_store") is None:
        c.group("rollout: one pod, Recreate")
        c.expect((spec.get("strategy") or {}).get("type") == "Recreate", "Deployment %s: strategy.type must be Recreate" % name)
        c.expect(spec.get("replicas", 1) == 1, "Deployment %s: replicas must be 1" % name)
    else:
        c.group("shared fences in etcd")
        if c.expect(isinstance(store, dict), "fence_store must have an etcd mapping"):
            c.expect("state_file" not in routes, "fence_store and state_file exclude each other")
            endpoints = store.get("endpoints") or []
            c.expect(endpoints, "fence_store.etcd.endpoints is empty")
            for e in endpoints:
                m = re.fullmatch(r"https?://(\[[^\]]+\]|[^:/]+):\d+/?", str(e))
                if c.expect(m, "fence_store endpoint %r is not http(s)://host:port" % e):
                    c.expect(m.group(1) not in LOOPBACK,
                             "fence_store endpoint %s is on loopback: an etcd per pod gives each pod fences of its own" % e)
            c.expect(str(store.get("prefix", "")).startswith("/"), "fence_store.etcd.prefix must start with /")
            c.expect(not any((volumes.get(m["name"], {}) or {}).get("persistentVolumeClaim")
                             for m in proxy.get("volumeMounts") or []),
                     "%s: a PersistentVolumeClaim is mounted, but with a fence store the proxy keeps no state" % PROXY)

    c.group("ports and probes on the admin port")
    ports = {p.get("containerPort") for p in proxy.get("ports") or []}
    c.expect(listen_port in ports, "%s: containerPort %d (listen) not declared" % (PROXY, listen_port))
    c.expect(admin_port in ports, "%s: containerPort %d (admin_listen) not declared" % (PROXY, admin_port))
    wanted = {"readinessProbe": "/readyz", "livenessProbe": "/healthz"}
    if sidecar == "native":
        wanted["startupProbe"] = "/readyz"
    for probe_name, path in wanted.items():
        probe = proxy.get(probe_name)
        if not c.expect(probe and "httpGet" in probe, "%s: %s must be an httpGet probe" % (PROXY, probe_name)):
            continue
        get = probe["httpGet"]
        c.expect(resolve_port(proxy, get.get("port")) == admin_port,
                 "%s: %s must use the admin port %d, got %r" % (PROXY, probe_name, admin_port, get.get("port")))
        c.expect(get.get("path") == path, "%s: %s path must be %s, got %r" % (PROXY, probe_name, path, get.get("path")))
        c.expect(get.get("scheme", "HTTP") == "HTTP",
                 "%s: %s must be plain HTTP: the admin listener has no TLS" % (PROXY, probe_name))
    for _, ct in all_containers(pod):
        for probe_name in ("startupProbe", "readinessProbe", "livenessProbe"):
            get = (ct.get(probe_name) or {}).get("httpGet")
            if get and ct is not proxy:
                c.expect(resolve_port(ct, get.get("port")) in (listen_port, None) or isinstance(get.get("port"), int),
                         "%s: %s port does not resolve" % (ct["name"], probe_name))
                c.expect(get.get("port") != backend_port,
                         "%s: %s on the backend port %s cannot work: the app binds 127.0.0.1 and kubelet connects to the pod IP"
                         % (ct["name"], probe_name, backend_port))

    c.group("the app is reachable only through the proxy")
    for ct in apps:
        for p in ct.get("ports") or []:
            c.expect(p.get("containerPort") != backend_port,
                     "%s declares the backend port %s: nothing may target the app directly" % (ct["name"], backend_port))
    for _, ct in all_containers(pod):
        for p in ct.get("ports") or []:
            c.expect("hostPort" not in p, "%s: hostPort bypasses the Service" % ct["name"])
    services = [s for s in by_kind.get("Service", [])
                if s["spec"].get("selector") and all(pod_labels.get(k) == v for k, v in s["spec"]["selector"].items())]
    c.expect(services, "no Service selects the pod")
    for svc in services:
        for p in svc["spec"].get("ports") or []:
            target = p.get("targetPort", p.get("port"))
            c.expect(isinstance(target, int),
                     "Service %s: targetPort must be a number (named ports of native sidecars are not resolved everywhere)"
                     % svc["metadata"]["name"])
            c.expect(target == listen_port, "Service %s: targetPort %r is not the proxy's listen port %d"
                     % (svc["metadata"]["name"], target, listen_port))

    tls = routes.get("tls")
    plain_port = None
    if routes.get("plain_listen"):
        plain_host, plain_port = split_address(routes["plain_listen"])
        if plain_host in LOOPBACK:
            plain_port = None  # not reachable from outside the pod

    c.group("NetworkPolicy: clients to the proxy's port, Prometheus to the admin port, nothing else")
    policies = [p for p in by_kind.get("NetworkPolicy", []) if selects((p.get("spec") or {}).get("podSelector"), pod_labels)]
    c.expect(policies, "no NetworkPolicy selects the pod: every port of it, the app's included if it ever binds the "
                       "pod IP, is open to every pod")
    admitted = set()
    for policy in policies:
        where = "NetworkPolicy %s" % policy["metadata"]["name"]
        pspec = policy.get("spec") or {}
        types = pspec.get("policyTypes") or (["Ingress"] + (["Egress"] if "egress" in pspec else []))
        c.expect("Ingress" in types, "%s: policyTypes must include Ingress" % where)
        for rule in pspec.get("ingress") or []:
            if not c.expect(rule.get("ports"), "%s: an ingress rule without ports admits every port, the app's too" % where):
                continue
            for port in rule["ports"]:
                number = port.get("port")
                if not c.expect(isinstance(number, int), "%s: port %r must be a number (named ports of native sidecars "
                                                         "are not resolved everywhere)" % (where, number)):
                    continue
                c.expect(port.get("protocol", "TCP") == "TCP", "%s: port %d: only TCP is served" % (where, number))
                numbers = set(range(number, port.get("endPort", number) + 1))
                c.expect(backend_port not in numbers, "%s admits the backend port %s: a path around the fence"
                         % (where, backend_port))
                c.expect(plain_port is None or plain_port not in numbers,
                         "%s admits plain_listen's port %s: it is for the kubelet only" % (where, plain_port))
                others = sorted(numbers - {listen_port, admin_port, backend_port, plain_port})
                c.expect(not others, "%s admits port %s, neither the proxy's (%d) nor the admin port (%d)"
                         % (where, "-".join(str(n) for n in sorted({others[0], others[-1]})) if others else "",
                            listen_port, admin_port))
                if admin_port in numbers:
                    c.expect(rule.get("from"), "%s: the admin port is open to every source: admit Prometheus only"
                             % where)
                admitted |= numbers
    if policies:
        c.expect(listen_port in admitted, "no NetworkPolicy admits clients to the proxy's port %d" % listen_port)
        c.expect(admin_port in admitted, "no NetworkPolicy admits Prometheus to the admin port %d" % admin_port)

    if tls is not None:
        check_tls(c, routes, tls, by_kind, pod, proxy, apps, mounts, volumes, listen_port, plain_port, services)

    state_dir = posixpath.dirname(routes["state_file"]) if store is None else None
    if state_dir is not None:
        c.group("state file on the app's PersistentVolume")
    state_mount = mounts.get(state_dir) if state_dir is not None else None
    if state_dir is not None and c.expect(state_mount, "%s: nothing mounted at %s (the state file's directory)" % (PROXY, state_dir)):
        claim = (volumes.get(state_mount["name"], {}).get("persistentVolumeClaim") or {}).get("claimName")
        if c.expect(claim, "%s: %s must be a PersistentVolumeClaim volume" % (PROXY, state_dir)):
            app_claims = {(volumes.get(m["name"], {}).get("persistentVolumeClaim") or {}).get("claimName")
                          for ct in apps for m in ct.get("volumeMounts") or []}
            c.expect(claim in app_claims, "the state file's volume (claim %s) must be the app's data volume" % claim)
            c.expect(not state_mount.get("readOnly"), "%s: the state directory must be writable" % PROXY)

    c.group("restricted security context")
    for kind, ct in all_containers(pod):
        sc = effective_security(pod, ct)
        who = ct["name"]
        c.expect(sc.get("runAsNonRoot") is True, "%s: runAsNonRoot must be true" % who)
        c.expect(sc.get("allowPrivilegeEscalation") is False, "%s: allowPrivilegeEscalation must be false" % who)
        c.expect("ALL" in ((sc.get("capabilities") or {}).get("drop") or []), "%s: capabilities.drop must include ALL" % who)
        c.expect(not (sc.get("capabilities") or {}).get("add"), "%s: adds capabilities" % who)
        c.expect((sc.get("seccompProfile") or {}).get("type") in ("RuntimeDefault", "Localhost"),
                 "%s: seccompProfile must be RuntimeDefault" % who)
        c.expect(not sc.get("privileged"), "%s: privileged" % who)
        c.expect(sc.get("readOnlyRootFilesystem") is True, "%s: readOnlyRootFilesystem must be true" % who)
    sc = effective_security(pod, proxy)
    c.expect(sc.get("runAsUser") == PROXY_UID, "%s: runAsUser must be %d (the image's USER)" % (PROXY, PROXY_UID))
    c.expect(pod.get("automountServiceAccountToken") is False, "the pod needs no service account token")

    c.group("resources")
    res = proxy.get("resources") or {}
    for key in ("cpu", "memory"):
        c.expect(key in (res.get("requests") or {}), "%s: resources.requests.%s missing" % (PROXY, key))
    c.expect("memory" in (res.get("limits") or {}), "%s: resources.limits.memory missing" % PROXY)

    c.group("grace period covers timeouts.shutdown")
    shutdown = duration_seconds((routes.get("timeouts") or {}).get("shutdown", "25s"))
    grace = pod.get("terminationGracePeriodSeconds", 30)
    c.expect(grace >= shutdown + 5, "terminationGracePeriodSeconds %s must cover timeouts.shutdown (%ss) plus the app's shutdown"
             % (grace, shutdown))

    monitors = by_kind.get("PodMonitor", [])
    rules = by_kind.get("PrometheusRule", [])
    dashboards = [o for o in by_kind.get("ConfigMap", []) if (o["metadata"].get("labels") or {}).get("grafana_dashboard")]
    if not (monitors or rules or dashboards):
        return
    documented = readme_metrics(readme) if readme else None
    if readme:
        c.expect(documented, "%s: no metrics table found" % readme)

    def check_names(text, where):
        if documented is None:
            return
        for metric in sorted(metric_names(text) - documented):
            c.problems.append("%s uses %s, which README.md's metrics table does not list" % (where, metric))

    c.group("PodMonitor")
    c.expect(len(monitors) == 1, "expected one PodMonitor, found %d" % len(monitors))
    for mon in monitors:
        selector = (mon["spec"].get("selector") or {}).get("matchLabels") or {}
        c.expect(selector and all(pod_labels.get(k) == v for k, v in selector.items()),
                 "PodMonitor %s does not select the pod" % mon["metadata"]["name"])
        for ep in mon["spec"].get("podMetricsEndpoints") or []:
            c.expect(resolve_port(proxy, ep.get("port")) == admin_port,
                     "PodMonitor: port %r is not the proxy's admin port" % ep.get("port"))
            c.expect(ep.get("path", "/metrics") == "/metrics", "PodMonitor: path must be /metrics")
            jobs = [r.get("replacement") for r in ep.get("relabelings") or [] if r.get("targetLabel") == "job"]
            c.expect(jobs == ["fencing-proxy"], "PodMonitor: the alerts expect job=\"fencing-proxy\"")

    c.group("PrometheusRule")
    c.expect(len(rules) == 1, "expected one PrometheusRule, found %d" % len(rules))
    wanted_alerts = {"FencingProxyDown", "FencingProxyStateWriteFailing", "FencingProxyConfigReloadFailing",
                     "FencingProxyStaleRejectionsHigh", "FencingProxyRaiseWaitHigh", "FencingProxyUpstreamErrorsHigh",
                     "FencingProxyConnectionsNearMax", "FencingProxyLockServiceUnavailable",
                     "FencingProxyUnverifiedRaises", "FencingProxyFenceStoreUnavailable",
                     "FencingProxyCertificateExpiringSoon", "FencingProxyCertificateReloadFailing"}
    seen = set()
    for rule_obj in rules:
        for group in rule_obj["spec"].get("groups") or []:
            for rule in group.get("rules") or []:
                alert = rule.get("alert")
                if not alert:
                    continue
                seen.add(alert)
                c.expect((rule.get("labels") or {}).get("severity") in ("critical", "warning", "info"),
                         "%s: needs a severity label" % alert)
                for key in ("summary", "description"):
                    c.expect((rule.get("annotations") or {}).get(key), "%s: needs a %s annotation" % (alert, key))
                check_names(rule.get("expr", ""), "alert %s" % alert)
    c.expect(wanted_alerts <= seen, "missing alerts: %s" % ", ".join(sorted(wanted_alerts - seen)))

    c.group("Grafana dashboard")
    c.expect(len(dashboards) == 1, "expected one dashboard ConfigMap, found %d" % len(dashboards))
    wanted_metrics = {"fencing_proxy_requests_total", "fencing_proxy_max_token", "fencing_proxy_raise_wait_seconds",
                      "fencing_proxy_state_sync_seconds", "fencing_proxy_upstream_request_seconds",
                      "fencing_proxy_inflight_requests", "fencing_proxy_connections",
                      "fencing_proxy_lock_service_requests_total", "fencing_proxy_lock_service_seconds",
                      "fencing_proxy_fence_store_members", "fencing_proxy_fence_store_seconds",
                      "fencing_proxy_tls_handshakes_total", "fencing_proxy_tls_certificate_expiry_timestamp_seconds"}
    for cm in dashboards:
        for key, text in (cm.get("data") or {}).items():
            try:
                dash = json.loads(text)
            except ValueError as e:
                c.problems.append("dashboard %s: not JSON: %s" % (key, e))
                continue
            panels = dash.get("panels") or []
            ids = [p.get("id") for p in panels]
            c.expect(len(ids) == len(set(ids)), "dashboard %s: panel ids are not unique" % key)
            used = set()
            for p in panels:
                c.expect(p.get("title") and p.get("gridPos") and p.get("targets"),
                         "dashboard %s: panel %r needs a title, gridPos and targets" % (key, p.get("title")))
                for t in p.get("targets") or []:
                    used |= metric_names(t.get("expr", ""))
                    check_names(t.get("expr", ""), "dashboard panel %r" % p.get("title"))
            c.expect(wanted_metrics <= used, "dashboard %s: no panel for %s" % (key, ", ".join(sorted(wanted_metrics - used))))


def check_tls(c, routes, tls, by_kind, pod, proxy, apps, mounts, volumes, listen_port, plain_port, services):
    c.group("TLS: the certificate Secret mounted read-only where the route file names it")
    if not c.expect(isinstance(tls, dict), "tls must be a mapping"):
        return
    certificates = {(o.get("spec") or {}).get("secretName"): o for o in by_kind.get("Certificate", [])}
    secrets = {o["metadata"]["name"]: o for o in by_kind.get("Secret", [])}
    c.expect(tls.get("cert_file") and tls.get("key_file"), "tls needs cert_file and key_file")
    checked_volumes = set()
    for key, secret_key in TLS_FILES.items():
        path = tls.get(key)
        if not path:
            continue
        directory, name = posixpath.split(path)
        mount = mounts.get(directory)
        if not c.expect(mount, "%s: nothing mounted at %s (tls.%s's directory)" % (PROXY, directory, key)):
            continue
        first = mount["name"] not in checked_volumes
        checked_volumes.add(mount["name"])
        c.expect(not first or mount.get("readOnly") is True,
                 "%s: the certificate mount at %s must be readOnly" % (PROXY, directory))
        secret = volumes.get(mount["name"], {}).get("secret")
        if not c.expect(secret, "%s: %s must be a Secret volume (tls.%s)" % (PROXY, directory, key)):
            continue
        secret_name = secret.get("secretName")
        if secret_name in secrets:
            keys = set((secrets[secret_name].get("data") or {})) | set((secrets[secret_name].get("stringData") or {}))
        elif c.expect(secret_name in certificates,
                      "Secret %s (tls.%s) is neither in the manifests nor a cert-manager Certificate's secretName"
                      % (secret_name, key)):
            keys = CERT_MANAGER_KEYS
        else:
            continue
        if secret.get("items"):
            files = {item.get("path"): item for item in secret["items"]}
        else:
            files = {k: {"key": k} for k in keys}
        item = files.get(name)
        if not c.expect(item, "tls.%s: %s is not a file of Secret %s's volume (it has %s)"
                        % (key, path, secret_name, ", ".join(sorted(files)))):
            continue
        c.expect(item["key"] in keys, "tls.%s: Secret %s has no key %s" % (key, secret_name, item["key"]))
        c.expect(item["key"] == secret_key, "tls.%s reads the Secret's %s, expected %s" % (key, item["key"], secret_key))
        mode = item.get("mode", secret.get("defaultMode", 0o644))
        c.expect(mode & 0o007 == 0 or (not first and "items" not in secret),
                 "Secret volume %s: mode %o lets every user in the container read %s" % (mount["name"], mode, name))
    for cert in by_kind.get("Certificate", []):
        where = "Certificate %s" % cert["metadata"]["name"]
        spec = cert.get("spec") or {}
        c.expect((spec.get("issuerRef") or {}).get("name"), "%s: issuerRef.name is empty" % where)
        usages = spec.get("usages")
        c.expect(usages is None or "server auth" in usages, "%s: usages must include server auth" % where)
        for svc in services:
            c.expect(svc["metadata"]["name"] in (spec.get("dnsNames") or []),
                     "%s: dnsNames must name Service %s, which clients connect to" % (where, svc["metadata"]["name"]))

    c.group("TLS: who may write, and the plain port")
    mode = tls.get("client_certificate", "require" if tls.get("client_ca_file") else None)
    c.expect(mode in (None, "require", "optional"), "tls.client_certificate must be require or optional, got %r" % mode)
    c.expect(mode is None or tls.get("client_ca_file"), "tls.client_certificate needs tls.client_ca_file")
    for route in routes.get("routes") or []:
        c.expect(not route.get("writers") or tls.get("client_ca_file"),
                 "route %s: writers needs tls.client_ca_file (nobody has an identity without it)" % route.get("name"))
        # A plain listener on the pod IP carries no identity: only writers keeps fenced writes off it.
        c.expect(plain_port is None or route.get("writers"),
                 "route %s has no writers: fenced writes without a client certificate get through plain_listen's "
                 "port %d" % (route.get("name"), plain_port or 0))
    ports = {p.get("containerPort") for p in proxy.get("ports") or []}
    c.expect(plain_port is None or plain_port in ports, "%s: containerPort %s (plain_listen) not declared" % (PROXY, plain_port))
    for ct in apps:
        for probe_name in ("startupProbe", "readinessProbe", "livenessProbe"):
            get = (ct.get(probe_name) or {}).get("httpGet")
            if not get:
                continue
            port = resolve_port(ct, get.get("port")) or resolve_port(proxy, get.get("port"))
            if port == listen_port:
                c.expect(mode != "require", "%s: %s goes through the TLS port, but the kubelet has no client certificate "
                                            "(client_certificate: require): probe through plain_listen" % (ct["name"], probe_name))
                c.expect(get.get("scheme") == "HTTPS", "%s: %s on the TLS port needs scheme HTTPS" % (ct["name"], probe_name))
            elif port is not None and port == plain_port:
                c.expect(get.get("scheme", "HTTP") == "HTTP", "%s: %s on plain_listen must be HTTP" % (ct["name"], probe_name))


def _pod(objects):
    for obj in objects:
        if obj.get("kind") == "Deployment":
            return obj["spec"]["template"]["spec"]
    raise KeyError("Deployment")


def _proxy(objects):
    for _, ct in all_containers(_pod(objects)):
        if ct["name"] == PROXY:
            return ct
    raise KeyError(PROXY)


def _routes(objects, edit):
    for obj in objects:
        if obj.get("kind") == "ConfigMap" and "routes.yaml" in (obj.get("data") or {}):
            obj["data"]["routes.yaml"] = edit(obj["data"]["routes.yaml"])


def _service(objects, edit):
    for obj in objects:
        if obj.get("kind") == "Service":
            edit(obj["spec"]["ports"][0])


MUTATIONS = {
    "subPath on the route file": lambda o: _proxy(o)["volumeMounts"][0].__setitem__("subPath", "routes.yaml"),
    "RollingUpdate": lambda o: [d["spec"].__setitem__("strategy", {"type": "RollingUpdate"})
                                for d in o if d.get("kind") == "Deployment"],
    "readiness on the client port": lambda o: _proxy(o)["readinessProbe"]["httpGet"].__setitem__("port", 8080),
    "liveness on /readyz": lambda o: _proxy(o)["livenessProbe"]["httpGet"].__setitem__("path", "/readyz"),
    "named Service targetPort": lambda o: _service(o, lambda p: p.__setitem__("targetPort", "http")),
    "admin on loopback": lambda o: _routes(o, lambda t: t.replace('admin_listen: "0.0.0.0:9901"', 'admin_listen: "127.0.0.1:9901"')),
    "backend on the pod IP": lambda o: _routes(o, lambda t: t.replace("http://127.0.0.1:8081", "http://10.0.0.1:8081")),
    "root filesystem writable": lambda o: _proxy(o)["securityContext"].__setitem__("readOnlyRootFilesystem", False),
    "runs as root": lambda o: _proxy(o)["securityContext"].__setitem__("runAsUser", 0),
    "capabilities kept": lambda o: _proxy(o)["securityContext"].pop("capabilities"),
    "no memory limit": lambda o: _proxy(o)["resources"].pop("limits"),
    "short grace period": lambda o: _pod(o).__setitem__("terminationGracePeriodSeconds", 10),
    "state on an emptyDir": lambda o: [v.update({"emptyDir": {}}) or v.pop("persistentVolumeClaim")
                                       for v in _pod(o)["volumes"] if v["name"] == "data"],
    "app exposes the backend port": lambda o: [ct.__setitem__("ports", [{"containerPort": 8081}])
                                               for ct in _pod(o)["containers"] if ct["name"] != PROXY],
}

def _network_policy(objects, edit):
    for obj in objects:
        if obj.get("kind") == "NetworkPolicy":
            edit(obj["spec"])


def _admin_rule(spec):
    return next(r for r in spec["ingress"] if any(p.get("port") == 9901 for p in r.get("ports") or []))


def _tls_volume(objects):
    return next(v for v in _pod(objects)["volumes"] if "secret" in v)


def _tls_mount(objects):
    name = _tls_volume(objects)["name"]
    return next(m for m in _proxy(objects)["volumeMounts"] if m["name"] == name)


def _app(objects):
    return next(ct for ct in _pod(objects)["containers"] if ct["name"] != PROXY)


MUTATIONS.update({
    "no NetworkPolicy": lambda o: o.__setitem__(slice(None), [x for x in o if x.get("kind") != "NetworkPolicy"]),
    "NetworkPolicy admits the backend port": lambda o: _network_policy(
        o, lambda s: s["ingress"][0]["ports"].append({"port": 8081, "protocol": "TCP"})),
    "NetworkPolicy rule without ports": lambda o: _network_policy(o, lambda s: s["ingress"][0].pop("ports")),
    "NetworkPolicy admits a port range": lambda o: _network_policy(
        o, lambda s: s["ingress"][0]["ports"][0].__setitem__("endPort", 9000)),
    "admin port open to every source": lambda o: _network_policy(o, lambda s: _admin_rule(s).pop("from")),
    "NetworkPolicy without Ingress": lambda o: _network_policy(o, lambda s: s.__setitem__("policyTypes", ["Egress"])),
})

# Only with tls: in the route file (components/tls).
TLS_MUTATIONS = {
    "certificate Secret mounted writable": lambda o: _tls_mount(o).__setitem__("readOnly", False),
    "certificate Secret mounted elsewhere": lambda o: _tls_mount(o).__setitem__("mountPath", "/etc/tls"),
    "route file names a file the Secret lacks": lambda o: _routes(
        o, lambda t: t.replace("/etc/fencing-proxy-tls/tls.key", "/etc/fencing-proxy-tls/server.key")),
    "cert_file reads the CA": lambda o: _tls_volume(o)["secret"].__setitem__(
        "items", [{"key": "ca.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"},
                  {"key": "ca.crt", "path": "ca.crt"}]),
    "key readable by every user": lambda o: _tls_volume(o)["secret"].__setitem__("defaultMode", 0o644),
    "Secret of no Certificate": lambda o: _tls_volume(o)["secret"].__setitem__("secretName", "other-tls"),
    "Certificate without the Service's name": lambda o: [
        x["spec"].__setitem__("dnsNames", ["example.com"]) for x in o if x.get("kind") == "Certificate"],
    "a route without writers beside plain_listen": lambda o: _routes(
        o, lambda t: re.sub(r"(?m)^ *writers: .*\n", "", t)),
    "NetworkPolicy admits the plain port": lambda o: _network_policy(
        o, lambda s: s["ingress"][0]["ports"].append({"port": 8080, "protocol": "TCP"})),
    "app probed through the TLS port": lambda o: _app(o)["readinessProbe"]["httpGet"].update(
        {"port": 8443, "scheme": "HTTPS"}),
    "admin probe over HTTPS": lambda o: _proxy(o)["livenessProbe"]["httpGet"].__setitem__("scheme", "HTTPS"),
}

# Only for a state file (one pod, its volume) or only for a fence store (etcd, no volume).
STATE_FILE_MUTATIONS = {"RollingUpdate", "state on an emptyDir"}
FENCE_STORE_MUTATIONS = {
    "etcd on loopback": lambda o: _routes(o, lambda t: re.sub(r"endpoints: \[[^\]]*\]",
                                                              'endpoints: ["http://127.0.0.1:2379"]', t)),
    "state_file beside fence_store": lambda o: _routes(o, lambda t: t + '\nstate_file: "/var/lib/fencing-proxy/fences.log"\n'),
    "a volume claim in the proxy": lambda o: [
        _pod(o)["volumes"].append({"name": "data", "persistentVolumeClaim": {"claimName": "legacy-app-data"}}),
        _proxy(o)["volumeMounts"].append({"name": "data", "mountPath": "/var/lib/fencing-proxy"})],
}


def _route_keys(objects):
    for obj in objects:
        if obj.get("kind") == "ConfigMap" and "routes.yaml" in (obj.get("data") or {}):
            return set(yaml.safe_load(obj["data"]["routes.yaml"]) or {})
    return set()


def self_test(objects, sidecar, readme):
    failures = []
    keys = _route_keys(objects)
    if "fence_store" in keys:
        mutations = {k: v for k, v in MUTATIONS.items() if k not in STATE_FILE_MUTATIONS}
        mutations.update(FENCE_STORE_MUTATIONS)
    else:
        mutations = dict(MUTATIONS)
    if "tls" in keys:
        mutations.update(TLS_MUTATIONS)
    for name, mutate in mutations.items():
        broken = copy.deepcopy(objects)
        mutate(broken)
        c = Checker()
        try:
            check(broken, sidecar, readme, c)
        except (KeyError, TypeError, ValueError, IndexError) as e:
            c.problems.append(str(e))
        if not c.problems:
            failures.append(name)
    print("  self-test: %d of %d broken variants caught" % (len(mutations) - len(failures), len(mutations)))
    for name in failures:
        print("  PROBLEM: self-test: not caught: " + name)
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sidecar", choices=("native", "plain"), required=True)
    parser.add_argument("--readme", help="README.md, whose metrics table lists every metric name")
    parser.add_argument("--self-test", action="store_true", help="also check that broken variants fail")
    parser.add_argument("rendered")
    args = parser.parse_args()
    with open(args.rendered, encoding="utf-8") as f:
        objects = [o for o in yaml.safe_load_all(f) if o is not None]
    c = Checker()
    try:
        check(objects, args.sidecar, args.readme, c)
    except (KeyError, TypeError, ValueError, IndexError) as e:
        c.problems.append("malformed manifests: %s: %s" % (type(e).__name__, e))
    print("  %d objects; checked: %s" % (len(objects), "; ".join(c.checked)))
    for problem in c.problems:
        print("  PROBLEM: " + problem)
    failures = self_test(objects, args.sidecar, None) if args.self_test else []
    return 1 if c.problems or failures else 0


if __name__ == "__main__":
    sys.exit(main())
