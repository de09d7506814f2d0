// What the adaptive plans send between ranks (wire.h).
#include "wire.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "baton/error.h"

namespace baton {
namespace {

using json = nlohmann::json;

// `text` parsed by `read`, a RunError naming `what` where it is not that.
template <class Read>
auto Parse(const std::string& text, const char* what, Read read) {
  try {
    return read(json::parse(text));
  } catch (const json::exception& e) {
    throw RunError(fmt::format("adaptive plans: {} is not what a rank sends: {}", what, e.what()));
  }
}

}  // namespace

std::string MessageTimesJson(const RankMessageTimes& t) {
  // [sent, peer, key, seconds] a message: a step's hundreds stay short.
  json times = json::array();
  for (const Executor::MessageTime& m : t.times) times.push_back(json::array({m.sent ? 1 : 0, m.peer, m.key, m.seconds}));
  return json{{"rank", t.rank}, {"replica", t.replica}, {"compute_s", t.compute_s}, {"times", std::move(times)}}.dump();
}

RankMessageTimes ParseMessageTimes(const std::string& text) {
  return Parse(text, "a rank's message times", [](const json& j) {
    RankMessageTimes out;
    out.rank = j.at("rank").get<int>();
    out.replica = j.at("replica").get<int>();
    out.compute_s = j.at("compute_s").get<double>();
    for (const json& m : j.at("times")) {
      out.times.push_back({m.at(0).get<int>() != 0, m.at(1).get<int>(), m.at(2).get<std::int64_t>(),
                           m.at(3).get<double>()});
    }
    return out;
  });
}

std::string DecisionJson(const ReplanDecision& d) {
  return json{{"schedule", d.schedule}, {"chunks", d.chunks}, {"bounds", d.bounds}, {"split", d.split}}.dump();
}

ReplanDecision ParseDecision(const std::string& text) {
  return Parse(text, "a re-plan decision", [](const json& j) {
    ReplanDecision d;
    d.schedule = j.at("schedule").get<std::string>();
    d.chunks = j.at("chunks").get<int>();
    d.bounds = j.at("bounds").get<std::vector<int>>();
    d.split = j.at("split").get<std::vector<int>>();
    return d;
  });
}

std::string TensorNamesJson(const TensorNames& n) { return json{{"held", n.held}, {"wanted", n.wanted}}.dump(); }

TensorNames ParseTensorNames(const std::string& text) {
  return Parse(text, "a rank's tensors to move", [](const json& j) {
    return TensorNames{j.at("held").get<std::vector<std::string>>(), j.at("wanted").get<std::vector<std::string>>()};
  });
}

std::string MovesJson(const std::vector<Move>& moves) {
  json out = json::array();
  for (const Move& m : moves) out.push_back({{"name", m.name}, {"from", m.from}, {"to", m.to}});
  return out.dump();
}

std::vector<Move> ParseMoves(const std::string& text) {
  return Parse(text, "the model state's moves", [](const json& j) {
    std::vector<Move> out;
    for (const json& m : j) out.push_back({m.at("name").get<std::string>(), m.at("from").get<int>(), m.at("to").get<int>()});
    return out;
  });
}

}  // namespace baton
