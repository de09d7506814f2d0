// main() of every multi-rank test: they run `mpirun` as child processes, and
// Open MPI refuses root without these settings; more ranks than cores (4
// ranks on a 2-core machine) need oversubscription.
//
// Each test process also gives its jobs a session folder of their own: Open
// MPI makes /tmp/ompi.HOST.UID when a job starts and removes it when the
// last one ends, and two jobs starting while a third ends can race on it
// ("mkdir ... File exists", orte_init failed). ctest runs tests in parallel
// processes; within one, jobs run one after another.
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
  ::testing::InitGoogleTest(&argc, argv);
  const int code = RUN_ALL_TESTS();
  std::error_code ec;
  std::filesystem::remove_all(session, ec);
  return code;
}
