// `baton data stats PATH --dataset KIND`: a token dataset's documents,
// tokens and lengths (quantiles, a histogram in powers of two, and how many
// documents each token budget would cut), so that a person can choose
// data.max_tokens; --svg draws the histogram.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "baton/data.h"
#include "baton/files.h"
#include "baton/svg_text.h"
#include "commands.h"

namespace baton {

namespace {

struct DataFlags {
  std::string path, dataset, split = "train", svg;
  std::int64_t eot = 50256;
};

TokenDocuments Open(const DataFlags& f) {
  if (f.dataset == "megatron") return OpenMegatron(f.path);
  if (f.dataset == "llmc") return OpenLlmc(f.path, f.eot);
  if (f.dataset == "jsonl") return OpenJsonl(f.path);
  return FortuneDocuments(ReadFortuneFolder(f.path), f.split);
}

// "[4, 8)" for bin k (bin 0 also holds 0).
std::string BinName(std::size_t k) {
  return k == 0 ? std::string("[0, 2)") : fmt::format("[{}, {})", std::int64_t{1} << k, std::int64_t{2} << k);
}

std::string Text(const TokenDocuments& docs, const DocumentStats& s) {
  std::string out = fmt::format("{}: {} documents, {} tokens ({} byte{} a token)\n", docs.name(), s.documents,
                                s.tokens, docs.token_bytes(), docs.token_bytes() > 1 ? "s" : "");
  if (s.documents == 0) return out;
  out += fmt::format("tokens a document: shortest {}, median {}, mean {:.1f}, p90 {}, p99 {}, longest {}\n",
                     s.shortest, s.median, s.mean, s.p90, s.p99, s.longest);
  const std::int64_t most = *std::max_element(s.bins.begin(), s.bins.end());
  out += "documents by length:\n";
  for (std::size_t k = 0; k < s.bins.size(); ++k) {
    const int bar = most > 0 ? static_cast<int>(std::lround(40.0 * static_cast<double>(s.bins[k]) / most)) : 0;
    out += fmt::format("  {:>22} {:>10}  {}\n", BinName(k), s.bins[k], std::string(static_cast<std::size_t>(bar), '#'));
  }
  // Each power-of-two budget from the median's bin: the documents longer
  // than it (cut into pieces of at most the budget, or refused).
  out += "a token budget (data.max_tokens) and the documents longer than it:\n";
  std::vector<std::int64_t> lengths(docs.lengths().begin(), docs.lengths().end());
  std::sort(lengths.begin(), lengths.end());
  std::int64_t budget = 1;
  while (budget < std::max<std::int64_t>(1, s.median)) budget *= 2;
  for (;; budget *= 2) {
    const auto longer = lengths.end() - std::upper_bound(lengths.begin(), lengths.end(), budget);
    out += fmt::format("  {:>10} tokens: {} document{} ({:.2f}%)\n", budget, longer, longer == 1 ? "" : "s",
                       100.0 * static_cast<double>(longer) / static_cast<double>(s.documents));
    if (longer == 0) break;
  }
  return out;
}

// The histogram as a bar chart: a bar a power-of-two bin.
std::string Svg(const TokenDocuments& docs, const DocumentStats& s) {
  const int bar = 44, gap = 8, left = 70, top = 40, height = 260;
  const int width = left + static_cast<int>(s.bins.size()) * (bar + gap) + 20;
  const std::int64_t most = s.bins.empty() ? 1 : std::max<std::int64_t>(1, *std::max_element(s.bins.begin(), s.bins.end()));
  std::ostringstream o;
  o << fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
                   "font-size=\"11\">\n",
                   width, top + height + 60);
  const std::string title = XmlEscape(docs.name());
  o << fmt::format("<text x=\"{}\" y=\"20\" font-size=\"13\">{}: {} documents, {} tokens; median {}, longest {}</text>\n",
                   left, title, s.documents, s.tokens, s.median, s.longest);
  o << fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#444\"/>\n", left - 4, top + height,
                   width - 10, top + height);
  o << fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", left - 8, top + 4, most);
  o << fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">0</text>\n", left - 8, top + height + 4);
  for (std::size_t k = 0; k < s.bins.size(); ++k) {
    const int h = static_cast<int>(std::lround(static_cast<double>(height) * static_cast<double>(s.bins[k]) / most));
    const int x = left + static_cast<int>(k) * (bar + gap);
    o << fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#4878a8\"><title>{} tokens: {} "
                     "documents</title></rect>\n",
                     x, top + height - h, bar, h, BinName(k), s.bins[k]);
    o << fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", x + bar / 2, top + height + 16,
                     k == 0 ? std::string("0-1") : fmt::format("{}", std::int64_t{1} << k));
  }
  o << fmt::format("<text x=\"{}\" y=\"{}\">documents a length bin (from 2^k tokens to 2^(k+1))</text>\n", left,
                   top + height + 40);
  o << "</svg>\n";
  return o.str();
}

}  // namespace

void AddDataCommand(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("data", "Look at a token dataset: baton data stats PATH --dataset KIND");
  cmd->require_subcommand(1);
  auto f = std::make_shared<DataFlags>();
  CLI::App* stats = cmd->add_subcommand(
      "stats", "Its documents, tokens and lengths (quantiles, a histogram, what each token budget cuts)");
  stats->add_option("path", f->path,
                    "the dataset: a megatron prefix (of its .bin and .idx), an llm.c shard, a .jsonl file, or the "
                    "fortunes folder")
      ->required();
  stats->add_option("--dataset", f->dataset, "its kind, as data.dataset says it")
      ->required()
      ->check(CLI::IsMember({"megatron", "llmc", "jsonl", "fortunes"}));
  stats->add_option("--eot", f->eot, "llmc: the end-of-text token that starts each document (default 50256)");
  stats->add_option("--split", f->split, "fortunes: train or validation (default train)")
      ->check(CLI::IsMember({"train", "validation"}));
  stats->add_option("--svg", f->svg, "also draw the length histogram here (an SVG file)");
  stats->callback([f] {
    CommandFiles files;
    if (f->dataset == "megatron") {
      files.inputs.push_back({"the dataset's index", f->path + ".idx"});
      files.inputs.push_back({"the dataset's data", f->path + ".bin"});
    } else if (f->dataset == "fortunes") {
      files.input_folders.push_back({"the fortunes folder", f->path});
    } else {
      files.inputs.push_back({"the dataset", f->path});
    }
    if (!f->svg.empty()) files.outputs.push_back({"--svg", f->svg});
    CheckCommandFiles(files);
    const TokenDocuments docs = Open(*f);
    const DocumentStats s = DescribeDocuments(docs);
    std::cout << Text(docs, s);
    if (!f->svg.empty()) WriteOutput(f->svg, Svg(docs, s));
  });
}

}  // namespace baton
