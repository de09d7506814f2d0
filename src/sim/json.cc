#include <nlohmann/json.hpp>

#include "baton/sim.h"

namespace baton {

std::string ToJson(const SimResult& r) {
  nlohmann::ordered_json j;
  j["schedule"] = r.schedule;
  j["ranks"] = r.ranks;
  j["microbatches"] = r.microbatches;
  j["slices"] = r.slices;
  j["chunks"] = r.chunks;
  j["makespan"] = r.makespan;
  j["bubble_rate"] = r.bubble_rate;
  j["span_bubble_rate"] = r.span_bubble_rate;
  auto& detail = j["ranks_detail"] = nlohmann::ordered_json::array();
  for (const RankResult& rr : r.per_rank) {
    nlohmann::ordered_json d;
    d["rank"] = rr.rank;
    d["start"] = rr.start;
    d["end"] = rr.end;
    d["busy"] = rr.busy;
    d["span"] = rr.span;
    d["peak_memory"] = rr.peak_memory;
    if (rr.peak_memory_bytes > 0.0) d["peak_memory_bytes"] = rr.peak_memory_bytes;
    d["stages"] = rr.stages;
    d["peak_in_flight"] = rr.peak_in_flight;
    detail.push_back(std::move(d));
  }
  return j.dump(2);
}

}  // namespace baton
