// The process's TCP sockets (sockets.h).
#include "sockets.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>

namespace baton::sockets {
namespace {

void NoDelay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Closes `fd` keeping errno (the failure's, not the close's).
int CloseKeepingErrno(int fd) {
  const int e = errno;
  ::close(fd);
  errno = e;
  return -1;
}

}  // namespace

std::string HostAddress(const std::string& host_name) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host_name.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return "127.0.0.1";
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr, text, sizeof text);
  ::freeaddrinfo(found);
  return text;
}

int ListenTcp(int backlog, int* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof any;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&any), sizeof any) != 0 || ::listen(fd, backlog) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&any), &len) != 0) {
    return CloseKeepingErrno(fd);
  }
  *port = ntohs(any.sin_port);
  return fd;
}

int ConnectTcp(const std::string& address) {
  const std::size_t colon = address.rfind(':');
  sockaddr_in to{};
  to.sin_family = AF_INET;
  char* end = nullptr;
  const long port = colon == std::string::npos ? -1 : std::strtol(address.c_str() + colon + 1, &end, 10);
  if (port < 0 || port > 65535 || end == nullptr || *end != '\0' ||
      ::inet_pton(AF_INET, address.substr(0, colon).c_str(), &to.sin_addr) != 1) {
    errno = EINVAL;
    return -1;
  }
  to.sin_port = htons(static_cast<std::uint16_t>(port));
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) return CloseKeepingErrno(fd);
  NoDelay(fd);
  return fd;
}

int AcceptTcp(int listener, int timeout_ms) {
  pollfd p{listener, POLLIN, 0};
  const int ready = ::poll(&p, 1, timeout_ms);
  if (ready == 0) errno = ETIMEDOUT;
  if (ready != 1) return -1;
  const int fd = ::accept(listener, nullptr, nullptr);
  if (fd >= 0) NoDelay(fd);
  return fd;
}

bool SendAll(int fd, std::string_view bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

long Receive(int fd, void* into, std::size_t size, bool wait_all) {
  return ::recv(fd, into, size, wait_all ? MSG_WAITALL : MSG_DONTWAIT);
}

void Close(int fd) { ::close(fd); }

}  // namespace baton::sockets
