// The training config's data section (sections.h ReadData).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>
#include <vector>

#include "baton/config.h"
#include "baton/error.h"
#include "sections.h"
#include "yaml_reader.h"

namespace baton {

// data: the dataset and its keys; a key another dataset reads is refused by
// name. Read first: the model's widths depend on the dataset.
void ReadData(YamlMap& top, TrainConfig& c) {
  YamlMap data = top.Map("data");
  c.data.dataset = Choice(data, "dataset", c.data.dataset);
  const DatasetKind kind = c.data.dataset;
  const bool tokens = IsTokenDataset(kind);
  // A key another dataset reads is refused, by name, with the reason.
  auto refuse = [&](std::initializer_list<std::string_view> keys, std::string_view why) {
    for (std::string_view k : keys) {
      if (data.Has(k)) data.Fail(data.Node(k), k, fmt::format("{}; data.dataset is {}", why, EnumName(kind)));
    }
  };
  if (kind == DatasetKind::kFortunes) c.data.path = "/usr/share/games/fortunes";
  c.data.path = data.Get<std::string>("path", c.data.path);
  c.data.shuffle = data.Get("shuffle", c.data.shuffle);
  c.data.samples = data.Get<long long>("samples", c.data.samples);
  if (c.data.samples < 1) data.Fail(data.Node("samples"), "samples", "must be at least 1");
  c.data.features = data.GetInt("features", c.data.features, 1, kMaxInt);
  c.data.classes = data.GetInt("classes", c.data.classes, 2, kMaxInt);
  c.data.seed = static_cast<std::uint64_t>(data.Get<long long>("seed", static_cast<long long>(c.data.seed)));
  c.data.evaluate = data.Get("evaluate", c.data.evaluate);
  if (kind == DatasetKind::kFashionMnist) {
    for (std::string_view k : {"samples", "features", "classes"}) {
      if (data.Has(k)) data.Fail(data.Node(k), k, "is set by the dataset for fashion_mnist (784 features, 10 classes)");
    }
    c.data.features = 784;
    c.data.classes = 10;
  }
  if (tokens) {
    refuse({"features", "classes"}, "is set by seq_len and the vocabulary for a token dataset");
    refuse({"evaluate"}, "is a fashion_mnist setting: a token dataset's end-of-epoch check is data.validation");
    c.data.packing = Choice(data, "packing", c.data.packing);
    if (c.data.packing != Packing::kNone) {
      // A packed sample holds documents in data.max_tokens positions.
      if (kind == DatasetKind::kSyntheticTokens) {
        data.Fail(data.Node("packing"), "packing",
                  "packs documents, and synthetic_tokens has none (fortunes, megatron, llmc and jsonl do)");
      }
      refuse({"seq_len"}, "is data.max_tokens where documents are packed (data.packing)");
      if (!data.Has("max_tokens")) {
        data.Fail(data.Node("packing"), "max_tokens",
                  "packing needs data.max_tokens: the positions of one packed sample (>= 1; the model's seq_len)");
      }
      c.data.seq_len = data.GetInt("max_tokens", 0, 1, kMaxInt);
      c.data.long_documents = Choice(data, "long_documents", c.data.long_documents);
    } else {
      refuse({"max_tokens", "long_documents"}, "is for packed documents (data.packing: greedy, balanced or pad)");
      if (!data.Has("seq_len")) {
        data.Fail(data.Node("dataset"), "seq_len", "a token dataset needs data.seq_len (tokens per sample, >= 1)");
      }
      c.data.seq_len = data.GetInt("seq_len", 0, 1, kMaxInt);
    }
    if (kind != DatasetKind::kLlmc) refuse({"eot"}, "is llm.c's end-of-text token (data.dataset: llmc)");
    if (!IsTokenFileDataset(kind)) refuse({"validation_path"}, "is for the datasets read from files (megatron, llmc, jsonl)");
    if (kind == DatasetKind::kFortunes) {
      refuse({"samples"}, "is set by the corpus and seq_len");
      refuse({"vocab"}, "is 256 for fortunes: every byte is a token");
      c.data.validation = data.Get("validation", c.data.validation);
      c.data.vocab = 256;
    } else if (IsTokenFileDataset(kind)) {
      refuse({"samples"}, "is set by the file and seq_len");
      refuse({"validation"}, "is fortunes' split; a dataset read from a file is validated on data.validation_path");
      if (!data.Has("path")) {
        data.Fail(data.Node("dataset"), "path",
                  kind == DatasetKind::kMegatron
                      ? "a megatron dataset needs data.path: the prefix of its .bin and .idx (as Megatron-LM's "
                        "--data-path names it)"
                      : fmt::format("a {} dataset needs data.path: the file", EnumName(kind)));
      }
      c.data.validation_path = data.Get<std::string>("validation_path", "");
      if (kind == DatasetKind::kJsonl) {
        refuse({"vocab"}, "is 256 for jsonl: every byte of the text is a token");
        c.data.vocab = 256;
      } else if (kind == DatasetKind::kMegatron) {
        if (!data.Has("vocab")) {
          data.Fail(data.Node("dataset"), "vocab",
                    "a megatron dataset needs data.vocab: its tokenizer's vocabulary (every token id is below it; "
                    "50257 for GPT-2's)");
        }
        c.data.vocab = data.GetInt("vocab", 0, 2, kMaxInt);
      } else {
        c.data.vocab = data.GetInt("vocab", 50257, 2, kMaxInt);  // llm.c's shards are GPT-2's tokens
        c.data.eot = data.Get<long long>("eot", c.data.eot);
        if (c.data.eot < 0 || c.data.eot > 65535) {
          data.Fail(data.Node("eot"), "eot", "is a uint16 token id (0 to 65535): llm.c's shards hold uint16 tokens");
        }
      }
    } else {
      refuse({"path"}, "is for datasets read from files");
      refuse({"validation"}, "is for fortunes (the validation split)");
      c.data.vocab = data.GetInt("vocab", c.data.vocab, 2, kMaxInt);
    }
    c.data.features = c.data.seq_len;
    c.data.classes = c.data.vocab;
  } else {
    refuse({"seq_len", "vocab", "eot", "validation_path", "packing", "max_tokens", "long_documents"},
           "is for token datasets (fortunes, synthetic_tokens, megatron, llmc, jsonl)");
    refuse({"validation"}, "is for fortunes (the validation split); fashion_mnist's is data.evaluate");
  }
  data.Finish();
}

}  // namespace baton
