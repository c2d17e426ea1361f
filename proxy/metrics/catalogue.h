#pragma once
// Every metric family the proxy exports, one entry each: its type, the member that holds it in
// Metrics (metrics.h), its name and its help. A new metric is one entry here and the line in
// Metrics that gives it its series; the contract (and docs/operations.md) list the same names.
//
//   X(Type, member, "name", "help")   Type: Counter, Gauge or Histogram

#define FP_METRIC_FAMILIES(X)                                                                                     \
  X(Counter, requests_total, "fencing_proxy_requests_total", "Requests by route and outcome.")                   \
  X(Gauge, inflight_requests, "fencing_proxy_inflight_requests",                                                  \
    "Requests forwarded to the backend and not yet answered.")                                                    \
  X(Histogram, upstream_request_seconds, "fencing_proxy_upstream_request_seconds",                                \
    "Time from forwarding a request to the end of the backend's response.")                                       \
  X(Counter, upstream_tls_handshakes_total, "fencing_proxy_upstream_tls_handshakes_total",                        \
    "TLS handshakes with an https backend, by result: success, certificate (its chain or name did not verify), "  \
    "timeout (not done within timeouts.connect), error (refused, closed or failed otherwise).")                   \
  X(Gauge, fence_keys, "fencing_proxy_fence_keys",                                                                \
    "Keys a keyed fence holds (0 for a fence without keys); keys are never labels.")                              \
  X(Counter, fence_keys_forgotten_total, "fencing_proxy_fence_keys_forgotten_total",                              \
    "Idle keys forgotten into their fence's floor (forget_idle_keys_after).")                                     \
  X(Gauge, max_token, "fencing_proxy_max_token",                                                                  \
    "Highest durable fencing token per fence (a float64: exact up to 2^53).")                                     \
  X(Counter, token_raises_total, "fencing_proxy_token_raises_total", "Durable raises of a fence's max_token.")    \
  X(Histogram, raise_wait_seconds, "fencing_proxy_raise_wait_seconds",                                            \
    "Time a raise waited for older in-flight writes of its fence to complete.")                                   \
  X(Counter, lock_service_requests_total, "fencing_proxy_lock_service_requests_total",                            \
    "Raises a lock service was asked to confirm, by result: verified (the holder's token), rejected (not the "    \
    "holder's, or no holder), unavailable (no answer within its timeout).")                                       \
  X(Histogram, lock_service_seconds, "fencing_proxy_lock_service_seconds",                                        \
    "Time a lock service took to say who holds a lock (a raise's verification).")                                 \
  X(Gauge, fence_store_members, "fencing_proxy_fence_store_members",                                              \
    "Proxies registered in the shared fence store's prefix, this one included, as its watch sees them (0 with "   \
    "the state file).")                                                                                           \
  X(Histogram, fence_store_seconds, "fencing_proxy_fence_store_seconds",                                          \
    "Shared fence store (etcd): raise (pending written to committed, as the raiser sees it), ack (acknowledged "  \
    "to committed or withdrawn), txn (one transaction), keepalive (one membership renewal), load (a full read).") \
  X(Histogram, state_sync_seconds, "fencing_proxy_state_sync_seconds",                                            \
    "Duration of one write and fdatasync of the state file.")                                                     \
  X(Gauge, connections, "fencing_proxy_connections", "Open client connections.")                                  \
  X(Counter, connections_refused_total, "fencing_proxy_connections_refused_total",                                \
    "Client connections closed at once because max_connections was reached.")                                    \
  X(Counter, connections_evicted_total, "fencing_proxy_connections_evicted_total",                                \
    "Idle keep-alive connections closed at max_connections to admit a new one.")                                  \
  X(Counter, access_log_dropped_lines_total, "fencing_proxy_access_log_dropped_lines_total",                      \
    "Access log lines dropped because stderr fell more than 4 MiB behind.")                                       \
  X(Counter, state_write_failures_total, "fencing_proxy_state_write_failures_total",                              \
    "Failed writes or syncs of the state file (the first one is terminal).")                                      \
  X(Counter, state_compactions_total, "fencing_proxy_state_compactions_total",                                    \
    "Rewrites of the state file as a snapshot (keeps it small), by result.")                                      \
  X(Gauge, state_compaction_stall_seconds, "fencing_proxy_state_compaction_stall_seconds",                        \
    "Longest time since start the state writer spent on a compaction instead of raises (the hand-over of a "      \
    "background compaction, or the whole of a small log's).")                                                     \
  X(Gauge, process_resident_memory_bytes, "fencing_proxy_process_resident_memory_bytes",                          \
    "Resident memory of the process (/proc/self/statm), read at each scrape.")                                    \
  X(Gauge, allocator_bytes, "fencing_proxy_allocator_bytes",                                                      \
    "The memory allocator's bytes, read at each scrape, by state: allocated (in use by the proxy), held (taken "  \
    "from the kernel and not given back), free (of held: whole free pages, what a release returns), cached (of "  \
    "held: freed small objects in the allocator's caches).")                                                      \
  X(Gauge, config_last_reload_successful, "fencing_proxy_config_last_reload_successful",                          \
    "1 if the last route-file load was applied, 0 if it was refused.")                                            \
  X(Gauge, config_last_reload_success_timestamp_seconds,                                                          \
    "fencing_proxy_config_last_reload_success_timestamp_seconds",                                                 \
    "Unix time of the last route-file load that was applied (start-up counts).")                                  \
  X(Counter, config_reloads_total, "fencing_proxy_config_reloads_total", "Route-file reloads by result.")         \
  X(Gauge, build_info, "fencing_proxy_build_info", "Version and revision of the running binary.")             \
  X(Counter, tls_handshakes_total, "fencing_proxy_tls_handshakes_total",                                          \
    "TLS handshakes on a listener, by result: ok, failed (refused by either side: a version, a certificate, "     \
    "ALPN, or no TLS at all), timeout (not finished within timeouts.header_read).")                               \
  X(Gauge, tls_certificate_expiry_timestamp_seconds, "fencing_proxy_tls_certificate_expiry_timestamp_seconds",    \
    "notAfter of the certificate loaded from each TLS file (a CA bundle: its first to expire), in Unix time.")   \
  X(Counter, tls_reloads_total, "fencing_proxy_tls_reloads_total",                                                \
    "Reloads of the listener's TLS files after start-up, by result: ok (new handshakes use them), failed (the "   \
    "running certificate keeps serving).")                                                                        \
  X(Gauge, tls_last_reload_successful, "fencing_proxy_tls_last_reload_successful",                                \
    "1 if the listener's TLS files as they are now on disk are the ones serving (start-up counts), 0 while a "    \
    "change to them does not load.")

// The shared fence store's operations (fence_store_seconds{op}; FenceStoreObserver::Observe).
#define FP_FENCE_STORE_OPS(X) X(raise) X(ack) X(txn) X(keepalive) X(load)
