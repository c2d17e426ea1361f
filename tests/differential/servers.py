"""The request-view servers of the differential oracle, started once per run. Standard library
only; every server on 127.0.0.1; every start bounded; Servers.stop() ends them all.

  python   parsers/pyserver.py: http.server (two processes, taken in turn: it is the slowest)
  node     parsers/nodeparse.js server: Node's http.createServer (llhttp)
  go       parsers/goparse.go server: Go's net/http
  nginx    nginx (Debian's), proxy_pass to `goparse relay`, which reports what nginx forwarded
  haproxy  HAProxy (Debian's), to the same relay

goparse is built once per run with the local toolchain only (GOTOOLCHAIN=local, GOPROXY=off,
GOFLAGS=-mod=mod is not needed: it imports the standard library alone), GOCACHE and GOPATH in
the run's directory (or FP_DIFF_GOCACHE, to keep the cache between runs).
"""

import os
import shutil
import subprocess
import sys

from common import die_with_parent, free_port, port_open, start_server, stop, track, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
PARSERS = os.path.join(HERE, "parsers")


def need(tool):
    path = shutil.which(tool) or next((p for p in ("/usr/sbin/" + tool, "/sbin/" + tool)
                                       if os.path.exists(p)), None)
    if not path:
        raise RuntimeError("%s is not installed (scripts/install-deps.sh --with-tests installs it)" % tool)
    return path


def build_go(workdir):
    out = os.path.join(workdir, "goparse")
    env = dict(os.environ, GOTOOLCHAIN="local", GOPROXY="off", GOFLAGS="", GO111MODULE="on",
               GOCACHE=os.environ.get("FP_DIFF_GOCACHE") or os.path.join(workdir, "gocache"),
               GOPATH=os.path.join(workdir, "gopath"), CGO_ENABLED="0")
    result = subprocess.run([need("go"), "build", "-o", out, "goparse.go"], cwd=PARSERS, env=env,
                            capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise RuntimeError("go build failed:\n%s" % result.stderr)
    return out


NGINX_CONF = """daemon off;
master_process off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/nginx-error.log crit;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {dir}/client_body;
  proxy_temp_path {dir}/proxy;
  fastcgi_temp_path {dir}/fastcgi;
  uwsgi_temp_path {dir}/uwsgi;
  scgi_temp_path {dir}/scgi;
  client_max_body_size 0;
  client_body_buffer_size 1m;
  client_header_buffer_size 64k;
  large_client_header_buffers 8 64k;
  keepalive_requests 1000000;
  keepalive_timeout 60s;
  upstream relay {{ server 127.0.0.1:{relay}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://relay;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $http_host;
      proxy_buffering off;
      proxy_request_buffering on;
      proxy_read_timeout 30s;
      proxy_buffer_size 256k;
      proxy_buffers 8 256k;
      proxy_busy_buffers_size 512k;
    }}
  }}
}}
"""

HAPROXY_CFG = """global
  maxconn 4096
  tune.bufsize 131072
  tune.http.maxhdr 1000
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  timeout http-request 30s
  timeout http-keep-alive 30s
  option http-keep-alive
  option http-buffer-request
frontend fe
  bind 127.0.0.1:{port}
  default_backend be
backend be
  server relay 127.0.0.1:{relay}
"""


class Servers:
    def __init__(self, workdir):
        self.workdir = workdir
        self.procs = []
        self.ports = {}
        self.goparse = None

    def start(self, python_instances=2):
        log = os.path.join(self.workdir, "servers.log")
        self.goparse = build_go(self.workdir)
        pys = []
        for _ in range(python_instances):
            proc, port = start_server([sys.executable, os.path.join(PARSERS, "pyserver.py")], "pyserver",
                                      log_path=log)
            self.procs.append(proc)
            pys.append(port)
        self.ports["python"] = pys
        self.node_methods = subprocess.run(
            [need("node"), "-e", "process.stdout.write(require('http').METHODS.join(' '))"],
            capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL).stdout.split()
        proc, port = start_server([need("node"), os.path.join(PARSERS, "nodeparse.js"), "server"], "node",
                                  log_path=log)
        self.procs.append(proc)
        self.ports["node"] = port
        proc, port = start_server([self.goparse, "server"], "goparse server", log_path=log)
        self.procs.append(proc)
        self.ports["go"] = port
        proc, relay = start_server([self.goparse, "relay"], "goparse relay", log_path=log)
        self.procs.append(proc)
        self.ports["nginx"] = self._nginx(relay)
        self.ports["haproxy"] = self._haproxy(relay)
        return self.ports

    def _daemon(self, argv, port, name):
        out = open(os.path.join(self.workdir, name + ".out"), "ab")
        proc = track(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                      start_new_session=True, preexec_fn=die_with_parent))
        out.close()
        self.procs.append(proc)
        try:
            wait_for(lambda: proc.poll() is not None or port_open(port), 15.0, "%s to listen" % name)
        except RuntimeError:
            stop(proc)
            raise
        if proc.poll() is not None:
            with open(os.path.join(self.workdir, name + ".out"), "rb") as f:
                raise RuntimeError("%s exited %s: %s" % (name, proc.returncode, f.read()[-2000:]))
        return port

    def _nginx(self, relay):
        d = os.path.join(self.workdir, "nginx")
        os.makedirs(d, exist_ok=True)
        port = free_port()
        conf = os.path.join(d, "nginx.conf")
        with open(conf, "w") as f:
            f.write(NGINX_CONF.format(dir=d, relay=relay, port=port))
        return self._daemon([need("nginx"), "-p", d, "-c", conf, "-e", os.path.join(d, "nginx-error.log")],
                            port, "nginx")

    def _haproxy(self, relay):
        port = free_port()
        cfg = os.path.join(self.workdir, "haproxy.cfg")
        with open(cfg, "w") as f:
            f.write(HAPROXY_CFG.format(relay=relay, port=port))
        return self._daemon([need("haproxy"), "-db", "-f", cfg], port, "haproxy")

    def stop(self):
        for proc in reversed(self.procs):
            stop(proc)
        self.procs = []
