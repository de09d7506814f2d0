// main() of every multi-rank test: they run `mpirun` as child processes, and
// Open MPI refuses root without these settings; more ranks than cores (4
// ranks on a 2-core machine) need oversubscription.
//
// Each test process also gives its jobs a session folder of their own: Open
// MPI makes /tmp/ompi.HOST.UID when a job starts and removes it when the
// last one ends, and two jobs starting while a third ends can race on it
// ("mkdir ... File exists", orte_init failed). ctest runs tests in parallel
// processes; within one, jobs run one after another.
//
// And its jobs' shared-memory segments a folder of their own, removed at
// the end: Open MPI's vader transport puts a file a rank in /dev/shm,
// named by job and rank, and a rank killed on purpose (the fault and
// recovery tests) never removes its own. Left in the shared folder they
// pile up, and a later job that draws the same job number finds a stale
// one: with them in /dev/shm, a spawn after such tests hung now and then.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

int main(int argc, char** argv) {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
  const std::filesystem::path session = std::filesystem::temp_directory_path() /
                                        ("baton-mpi-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(session);
  setenv("OMPI_MCA_orte_tmpdir_base", session.c_str(), 1);
  std::error_code ec;
  const std::filesystem::path shm = std::filesystem::is_directory("/dev/shm", ec)
                                        ? std::filesystem::path("/dev/shm") / session.filename()
                                        : session / "shm";
  std::filesystem::create_directories(shm, ec);
  setenv("OMPI_MCA_btl_vader_backing_directory", shm.c_str(), 1);
  ::testing::InitGoogleTest(&argc, argv);
  const int code = RUN_ALL_TESTS();
  std::filesystem::remove_all(shm, ec);
  std::filesystem::remove_all(session, ec);
  return code;
}
