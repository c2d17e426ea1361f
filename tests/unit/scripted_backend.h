#pragma once
// A backend for unit tests that drive the proxy's sockets: it listens on 127.0.0.1:0 and runs a
// script, on a thread of its own and with blocking POSIX calls, for each connection it accepts,
// recording the raw bytes and the requests it received. The code under test runs on the test's
// io_context as it does in the proxy; the backend never shares it, so a script can block.

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace fencing {

class ScriptedBackend {
 public:
  class Conn {
   public:
    Conn(ScriptedBackend& backend, int fd, size_t index, uint16_t peer_port)
        : backend_(backend), fd_(fd), index_(index), peer_port_(peer_port) {}
    ~Conn() { Close(); }

    size_t index() const { return index_; }

    // The next whole request (head, and body by Content-Length or chunked), or "" if the peer
    // closed (or the test ended) first. Each one is recorded.
    std::string ReadRequest() {
      for (;;) {
        size_t total = RequestLength(pending_);
        if (total != std::string::npos) {
          std::string request = pending_.substr(0, total);
          pending_.erase(0, total);
          backend_.RecordRequest(index_, request);
          return request;
        }
        if (!Fill()) return "";
      }
    }
    void Write(std::string_view bytes) {
      while (fd_ >= 0 && !bytes.empty()) {
        ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
        if (n <= 0) return;
        bytes.remove_prefix(static_cast<size_t>(n));
      }
    }
    void Close() {
      if (fd_ >= 0) ::close(fd_);
      fd_ = -1;
    }
    // Keeps the connection open until the peer closes it, the test asks for it to be closed
    // (CloseConnection), or the test ends.
    void Hold() {
      while (fd_ >= 0 && !backend_.stop_) {
        if (backend_.CloseRequested(peer_port_)) break;
        if (!Fill(std::chrono::milliseconds(10), /*once=*/true) && eof_) break;
      }
      Close();
    }
    // Serves every request on the connection with `response` until the peer closes it.
    void Serve(std::string_view response = kOk) {
      while (!ReadRequest().empty()) Write(response);
    }

   private:
    // Reads more; false on EOF, error or the end of the test (or, once, when nothing came).
    bool Fill(std::chrono::milliseconds wait = std::chrono::milliseconds(10), bool once = false) {
      while (fd_ >= 0 && !backend_.stop_) {
        pollfd p{fd_, POLLIN, 0};
        int ready = ::poll(&p, 1, static_cast<int>(wait.count()));
        if (ready == 0) {
          if (once) return false;
          continue;
        }
        char buf[16 * 1024];
        ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
        if (n <= 0) {
          eof_ = true;
          return false;
        }
        pending_.append(buf, static_cast<size_t>(n));
        backend_.RecordBytes(index_, std::string_view(buf, static_cast<size_t>(n)));
        return true;
      }
      return false;
    }

    ScriptedBackend& backend_;
    int fd_;
    size_t index_;
    uint16_t peer_port_;
    bool eof_ = false;
    std::string pending_;
  };

  static constexpr std::string_view kOk = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

  using Script = std::function<void(Conn&)>;

  // Without a script every connection is served with kOk.
  explicit ScriptedBackend(Script script = [](Conn& c) { c.Serve(); }) : script_(std::move(script)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listen_fd_, 64) != 0) {
      ADD_FAILURE() << "backend cannot listen";
      return;
    }
    socklen_t len = sizeof addr;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }
  ~ScriptedBackend() {
    stop_ = true;
    if (acceptor_.joinable()) acceptor_.join();
    for (std::thread& t : threads_) t.join();
    if (listen_fd_ >= 0) ::close(listen_fd_);
  }

  boost::asio::ip::tcp::endpoint endpoint() const {
    return {boost::asio::ip::make_address_v4("127.0.0.1"), port_};
  }
  uint16_t port() const { return port_; }

  size_t connections() const { return accepted_; }
  // The connections accepted once `n` have been (the accept runs on the backend's thread, a
  // little after the client's connect has completed), or after a second.
  size_t WaitForConnections(size_t n) const {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (accepted_ < n && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return accepted_;
  }
  std::vector<std::string> requests(size_t conn) const {
    std::lock_guard lock(mu_);
    auto it = requests_.find(conn);
    return it == requests_.end() ? std::vector<std::string>{} : it->second;
  }
  std::string received(size_t conn) const {
    std::lock_guard lock(mu_);
    auto it = received_.find(conn);
    return it == received_.end() ? std::string() : it->second;
  }
  // Requests with this method, over all connections.
  size_t Count(std::string_view method) const {
    std::lock_guard lock(mu_);
    size_t n = 0;
    for (const auto& [conn, list] : requests_) {
      for (const std::string& r : list) n += r.compare(0, method.size() + 1, std::string(method) + " ") == 0;
    }
    return n;
  }
  // Asks the connection whose client uses this local port to close (see Conn::Hold).
  void CloseConnection(uint16_t client_port) {
    std::lock_guard lock(mu_);
    close_requested_.insert(client_port);
  }

  // The request's length if `bytes` holds a whole one, else npos.
  static size_t RequestLength(const std::string& bytes) {
    size_t head_end = bytes.find("\r\n\r\n");
    if (head_end == std::string::npos) return std::string::npos;
    head_end += 4;
    std::string head = bytes.substr(0, head_end);
    std::transform(head.begin(), head.end(), head.begin(), [](unsigned char c) { return std::tolower(c); });
    if (size_t p = head.find("\r\ncontent-length:"); p != std::string::npos) {
      size_t total = head_end + std::stoul(head.substr(p + 17));
      return bytes.size() >= total ? total : std::string::npos;
    }
    if (head.find("\r\ntransfer-encoding: chunked\r\n") != std::string::npos) {
      std::string_view body = std::string_view(bytes).substr(head_end);
      if (body.substr(0, 5) == "0\r\n\r\n") return head_end + 5;
      size_t end = body.find("\r\n0\r\n\r\n");
      return end == std::string::npos ? std::string::npos : head_end + end + 7;
    }
    return head_end;
  }

 private:
  void AcceptLoop() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 10) <= 0) continue;
      sockaddr_in peer{};
      socklen_t len = sizeof peer;
      int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC);
      if (fd < 0) continue;
      size_t index = accepted_++;
      uint16_t peer_port = ntohs(peer.sin_port);
      threads_.emplace_back([this, fd, index, peer_port] {
        Conn conn(*this, fd, index, peer_port);
        script_(conn);
      });
    }
  }
  void RecordRequest(size_t conn, const std::string& request) {
    std::lock_guard lock(mu_);
    requests_[conn].push_back(request);
  }
  void RecordBytes(size_t conn, std::string_view bytes) {
    std::lock_guard lock(mu_);
    received_[conn].append(bytes);
  }
  bool CloseRequested(uint16_t client_port) {
    std::lock_guard lock(mu_);
    return close_requested_.count(client_port) != 0;
  }

  Script script_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> accepted_{0};
  std::thread acceptor_;
  std::vector<std::thread> threads_;  // touched by the acceptor thread only, until it is joined
  mutable std::mutex mu_;
  std::map<size_t, std::vector<std::string>> requests_;
  std::map<size_t, std::string> received_;
  std::set<uint16_t> close_requested_;
};

// Waits until the peer of `fd` has closed its side (the FIN has arrived), without reading.
inline bool WaitForPeerClose(int fd, std::chrono::milliseconds timeout = std::chrono::milliseconds(1500)) {
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, static_cast<int>(timeout.count())) == 1 && (p.revents & (POLLRDHUP | POLLHUP));
}

}  // namespace fencing
