#pragma once
// The I/O types of the proxy's worker threads, all bound to the io_context's own executor type.
// Asio's defaults use any_io_executor, a type-erased executor that every operation copies and
// calls through a table: about 5% of the instructions of a proxied request. Each worker runs one
// io_context, so nothing needs the erasure.

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace fencing::io {

using Executor = boost::asio::io_context::executor_type;
template <typename T = void>
using Awaitable = boost::asio::awaitable<T, Executor>;
using Socket = boost::asio::basic_stream_socket<boost::asio::ip::tcp, Executor>;
using Acceptor = boost::asio::basic_socket_acceptor<boost::asio::ip::tcp, Executor>;
using Timer = boost::asio::basic_waitable_timer<std::chrono::steady_clock,
                                                boost::asio::wait_traits<std::chrono::steady_clock>, Executor>;

// Completion token for co_await in an Awaitable: results as a tuple (error_code first), no throw.
inline constexpr auto kTuple = boost::asio::as_tuple(boost::asio::use_awaitable_t<Executor>{});

}  // namespace fencing::io
