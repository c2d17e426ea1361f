#pragma once
// A TLS backend for the upstream unit tests: it listens on 127.0.0.1:0 and serves each accepted
// connection on a thread of its own with blocking OpenSSL calls on the socket (SSL_set_fd), so
// each SSL_write is one TLS record on the wire. For each request (a head without a body) it
// sends what the test's answer function says: the response as one record, optionally stray bytes
// as a second one, optionally a close_notify; and only then counts the request answered, so a
// test that waits for that finds every one of those records in its socket's receive queue.
// It counts the handshakes that completed and those that failed, and keeps every application
// byte it read.

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <boost/asio/ip/tcp.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace fencing {

class TlsBackend {
 public:
  struct Answer {
    std::string response;
    std::string stray;          // sent as a record of its own after the response
    bool close_notify = false;  // then a close_notify (the connection is not closed)
  };
  using AnswerFn = std::function<Answer(size_t request)>;  // 1-based, over every connection

  // client_ca: non-empty asks every client for a certificate signed by it (and refuses others).
  TlsBackend(const std::string& cert, const std::string& key, AnswerFn answer, const std::string& client_ca = "")
      : answer_(std::move(answer)) {
    ctx_ = SSL_CTX_new(TLS_server_method());
    EXPECT_EQ(SSL_CTX_use_certificate_chain_file(ctx_, cert.c_str()), 1);
    EXPECT_EQ(SSL_CTX_use_PrivateKey_file(ctx_, key.c_str(), SSL_FILETYPE_PEM), 1);
    if (!client_ca.empty()) {
      EXPECT_EQ(SSL_CTX_load_verify_locations(ctx_, client_ca.c_str(), nullptr), 1);
      SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    }
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::listen(listener_, 16), 0);
    socklen_t len = sizeof addr;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }

  ~TlsBackend() {
    stop_ = true;
    acceptor_.join();
    {
      std::lock_guard lock(mu_);
      for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    }
    for (std::thread& t : threads_) t.join();
    for (int fd : fds_) ::close(fd);
    ::close(listener_);
    SSL_CTX_free(ctx_);
  }

  boost::asio::ip::tcp::endpoint endpoint() const {
    return {boost::asio::ip::make_address_v4("127.0.0.1"), port_};
  }

  size_t handshakes() {
    std::lock_guard lock(mu_);
    return handshakes_;
  }
  size_t failed_handshakes() {
    std::lock_guard lock(mu_);
    return failed_handshakes_;
  }
  std::string received() {
    std::lock_guard lock(mu_);
    return received_;
  }
  // Waits (bounded) until `answered` requests have been answered, or `failed` handshakes failed.
  bool WaitAnswered(size_t answered, std::chrono::milliseconds limit = std::chrono::seconds(5)) {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, limit, [&] { return answered_ >= answered; });
  }
  bool WaitHandshakes(size_t done, std::chrono::milliseconds limit = std::chrono::seconds(5)) {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, limit, [&] { return handshakes_ >= done; });
  }
  bool WaitFailedHandshakes(size_t failed, std::chrono::milliseconds limit = std::chrono::seconds(5)) {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, limit, [&] { return failed_handshakes_ >= failed; });
  }

 private:
  void AcceptLoop() {
    while (!stop_) {
      pollfd p{listener_, POLLIN, 0};
      if (::poll(&p, 1, 20) != 1) continue;
      const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      std::lock_guard lock(mu_);
      fds_.push_back(fd);
      threads_.emplace_back([this, fd] { Serve(fd); });
    }
  }

  void Serve(int fd) {
    timeval timeout{5, 0};  // a test that hangs ends with its backend's reads
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    SSL* ssl = SSL_new(ctx_);
    SSL_set_fd(ssl, fd);
    const bool shook = SSL_accept(ssl) == 1;
    {
      std::lock_guard lock(mu_);
      ++(shook ? handshakes_ : failed_handshakes_);
    }
    changed_.notify_all();
    std::string pending;
    while (shook && !stop_) {
      char buf[4096];
      const int n = SSL_read(ssl, buf, sizeof buf);
      if (n <= 0) break;
      pending.append(buf, static_cast<size_t>(n));
      {
        std::lock_guard lock(mu_);
        received_.append(buf, static_cast<size_t>(n));
      }
      for (size_t end; (end = pending.find("\r\n\r\n")) != std::string::npos;) {
        pending.erase(0, end + 4);
        size_t request;
        {
          std::lock_guard lock(mu_);
          request = ++requests_;
        }
        const Answer answer = answer_(request);
        SSL_write(ssl, answer.response.data(), static_cast<int>(answer.response.size()));
        if (!answer.stray.empty()) SSL_write(ssl, answer.stray.data(), static_cast<int>(answer.stray.size()));
        if (answer.close_notify) SSL_shutdown(ssl);
        {
          std::lock_guard lock(mu_);
          ++answered_;
        }
        changed_.notify_all();
      }
    }
    SSL_free(ssl);
    ERR_clear_error();
  }

  AnswerFn answer_;
  SSL_CTX* ctx_ = nullptr;
  int listener_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::vector<int> fds_;  // the accepted sockets, closed once their threads have ended
  std::vector<std::thread> threads_;
  size_t handshakes_ = 0, failed_handshakes_ = 0, requests_ = 0, answered_ = 0;
  std::string received_;
};

}  // namespace fencing
