// A JSON Lines set of documents of random lengths (data.dataset: jsonl),
// for the packed-documents tests.
#ifndef BATON_TESTS_SUPPORT_RANDOM_DOCUMENTS_H_
#define BATON_TESTS_SUPPORT_RANDOM_DOCUMENTS_H_

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

namespace baton_test {

// `count` documents of `shortest` to `longest` lowercase letters, a
// "text" field a line, drawn from `seed`: the same file for the same
// arguments.
inline void WriteRandomDocuments(const std::filesystem::path& path, int count, int shortest, int longest,
                                 std::uint64_t seed) {
  std::ofstream out(path);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> length(shortest, longest), letter('a', 'z');
  for (int d = 0; d < count; ++d) {
    std::string text(static_cast<std::size_t>(length(rng)), ' ');
    for (char& c : text) c = static_cast<char>(letter(rng));
    out << "{\"text\": \"" << text << "\"}\n";
  }
}

}  // namespace baton_test

#endif  // BATON_TESTS_SUPPORT_RANDOM_DOCUMENTS_H_
