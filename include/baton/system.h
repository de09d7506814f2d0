// The machine a rank runs on (the OS room, src/os): its name and the CPUs
// this process may use. What `baton doctor` prints and the memory check
// groups ranks by.
#ifndef BATON_SYSTEM_H_
#define BATON_SYSTEM_H_

#include <string>

namespace baton {

// This machine's name (gethostname), for grouping ranks by node;
// "localhost" if it has none.
std::string HostName();

// The CPUs this process may run on (its affinity), as ranges: "0-1",
// "0,2,4-7"; "?" if they cannot be read.
std::string AllowedCores();

}  // namespace baton

#endif  // BATON_SYSTEM_H_
