// A folder of its own for each test: tests run in parallel processes, and a
// test's files must not meet another's.
#ifndef BATON_TESTS_SUPPORT_TEST_FOLDER_H_
#define BATON_TESTS_SUPPORT_TEST_FOLDER_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace baton_test {

// TempDir/PREFIX_PID_TESTNAME, made empty; the caller removes it.
inline std::filesystem::path FreshTestFolder(const std::string& prefix) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / (prefix + "_" + std::to_string(::getpid()) + "_" + info->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace baton_test

#endif  // BATON_TESTS_SUPPORT_TEST_FOLDER_H_
