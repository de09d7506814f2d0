// The process's TCP sockets (Env's socket operations, baton/env.h): plain
// functions over descriptors that the process's Env and the fake share.
#ifndef BATON_OS_SOCKETS_H_
#define BATON_OS_SOCKETS_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace baton::sockets {

// As Env's operations of the same names.
std::string HostAddress(const std::string& host_name);
int ListenTcp(int backlog, int* port);
int ConnectTcp(const std::string& address);
int AcceptTcp(int listener, int timeout_ms);
bool SendAll(int fd, std::string_view bytes);
long Receive(int fd, void* into, std::size_t size, bool wait_all);
void Close(int fd);

}  // namespace baton::sockets

#endif  // BATON_OS_SOCKETS_H_
